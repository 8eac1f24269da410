"""Chapter 8's page in words (fusedrms.book.ch08_page): sentences and tables in every state of
the recording, and the committed recording's numbers."""
import pytest

from fusedrms import records
from fusedrms.book import ch08, ch08_page
def _lever(name, before, after, regs=(64, 64)):
    return {"lever": name, "hypothesis": "h", "rows": 32768, "before_us": before,
            "after_us": after, "change_pct": 100 * (after - before) / before,
            "kept": after < before, "registers_before": regs[0], "registers_after": regs[1]}


def test_lever_words_follow_the_levers_in_every_state():
    levers = [_lever("one reciprocal per block", 444.0, 350.0),
              _lever("16 -> 8 warps", 350.0, 310.0),
              _lever("unpadded tile (32 + 16 + 8 blocks)", 306.0, 279.0),
              _lever("2 rows per program", 310.0, 614.0, regs=(64, 162))]
    w = ch08_page.lever_words(levers)
    assert w["verdict"] == "That is what the hypothesis predicts"
    assert w["paragraph"].startswith("Both levers that remove work per element without "
                                     "touching a byte shortened the time, by 21% and 9%.")
    assert "going from 64 to 162; fewer warps then fit on an SM" in w["paragraph"]
    assert "the weaker half of the evidence: it also cost occupancy" in w["paragraph"]
    same_regs = ch08_page.lever_words(levers[:3] + [_lever("2 rows per program", 310.0, 320.0)])
    assert "That is what the hypothesis predicts." in same_regs["paragraph"]
    assert "weaker half" not in same_regs["paragraph"]
    assert "11% shorter from 16 to 8 warps" in w["paragraph"]
    worse = ch08_page.lever_words([_lever("one reciprocal per block", 300.0, 330.0)])
    assert worse["verdict"] == "That is not the pattern the hypothesis predicts"
    assert "1 of 1 shortened" not in worse["paragraph"] and "0 of 1 shortened" in worse["paragraph"]
    assert "+10%" in worse["paragraph"] and "warps" not in worse["paragraph"]
    assert ch08_page.lever_words([])["paragraph"] == "The levers are not recorded yet."


def test_config_words_read_as_english():
    assert ch08_page.config_words("warps 4, unpadded (split) tile, block reciprocal division") == (
        "4 warps, the unpadded tile and one reciprocal per block")
    assert ch08_page.config_words("warps 16, maxnreg 64, per element division") == (
        "16 warps, at most 64 registers per thread and an exact division per element")
    assert "(" not in ch08_page.config_words("warps 8, 2 rows/program, block reciprocal division")
    assert "not name" in ch08_page.config_words(None)


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


def test_cost_words_say_plainly_what_is_not_recorded():
    words = ch08_page.cost_words(None, None)
    assert all("not recorded" in words[k] for k in ("cost", "instructions", "ncu"))
    assert "not measured yet" in words["claim"]


def test_the_committed_recording_gives_the_chapters_numbers():
    doc, cost = records.load("fp8_quant"), records.load("fp8_exactness_cost")
    if doc.get("source", {}).get("own"):
        pytest.skip("the reader's own recording is loaded")
    words = ch08_page.cost_words(cost, doc["provenance"]["fused_config"])
    assert "not recorded" not in " ".join(words.values())
    c = ch08_page.instruction_comparison(cost, doc["provenance"]["fused_config"])
    assert c["exact_kernel"] == "rmsnorm_fp8_fused_split_kernel"  # what fp8.fused ran
    ncu = ch08_page.ncu_numbers(cost["source"]["folder"])
    assert ncu["rows"] == 16384 and 0 < ncu["per_element"] < c["exact"] * 1.5
    assert ncu["busiest_pipe"] and " " not in ncu["busiest_pipe"]
    table = ch08_page.cost_table(ch08.exactness_cost_rows(cost))
    assert all(r["exact µs"] > r["diagnostic µs"] for r in table)


def _exact_row(checks=27, exact=27, differing=0, codes=1000):
    return [{"version": "fp8.fused", "checks": checks, "bit-exact": exact,
             "differing codes": differing, "codes compared": codes}]


def test_exactness_sentence_names_what_was_compared_where_and_how_many_codes():
    text = ch08_page.exactness_sentence(_exact_row(), "NVIDIA H200", "4 warps")
    assert text.startswith("On the NVIDIA H200, fp8.fused, with 4 warps, was compared with the "
                           "reference, which PyTorch computed on the same GPU")
    assert "all 27 checks were bit-exact, 1,000 codes equal bit for bit" in text
    some = ch08_page.exactness_sentence(_exact_row(exact=25, differing=12), None, "4 warps")
    assert "On the GPU," in some and "25 of the 27 checks" in some and "12 of the 1,000" in some
    scales = ch08_page.exactness_sentence(_exact_row(exact=26), "X", "4 warps")
    assert "all 1,000 codes were equal, but scales fell outside" in scales
    assert "not recorded yet" in ch08_page.exactness_sentence([], None, "4 warps")


def test_candidates_sentence_counts_checks_and_codes():
    cand = {"provenance": {"gpu": "NVIDIA H200"}, "records": [
        {"kind": "candidate", "exact_checks": 16, "bit_exact": True},
        {"kind": "candidate", "exact_checks": 16, "bit_exact": False}]}
    text = ch08_page.candidates_sentence(cand, ((3, 129), (64, 7168)))
    assert "in 16 checks each: 4 on random inputs (918,278 codes) against the reference and " \
           "12 edge cases" in text
    assert "1 of the 2 candidates passed" in text
    cand["records"][1]["bit_exact"] = True
    assert "all 2 candidates passed" in ch08_page.candidates_sentence(cand, ((3, 129),))
    assert "not recorded yet" in ch08_page.candidates_sentence(None, ((3, 129),))


def _t(rows, naive, fused, floor, ratio=2.32):
    return {"rows": rows, "cols": 7168, "naive_us": naive, "fused_us": fused,
            "floor_us": floor, "speedup": naive / fused, "pct_floor": 100 * floor / fused,
            "bytes_ratio": ratio}


def test_timing_paragraph_in_every_state():
    text = ch08_page.timing_paragraph([_t(2, 9.7, 8.3, 0.01), _t(32768, 591.8, 278.2, 168.3)])
    assert text.startswith("The fused kernel is faster than the naive pair at all 2 timed "
                           "shapes: at 32,768 rows the naive pair takes 591.8 µs")
    assert "a speedup of 2.13x, where the bytes alone would allow 2.32x" in text
    assert "60% of its copy floor (168.3 µs): if the bytes set" in text
    slow = ch08_page.timing_paragraph([_t(2, 8.0, 9.0, 0.01), _t(4096, 50.0, 20.0, 19.0)])
    assert "at 1 of the 2 timed shapes" in slow and "near the floor, so the bytes" in slow
    one = ch08_page.timing_paragraph([_t(4096, 10.0, 20.0, 5.0, ratio=None)])
    assert one.startswith("The fused kernel is not faster than the naive pair at the one timed "
                          "shape:") and "bytes alone" not in one and "2 rows" not in one
    assert ch08_page.timing_paragraph([]) == "The timings are not recorded yet."
