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
    assert ch06.readable_us(230637.56) == "230.6 ms"
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

# ---------------------------------------------------------------- the chapter's sentences

BAD_ENGLISH = ("1 cases", "1 shapes", "1 sizes", "-0", "((", "))", " ,", "..", "  ",
               "None", "nan", "shapes shapes", "cases cases")


def _reads_well(text):
    assert text and not any(bad in text for bad in BAD_ENGLISH), text
    return text


def _grid_record(impl, rows, status="ok", **kw):
    base = dict(sweep="grid", op="add_rmsnorm", impl=impl, rows=rows, cols=4096, dtype="bf16",
                mode="cold", status=status)
    if status == "ok":
        base.update(median_us=10.0, p10_us=9.5, p90_us=10.5, bytes=rows * 3 * 8192,
                    pct_of_floor=90.0, correct=True, process_medians_us=[9.9, 10.0, 10.2])
    return dict(base, **kw)


def _grid(*recs, processes=3, compile_processes=1):
    return {"provenance": {"settings": dict(processes=processes,
                                            compile_processes=compile_processes),
                           "sweeps": [dict(name="grid", rows=[1, 16384], cols=[2048, 16384])]},
            "records": list(recs)}


def test_every_sentence_says_nothing_when_nothing_is_recorded():
    for say in (ch06.sync_sentence, ch06.warmup_sentence, ch06.process_counts_sentence,
                ch06.process_sentence, ch06.l2_sentence, ch06.dirty_sentence,
                ch06.graph_sentences, ch06.floor_sentence, ch06.health_sentence,
                ch06.ncu_sentence, ch06.grid_span):
        assert say(None) is None, say.__name__
    assert ch06.not_timed_at(None, rows=1) == []


def test_sentences_on_the_committed_recording_read_well():
    import statistics

    from fusedrms.measure import harness as h

    rules, grid, ncu = (h.recorded(n) for n in ("timing_rules", "bench_grid", "ncu_summary"))
    if not (rules and grid and ncu):
        pytest.skip("no committed chapter 6 recording")
    bw = statistics.median(grid["provenance"]["copy_GBps_per_process"])
    view = ch06.ncu_view(ncu)
    for text in (ch06.sync_sentence(ch06.sync_rows(rules), bw),
                 ch06.warmup_sentence(ch06.warmup_view(rules)),
                 ch06.process_counts_sentence(grid),
                 ch06.process_sentence(ch06.process_view(grid)),
                 ch06.l2_sentence(ch06.l2_rows(rules)), ch06.dirty_sentence(view),
                 *ch06.graph_sentences(ch06.graph_rows(rules)),
                 ch06.floor_sentence(ch06.floor_summary(grid, "capstone.fused")),
                 ch06.health_sentence(ch06.grid_health(grid), "capstone.fused"),
                 ch06.ncu_sentence(view), ch06.grid_span(grid)):
        _reads_well(text)


def test_sync_sentence_concludes_only_what_the_clocks_show():
    def row(rows, no_sync, events):
        return dict(rows=rows, cols=8192, bytes=rows * 3 * 8192 * 2, no_sync_us=no_sync,
                    sync_us=events + 20, events_us=events)

    launch = _reads_well(ch06.sync_sentence([row(1024, 24, 15), row(65536, 78, 741)], 4000.0))
    assert "it times the launch" in launch and "below the copy floor at 1 of 2 sizes" in launch
    # a clock that grows with the work is not said to time the launch
    honest = _reads_well(ch06.sync_sentence([row(1024, 20, 15), row(65536, 850, 841)], 4000.0))
    assert "times the launch" not in honest and "below the copy floor" not in honest
    one = _reads_well(ch06.sync_sentence([row(1024, 24, 15)], None))
    assert one.startswith("At 1,024 rows")


def test_process_sentences_in_every_state():
    full = _grid(*[_grid_record("k", r) for r in (1, 16, 256)])
    assert _reads_well(ch06.process_counts_sentence(full)) == \
        "In the recorded grid 3 cold cases ran in three processes"
    cut = _grid(_grid_record("k", 1),
                _grid_record("k", 16, process_medians_us=[10.0, 10.1], processes=2),
                _grid_record("torch.compile", 1, process_medians_us=[10.0], processes=1))
    text = _reads_well(ch06.process_counts_sentence(cut))
    assert "1 cold case ran in three processes, 1 in two and 1 in one" in text
    assert "torch.compile's 1 ran in one by design" in text and "the other 1 in fewer" in text
    quiet = _reads_well(ch06.process_sentence(ch06.process_view(full)))
    assert "no process was more than 5% off" in quiet and "3 cases measured" in quiet
    loud = _grid(_grid_record("k", 1, process_medians_us=[10.0, 10.0, 20.0]),
                 _grid_record("k", 16))
    text = _reads_well(ch06.process_sentence(ch06.process_view(loud)))
    assert "in 1 case one process was more than 5% off" in text and "100% above it" in text


def test_floor_sentence_never_contradicts_its_own_count():
    fs = dict(cases=13, min_pct=84.63, max_pct=104.1, median_pct=95.6, at_least=12, share=85.0,
              min_bytes=64e6)
    text = _reads_well(ch06.floor_sentence(fs))
    # 84.63% is below 85%: the range must not read "85% to 104%" beside "12 of 13 at 85%"
    assert "84.6% to 104.1%" in text and "at 85% or more on 12 of them" in text
    assert "on all 13" in ch06.floor_sentence(dict(fs, min_pct=86.0, at_least=13))
    assert "below 85% on all 13" in ch06.floor_sentence(dict(fs, max_pct=80.0, at_least=0))
    one = _reads_well(ch06.floor_sentence(dict(fs, cases=1, max_pct=84.63, at_least=0)))
    assert one.startswith("On the one grid shape that moves")


def test_health_sentence_reports_skipped_cases_as_missing_never_as_results():
    grid = _grid(_grid_record("capstone.fused", 1),
                 _grid_record("torch.eager_chain", 1, correct=False),
                 _grid_record("torch.compile_add", 1, status="skipped: time budget"),
                 _grid_record("torch.compile_add", 16, status="skipped: time budget"),
                 _grid_record("j", 1, status="unsupported: too wide"))
    text = _reads_well(ch06.health_sentence(ch06.grid_health(grid), "capstone.fused"))
    assert "2 cases of torch.compile_add were not timed" in text and "missing" in text
    assert "failed" not in text and "1 case was a width" in text and "(j)" in text
    assert "A peer outside the tolerance is not broken" in text
    clean = _reads_well(ch06.health_sentence(ch06.grid_health(_grid(
        _grid_record("capstone.fused", 1))), "capstone.fused"))
    assert "every output within the tolerance" in clean and "not timed" not in clean
    # our own kernel outside the tolerance is never excused as a peer's definition
    ours = ch06.health_sentence(ch06.grid_health(_grid(
        _grid_record("capstone.fused", 1, correct=False))), "capstone.fused")
    assert "A peer outside the tolerance" not in ours
    err = _reads_well(ch06.health_sentence(ch06.grid_health(_grid(
        _grid_record("q", 1, status="error: KeyError: x"))), "capstone.fused"))
    assert "1 case failed with an error (q)" in err


def test_graph_sentences_report_both_lone_calls():
    r = dict(impl="capstone.fused", rows=1, cols=2048, cold_us=4.77, cold_graph_us=5.25,
             held_us=4.24, held_graph_us=4.19, back_to_back_us=42.9, graph_back_to_back_us=1.61)
    answer, lesson = ch06.graph_sentences([r])
    _reads_well(answer), _reads_well(lesson)
    assert "27 times as long" in answer
    assert "10% more flushed" in lesson and "1.2% less warm" in lesson
    faster = dict(r, cold_graph_us=2.0, held_graph_us=2.0)
    assert ch06.graph_sentences([faster])[1].startswith("Replaying made even a lone call faster")
    same = ch06.graph_sentences([dict(r, held_graph_us=4.24)])[1]
    assert "the same time warm" in same


def test_l2_and_dirty_sentences_follow_the_numbers():
    head = dict(rows=1024, cols=4096, bytes=25e6, warm_us=7.7, cold_us=10.5,
                cold_over_warm=10.5 / 7.7)
    big = dict(rows=16384, cols=4096, bytes=403e6, warm_us=97.0, cold_us=97.0,
               cold_over_warm=1.0)
    text = _reads_well(ch06.l2_sentence(([head, big], dict(headline=head, l2_bytes=60e6))))
    assert "inside the L2" in text and "1.36 times better" in text and "the same" in text
    flat = dict(head, cold_us=7.8, cold_over_warm=7.8 / 7.7)
    assert "little difference" in ch06.l2_sentence(([flat], dict(headline=flat)))
    view = dict(status="ok", op="add_rmsnorm", rows=16384, cols=8192, dtype="bf16",
                bytes_write=244.9e6, model_bytes=805322752)
    short = _reads_well(ch06.dirty_sentence(view))
    assert "268.4 MB" in short and "23.5 MB fewer" in short
    full = _reads_well(ch06.dirty_sentence(dict(view, bytes_write=268435456)))
    assert "nothing was left in L2" in full
    total = _reads_well(ch06.dirty_sentence(dict(view, bytes_write=None, dram_bytes=810e6)))
    assert "more" in total and "fewer" not in total


def test_ncu_sentence_says_where_the_configuration_came_from():
    view = dict(status="ok", duration_us=181.66, dram_throughput_pct=89.86,
                config=dict(label="rows/prog 1, warps 16",
                            source="tuned on NVIDIA H200 for (8192, bfloat16)"))
    text = _reads_well(ch06.ncu_sentence(view))
    assert "89.9%" in text and "tuning table for the NVIDIA H200 at 8,192 bf16 columns" in text
    assert "(8192" not in text
    bare = _reads_well(ch06.ncu_sentence(dict(view, config=None, dram_throughput_pct=None)))
    assert "does not record its launch configuration" in bare
    assert ch06.ncu_sentence(dict(view, status="error")) is None


def test_not_timed_at_names_skipped_peers_but_not_declared_widths():
    grid = _grid(_grid_record("a", 1), _grid_record("torch.compile", 1, status="skipped: x"),
                 _grid_record("w", 1, status="unsupported: too wide"))
    assert ch06.not_timed_at(grid, sweep="grid", rows=1) == ["torch.compile"]
    assert ch06.grid_span(grid) == "1 to 16,384 rows, widths 2,048 to 16,384"


def test_cooperation_sentence_compares_the_h200_and_names_who_was_not_timed():
    timed = [dict(impl="hip.serial", median_us=1048.5), dict(impl="hip.block", median_us=17.62)]
    text = _reads_well(ch06.cooperation_sentence(timed, 25.8, ["torch.compile"]))
    assert "a factor of 59.5" in text and "larger than on the RX 9070 XT" in text
    assert "did not time torch.compile at this shape: it is missing" in text
    assert "smaller" in ch06.cooperation_sentence(timed, 100.0)
    both = _reads_well(ch06.cooperation_sentence([], None, ["a", "b"]))
    assert both.startswith("The recording did not time a and b") and "they are missing" in both
    assert ch06.cooperation_sentence([], None, []) is None
