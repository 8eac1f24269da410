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


def _fake_rules_clock(monkeypatch):
    """The timer replaced by a clock that answers every option ch06 asks for, on the CPU."""
    from fusedrms.measure import timer

    fake_clock(monkeypatch)
    asked = []

    def time_gpu(fn, warmup=25, reps=100, l2="cold", graph=False, hold=False, graph_calls=None):
        timer._check_args(l2, warmup, reps, hold, graph_calls)  # the real argument rules
        asked.append((l2, graph, hold, graph_calls))
        fn()
        base = {"cold": 20.0, "warm": 10.0}[l2] - (5.0 if graph else 0.0) + (1.0 if hold else 0)
        return [base + v for v in range(reps)]

    monkeypatch.setattr(timer, "time_gpu", time_gpu)
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
    return asked


GRID = {"records": [
    dict(impl="k", op="add_rmsnorm", rows=1, cols=8, dtype="bf16", mode="cold", status="ok",
         median_us=10.0, p10_us=9.0, p90_us=11.0, process_medians_us=[9.0, 10.0, 13.0]),
    dict(impl="j", op="rmsnorm", rows=2, cols=8, dtype="fp32", mode="cold", status="ok",
         median_us=100.0, p10_us=99.0, p90_us=101.0, process_medians_us=[100.0, 100.5, 99.0]),
    dict(impl="k", op="add_rmsnorm", rows=1, cols=8, dtype="bf16", mode="warm", status="ok",
         median_us=1.0, p10_us=1.0, p90_us=1.0, process_medians_us=[1.0, 9.0])]}


def test_timing_rules_logic_with_a_fake_clock(monkeypatch):
    """measure_timing_rules' bookkeeping on the CPU: small inputs, fake events, no compile."""
    asked = _fake_rules_clock(monkeypatch)
    got = {r["rule"]: r for r in ch06.measure_timing_rules(GRID, log=lambda m: None)}
    assert set(got) == {"synchronize", "warm-up", "processes", "L2", "graph"}
    for name, r in got.items():
        assert r["status"] == "ok", (name, r["status"])
        assert r["ignored"]["median_us"] > 0 and r["followed"]["median_us"] > 0
        assert "ignored" in ch06.rule_summary(r)
    # (c) every process median kept; the outlier process, not the fastest, is the one shown
    p = got["processes"]
    assert p["cases"] == 2 and len(p["all_cases"]) == 2
    assert p["worst"]["impl"] == "k" and p["worst"]["outlier_us"] == 13.0
    assert p["ignored"]["median_us"] == 13.0 and p["cases_over_5pct"] == 1
    assert p["worst_across_pct"] == pytest.approx(40.0)
    assert got["warm-up"]["compile"]["impl"] == "torch.compile_add"
    assert got["warm-up"]["triton_cache"] in ("empty", "default")  # never a path
    # (a) L2: one call per graph replay on both sides, warm held, at the listed shapes
    l2 = got["L2"]
    assert [s["rows"] for s in l2["shapes"]] == [r for r, _ in ch06.RULE_SHAPES["L2"]]
    assert 20e6 <= l2["headline"]["bytes"] <= 40e6
    assert ("warm", True, True, 1) in asked and ("cold", True, False, None) in asked
    assert all(s["cold_over_warm"] == pytest.approx(s["cold_us"] / s["warm_us"])
               for s in l2["shapes"])
    # (b) graph: every way of launching, per implementation and shape
    g = got["graph"]["impls"]
    assert {r["impl"] for r in g} == {"torch.rms_norm_add", "torch.eager_chain"}
    assert len(g) == 2 * len(ch06.RULE_SHAPES["graph"])
    for key in ("cold_us", "cold_graph_us", "held_us", "held_graph_us", "back_to_back_us",
                "graph_back_to_back_us"):
        assert all(r[key] > 0 for r in g), key
    # (d) synchronize at every size, three clocks each
    sync = got["synchronize"]["shapes"]
    assert [s["rows"] for s in sync] == [r for r, _ in ch06.RULE_SHAPES["synchronize"]]
    assert all(s["no_sync_us"] > 0 and s["sync_us"] > 0 and s["events_us"] > 0 for s in sync)
    # without a grid the process rule says what it needs instead of failing the others
    got = {r["rule"]: r for r in ch06.measure_timing_rules(None, log=lambda m: None)}
    assert got["processes"]["status"].startswith("error: RuntimeError: needs the grid")
    assert got["L2"]["status"] == "ok"


def test_timing_rules_smoke_sizes(monkeypatch):
    _fake_rules_clock(monkeypatch)
    got = {r["rule"]: r for r in ch06.measure_timing_rules(GRID, log=lambda m: None, smoke=True)}
    assert all(r["status"] == "ok" for r in got.values())
    assert [s["rows"] for s in got["L2"]["shapes"]] == [r for r, _ in ch06.SMOKE_RULE_SHAPES["L2"]]
    assert "compile" not in got["warm-up"]


@pytest.mark.gpu
def test_timing_rules_on_the_gpu_at_smoke_sizes():
    got = {r["rule"]: r for r in ch06.measure_timing_rules(GRID, log=lambda m: None, smoke=True)}
    assert all(r["status"] == "ok" for r in got.values()), {k: r["status"] for k, r in got.items()}
    for s in got["L2"]["shapes"] + got["synchronize"]["shapes"]:
        assert all(v > 0 for k, v in s.items() if k.endswith("_us"))
    r = got["graph"]["impls"][0]
    assert r["graph_back_to_back_us"] < r["back_to_back_us"]  # a graph removes the CPU's path
    cfg = ch06.config_in_use(harness.pick_target("add_rmsnorm"), 16384, 8192, "bf16")
    assert cfg is None or (cfg["num_warps"] >= 1 and cfg["programs"] >= 1)