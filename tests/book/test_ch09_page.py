"""Chapter 9's page: the readers turn a recording (built here with ch09.aggregate, or the
committed one) into tables, a figure and sentences that read right in every state."""
import pytest

from fusedrms import records
from fusedrms.book import ch09, ch09_page
from tests.book.test_ch09 import _part  # one process's records, as the worker writes them


def _doc(parts):
    return {"provenance": {"gpu": "test"}, "records": ch09.aggregate(parts)}


def test_readers_compare_with_the_fastest_checked_peer():
    big = _part({"triton.two_stage": 100.0, "torch.eager": 300.0, "torch.compile": 110.0},
                rows=16384, cols=8192)
    unchecked = _part({"liger": 50.0}, rows=16384, cols=8192, check_ok=False)  # fails its check
    small = _part({"triton.two_stage": 9.0, "torch.compile": 6.0}, rows=1024, cols=2048)
    doc = _doc([{"copy_GBps": 4000.0, "records": big["records"] + unchecked["records"]
                 + small["records"], "skipped": 0}])
    table = ch09_page.training_table(doc, "rmsnorm")
    assert [r["shape"] for r in table] == ["1024x2048 bf16", "16384x8192 bf16"]
    assert table[1]["fastest_peer"] == "torch.compile"
    assert table[1]["vs_fastest"] == pytest.approx(100 / 110)
    v = ch09_page.verdict(doc, "rmsnorm")
    assert v["shapes"] == 2 and v["at_or_below_1"] == 1 and v["worst_shape"] == "1024x2048 bf16"
    v = ch09_page.verdict(doc, "rmsnorm", large_only=True)  # only the shape moving >= 64 MB
    assert v["shapes"] == 1 and v["at_or_below_1"] == 1 and v["worst_shape"] == "16384x8192 bf16"
    fig = ch09_page.figure(doc, "rmsnorm")
    assert fig is not None and len(fig.axes[0].patches) == 2 * 3  # 3 peers, 2 shapes
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "Liger (gradients off)" in labels and "torch.eager" not in labels


def test_no_recording_means_none_everywhere(monkeypatch, tmp_path):
    monkeypatch.setattr(records, "DATA_DIR", tmp_path)
    doc = ch09_page.load()
    assert doc is None
    assert ch09_page.training_table(doc, "rmsnorm") is None and ch09_page.verdict(doc, "rmsnorm") is None
    assert ch09_page.figure(doc, "rmsnorm") is None and ch09_page.backward_table(doc) is None


def test_recorded_tables_render_on_the_page():
    from fusedrms.book import page

    part = _part({"triton.two_stage": 100.0, "torch.eager": 300.0}, rows=16384, cols=8192)
    part["records"].append({"kind": "backward", "op": "rmsnorm", "impl": "two_stage",
                            "rows": 4096, "cols": 4096, "dtype": "bf16", "bytes": 10**8,
                            "floor_us": 25.0, "us": 30.0, "programs": 264})
    doc = _doc([part])
    rows, formats = ch09_page.for_page(ch09_page.training_table(doc, "rmsnorm"), ch09_page.TRAIN_COLUMNS)
    assert "Liger" not in rows[0]  # a peer with no record is left out, not shown empty
    html = page.table(rows, formats=formats, caption="t")._repr_html_()
    assert "ours (p10-p90)" in html and "100 (100-100)" in html and "3.00" not in html
    rows, formats = ch09_page.for_page(ch09_page.backward_table(doc), ch09_page.BACKWARD_COLUMNS)
    assert rows[0]["% floor"] == pytest.approx(100 * 25.0 / 30.0)
    assert "µs" in page.table(rows, formats=formats, caption="b")._repr_html_()
    assert "For RMSNorm" in ch09_page.answer(doc) and "not been recorded" in ch09_page.answer(None)


def _train_doc(shapes, impls=("triton.two_stage", "torch.rms_norm", "liger"), skip=()):
    """A recording of both ops at ``shapes``, ours 10 % slower than F.rms_norm at even-numbered
    shapes and 10 % faster at odd ones; ``skip`` = {(impl, shape index)} never timed."""
    records_ = []
    for k, (rows, cols, dt) in enumerate(shapes):
        for op in ch09.OPS:
            times = {"triton.two_stage": 100.0, "torch.rms_norm": 100.0 / (1.1 if k % 2 == 0
                                                                        else 0.9),
                     "liger": 150.0}
            times = {i: t for i, t in times.items() if i in impls and (i, k) not in skip}
            records_ += _part(times, rows=rows, cols=cols, dt=dt, op=op)["records"]
    return _doc([{"copy_GBps": 4000.0, "records": records_, "skipped": 0}])


def _english(text):
    import re

    assert not re.search(r"\b1 (shapes|processes|ulps)\b", text), text
    assert not re.search(r"\b(\w+) \1\b", text), text  # a doubled word
    assert "-0" not in text and "((" not in text and "torch.rms_norm" not in text, text


def test_answer_with_few_shapes_names_each_and_no_large_shape_verdict():
    doc = _train_doc([(1024, 2048, "bf16"), (1024, 4096, "bf16")])
    text = ch09_page.answer(doc)
    _english(text)
    assert "1024x2048 bf16" in text and "1024x4096 bf16" in text and "F.rms_norm" in text
    assert "64 MB" not in text and "of 2 shapes" not in text
    cover = ch09_page.coverage_sentence(doc)
    _english(cover)
    assert "only 2 shapes of the 11" in cover
    assert "No step with 4096 or 16384 rows, 8192 columns or fp32 was timed" in cover
    # the determinism study runs at 16384 rows: the sentence is about timings only
    assert "measured" not in cover


def test_answer_with_every_shape_counts_and_gives_the_large_shape_median():
    doc = _train_doc(list(ch09.SHAPES))
    text = ch09_page.answer(doc)
    _english(text)
    assert "faster than the fastest checked peer at 5 of 11 shapes and slower at 6" in text
    assert "shapes moving 64 MB or more" in text
    assert ch09_page.coverage_sentence(doc) == ("The recording timed forward + backward at all 11 "
                                           "shapes.")


def test_a_peer_missing_at_some_shapes_is_reported_not_beaten():
    skip = {("liger", k) for k in range(3)} | {("torch.rms_norm", k) for k in (0, 5)}
    doc = _train_doc(list(ch09.SHAPES), impls=("triton.two_stage", "torch.rms_norm", "liger",
                                               "torch.eager"), skip=skip)
    text = ch09_page.answer(doc)
    _english(text)
    assert ("Without a checked time, so not in these comparisons: eager PyTorch at any of them, "
            "F.rms_norm at 1 of them, Liger at 2 of them and torch.compile at any of them.") in text
    assert "At 1024x2048 bf16 no peer has a checked time" in text  # neither was timed there
    v = ch09_page.verdict(doc, "rmsnorm")
    assert v["shapes"] == 10 and v["missing"] == {"torch.eager": 10, "torch.rms_norm": 1,
                                                  "liger": 2, "torch.compile": 10}


def test_answer_when_no_peer_was_timed():
    doc = _train_doc([(1024, 2048, "bf16")], impls=("triton.two_stage",))
    text = ch09_page.answer(doc)
    assert text.count("no shape has both our time and a checked peer's") == 2


def test_processes_sweep_and_determinism_sentences_in_every_state():
    assert ch09_page.processes_sentence(None) == "no case has been timed yet"
    parts = [_part({"triton.two_stage": t}) for t in (10.0, 11.0)]
    parts[1]["records"] = []
    assert ch09_page.processes_sentence(_doc(parts)) == "every case was timed in 1 process"
    mixed = _doc([_part({"triton.two_stage": 10.0, "torch.eager": 30.0}),
                  _part({"triton.two_stage": 11.0})])
    assert ch09_page.processes_sentence(mixed) == "1 to 2 processes per case"
    assert "not measured here" in ch09_page.sweep_sentence(mixed)
    sweep = [{"kind": "programs", "op": "rmsnorm", "impl": f"{n}/SM", "rows": 1024, "cols": 4096,
              "dtype": "bf16", "bytes": 10**8, "programs": 132 * n, "us": 30.0 - n,
              "floor_us": 20.0, "pct_floor": 50.0} for n in (1, 2, 4)]
    text = ch09_page.sweep_sentence({"records": sweep})
    _english(text)
    assert text.startswith("The fastest grid measured: 4 per SM at 1024x4096 bf16, 26.0 µs")
    assert "no repeated runs" in ch09_page.determinism_sentence(mixed)
    det = [{"kind": "determinism", "impl": "two_stage", "rows": 64, "cols": 512, "dtype": "bf16",
            "runs": 5, "distinct": 1, "max_ulp_apart": 0},
           {"kind": "determinism", "impl": "atomic", "rows": 64, "cols": 512, "dtype": "bf16",
            "runs": 5, "distinct": 2, "max_ulp_apart": 1}]
    text = ch09_page.determinism_sentence({"records": det})
    _english(text)
    assert "two-stage dw gave the same bits every time" in text
    assert "atomic dw gave 2 different dw bit patterns, at most 1 ulp apart" in text


def test_the_backward_table_shows_zero_partials_for_the_atomic_design():
    recs = [{"kind": "backward", "op": "rmsnorm", "impl": d, "rows": 1024, "cols": 2048,
             "dtype": "bf16", "bytes": 10**7, "programs": 132, "us": 10.0, "pct_floor": 30.0}
            for d in ("two_stage", "atomic")]
    rows = ch09_page.backward_table({"records": recs})
    assert [r["design"] for r in rows] == ["two-stage dw", "atomic dw"]
    assert rows[0]["partials_pct"] == pytest.approx(100 * 2 * 132 * 2048 * 4 / 10**7)
    assert rows[1]["partials_pct"] == 0  # shown as 0, not a blank cell that reads as missing


def test_the_committed_recording_reads_as_measured():
    """The committed recording timed 1024 rows only: the page says so and judges no large shape."""
    doc = ch09_page.load()
    if doc is None or doc.get("source", {}).get("own"):
        pytest.skip("no committed recording, or the reader's own is loaded")
    timed = ch09_page.coverage(doc)["timed"]
    text = ch09_page.answer(doc)
    _english(text)
    if len(timed) <= 3:
        assert "64 MB" not in text
        assert all(ch09_page._shape(*s) in text for s in timed)


def test_measured_intro_reads_in_every_state():
    assert "No recording of this comparison exists yet" in ch09_page.measured_intro(None)
    one = _doc([_part({"triton.two_stage": 10.0})])
    one["provenance"]["processes"] = 1
    assert ch09_page.measured_intro(one).startswith("The measurement ran in one process.")
    doc = _train_doc([(1024, 2048, "bf16")])
    doc["provenance"]["processes"] = 3
    text = ch09_page.measured_intro(doc)
    _english(text)
    assert "ran in 3 separate processes" in text and "(every case was timed in 1 process" in text


def test_calls_per_replay_comes_from_the_recorded_methods():
    def rec(method):
        return {"kind": "train", "method": method}

    assert ch09_page.calls_per_replay(None) == "many"
    assert ch09_page.calls_per_replay({"records": [rec("20 calls back to back over 10 rotating "
                                                  "input copies")] * 2}) == "20"
    both = {"records": [rec("20 calls back to back"), rec("28 calls back to back"),
                        {"kind": "determinism", "method": "99 calls"}]}
    assert ch09_page.calls_per_replay(both) == "20 to 28"


def test_the_page_prices_every_floor_at_the_books_copy():
    from fusedrms import records

    doc, floor = ch09_page.load(), records.copy_floor()
    timed = [r for r in doc["records"] if "us" in r and r.get("bytes")]
    assert timed
    for r in timed:  # not the median of the copies the measuring processes saw
        assert r["floor_us"] == pytest.approx(floor.us(r["bytes"]))
        assert r["pct_floor"] == pytest.approx(floor.pct(r["bytes"], r["us"]))


def test_without_a_copy_measured_the_answer_says_no_share_of_a_floor(monkeypatch):
    from fusedrms import records

    monkeypatch.setattr(records, "copy_floor_beside", lambda doc: None)
    doc = ch09_page.load()
    assert all(r.get("pct_floor") is None for r in doc["records"])
    text = ch09_page.answer(doc)
    assert "floor" not in text and "None" not in text and "For RMSNorm" in text


def test_differences_inside_the_run_to_run_spread_are_ties():
    """Three processes: the band is the spread of the process times; a 0.5% gap is a tie, 20% not."""
    def part(scale):
        near = _part({"triton.two_stage": 100.0 * scale, "torch.compile": 100.5},
                     rows=16384, cols=8192)
        far = _part({"triton.two_stage": 120.0 * scale, "torch.compile": 100.0}, rows=4096,
                    cols=4096)
        return {"copy_GBps": 4000.0, "records": near["records"] + far["records"], "skipped": 0}

    doc = _doc([part(1.0), part(1.01), part(0.99)])
    band = ch09_page.tie_band(doc)
    assert band == pytest.approx(0.016, abs=0.002)
    v = ch09_page.verdict(doc, "rmsnorm")
    assert (v["faster"], v["tie"], v["slower"]) == (0, 1, 1)
    text = ch09_page.answer(doc)
    assert "tie band of ±1.6%: 1 of these is a tie." in text
