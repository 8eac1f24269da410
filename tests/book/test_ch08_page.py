"""Chapter 8's page readers (fusedrms.book.ch08_page): instruction counts,
Nsight Compute's numbers and the cost table, and the committed recording's numbers."""
import pytest

from fusedrms import records
from fusedrms.book import ch08, ch08_page


def _sass(name, warps, shared, total):
    return {"variant": 0, "n_regs": 40, "metadata": {"name": name, "num_warps": str(warps),
                                                     "shared": str(shared)},
            "opcodes": {"FFMA": total}}


def test_instructions_compare_the_kernel_as_it_ran_with_the_diagnostic_at_its_warps():
    doc = {"provenance": {"sass": {
        "fused": [_sass("rmsnorm_fp8_fused_kernel", 16, 256, 736)],
        "fused_split": [_sass("rmsnorm_fp8_fused_split_kernel", 4, 128, 1792)],
        "approx": [_sass("rmsnorm_fp8_approx_kernel", 4, 256, 888),
                   _sass("rmsnorm_fp8_approx_kernel", 4, 128, 496),  # the 4096-wide variant
                   _sass("rmsnorm_fp8_approx_kernel", 16, 256, 296)]}}}
    per = {(r["kernel"], r["num_warps"], r["row_blocks"]): r["per_element"]
           for r in ch08.instructions_per_element(doc)}
    # the split tile holds the row's 56 blocks: 56 * 128 / 128 threads = 56 elements each
    assert per[("rmsnorm_fp8_fused_split_kernel", 4, 56)] == pytest.approx(1792 / 56)
    assert per[("rmsnorm_fp8_fused_kernel", 16, 64)] == pytest.approx(736 / 16)
    c = ch08_page.instruction_comparison(doc, "warps 4, unpadded (split) tile, block reciprocal "
                                         "division")
    assert (c["exact"], c["approx"], c["warps"]) == (pytest.approx(32.0),
                                                     pytest.approx(888 / 64), 4)
    base = ch08_page.instruction_comparison(doc, "warps 16, maxnreg 64, per element division")
    assert base["exact"] == pytest.approx(46.0) and base["approx"] == pytest.approx(296 / 16)
    assert ch08_page.instruction_comparison(doc, "warps 8, block reciprocal division") is None


def test_the_committed_recording_gives_the_chapters_numbers():
    doc, cost = records.load("fp8_quant"), records.load("fp8_exactness_cost")
    if doc.get("source", {}).get("own"):
        pytest.skip("the reader's own recording is loaded")
    c = ch08_page.instruction_comparison(cost, doc["provenance"]["fused_config"])
    assert c["exact_kernel"] == "rmsnorm_fp8_fused_split_kernel"  # what fp8.fused ran
    ncu = ch08_page.ncu_numbers(cost["source"]["folder"])
    assert ncu["rows"] == 16384 and 0 < ncu["per_element"] < c["exact"] * 1.5
    assert ncu["busiest_pipe"] and " " not in ncu["busiest_pipe"]
    table = ch08_page.cost_table(ch08.exactness_cost_rows(cost))
    assert all(r["exact µs"] > r["diagnostic µs"] for r in table)
