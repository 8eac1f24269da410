"""Chapter 8's companion (fusedrms.book.ch08): the recording's steps and the readers of its files."""
import json

import pytest

from fusedrms import env, records, traffic
from fusedrms.book import ch08

ENV = env.current()


def _fake_doc(tmp_path, speedup_large=2.1, floor_fraction=0.93):
    recs = [
        {"kind": "exactness", "rows": 2, "cols": 7168, "seed": 0, "codes": 14336,
         "fused_differing_codes": 0, "fused_scales_ok": True, "naive_differing_codes": 0,
         "naive_scales_ok": True, "fused_software_differing_codes": 0,
         "reordered_reference_differing_codes": 391, "reordered_reference_scales_ok": False},
        {"kind": "exactness", "rows": 64, "cols": 7168, "seed": 0, "codes": 458752,
         "fused_differing_codes": 0, "naive_differing_codes": 2, "naive_scales_ok": True,
         "fused_software_error": "RuntimeError: boom"},
        {"kind": "timing", "rows": 2, "cols": 7168, "naive_us": 9.0, "fused_us": 6.0, "speedup": 1.5},
        {"kind": "timing", "rows": 16384, "cols": 7168, "naive_us": 420.0,
         "fused_us": 420.0 / speedup_large, "speedup": speedup_large,
         "fused_floor_us": 420.0 / speedup_large * floor_fraction,
         "fused_floor_fraction": floor_fraction},
        {"kind": "timing", "rows": 32768, "cols": 7168, "error": "OutOfMemoryError: no"},
    ]
    path = records.write(tmp_path / "fp8_quant.json", recs,
                         extra={"targets": {"speedup": 1.5, "floor_fraction": 0.9,
                                            "large_rows": 4096}})
    return json.loads(path.read_text())


def test_recorded_results_summary(tmp_path):
    doc = _fake_doc(tmp_path)
    assert "Recorded on" in records.describe(doc)
    s = ch08.exactness_summary(doc)
    assert s["fused"] == {"checks": 2, "exact": 2, "differing_codes": 0, "codes": 473088, "errors": 0}
    assert s["naive"]["exact"] == 1 and s["naive"]["differing_codes"] == 2
    assert s["fused_software"]["errors"] == 1
    assert s["reordered_reference"]["exact"] == 0


def test_record_rehearsal_on_small_shapes(tmp_path):
    """The chapter's record on small shapes: exactness everywhere; timings fail on a CPU, are
    recorded as errors, never as numbers, and fail the recording (its files stay readable)."""
    from fusedrms.measure import harness

    def rehearse():
        return ch08.record(tmp_path, check_shapes=((3, 129), (2, 7168)),
                           timing_shapes=((2, 7168),), log=lambda *a: None)

    if ENV.on_gpu:
        written = rehearse()
        assert [p.name for p in written] == ["fp8_quant.json", "fp8_candidates.json"]
    else:
        with pytest.raises(harness.Incomplete, match="chapter 8: .*GPU"):
            rehearse()
    assert (tmp_path / "fp8_candidates.json").exists()
    doc = json.loads((tmp_path / "fp8_quant.json").read_text())
    summary = ch08.exactness_summary(doc)
    assert summary["fused"]["checks"] == 6 and summary["fused"]["exact"] == 6
    assert summary["reordered_reference"]["differing_codes"] > 0
    assert any(r["kind"] == "zero_block" and r["fused_differing_codes"] == 0 for r in doc["records"])
    assert ch08.timing_table(doc)  # on a CPU the timing step records its error instead of a time
    if not ENV.on_gpu:
        assert all("median_us" not in r for r in ch08.timing_table(doc))


def test_exactness_cost_readers(tmp_path):
    doc = {"provenance": {"sass": {
        "fused": [{"n_regs": 36, "metadata": {"name": "rmsnorm_fp8_fused_kernel", "num_warps": "16",
                                              "shared": "256"},
                   "opcodes": {"FFMA": 112, "DADD": 24, "CALL": 20, "BSSY": 21, "MOV": 551}}],
        "approx": [{"n_regs": 32, "metadata": {"name": "rmsnorm_fp8_approx_kernel",
                                               "num_warps": "16", "shared": "256"},
                    "opcodes": {"FMUL": 42, "IMAD": 41, "NOP": 213}}]}},
           "records": [
        {"status": "ok", "impl": "fp8.fused", "rows": 16384, "cols": 7168, "differing_codes": 0,
         "median_us": 154.2, "floor_us": 84.3, "pct_of_floor": 100 * 84.3 / 154.2},
        {"status": "ok", "impl": "fp8.approx_w4", "rows": 16384, "cols": 7168,
         "differing_codes": 88296, "median_us": 94.2, "floor_us": 84.3,
         "pct_of_floor": 100 * 84.3 / 94.2},
        {"status": "ok", "impl": "fp8.fused", "rows": 2, "cols": 7168, "differing_codes": 0,
         "median_us": 3.0, "floor_us": 0.01, "pct_of_floor": 0.3},
        {"status": "error: x", "impl": "fp8.approx_w8", "rows": 2, "cols": 7168}]}
    floor = records.CopyFloor(4236.0, "GPU")
    rows = {(r["impl"], r["rows"]): r for r in ch08.exactness_cost_rows(doc, floor)}
    fused = rows[("fp8.fused", 16384)]  # its bytes at the floor given, not the file's 84.3 µs
    assert fused["floor_us"] == pytest.approx(floor.us(fused["bytes"]))
    assert fused["bytes"] == traffic.price("rmsnorm_fp8_fused", 16384, 7168, "bf16").bytes_total
    assert rows[("fp8.fused", 16384)]["exact"] and rows[("fp8.fused", 16384)]["reaches_target"] is False
    assert rows[("fp8.approx_w4", 16384)]["reaches_target"] is True  # 89.5 % >= 85 %
    assert rows[("fp8.fused", 2)]["reaches_target"] is None  # under 64 MB: no check
    assert ("fp8.approx_w8", 2) not in rows
    per = {p["kernel"]: p for p in ch08.instructions_per_element(doc)}
    assert per["rmsnorm_fp8_fused_kernel"]["elements_per_thread"] == 16.0
    assert per["rmsnorm_fp8_fused_kernel"]["per_element"] == 728 / 16
    assert per["rmsnorm_fp8_approx_kernel"]["per_element"] == 296 / 16
    (tmp_path / "ncu_fp8_fused.txt").write_text(
        "  rmsnorm_fp8_fused_split_kernel (16384, 1, 1)x(128, 1, 1), Context 1\n"
        "    Duration                         us       154.20\n"
        "    DRAM Throughput                   %        52.00\n"
        "          The FMA pipeline is the highest-utilized pipeline (71.3%) based on active\n")
    pipes = ch08.pipe_utilization(tmp_path)
    assert pipes[0]["Duration"] == 154.2 and pipes[0]["DRAM Throughput"] == 52.0
    assert pipes[0]["busiest_pipe_pct"] == 71.3 and pipes[0]["kernel"].startswith("rmsnorm_fp8")



def test_the_twin_is_close_but_not_equal():
    """What the page says of the seed's twin: codes at most one e4m3 step away, scales a last
    bit apart, and still not equal."""
    twin = ch08.twin_differences(rows=8)[-1]
    assert not twin["passes"] and twin["differing codes"] > 0
    assert twin["max code steps"] == 1 and 0 < twin["max scale gap"] < 1e-6


def test_the_twin_table_reads_as_the_page_says():
    """On the page's 64 rows: alone, only the 1/448 scale and the approximate division change
    codes; together the four fail, no code more than one e4m3 step from the specification's."""
    twin = ch08.twin_differences(rows=64)
    alone = {r["shortcut"].split(",")[0].split(" ")[0]: r["passes"] for r in twin[:-1]}
    assert alone == {"fp32": True, "rsqrt": True, "scale": False, "q": False}
    assert not twin[-1]["passes"] and twin[-1]["max code steps"] == 1


def test_one_slow_round_of_five_does_not_set_the_spread():
    """A slow window of the GPU in one round widened every lever's tie band to 19% at 32768 x
    7168; from five rounds on, the spread drops the fastest and the slowest."""
    assert ch08.round_spread([272.7, 274.9, 324.9]) == (272.7, 324.9)
    assert ch08.round_spread([272.7, 273.1, 274.9, 273.8, 324.9]) == (273.1, 274.9)
    assert ch08.round_spread([]) is None
