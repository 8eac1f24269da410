"""Chapter 4's AMD registers (fusedrms.book.ch04_amd): the table and the sentences in every state
(compiled and recorded, nothing recorded, a target spilling, the compile failing). The compile
itself is tested in tests/kernels/test_amd_targets.py; here the results are made up."""
import re

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


def _plain(text):
    assert "  " not in text and "None" not in text and ".." not in text
    assert not re.search(r"\b1 [a-z]+s\b", text), text


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


def test_answer_when_only_nvidia_spills():
    text = ch04_amd.answer(NVIDIA, "H200", _compiled())
    assert text.startswith("At 65,536 columns, where the H200 spilled 92 values per thread, "
                           "neither AMD target spills: the RX 9070 XT takes 225 of a lane's 256 "
                           "VGPRs and the MI300X 118.")
    assert text.endswith("On the MI300X Triton's 16 warps are 16 wavefronts of 64 lanes, "
                         "1,024 threads, so each holds 64 values where a 32-lane GPU's thread "
                         "holds 128.")
    _plain(text)


def test_answer_in_the_other_states():
    nothing_recorded = ch04_amd.answer({}, "NVIDIA", _compiled())
    assert nothing_recorded.startswith("At 65,536 columns neither AMD target spills")
    spilling = ch04_amd.answer(NVIDIA, "H200", _compiled(spills=1))
    assert "the RX 9070 XT spills 1 value and the MI300X spills 1 value." in spilling
    failed = ch04_amd.answer(NVIDIA, "H200", _compiled(ok=False))
    assert "did not run" in failed and "VGPR" not in failed
    one_target = ch04_amd.answer(NVIDIA, "H200",
                                 [r for r in _compiled() if r.target == "gfx1201"], ("gfx1201",))
    assert "no AMD target spills" in one_target and "wavefronts" not in one_target
    for text in (nothing_recorded, spilling, failed, one_target):
        _plain(text)
