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


def test_hipcc_compiles_for_an_amd_target(tmp_path, monkeypatch):
    require_or_skip("FUSEDRMS_REQUIRE_HIPCC", build.available("hipcc"), "hipcc not installed")
    monkeypatch.setenv("FUSEDRMS_CACHE", str(tmp_path))
    obj = build.compile(toolchain="hipcc", arch="gfx90a", shared=False)  # CDNA, 64-lane wavefronts
    assert obj.stat().st_size > 0


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
    assert len(results) == 5 and all("ok=1" in line for line in results), out.stdout
    bad = subprocess.run([str(exe), "--block", "96"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "power of two" in bad.stderr


@pytest.mark.parametrize("tool,flags", [
    # the kernels' device code is checked above; here the host side (memory, events, launches)
    ("hipcc", ["-x", "hip", "--offload-arch=gfx90a", "--cuda-host-only", "-O1", "-c"]),
    ("nvcc", ["-x", "cu", "-arch=sm_90", "-O3", "-std=c++17", "-c"]),
])
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
