"""Chapter 6's companion (fusedrms.book.ch06): the timing rules measured, and the chapter's readers."""
import dataclasses

import pytest
import torch

from fusedrms import env, registry
from fusedrms.book import ch06
from fusedrms.measure import harness, worker

from measure.test_harness import fake_clock

ENV = env.current()


def test_historical_seed_table_is_labelled_and_in_microseconds():
    doc = ch06.historical_seed()
    p = doc["provenance"]
    assert p["historical"] is True and "9070 XT" in p["gpu"]
    # the source as a reader reads it: the course's chapter and section, no archive number
    assert p["source"].startswith("chapter 13") and "section 13.5" in p["source"]
    assert "seed" not in p["source"] and "/" not in p["source"].replace("HIP/Triton", "")
    by = {r["impl"].split(" (")[0]: r for r in doc["records"]}
    assert by["HIP serial"]["median_us"] == pytest.approx(1504.86)
    assert by["HIP block"]["median_us"] == pytest.approx(58.44)
    assert by["Triton t0"]["median_us"] == pytest.approx(33.36)
    assert by["Triton t1"]["median_us"] == pytest.approx(30.081)
    assert all(r["min_median_us"] <= r["median_us"] <= r["max_median_us"] for r in doc["records"])


def test_readable_times_and_ratios():
    assert ch06.readable_us(230637.56) == "231 ms"
    assert ch06.readable_us(23063.7) == "23.1 ms"
    assert ch06.readable_us(7435373.07) == "7.44 s"
    assert ch06.readable_us(99.18) == "99.2 µs" and ch06.readable_us(1.579) == "1.58 µs"
    assert ch06.readable_us(2695.4) == "2.70 ms" and ch06.readable_us(208.2) == "208 µs"
    assert ch06.readable_us(7540.4) == "7.54 ms" and ch06.readable_us(None) == "-"
    assert ch06.times_in_words(2325.35) == "about 2,300 times"
    assert ch06.times_in_words(74377.5) == "about 74,000 times"
    assert ch06.times_in_words(71.06) == "71 times" and ch06.times_in_words(1.324) == "1.3 times"


def test_readers_on_the_committed_recording_never_raise():
    """Whatever the committed recording holds (old or new), every reader answers or says None."""
    from fusedrms.measure import harness as h

    rules, grid, ncu = (h.recorded(n) for n in ("timing_rules", "bench_grid", "ncu_summary"))
    for reader in (ch06.sync_rows, ch06.warmup_view, ch06.l2_rows, ch06.graph_rows):
        reader(rules)
        reader(None)
    view = ch06.ncu_view(ncu)
    assert view is None or set(ch06.NCU_PICKS) <= set(view)
    p = ch06.process_view(grid)
    if p is not None:  # the outlier process, not the fastest one, is the number shown
        w = p["worst"]
        assert w["outlier_us"] in w["process_medians_us"]
        assert abs(w["outlier_us"] - w["median_us"]) == max(
            abs(m - w["median_us"]) for m in w["process_medians_us"])
    assert ch06.grid_health(None) is None and ch06.floor_summary(None, "x") is None


def test_ncu_view_picks_the_sections():
    doc = {"records": [{"status": "ok", "kernel": "k", "bytes_read": 5e8, "bytes_write": 2.8e8,
                        "kernels": [{"kernel": "k", "metrics": {
                            "Launch Statistics / Block Size": {"unit": "", "value": "512"},
                            "Launch Statistics / Registers Per Thread": {"unit": "register/thread",
                                                                         "value": "40"},
                            "Occupancy / Achieved Occupancy": {"unit": "%", "value": "88.1"},
                            "Warp State Statistics / Warp Cycles Per Issued Instruction":
                                {"unit": "cycle", "value": "30.2"}}}]}]}
    v = ch06.ncu_view(doc)
    assert v["Block size"] == "512" and v["Achieved occupancy"] == "88.1%"
    assert v["Registers per thread"] == "40"  # the label says per thread
    assert v["Warp cycles per issued instruction"] == "30.2 cycles" and v["Grid size"] is None


def test_grid_summaries():
    grid = {"records": [dict(sweep="grid", impl="k", op="add_rmsnorm", rows=r, cols=4096,
                             dtype="bf16", mode="cold", status="ok", median_us=t, bytes=b,
                             pct_of_floor=p, correct=c, process_medians_us=[t, t, t],
                             p10_us=t, p90_us=t)
                        for r, t, b, p, c in [(1, 5.0, 1e4, 0.1, True), (4096, 30.0, 1e8, 80.0, True),
                                              (16384, 100.0, 4e8, 95.0, False)]]
            + [dict(sweep="grid", impl="j", rows=1, cols=8, dtype="bf16", mode="cold",
                    status="unsupported: too wide"),
               dict(sweep="grid", impl="q", rows=1, cols=8, dtype="bf16", mode="cold",
                    status="error: KeyError: x"),
               dict(sweep="grid", impl="torch.compile", rows=1, cols=8, dtype="bf16",
                    mode="cold", status="skipped: time budget")]}
    f = ch06.floor_summary(grid, "k")
    assert f["cases"] == 2 and f["at_least"] == 1 and f["min_pct"] == 80.0
    h = ch06.grid_health(grid)
    assert (h["measured"], h["wrong"], h["unsupported"], h["errors"]) == (3, 1, 1, 1)
    assert h["wrong_impls"] == ["k"] and h["error_impls"] == ["q"]
    # a case the recording skipped is missing, not an error
    assert h["skipped"] == 1 and h["skipped_impls"] == ["torch.compile"]
    assert [r["rows"] for r in ch06.grid_rows(grid)] == [1, 4096, 16384]
    # the checks beside the grid count the grid's cases only, not the file's other sweeps
    grid["records"].append(dict(sweep="l2", impl="k", rows=1, cols=8, dtype="bf16",
                                mode="warm", status="skipped: time budget"))
    assert ch06.grid_health(grid)["cases"] == 7 and ch06.grid_health(grid, "grid")["cases"] == 6
    assert ch06.grid_health(grid, "grid")["skipped"] == 1
    assert ch06.grid_health(grid, "no such sweep") is None


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
    original = worker.make_inputs
    monkeypatch.setattr(ch06, "make_inputs",
                        lambda op, rows, cols, dtype, device="cuda", seed=0:
                        original(op, 4, 64, dtype, "cpu"))
    monkeypatch.setattr(worker, "_sync", lambda device="cuda": None)
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
    # the chapter's readers on that recording
    doc = {"records": list(got.values())}
    assert [r["rows"] for r in ch06.sync_rows(doc)] == sorted(r["rows"] for r in sync)
    shapes, rule = ch06.l2_rows(doc)
    assert rule["headline"] in shapes
    assert ch06.graph_rows(doc) == g
    w = ch06.warmup_view(doc)
    assert w["ratio"] == pytest.approx(w["first_us"] / w["warm_us"]) and "compile_ratio" in w
    # without a grid the process rule says what it needs instead of failing the others
    got = {r["rule"]: r for r in ch06.measure_timing_rules(None, log=lambda m: None)}
    assert got["processes"]["status"].startswith("error: RuntimeError: needs the grid")
    assert got["L2"]["status"] == "ok"


def test_timing_rules_smoke_sizes(monkeypatch):
    _fake_rules_clock(monkeypatch)
    got = {r["rule"]: r for r in ch06.measure_timing_rules(GRID, log=lambda m: None, smoke=True)}
    assert all(r["status"] == "ok" for k, r in got.items() if k != "processes")
    # one process per case in a smoke run: the spread across processes is skipped, saying why
    assert got["processes"]["status"].startswith("skipped: a smoke run")
    assert [s["rows"] for s in got["L2"]["shapes"]] == [r for r, _ in ch06.SMOKE_RULE_SHAPES["L2"]]
    assert "compile" not in got["warm-up"]


@pytest.mark.gpu
def test_timing_rules_on_the_gpu_at_smoke_sizes():
    got = {r["rule"]: r for r in ch06.measure_timing_rules(GRID, log=lambda m: None, smoke=True)}
    assert all(r["status"] == "ok" for k, r in got.items() if k != "processes")
    # one process per case in a smoke run: the spread across processes is skipped, saying why
    assert got["processes"]["status"].startswith("skipped: a smoke run"), {k: r["status"] for k, r in got.items()}
    for s in got["L2"]["shapes"] + got["synchronize"]["shapes"]:
        assert all(v > 0 for k, v in s.items() if k.endswith("_us"))
    r = got["graph"]["impls"][0]
    assert r["graph_back_to_back_us"] < r["back_to_back_us"]  # a graph removes the CPU's path
    cfg = ch06.config_in_use(harness.pick_target("add_rmsnorm"), 16384, 8192, "bf16")
    assert cfg is None or (cfg["num_warps"] >= 1 and cfg["programs"] >= 1)


def test_two_questions_pairs_one_call_with_a_call_in_a_stream():
    def rec(sweep, mode, rows, us, **extra):
        return dict(sweep=sweep, mode=mode, impl="capstone.fused", rows=rows, cols=4096,
                    dtype="bf16", status="ok", median_us=us, bytes=rows * 4096 * 6, **extra)

    grid = {"records": [rec("grid", "cold", 1, 5.0, process_p10_us=4.9, process_p90_us=5.2),
                        rec("grid", "cold", 1024, 10.3, min_median_us=10.1, max_median_us=10.6),
                        rec("grid", "cold", 16384, 96.0)]}
    peers = {"records": [rec("peers", "rotating", 1, 1.8), rec("peers", "rotating", 1024, 7.2),
                         rec("peers", "rotating", 2, 1.0)]}
    rows = ch06.two_questions(grid, peers, "capstone.fused")
    assert [(r["rows"], r["one_call_us"], r["stream_us"]) for r in rows] == [(1, 5.0, 1.8),
                                                                           (1024, 10.3, 7.2)]
    assert rows[0]["one_call"] == "5.00 (4.90-5.20)" and rows[1]["one_call"] == "10.3 (10.1-10.6)"
    assert rows[1]["ratio"] == pytest.approx(10.3 / 7.2)
    # a grid that times the stream itself is read first
    grid["records"].append(rec("stream", "rotating", 16384, 90.0))
    assert [r["rows"] for r in ch06.two_questions(grid, peers, "capstone.fused")] == [16384]
    assert ch06.two_questions(None, None, "capstone.fused") == []


def test_the_profile_names_the_configuration_ncu_profiled():
    """The committed profile ran the row-in-registers kernel (the large-batch rule) and its label
    says so; an older recording that kept the table's entry while the two-pass kernel ran is
    labelled with the two-pass launch."""
    from fusedrms.measure import harness

    view = ch06.ncu_view(harness.recorded("ncu_summary", machine="h200"))
    assert "chunked" not in view["kernel"] and view["config"]["chunk"] is None
    assert "large-batch rule" in view["config"]["source"]
    old = {"records": [{"status": "ok", "kernel": "add_rmsnorm_chunked_kernel",
                        "config": {"chunk": None, "label": "rows/prog 2"}}]}
    assert "two passes" in ch06.ncu_view(old)["config"]["label"]
    # a record whose kernel is the row-in-registers one keeps its configuration
    doc = {"records": [{"status": "ok", "kernel": "add_rmsnorm_kernel",
                        "config": {"chunk": None, "label": "rows/prog 1"}}]}
    assert ch06.ncu_view(doc)["config"] == {"chunk": None, "label": "rows/prog 1"}


def test_not_timed_at_names_skipped_peers_but_not_declared_widths():
    def rec(impl, status="ok"):
        return dict(sweep="grid", op="add_rmsnorm", impl=impl, rows=1, cols=4096, dtype="bf16",
                    mode="cold", status=status)
    grid = {"records": [rec("a"), rec("torch.compile", "skipped: x"),
                        rec("w", "unsupported: too wide")]}
    assert ch06.not_timed_at(grid, sweep="grid", rows=1) == ["torch.compile"]
    assert ch06.not_timed_at(grid, sweep="grid", rows=2) == []


def test_the_smoke_run_probes_for_a_quiet_memory_system_but_hardly_waits():
    real, smoke = ch06.timing_settings(300.0), ch06.timing_settings(300.0, smoke=True)
    assert real.quiet_wait_s == harness.Settings.quiet_wait_s > 0
    assert 0 < smoke.quiet_wait_s <= 0.05
