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


def test_a_peer_missing_at_some_shapes_is_reported_not_beaten():
    skip = {("liger", k) for k in range(3)} | {("torch.rms_norm", k) for k in (0, 5)}
    doc = _train_doc(list(ch09.SHAPES), impls=("triton.two_stage", "torch.rms_norm", "liger",
                                               "torch.eager"), skip=skip)
    v = ch09_page.verdict(doc, "rmsnorm")
    assert v["no_peer_shapes"] == ["1024x2048 bf16"]  # neither was timed there
    assert v["shapes"] == 10 and v["missing"] == {"torch.eager": 10, "torch.rms_norm": 1,
                                                  "liger": 2, "liger.in_place": 10,
                                                  "torch.compile": 10}


def test_a_peer_the_recording_predates_is_named_on_the_page():
    doc = _train_doc(list(ch09.SHAPES)[:2])  # ours, F.rms_norm and Liger out of place
    assert ch09_page.unrecorded_peers(doc) == ["torch.eager", "liger.in_place", "torch.compile"]
    sentence = ch09_page.missing_sentence(doc)
    assert "Liger in place (not measured by this recording)" in sentence
    assert "Liger (" not in sentence  # Liger out of place was timed
    doc["records"].append({"kind": "peer_missing", "impl": "torch.compile", "reason": "no GPU"})
    assert ch09_page.unrecorded_peers(doc) == ["torch.eager", "liger.in_place"]
    assert "torch.compile (no GPU)" in ch09_page.missing_sentence(doc)


def test_the_backward_alone_against_the_peers_backward_alone():
    def rec(impl, us, check_ok=True, rows=4096):
        return {"kind": "backward", "op": "rmsnorm", "impl": impl, "rows": rows, "cols": 4096,
                "dtype": "bf16", "bytes": 10**8, "floor_us": 25.0, "us": us, "programs": 132,
                "check_ok": check_ok}
    doc = _doc([{"copy_GBps": 4000.0, "skipped": 0, "records": [
        rec("two_stage", 30.0), rec("atomic", 33.0), rec("liger", 40.0),
        rec("liger.in_place", 28.0, check_ok=False),  # faster, but its gradients are off
        rec("torch.compile", 36.0), rec("two_stage", 9.0, rows=1024)]}])
    table = ch09_page.backward_peers_table(doc, "rmsnorm")
    assert [r["shape"] for r in table] == ["1024x4096 bf16", "4096x4096 bf16"]
    assert table[0]["fastest_peer"] is None and table[0]["vs_fastest"] is None
    assert table[1]["fastest_peer"] == "torch.compile"
    assert table[1]["vs_fastest"] == pytest.approx(30 / 36)
    # the design table keeps our designs only
    assert {r["design"] for r in ch09_page.backward_table(doc)} == {"two-stage dw", "atomic dw"}
    assert ch09_page.backward_peers_table(doc, "add_rmsnorm") is None


def test_the_backward_table_shows_zero_partials_for_the_atomic_design():
    recs = [{"kind": "backward", "op": "rmsnorm", "impl": d, "rows": 1024, "cols": 2048,
             "dtype": "bf16", "bytes": 10**7, "programs": 132, "us": 10.0, "pct_floor": 30.0}
            for d in ("two_stage", "atomic")]
    rows = ch09_page.backward_table({"records": recs})
    assert [r["design"] for r in rows] == ["two-stage dw", "atomic dw"]
    assert rows[0]["partials_pct"] == pytest.approx(100 * 2 * 132 * 2048 * 4 / 10**7)
    assert rows[1]["partials_pct"] == 0  # shown as 0, not a blank cell that reads as missing


def test_the_page_prices_every_floor_at_the_books_copy():
    from fusedrms import records

    doc, floor = ch09_page.load(), records.copy_floor()
    timed = [r for r in doc["records"] if "us" in r and r.get("bytes")]
    assert timed
    for r in timed:  # not the median of the copies the measuring processes saw
        assert r["floor_us"] == pytest.approx(floor.us(r["bytes"]))
        assert r["pct_floor"] == pytest.approx(floor.pct(r["bytes"], r["us"]))


def test_without_a_copy_measured_no_share_of_a_floor_is_given(monkeypatch):
    from fusedrms import records

    monkeypatch.setattr(records, "copy_floor_beside", lambda doc: None)
    doc = ch09_page.load()
    assert all(r.get("pct_floor") is None for r in doc["records"])
    v = ch09_page.verdict(doc, "rmsnorm")
    assert v["median_pct_floor"] is None and v["shapes"] > 0


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


def test_the_memory_table_puts_both_ops_side_by_side_per_implementation():
    def rec(op, impl, peak, rows=16384):
        return {"kind": "train", "op": op, "impl": impl, "rows": rows, "cols": 8192,
                "dtype": "bf16", "peak_MiB": peak}
    doc = {"records": [rec("rmsnorm", "triton.two_stage", 516.2), rec("add_rmsnorm", "triton.two_stage", 772.2),
                       rec("rmsnorm", "torch.eager", 3460.2), rec("rmsnorm", "liger", 1.0, rows=1024)]}
    table = ch09_page.memory_table(doc, (16384, 8192, "bf16"))
    assert table == [{"implementation": "ours", "RMSNorm, MiB": 516.2, "fused add + RMSNorm, MiB": 772.2},
                     {"implementation": "eager PyTorch", "RMSNorm, MiB": 3460.2,
                      "fused add + RMSNorm, MiB": None}]  # Liger: another shape, not in this table
    assert ch09_page.memory_table(doc, (1, 1, "bf16")) is None
