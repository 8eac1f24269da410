"""The book's Triton kernels compiled for AMD GPUs without one (fusedrms.kernels.amd_targets).

Every kernel is compiled once per target (a module fixture, in two child processes side by side):
Triton's wheel carries the AMD device libraries and links in process, so this runs on a CPU-only
machine with no ROCm installed.
"""
import ast
from pathlib import Path

import pytest
import torch

from fusedrms.kernels import amd_targets as amd

KERNEL_DIR = Path(amd.__file__).parent


def _jit_kernels() -> set:
    """Every ``@triton.jit`` function named ``*_kernel`` under fusedrms/kernels (helpers such as
    ``loud_scale`` are inlined into these and compiled with them)."""
    found = set()
    for path in KERNEL_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name.endswith("_kernel") and any(
                    ast.unparse(d).endswith("jit") for d in node.decorator_list):
                found.add(node.name)
    return found


@pytest.fixture(scope="module")
def compiled():
    results = amd.compile_launches()
    return amd.compiled_by_key(results)


def test_every_kernel_of_the_book_has_a_launch():
    kernels = _jit_kernels()
    assert len(kernels) >= 14, sorted(kernels)
    assert kernels == {x.kernel for x in amd.LAUNCHES}
    assert len({x.key for x in amd.LAUNCHES}) == len(amd.LAUNCHES)


def test_every_kernel_compiles_for_both_targets(compiled):
    failed = {k: r.error for k, r in compiled.items() if not r.compiled}
    assert not failed
    assert set(compiled) == {(x.key, a) for x in amd.LAUNCHES for a in ("gfx1201", "gfx942")}


def test_wavefront_size_is_the_targets(compiled):
    for (key, arch), r in compiled.items():
        assert r.wavefront == {"gfx1201": 32, "gfx942": 64}[arch], (key, arch)
        assert r.wavefront == amd.TARGETS[arch].wavefront


def test_no_kernel_spills_at_its_launch(compiled):
    for (key, arch), r in compiled.items():
        assert (r.vgpr_spills, r.sgpr_spills, r.scratch_bytes) == (0, 0, 0), (key, arch)


def test_registers_are_within_the_hardware_limits(compiled):
    for (key, arch), r in compiled.items():
        target = amd.TARGETS[arch]
        assert 0 < r.vgprs <= target.max_vgprs and 0 < r.sgprs <= target.max_sgprs, (key, arch, r)
        assert 0 <= r.lds_bytes <= target.max_lds_bytes, (key, arch, r)
        assert r.waves_per_simd >= 1, (key, arch)
    # the accumulation registers exist on CDNA only, and a norm uses none
    assert all(r.agprs == 0 for (_, a), r in compiled.items() if a == "gfx942")
    assert all(r.agprs is None for (_, a), r in compiled.items() if a == "gfx1201")


def test_fp8_variants_are_the_ones_compiled(compiled):
    """rounding="auto" writes e4m3 bits with integer arithmetic on every AMD GPU: no fp8
    conversion instruction in the software variant, on either target."""
    for arch in ("gfx1201", "gfx942"):
        assert compiled[("fp8 fused", arch)].fp8_conversions == 0
    fp8 = [x for x in amd.LAUNCHES if x.builder == "fp8"]
    assert {x.kwargs["rounding"] for x in fp8} == {"software", "cast"}


def test_fp8_format_per_target():
    assert amd.fp8_format("gfx942").max == float(torch.finfo(torch.float8_e4m3fnuz).max) == 240
    for arch in ("gfx1201", "gfx950"):
        fmt = amd.fp8_format(arch)
        assert fmt.max == float(torch.finfo(getattr(torch, fmt.torch_dtype)).max) == 448
    assert getattr(torch, amd.fp8_format("gfx942").torch_dtype) == torch.float8_e4m3fnuz
    with pytest.raises(ValueError, match="gfx1030"):
        amd.fp8_format("gfx1030")


def test_resources_read_the_code_object_metadata():
    asm = ("; Occupancy: 6\n  v_cvt_pk_fp8_f32 v1, v2, v3\n  ; v_cvt_pk_fp8_f32 in a comment\n"
           "  - .agpr_count: 0\n"
           "    .group_segment_fixed_size: 0\n    .private_segment_fixed_size: 16\n"
           "    .sgpr_count:     22\n    .sgpr_spill_count: 0\n    .vgpr_count:     54\n"
           "    .vgpr_spill_count: 3\n    .wavefront_size: 32\n")
    got = amd.resources(asm, shared=32)
    assert got == dict(vgprs=54, agprs=0, sgprs=22, vgpr_spills=3, sgpr_spills=0,
                       scratch_bytes=16, lds_bytes=32, wavefront=32, waves_per_simd=6,
                       fp8_conversions=1)
    assert amd.Compiled("k", "gfx1201", True, **got).spills == 3


def test_a_launch_that_cannot_be_built_is_a_result_not_a_crash():
    bad = amd.Launch("nothing", 4, "no_kernel", "-", "no_such_builder")
    r = amd._compile_one(bad, amd.TARGETS["gfx942"])
    assert not r.compiled and "no_such_builder" in r.error and r.vgprs is None


def test_a_failed_compiler_process_is_reported_for_every_launch(tmp_path):
    launches = amd.LAUNCHES[:2]
    out = amd._read_answer(tmp_path / "missing.json", launches, "gfx942",
                           "Traceback...\nImportError: no module named triton\n")
    assert [r.key for r in out] == [x.key for x in launches]
    assert all(not r.compiled and "ImportError: no module named triton" in r.error for r in out)


def test_unknown_target_is_refused():
    with pytest.raises(ValueError, match="gfx9999"):
        amd.compile_launches(amd.LAUNCHES[:1], ["gfx9999"])


@pytest.mark.parametrize("argv,message", [
    (["--target", "gfx9999"], "--target must be one of"),
    (["--chapter", "5"], "--chapter must be one of"),
    (["--chapter", "four"], "--chapter"),
    (["--bogus"], "unrecognized arguments"),
])
def test_cli_bad_arguments_give_usage_and_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        amd.main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage:") and message in err


def test_cli_prints_the_table(compiled, monkeypatch, capsys):
    monkeypatch.setattr(amd, "compile_launches",
                        lambda launches, targets: [compiled[(x.key, a)]
                                                   for x in launches for a in targets])
    assert amd.main(["--chapter", "4"]) == 0
    out = capsys.readouterr().out
    r = compiled[("row 4096 bf16", "gfx942")]
    assert "gfx942: Instinct MI300X (CDNA3), wave64, fp8 e4m3fnuz, largest 240" in out
    assert f"{r.vgprs}/{r.sgprs} w{r.waves_per_simd}" in out
    assert "fp8" not in out.split("per kernel")[1]  # chapter 4 only
