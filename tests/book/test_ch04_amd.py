"""Chapter 4's AMD registers (fusedrms.book.ch04_amd): the table in every state (compiled and
recorded, nothing recorded, a target spilling, the compile failing) and the values beside it. The compile
itself is tested in tests/kernels/test_amd_targets.py; here the results are made up."""
from fusedrms.book import ch04_amd
from fusedrms.kernels import amd_targets as amd

NVIDIA = {4096: (36, 0), 32768: (128, 0), 65536: (128, 92)}


def _compiled(vgprs=(42, 123, 225), gfx942=(26, 60, 118), spills=0, ok=True):
    out = []
    for arch, counts in (("gfx1201", vgprs), ("gfx942", gfx942)):
        for cols, v in zip(ch04_amd.WIDTHS, counts):
            key = amd.row_launch(cols).key
            out.append(amd.Compiled(key, arch, True, vgprs=v, sgprs=20, vgpr_spills=spills,
                                    sgpr_spills=0) if ok else
                       amd.Compiled(key, arch, False, "RuntimeError: no AMD backend"))
    return out


def test_the_widths_are_the_chapters():
    assert ch04_amd.WIDTHS == (4096, 32768, 65536)
    assert [x.kernel for x in ch04_amd.launches()] == ["rmsnorm_row_kernel"] * 3
    assert all(x.kwargs["dtype"] == "float32" for x in ch04_amd.launches())


def test_nvidia_counts_take_fp32_records_first_list_first():
    asm = [{"kind": "ptx", "cols": 4096, "dtype": "float32", "registers_per_thread": 36,
            "spills": 0},
           {"kind": "ptx", "cols": 4096, "dtype": "bfloat16", "registers_per_thread": 32,
            "spills": 0},
           {"kind": "registers", "cols": 65536, "dtype": "float32", "error": "boom"}]
    chapter2 = [{"cols": 4096, "registers_per_thread": 40, "spills": 0},
                {"cols": 65536, "dtype": "float32", "registers_per_thread": 128, "spills": 92}]
    assert ch04_amd.nvidia_counts(asm, chapter2, None) == {4096: (36, 0), 65536: (128, 92)}
    assert ch04_amd.nvidia_counts(None) == {}
    assert ch04_amd.nvidia_name({"gpu": "NVIDIA H200"}) == "H200"
    assert ch04_amd.nvidia_name(None) == "NVIDIA"


def test_table_is_narrow_and_says_what_is_missing():
    rows = ch04_amd.table(NVIDIA, "H200", _compiled())
    assert list(rows[0]) == ["fp32 columns", "H200", "RX 9070 XT", "MI300X"]
    assert rows[2] == {"fp32 columns": "65,536", "H200": "128, 92 spilled", "RX 9070 XT": "225",
                       "MI300X": "118"}
    empty = ch04_amd.table({}, "NVIDIA", _compiled(ok=False))
    assert {r["NVIDIA"] for r in empty} == {"not recorded"}
    assert {r["MI300X"] for r in empty} == {"did not compile"}


def test_lane_values_are_the_rule_and_the_targets_arithmetic():
    v = ch04_amd.lane_values()
    assert v == {"amd_cols": "65,536", "amd_narrow": "RX 9070 XT", "amd_narrow_vgprs": "256",
                 "amd_wide": "MI300X", "amd_wide_vgprs": "512", "amd_values": "64",
                 "nv_values": "128"}
    # "an MI300X thread holds N values, a 32-lane GPU's 2N": the wavefront is twice a warp
    assert 2 * int(v["amd_values"]) == int(v["nv_values"])


def test_the_table_shows_what_the_page_tells_readers_to_look_for():
    """The page says a spilling target's cell says so: the table writes "spilled" there, and
    "did not compile" where the compile failed."""
    spilling = ch04_amd.table(NVIDIA, "H200", _compiled(spills=3))
    assert spilling[-1]["MI300X"] == "118, 3 spilled"
    failed = ch04_amd.table(NVIDIA, "H200", _compiled(ok=False))
    assert failed[-1]["RX 9070 XT"] == "did not compile"
