"""Chapter 6's companion (fusedrms.book.ch06): the timing rules measured, and the chapter's readers."""
import dataclasses

import pytest
import torch

from fusedrms import env, registry
from fusedrms.book import ch06
from fusedrms.measure import harness

from measure.test_harness import fake_clock

ENV = env.current()


def test_historical_seed_table_is_labelled_and_in_microseconds():
    doc = ch06.historical_seed()
    p = doc["provenance"]
    assert p["historical"] is True and "seed 003" in p["source"] and "9070 XT" in p["gpu"]
    by = {r["impl"].split(" (")[0]: r for r in doc["records"]}
    assert by["HIP serial"]["median_us"] == pytest.approx(1504.86)
    assert by["HIP block"]["median_us"] == pytest.approx(58.44)
    assert by["Triton t0"]["median_us"] == pytest.approx(33.36)
    assert by["Triton t1"]["median_us"] == pytest.approx(30.081)
    assert all(r["min_median_us"] <= r["median_us"] <= r["max_median_us"] for r in doc["records"])


def test_chapter_helpers_verdict_classify_rules():
    recs = [dict(impl="k", status="ok", rows=r, cols=4096, dtype="bf16", median_us=t, bytes=b,
                 pct_of_floor=p) for r, t, b, p in
            [(1, 5.0, 1e4, 0.1), (16, 5.5, 1e5, 1.0), (4096, 30.0, 1e8, 80.0),
             (16384, 100.0, 4e8, 95.0)]]
    labels = [r["regime"] for r in ch06.classify(recs)]
    assert labels == ["launch-bound", "launch-bound", "in between", "on the floor"]
    v = ch06.verdict(recs[2:])
    assert "not met" in v and "80.0% at 4096x4096 bf16" in v and "gap 5.0" in v
    assert ch06.verdict(recs[3:]).startswith("target >= 85% of floor over 1 cases: met")
    assert "no data" in ch06.verdict([])
    rule = {"rule": "synchronize", "status": "ok",
            "ignored": {"what": "cpu", "median_us": 4.0}, "followed": {"what": "ev", "median_us": 200.0}}
    text = ch06.rule_summary(rule)
    assert "ignored" in text and "0.02" in text
    assert "not measured" in ch06.rule_summary({"rule": "L2", "status": "error: x"})
    assert ch06.find_rule({"records": [rule]}, "synchronize") is rule
    assert ch06.find_rule(None, "x") is None


def test_timing_rules_logic_with_a_fake_clock(monkeypatch):
    """measure_timing_rules' bookkeeping on the CPU: small inputs, fake events, no compile."""
    import dataclasses

    fake_clock(monkeypatch)
    original = harness.make_inputs
    monkeypatch.setattr(ch06, "make_inputs",
                        lambda op, rows, cols, dtype, device="cuda", seed=0:
                        original(op, 4, 64, dtype, "cpu"))
    monkeypatch.setattr(harness, "_sync", lambda device="cuda": None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(ch06.env, "require_gpu", lambda what: None)
    monkeypatch.setattr(ch06, "pick_target", lambda op="add_rmsnorm": "torch.rms_norm_add")
    registry.load_all()
    monkeypatch.setitem(registry._IMPLS, "torch.compile_add", dataclasses.replace(
        registry._IMPLS["torch.compile_add"], fn=registry._IMPLS["torch.rms_norm_add"].fn))
    grid = {"records": [dict(impl="k", op="add_rmsnorm", rows=1, cols=8, dtype="bf16",
                             mode="cold", status="ok", median_us=10.0, p10_us=9.0, p90_us=11.0,
                             process_medians_us=[9.0, 10.0, 12.0])]}
    got = {r["rule"]: r for r in ch06.measure_timing_rules(grid, log=lambda m: None)}
    assert set(got) == {"synchronize", "warm-up", "processes", "L2", "launch overhead"}
    for name, r in got.items():
        assert r["status"] == "ok", (name, r["status"])
        assert r["ignored"]["median_us"] > 0 and r["followed"]["median_us"] > 0
        assert "ignored" in ch06.rule_summary(r)
    assert got["processes"]["worst_across_pct"] == pytest.approx(30.0)
    assert got["warm-up"]["compile"]["impl"] == "torch.compile_add"
    assert [s["rows"] for s in got["L2"]["shapes"]] == [1024, 16384]
    # without a grid the process rule says what it needs instead of failing the others
    got = {r["rule"]: r for r in ch06.measure_timing_rules(None, log=lambda m: None)}
    assert got["processes"]["status"].startswith("error: RuntimeError: needs the grid")
    assert got["L2"]["status"] == "ok"
