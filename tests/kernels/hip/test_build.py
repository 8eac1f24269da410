"""Building rmsnorm.hip: the CPU runtime here, and compile checks for AMD (hipcc) and NVIDIA (nvcc)."""
import shutil
import subprocess

import pytest

from fusedrms.kernels.hip import build
from tests.conftest import require_or_skip


def test_cpu_build_is_cached_by_source_and_flags():
    first = build.compile(toolchain="cpu")  # the shared cache: the kernel tests reuse these builds
    stamp = first.stat().st_mtime_ns
    assert build.compile(toolchain="cpu") == first and first.stat().st_mtime_ns == stamp
    other = build.compile(toolchain="cpu", defines={"FUSEDRMS_CPU_WARP": 64})
    assert other != first, "different flags must give a different cached library"
    gpp = build.compiler_for("cpu")
    args = build.flags("cpu")
    text = build.source_text()
    assert build._key(text, gpp, args) == build._key(text, gpp, args)
    assert build._key(text + "// an edit", gpp, args) != build._key(text, gpp, args)
    assert build._key(text, "/usr/bin/other-g++", args) != build._key(text, gpp, args)


def test_a_finished_build_in_the_cache_is_never_replaced(tmp_path):
    """Two processes building the same key at once: the second keeps the first one's library, so
    a path already loaded or stamped never changes under it."""
    target = tmp_path / "rmsnorm-cpu-key.so"
    first, second = tmp_path / "first.so", tmp_path / "second.so"
    first.write_bytes(b"first")
    second.write_bytes(b"second")
    build._publish(first, target)
    stamp = target.stat().st_mtime_ns
    build._publish(second, target)
    assert target.read_bytes() == b"first" and target.stat().st_mtime_ns == stamp


def test_compile_error_carries_the_compilers_message(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEDRMS_CACHE", str(tmp_path))
    broken = build.source_text().replace("sum_sq += v * v;", "sum_sq += v * undeclared_name;", 1)
    with pytest.raises(build.CompileError) as err:
        build.compile(broken, toolchain="cpu")
    assert "undeclared_name" in err.value.message
    assert "kernel.hip" in str(err.value)  # the reader's file name, not a temporary path
    assert not list(tmp_path.glob("*.so")), "a failed build must not leave a library in the cache"


def test_unknown_toolchain_is_explained():
    with pytest.raises(ValueError, match="toolchain"):
        build.compile(toolchain="clang-gpu")


AMD_TARGETS = [("gfx90a", 64), ("gfx1030", 32)]  # CDNA2 (wave64) and RDNA2 (wave32)
SHUFFLE_KERNELS = ("rmsnorm_shuffle<float>", "rmsnorm_shuffle<bf16_bits>", "row_sum_kernel<4>")


@pytest.mark.parametrize("arch,lanes", AMD_TARGETS)
def test_hipcc_compiles_host_and_device_code_for_amd(arch, lanes, tmp_path, monkeypatch):
    require_or_skip("FUSEDRMS_REQUIRE_HIPCC", build.available("hipcc"), "hipcc not installed")
    monkeypatch.setenv("FUSEDRMS_CACHE", str(tmp_path))
    obj = build.compile(toolchain="hipcc", arch=arch, shared=False)  # both passes, one object
    assert obj.stat().st_size > 0


@pytest.mark.parametrize("arch,lanes", AMD_TARGETS)
def test_amd_device_code_uses_the_targets_wavefront(arch, lanes, tmp_path, monkeypatch):
    """Every kernel is built for the target's wavefront, and the shuffle finish takes its lane count
    from it: min(blockDim.x, warpSize) compiles to a min with the literal 32 or 64."""
    import re

    require_or_skip("FUSEDRMS_REQUIRE_HIPCC", build.available("hipcc"), "hipcc not installed")
    monkeypatch.setenv("FUSEDRMS_CACHE", str(tmp_path))
    found = build.amdgcn_kernels(build.amdgcn(arch=arch))
    assert len(found) >= 28 and {k["lanes"] for k in found.values()} == {lanes}, sorted(found)
    other = 96 - lanes
    for name in SHUFFLE_KERNELS:
        mins = re.findall(r"_min_[ui]32\S*\s+\S+,\s*(\d+),", found[name]["body"])
        assert str(lanes) in mins and str(other) not in mins, (name, mins)


def test_the_lane_count_comes_from_warp_size_not_a_removed_macro():
    text = build.source_text()
    assert "__AMDGCN_WAVEFRONT_SIZE" not in text  # deprecated, removed in current LLVM
    assert "__activemask" not in (build.COMPAT / "nvidia.h").read_text().split("#define __shfl_xor")[1]


def test_nvcc_compiles_for_sm90_with_the_compat_header(tmp_path, monkeypatch):
    require_or_skip("FUSEDRMS_REQUIRE_NVCC", build.available("nvcc"), "nvcc not installed")
    monkeypatch.setenv("FUSEDRMS_CACHE", str(tmp_path))
    obj = build.compile(toolchain="nvcc", arch="sm_90", shared=False)
    assert obj.stat().st_size > 0


HOST = build.HIP_DIR / "host" / "rmsnorm_host.cpp"


def test_host_program_runs_on_the_cpu_runtime(tmp_path):
    exe = tmp_path / "rmsnorm_host"
    subprocess.run(["g++", "-x", "c++", "-std=c++17", "-O2", "-pthread", str(HOST), "-o", str(exe)],
                   check=True, capture_output=True, timeout=300)
    out = subprocess.run([str(exe), "--rows", "3", "--cols", "13", "--block", "16", "--warmup", "0",
                          "--repeats", "2"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    results = [line for line in out.stdout.splitlines() if line.startswith("RESULT")]
    assert len(results) == 6 and all("ok=1" in line for line in results), out.stdout
    bad = subprocess.run([str(exe), "--block", "96"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "power of two" in bad.stderr


@pytest.mark.parametrize("tool,flags", [
    # the whole program, device code included, for a wave64 and a wave32 AMD target and for sm_90
    ("hipcc", ["-x", "hip", "--offload-arch=gfx90a", "-O1", "-c"]),
    ("hipcc", ["-x", "hip", "--offload-arch=gfx1030", "-O1", "-c"]),
    ("nvcc", ["-x", "cu", "-arch=sm_90", "-O3", "-std=c++17", "-c"]),
], ids=["hipcc-gfx90a", "hipcc-gfx1030", "nvcc-sm_90"])
def test_host_program_compiles_for_gpus(tool, flags, tmp_path):
    require_or_skip(f"FUSEDRMS_REQUIRE_{tool.upper()}", shutil.which(tool) is not None,
                    f"{tool} not installed")
    env = {**__import__("os").environ, "HIP_PLATFORM": "amd"}
    out = subprocess.run([tool, *flags, str(HOST), "-o", str(tmp_path / "host.o")],
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr


def test_ptx_shows_16_byte_loads_only_in_the_vectorized_kernel():
    require_or_skip("FUSEDRMS_REQUIRE_NVCC", build.available("nvcc"), "nvcc not installed")
    found = build.memory_instructions(build.ptx())
    assert "ld.global.v4.f32" in found["rmsnorm_vectorized<float, 4>"]
    assert "st.global.v4.u32" in found["rmsnorm_vectorized<bf16_bits, 8>"]
    assert found["rmsnorm_block<float>"] == ["ld.global.f32", "st.global.f32"]
    assert found["rmsnorm_vectorized<float, 1>"] == ["ld.global.f32", "st.global.f32"]  # the fallback
    # the unfused twins: scalar accesses in hip.unfused, 16-byte ones in hip.vectorized_unfused
    assert found["square_kernel<float, 1>"] == ["ld.global.f32", "st.global.f32"]
    assert "ld.global.v4.f32" in found["scale_kernel<float, 4>"]
    assert "ld.global.v4.u32" in found["square_kernel<bf16_bits, 8>"]
    assert "ld.global.v4.f32" in found["row_sum_kernel<4>"]


def test_nvidia_shuffles_name_their_lanes_instead_of_asking_activemask():
    require_or_skip("FUSEDRMS_REQUIRE_NVCC", build.available("nvcc"), "nvcc not installed")
    text = build.ptx()
    assert "shfl.sync.bfly.b32" in text and "activemask" not in text
