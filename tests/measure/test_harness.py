"""The benchmark harness: cases, the worker protocol, aggregation over processes, floors, files.

The worker and the aggregation run here on the CPU with a fake clock (``timer`` needs a GPU), so
everything but the device events is exercised; the GPU tests run the real thing.
"""
import contextlib
import io
import json
import statistics
from dataclasses import asdict

import pytest
import torch

from fusedrms.measure import harness, ncu, plots, timer, worker
from fusedrms import dtypes, env, records, reference, registry

ENV = env.current()


def fake_clock(monkeypatch, per_process_offsets=(0.0, 1.0, 2.0)):
    """timer.* replaced by a deterministic clock: samples 1..reps, shifted per process."""
    state = {"process": 0}

    def time_gpu(fn, warmup=25, reps=100, l2="cold", graph=False):
        fn()
        offset = per_process_offsets[state["process"] % len(per_process_offsets)]
        return [float(v) + offset for v in range(1, reps + 1)]

    monkeypatch.setattr(timer, "time_gpu", time_gpu)
    monkeypatch.setattr(timer, "copy_bandwidth_GBps", lambda nbytes=1 << 30, reps=20: 1000.0)
    monkeypatch.setattr(timer, "l2_bytes", lambda: 50 << 20)
    monkeypatch.setattr(timer, "flush_bytes", lambda: 256 << 20)
    return state


def inprocess_runner(state):
    """A runner that runs the worker in this process (on the CPU) and parses its output."""
    def runner(cases, settings, deadline, index, bar, log, device_info):
        state["process"] = index
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            worker.run_worker({"cases": cases, "settings": asdict(settings), "deadline": deadline,
                              "device": "cpu"})
        got, bw, failure = harness.consume(buf.getvalue().splitlines(keepends=True), index, bar,
                                         log, device_info)
        return harness.complete(got, cases, index, failure), bw, failure
    return runner


SMALL = [harness.Sweep("t", "add_rmsnorm", (4, 33), (64,), ("fp32",),
                     impls=("torch.eager_chain", "torch.rms_norm_add"))]


def test_no_gpu_run_explains_and_exits_2(capsys):
    if ENV.on_gpu:
        pytest.skip("this machine has a GPU")
    assert harness.main([]) == harness.NO_GPU_EXIT
    err = capsys.readouterr().err
    assert "No GPU here" in err and "recorded" in err and "Traceback" not in err
    assert ncu.main([]) == 2


def test_unknown_dtype_and_mode_are_explained():
    with pytest.raises(ValueError, match="unknown dtype"):
        dtypes.torch_dtype("fp64")
    with pytest.raises(ValueError, match="unknown mode"):
        harness.Sweep("x", "rmsnorm", (1,), (8,), modes=("hot",))


def test_plans_expand_to_registered_cases():
    cases, not_run = harness.expand(harness.PLANS["h200"])
    names = {c["impl"] for c in cases}
    assert {"torch.eager_chain", "torch.rms_norm_add", "torch.compile_add",
            "torch.rms_norm", "torch.compile"} <= names
    grid = [c for c in cases if c["sweep"] == "grid"]
    assert {c["rows"] for c in grid} == {1, 16, 256, 1024, 4096, 16384}
    assert {c["cols"] for c in grid} == {2048, 4096, 8192, 16384}
    assert {c["dtype"] for c in grid} == {"bf16", "fp16", "fp32"}
    assert all(c["rows"] <= 256 for c in cases if c["mode"] == "graph")
    assert all(r["status"].startswith("unsupported") for r in not_run)


def test_floor_bytes_match_the_traffic_model_and_fail_clearly():
    from fusedrms import traffic

    rows, cols = 64, 256
    b = harness.floor_bytes("add_rmsnorm", rows, cols, "bf16")
    assert b == traffic.price(traffic.OP_STEP["add_rmsnorm"], rows, cols, "bf16").bytes_total
    assert b >= 3 * rows * cols * 2  # x and residual read, y written
    assert harness.floor_us(10**9, 1000.0) == pytest.approx(1000.0)  # 1 GB at 1000 GB/s = 1 ms
    with pytest.raises(harness.FloorUnavailable, match="no step for op"):
        harness.floor_bytes("softmax", 4, 8, "bf16")


def test_each_process_logs_where_its_time_went(monkeypatch, tmp_path):
    state = fake_clock(monkeypatch)
    lines = []
    harness.run_sweeps(SMALL, harness.Settings(processes=1, warmup=2, reps=5, min_reps=5),
                       tmp_path / "grid.json", log=lines.append, runner=inprocess_runner(state))
    [line] = [m for m in lines if "of which" in m]
    for phase in ("copy bandwidth", "inputs", "first calls and checks", "timing (cold)"):
        assert phase in line


def test_worker_and_aggregation_over_three_processes(monkeypatch, tmp_path):
    state = fake_clock(monkeypatch)
    settings = harness.Settings(processes=3, warmup=2, reps=11, min_reps=11)
    out = tmp_path / "grid.json"
    doc = harness.run_sweeps(SMALL, settings, out, log=lambda m: None, runner=inprocess_runner(state))
    recs = [r for r in doc["records"] if r["status"] == "ok"]
    assert len(recs) == 4  # 2 impls x 2 shapes
    for r in recs:
        # process medians 6, 7, 8 (samples 1..11 shifted by 0, 1, 2): median 7, range 6-8
        assert r["process_medians_us"] == [6.0, 7.0, 8.0]
        assert r["median_us"] == 7.0 and r["min_median_us"] == 6.0 and r["max_median_us"] == 8.0
        assert r["processes"] == 3 and r["reps"] == 11
        assert r["correct"] is True, r["check"]
        nbytes = harness.floor_bytes("add_rmsnorm", r["rows"], r["cols"], "fp32")
        assert r["bytes"] == nbytes
        assert r["floor_us"] == pytest.approx(nbytes / 1e9 / 1000.0 * 1e6)
        assert r["pct_of_floor"] == pytest.approx(100 * r["floor_us"] / 7.0)
        assert r["achieved_GBps"] == pytest.approx(nbytes / 7.0 / 1e3)
    # the files: JSON with provenance, CSV beside it, loadable
    loaded = harness.load(out)
    assert loaded["provenance"]["copy_GBps_per_process"] == [1000.0] * 3
    assert "flush" in loaded["records"][0]["l2_method"]
    assert "Recorded on" in records.describe(loaded)
    csv_text = out.with_suffix(".csv").read_text().splitlines()
    assert csv_text[0].startswith("sweep,op,impl,rows,cols,dtype,mode,status,median_us")
    assert "6.0;7.0;8.0" in csv_text[1]
    table = harness.format_table(loaded["records"])
    assert "torch.eager_chain" in table and "%" in table


def test_a_wrong_kernel_is_flagged_and_a_crashing_one_reported(monkeypatch):
    state = fake_clock(monkeypatch)
    registry.load_all()
    wrong = registry.Impl("test.zeros", "add_rmsnorm", lambda x, r, w, eps: torch.zeros_like(x),
                          "triton")
    broken = registry.Impl("test.broken", "add_rmsnorm",
                           lambda x, r, w, eps: (_ for _ in ()).throw(RuntimeError("boom")),
                           "triton")
    registry.register(wrong)
    registry.register(broken)
    try:
        sweep = [harness.Sweep("t", "add_rmsnorm", (8,), (32,), ("fp32",),
                             impls=("test.*",))]
        doc = harness.run_sweeps(sweep, harness.Settings(processes=1, reps=5,
                                                     min_reps=5),
                               None, log=lambda m: None, runner=inprocess_runner(state))
    finally:
        registry._IMPLS.pop("test.zeros")
        registry._IMPLS.pop("test.broken")
    by = {r["impl"]: r for r in doc["records"]}
    assert by["test.zeros"]["correct"] is False and "FAIL" in by["test.zeros"]["check"]
    assert by["test.broken"]["status"].startswith("error: RuntimeError: boom")


def test_a_process_time_limit_reports_cases_not_timed(monkeypatch):
    state = fake_clock(monkeypatch)
    cases, _ = harness.expand(SMALL)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        worker.run_worker({"cases": cases, "settings": asdict(harness.Settings()),
                          "deadline": 1.0, "device": "cpu"})
    got, bw, failure = harness.consume(buf.getvalue().splitlines(True), 0, harness._progress(0, "x"),
                                     lambda m: None, {})
    assert bw == 1000.0 and failure is None
    assert got and all(r["status"] == "not run: the process's time limit" for r in got)
    recs = harness.aggregate(got, [bw], expected=1)
    assert len(harness.incomplete(recs)) == len(cases)
    with pytest.raises(harness.Incomplete, match=f"{len(cases)} case"):
        harness.require_complete({"records": recs}, "the grid")


def test_a_crashed_worker_leaves_not_run_records():
    cases, _ = harness.expand(SMALL)
    got = harness.complete([], cases, 2, "worker exited with code -9")
    assert len(got) == len(cases)
    assert all(r["status"] == "not run: worker exited with code -9" and r["process"] == 2
               for r in got)


def test_aggregate_without_floor_keeps_times_or_raises():
    rec = dict(sweep="s", op="softmax", impl="x", rows=1, cols=8, dtype="fp32", mode="cold",
               status="ok", median_us=2.0, p10_us=1.0, p90_us=3.0, n=10, warmup=3,
               first_call_ms=1.0, correct=True, check="", l2_method="m", process=0)
    out = harness.aggregate([rec], [1000.0], allow_missing_floor=True)
    assert out[0]["median_us"] == 2.0 and "floor_error" in out[0] and "pct_of_floor" not in out[0]
    with pytest.raises(harness.FloorUnavailable):
        harness.aggregate([rec], [1000.0], allow_missing_floor=False)


def test_compile_peers_report_compile_time_separately():
    rec = dict(sweep="s", op="add_rmsnorm", impl="torch.compile_add", rows=1, cols=8,
               dtype="fp32", mode="cold", status="ok", median_us=2.0, p10_us=1.0, p90_us=3.0,
               n=10, warmup=3, first_call_ms=1500.0, correct=True, check="", l2_method="m",
               process=0)
    out = harness.aggregate([rec], [1000.0])
    # the timing process's first call loads from the warm cache; compile_s is the warm-up's
    assert out[0]["first_call_ms"] == [1500.0] and out[0]["median_us"] == 2.0


def test_select_filters_records():
    doc = {"records": [{"impl": "a", "rows": 1}, {"impl": "b", "rows": 2}, {"impl": "c", "rows": 2}]}
    assert [r["impl"] for r in harness.select(doc, rows=2)] == ["b", "c"]
    assert [r["impl"] for r in harness.select(doc, impl=("a", "c"))] == ["a", "c"]


def test_sample_rows_cover_first_middle_last():
    assert worker.sample_rows(1) == [0]
    rows = worker.sample_rows(1000)
    assert rows[0] == 0 and rows[-1] == 999 and 500 in rows and len(rows) <= 19


NCU_CSV = '''==PROF== Connected to process 123
some program output
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","123","python3","h","_add_rmsnorm_kernel","1","7","(256, 1, 1)","(16384, 1, 1)","0","9.0","GPU Speed Of Light Throughput","DRAM Throughput","%","91.52"
"0","123","python3","h","_add_rmsnorm_kernel","1","7","(256, 1, 1)","(16384, 1, 1)","0","9.0","GPU Speed Of Light Throughput","Duration","usecond","201.34"
"0","123","python3","h","_add_rmsnorm_kernel","1","7","(256, 1, 1)","(16384, 1, 1)","0","9.0","GPU Speed Of Light Throughput","Memory Throughput","%","91.52"
"0","123","python3","h","_add_rmsnorm_kernel","1","7","(256, 1, 1)","(16384, 1, 1)","0","9.0","GPU Speed Of Light Throughput","Compute (SM) Throughput","%","20.1"
"0","123","python3","h","_add_rmsnorm_kernel","1","7","(256, 1, 1)","(16384, 1, 1)","0","9.0","Memory Workload Analysis","Memory Throughput","Tbyte/second","4.39"
"0","123","python3","h","_add_rmsnorm_kernel","1","7","(256, 1, 1)","(16384, 1, 1)","0","9.0","Memory Workload Analysis","L2 Hit Rate","%","1,2"
==PROF== Disconnected
'''


def test_parse_ncu_csv_reads_the_target_metrics():
    (k,) = ncu.parse_ncu_csv(NCU_CSV)
    assert k["kernel"] == "_add_rmsnorm_kernel"
    assert k["dram_throughput_pct"] == 91.52 and k["sol_memory_pct"] == 91.52
    assert k["duration_us"] == pytest.approx(201.34)
    assert k["dram_GBps"] == pytest.approx(4390.0)
    assert k["l2_hit_pct"] == 12.0  # thousands separators stripped
    assert ncu.parse_ncu_csv("==PROF== ERR_NVGPUCTRPERM\n") == []


def test_kernel_base_names_for_the_ncu_filter():
    assert ncu.base_name("_add_rmsnorm_kernel") == "_add_rmsnorm_kernel"
    assert ncu.base_name("void at::native::vectorized_elementwise_kernel<4, float>(int, float)") \
        == "vectorized_elementwise_kernel"


def test_unavailable_profile_is_none_not_zero(monkeypatch):
    monkeypatch.setattr(ncu, "find_ncu", lambda: None)
    s = ncu.profile_with_ncu("torch.rms_norm_add")
    assert s["status"] == "unavailable" and "ncu not found" in s["reason"]
    for k in ("dram_throughput_pct", "sol_memory_pct", "duration_us"):
        assert s[k] is None


def test_show_and_plot_a_written_file(tmp_path, capsys):
    rec = dict(sweep="grid", op="add_rmsnorm", impl="capstone.fused", rows=1024, cols=4096,
               dtype="bf16", mode="cold", status="ok", median_us=10.0, min_median_us=9.0,
               max_median_us=11.0, p10_us=9.5, p90_us=10.5, processes=3, bytes=25174016,
               copy_GBps=4000.0, floor_us=6.29, pct_of_floor=62.9, achieved_GBps=2517.0)
    path = harness.write_results(tmp_path / "g.json", [rec, dict(rec, rows=4096, bytes=100671488,
                                                               achieved_GBps=3500.0,
                                                               pct_of_floor=87.5)],
                               {"copy_GBps_per_process": [4000.0]})
    assert harness.main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Recorded on" in out and "capstone.fused" in out and "63%" in out
    assert plots.main([str(path), "--out", str(tmp_path / "p")]) == 0
    assert (tmp_path / "p.png").stat().st_size > 1000 and (tmp_path / "p.svg").exists()
    with pytest.raises(SystemExit) as e:  # a usage error, not a traceback or exit 1
        harness.main(["show", str(tmp_path / "missing.json")])
    assert e.value.code == 2 and "no such file" in capsys.readouterr().err


@pytest.mark.gpu
def test_gpu_small_run_end_to_end(tmp_path):
    sweep = [harness.Sweep("t", "add_rmsnorm", (256, 4096), (4096,), ("bf16",), ("cold", "warm"),
                         impls=("torch.rms_norm_add", "capstone.*"))]
    doc = harness.run_sweeps(sweep, harness.Settings(processes=2), tmp_path / "g.json")
    ok = [r for r in doc["records"] if r["status"] == "ok"]
    assert ok and all(r["processes"] == 2 and r["median_us"] > 0 for r in ok)
    assert all(0 < r["pct_of_floor"] < 150 for r in ok)
    assert all(r["correct"] for r in ok if not r["impl"].startswith("torch."))


@pytest.mark.gpu
def test_gpu_ncu_summary_never_reports_zero_for_missing():
    s = ncu.profile_with_ncu(rows=1024, cols=4096, timeout_s=90)
    if s["status"] != "ok":
        assert s["duration_us"] is None and s["reason"]
    else:
        assert s["duration_us"] > 0 and 0 < s["dram_throughput_pct"] <= 100


def test_recorded_missing_file_is_a_note_not_an_error(capsys):
    assert harness.recorded("no_such_file_anywhere") is None
    assert "not recorded yet" in capsys.readouterr().out


def test_correctness_flag_over_processes():
    assert harness._all_correct([True, True]) is True
    assert harness._all_correct([True, False, None]) is False
    assert harness._all_correct([True, None]) is None  # not checked is not "correct"


def test_profile_with_a_fake_ncu(monkeypatch, tmp_path):
    """The ncu command line, its filter by kernel name, and the parsed summary."""
    fake = tmp_path / "ncu"
    csv_file = tmp_path / "out.csv"
    csv_file.write_text(NCU_CSV)
    fake.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path}/args\ncat {csv_file}\n")
    fake.chmod(0o755)
    monkeypatch.setattr(ncu, "find_ncu", lambda: str(fake))
    monkeypatch.setattr(ncu, "kernel_names",
                        lambda *a: ["_add_rmsnorm_kernel", "void at::foo<int>(int)"])
    s = ncu.profile_with_ncu("capstone.fused", rows=64, cols=128)
    assert s["status"] == "ok", s.get("reason")
    assert s["kernel_filter"] == "regex:_add_rmsnorm_kernel|foo"
    args = (tmp_path / "args").read_text()
    assert "--clock-control none" in args and "--section SpeedOfLight" in args
    assert "--section MemoryWorkloadAnalysis" in args and "profile-target" in args
    for section in ("Occupancy", "LaunchStats", "WarpStateStats"):
        assert f"--section {section}" in args
    assert "--metrics dram__bytes_read.sum,dram__bytes_write.sum" in args
    # only the call after the warm-up (Inductor's autotuner launches candidates under its name)
    assert "--profile-from-start off" in args and "--launch-skip" not in args
    assert s["dram_throughput_pct"] == 91.52 and s["duration_us"] == pytest.approx(201.34)
    assert s["model_bytes"] == harness.floor_bytes("add_rmsnorm", 64, 128, "bf16")
    csv_file.write_text("==ERROR== ERR_NVGPUCTRPERM - no permission\n")
    s = ncu.profile_with_ncu("capstone.fused", rows=64, cols=128)
    assert s["status"] == "unavailable" and "ERR_NVGPUCTRPERM" in s["reason"]
    assert s["dram_throughput_pct"] is None and s["duration_us"] is None


@pytest.mark.skipif(ENV.on_gpu, reason="checks the worker's no-GPU answer")
def test_a_real_worker_process_without_gpu_reports_and_the_parent_keeps_going():
    cases, _ = harness.expand(SMALL)
    info = {}
    got, bw, failure = harness._run_process(cases, harness.Settings(), None, 0,
                                          harness._progress(len(cases), "t"), lambda m: None, info)
    assert bw is None and failure.startswith("No GPU here")
    assert len(got) == len(cases) and all(r["status"].startswith("not run: No GPU") for r in got)


def test_every_case_is_timed_in_every_process_after_the_warm_up(monkeypatch):
    seen, warmed = [], []

    def runner(cases, settings, deadline, index, bar, log, device_info):
        seen.append((index, [c["impl"] for c in cases], deadline))
        return [dict(c, process=index, status="ok", median_us=10.0 + index, p10_us=9.0,
                     p90_us=11.0 + index, n=5, first_call_ms=1.0, correct=True, check="ok",
                     l2_method="rotating") for c in cases], 1000.0, None

    def warm(cases, workers, log):
        warmed.append((len(cases), workers))
        return {(c["op"], c["impl"], c["rows"], c["cols"], c["dtype"]): 9000.0 for c in cases}

    sweep = [harness.Sweep("t", "add_rmsnorm", (4,), (64,), ("fp32",),
                         impls=("torch.eager_chain", "torch.compile_add"))]
    doc = harness.run_sweeps(sweep, harness.Settings(processes=3, warm_workers=4, timeout_s=50),
                             None, log=lambda m: None, runner=runner, warm=warm)
    assert warmed == [(2, 4)]
    # the compiled peer is timed beside the others, in every process, with a hard limit only
    assert [impls for _, impls, _ in seen] == [["torch.eager_chain", "torch.compile_add"]] * 3
    assert all(d - harness.time.time() == pytest.approx(50, abs=2) for _, _, d in seen)
    by = {r["impl"]: r for r in doc["records"]}
    assert by["torch.compile_add"]["compile_s"] == 9.0 and "compile_s" not in by["torch.eager_chain"]
    assert by["torch.eager_chain"]["process_medians_us"] == [10.0, 11.0, 12.0]
    assert by["torch.eager_chain"]["process_p10_us"] == pytest.approx(10.2)
    assert by["torch.eager_chain"]["process_p90_us"] == pytest.approx(11.8)
    assert doc["incomplete"] == []


def test_a_case_timed_in_fewer_processes_is_incomplete():
    rec = dict(sweep="t", op="add_rmsnorm", impl="a", rows=1, cols=64, dtype="fp32", mode="rotating",
               status="ok", median_us=1.0, p10_us=1.0, p90_us=1.0, n=3, first_call_ms=1.0,
               correct=True, check="ok", l2_method="rotating")
    got = [dict(rec, process=0), dict(rec, process=1, status="error: RuntimeError: boom")]
    (agg,) = harness.aggregate(got, [1000.0], expected=2)
    assert agg["status"].startswith("timed in 1 of 2 processes") and "boom" in agg["status"]
    assert harness.incomplete([agg]) == [agg]
    unsupported = dict(rec, status="unsupported: dtype fp8 not supported")
    assert harness.incomplete([unsupported]) == []


def test_warm_ahead_spreads_shapes_over_processes_and_reads_compile_times(monkeypatch):
    """The real process launcher, on the CPU: every shape goes to one process, all side by side."""
    cases, _ = harness.expand([harness.Sweep("t", "add_rmsnorm", (2, 3, 4), (64,), ("fp32",),
                                             impls=("torch.eager_chain", "torch.rms_norm_add"))])
    got = harness.warm_ahead(cases, 2, log=lambda m: None, device="cpu")
    assert set(got) == {(c["op"], c["impl"], c["rows"], c["cols"], c["dtype"]) for c in cases}
    assert all(ms > 0 for ms in got.values())


def test_rotating_mode_missing_and_in_place_peers(monkeypatch):
    """Rotating mode times calls over several input sets; a peer that is not installed is
    recorded as missing (no number); an in-place peer is checked on copies and runs last."""
    from fusedrms.kernels import peers

    state = fake_clock(monkeypatch)
    seen = {}

    def time_rotating(calls, reps=9, warmup=2, min_replay_us=200.0):
        for c in calls:
            c()
        seen["sets"] = len(calls)
        return [float(v) for v in range(1, reps + 1)]

    monkeypatch.setattr(timer, "time_rotating", time_rotating)
    monkeypatch.setattr(timer, "l2_bytes", lambda: 4096)  # tiny L2: a handful of sets
    order = []

    def in_place(x, r, w, eps):
        order.append("in_place")
        y, s = reference.add_rmsnorm_residual(x, r, w, eps)
        r.copy_(s)
        x.copy_(y)
        return x, r

    def missing(x, r, w, eps):
        raise peers.PeerMissing("not installed here")

    def plain(x, r, w, eps):
        order.append("plain")
        return reference.add_rmsnorm_residual(x, r, w, eps)

    registry.load_all()
    impls = [registry.Impl("test.a_in_place", "add_rmsnorm_residual", in_place, "triton",
                           mutates=True),
             registry.Impl("test.b_missing", "add_rmsnorm_residual", missing, "triton"),
             registry.Impl("test.c_plain", "add_rmsnorm_residual", plain, "triton")]
    for i in impls:
        registry.register(i)
    try:
        sweep = [harness.Sweep("t", "add_rmsnorm_residual", (8,), (64,), ("fp32",),
                               ("rotating",), impls=("test.*",))]
        doc = harness.run_sweeps(sweep, harness.Settings(processes=1),
                                 None, log=lambda m: None, runner=inprocess_runner(state))
    finally:
        for i in impls:
            registry._IMPLS.pop(i.name)
    by = {r["impl"]: r for r in doc["records"]}
    assert by["test.b_missing"]["status"].startswith("missing: not installed")
    assert "median_us" not in by["test.b_missing"]
    for name in ("test.a_in_place", "test.c_plain"):
        assert by[name]["status"] == "ok" and by[name]["correct"] is True, by[name]
        assert "rotating" in by[name]["l2_method"]
        # the warm-up is a time, as a number; no count of warm-up calls
        assert by[name]["warm_ms"] == timer.ROTATING_WARM_MS and "warmup" not in by[name]
        assert by[name]["sets"] == seen["sets"]
    assert seen["sets"] >= 2
    assert order[0] == "plain" and order[-1] == "in_place"  # the in-place peer runs last


def test_every_peer_of_the_issue_is_registered():
    names = {i.name for i in registry.impls()}
    for name in ("torch.compile_add", "torch.rms_norm_add", "torch.eager_chain",
                 "torch.compile_residual", "liger.fused_add_rms_norm", "liger.rms_norm",
                 "flashinfer.fused_add_rmsnorm", "flashinfer.rms_norm",
                 "capstone.fused_residual_in_place"):
        assert name in names, name
    assert registry.get("flashinfer.fused_add_rmsnorm").mutates


def test_python_mode_times_calls_back_to_back_on_the_wall_clock(monkeypatch):
    state = fake_clock(monkeypatch)
    sweep = [harness.Sweep("py", "add_rmsnorm", (1,), (64,), ("fp32",), ("python",),
                           impls=("torch.rms_norm_add",))]
    doc = harness.run_sweeps(sweep, harness.Settings(processes=1,
                                                     min_reps=3),
                             None, log=lambda m: None, runner=inprocess_runner(state))
    rec = doc["records"][0]
    assert rec["status"] == "ok" and rec["median_us"] > 0 and "python" in rec["l2_method"]


def test_timing_processes_compile_with_one_thread(monkeypatch):
    """The warm-up filled the caches: a timing process needs no Inductor compile pool."""
    seen = {}

    class FakeProc:
        stdout, returncode, args = iter(()), 0, None

        def __init__(self, cmd, **kw):
            seen.update(kw.get("env") or {})

        def wait(self):
            return 0

        def kill(self):
            pass

    monkeypatch.setattr(harness.subprocess, "Popen", FakeProc)
    cases, _ = harness.expand(SMALL)
    harness._run_process(cases, harness.Settings(), None, 0, harness._progress(len(cases), "t"),
                         lambda m: None, {})
    assert seen.get("TORCHINDUCTOR_COMPILE_THREADS") == "1" and "PATH" in seen


def test_liger_is_imported_beside_the_warm_up(monkeypatch):
    from fusedrms.kernels import peers

    calls = []
    monkeypatch.setattr(peers, "liger_status", lambda: calls.append(1) or "status")

    def runner(cases, settings, deadline, index, bar, log, device_info):
        return [dict(c, process=index, status="ok", median_us=1.0, p10_us=1.0, p90_us=1.0, n=3,
                     first_call_ms=1.0, correct=True, check="ok", l2_method="rotating")
                for c in cases], 1000.0, None

    doc = harness.run_sweeps(SMALL, harness.Settings(processes=2), None, log=lambda m: None,
                             runner=runner, warm=lambda cases, workers, log: {})
    assert calls == [1] and doc["provenance"]["liger"] == "status"


def test_two_documents_from_one_run_time_each_shared_case_once(monkeypatch, tmp_path):
    timed = []

    def runner(cases, settings, deadline, index, bar, log, device_info):
        timed.append([harness.timing_key(c) for c in cases])
        return [dict(c, process=index, status="ok", median_us=float(len(c["impl"]) + index),
                     p10_us=1.0, p90_us=2.0, n=5, first_call_ms=1.0, correct=True, check="ok",
                     l2_method="rotating") for c in cases], 1000.0, None

    warmed = []
    a = [harness.Sweep("grid", "add_rmsnorm", (4, 8), (64,), ("fp32",),
                       impls=("torch.eager_chain", "torch.rms_norm_add")),
         harness.Sweep("l2", "add_rmsnorm", (4,), (64,), ("fp32",), impls=("torch.eager_chain",))]
    b = [harness.Sweep("peers", "add_rmsnorm", (8, 16), (64,), ("fp32",),
                       impls=("torch.rms_norm_add",))]
    docs = harness.run_documents(
        {"a": (a, tmp_path / "a.json"), "b": (b, tmp_path / "b.json")},
        harness.Settings(processes=3), log=lambda m: None, runner=runner,
        warm=lambda cases, workers, log: warmed.append(len(cases)) or {},
        provenance={"run_id": "r1"})
    # union of (impl, shape): eager 4, 8; rms_norm_add 4, 8, 16 -> 5 timings per process
    assert warmed == [5] and [len(k) for k in timed] == [5, 5, 5]
    assert all(len(set(k)) == len(k) for k in timed)
    rec = {name: {(r["sweep"], r["impl"], r["rows"]): r for r in d["records"]}
           for name, d in docs.items()}
    assert set(rec["a"]) == {("grid", "torch.eager_chain", 4), ("grid", "torch.eager_chain", 8),
                             ("grid", "torch.rms_norm_add", 4), ("grid", "torch.rms_norm_add", 8),
                             ("l2", "torch.eager_chain", 4)}
    assert set(rec["b"]) == {("peers", "torch.rms_norm_add", 8), ("peers", "torch.rms_norm_add", 16)}
    shared_a, shared_b = rec["a"][("grid", "torch.rms_norm_add", 8)], rec["b"][("peers", "torch.rms_norm_add", 8)]
    assert shared_a["process_medians_us"] == shared_b["process_medians_us"] == [18.0, 19.0, 20.0]
    assert rec["a"][("l2", "torch.eager_chain", 4)]["median_us"] == rec["a"][("grid", "torch.eager_chain", 4)]["median_us"]
    for name, sweeps in (("a", a), ("b", b)):
        assert docs[name]["incomplete"] == []
        written = json.loads((tmp_path / f"{name}.json").read_text())
        prov = written["provenance"]
        assert prov["sweeps"] == json.loads(json.dumps([asdict(s) for s in sweeps]))
        assert prov["run_id"] == "r1" and prov["timed_with"] == ["a", "b"]
        assert len(written["records"]) == len(docs[name]["records"])


def test_a_case_a_shared_run_did_not_time_is_missing_from_every_document_that_lists_it():
    def runner(cases, settings, deadline, index, bar, log, device_info):
        got = [dict(c, process=index, status="ok", median_us=1.0, p10_us=1.0, p90_us=1.0, n=5,
                    first_call_ms=1.0, correct=True, check="ok", l2_method="rotating")
               for c in cases if c["rows"] != 8]
        return harness.complete(got, cases, index, "hung"), 1000.0, "hung"

    a = [harness.Sweep("grid", "add_rmsnorm", (4, 8), (64,), ("fp32",), impls=("torch.eager_chain",))]
    b = [harness.Sweep("peers", "add_rmsnorm", (8,), (64,), ("fp32",), impls=("torch.eager_chain",))]
    docs = harness.run_documents({"a": (a, None), "b": (b, None)}, harness.Settings(processes=1),
                                 log=lambda m: None, runner=runner, warm=lambda *x, **k: {})
    for name in ("a", "b"):
        [missing] = docs[name]["incomplete"]
        assert missing["rows"] == 8 and "hung" in missing["status"]
        with pytest.raises(harness.Incomplete):
            harness.require_complete(docs[name], name)


def test_each_process_copies_a_large_calls_bytes_once_beside_its_rotating_cases(monkeypatch,
                                                                                 tmp_path):
    """From ``copy_at_size_min_bytes`` a call, a process times the floor's copy of the call's
    bytes once per byte count (two ops of one size share it), both ways, and keeps the faster;
    each rotating record of that size gets the copy's median over processes and its own time as a
    share of it; a smaller call gets none, and a copy that failed is reported, never a number."""
    state = fake_clock(monkeypatch)
    copied = []

    def time_rotating(calls, reps=9, warmup=2, min_replay_us=200.0):
        out = [c() for c in calls]
        if all(getattr(o, "dtype", None) in (torch.uint8, torch.int32) for o in out):
            # the copy at size: copy_ writes bytes, the kernel int32 words
            way = "copy_" if out[0].dtype == torch.uint8 else "kernel"
            half = out[0].numel() * out[0].element_size()
            copied.append((state["process"], len(calls), half, way))
            # for the call's own bytes: copy_ 40 us + the process (3 more in process 1), the
            # kernel 43 us, so each process keeps the faster: 40, 43 (the kernel), 42
            us = 43.0 if way == "kernel" else 40.0 + state["process"] + 3 * (state["process"] == 1)
            return [us * 2 * half / big] * reps
        return [50.0 + state["process"]] * reps

    monkeypatch.setattr(timer, "time_rotating", time_rotating)
    rows, cols = 64, 256
    big = harness.floor_bytes("add_rmsnorm", rows, cols, "fp32")
    assert big == harness.floor_bytes("rmsnorm", rows * 3 // 2, cols, "fp32") != \
        harness.floor_bytes("add_rmsnorm", 4, cols, "fp32")
    sweeps = [harness.Sweep("t", "add_rmsnorm", (4, rows), (cols,), ("fp32",), ("rotating",),
                            impls=("torch.rms_norm_add",)),
              harness.Sweep("t", "rmsnorm", (rows * 3 // 2,), (cols,), ("fp32",), ("rotating",),
                            impls=("torch.rms_norm",)),
              harness.Sweep("t", "add_rmsnorm", (rows,), (cols,), ("fp32",), ("cold",),
                            impls=("torch.eager_chain",))]
    out = tmp_path / "grid.json"
    settings = harness.Settings(processes=3, copy_at_size_min_bytes=big)
    doc = harness.run_sweeps(sweeps, settings, out, log=lambda m: None,
                             runner=inprocess_runner(state))
    # one copy each way per process, of the large size only, over the rotation's sets, half of it
    # read (rounded up to whole COPY_ALIGN bytes; the times are scaled back to the call's bytes)
    assert [(p, way) for p, _, _, way in copied] == [(p, way) for p in range(3)
                                                     for way in worker.COPY_WAYS]
    align = worker.COPY_ALIGN
    assert all(sets >= 2 and half % align == 0 and big // 2 <= half < big // 2 + align
               for _, sets, half, _ in copied)
    recs = {(r["op"], r["rows"], r["mode"]): r for r in doc["records"]}
    for key in (("add_rmsnorm", rows, "rotating"), ("rmsnorm", rows * 3 // 2, "rotating")):
        r = recs[key]
        assert r["copy_at_size_us"] == pytest.approx(42.0) and r["median_us"] == 51.0
        assert r["pct_of_copy_at_size"] == pytest.approx(100 * 42.0 / 51.0)
    for key in (("add_rmsnorm", 4, "rotating"), ("add_rmsnorm", rows, "cold")):
        assert "copy_at_size_us" not in recs[key] and "pct_of_copy_at_size" not in recs[key]
    [copy] = doc["provenance"]["copy_at_size"]
    assert copy["bytes"] == big and copy["process_medians_us"] == pytest.approx([40.0, 43.0, 42.0])
    assert copy["GBps"] == pytest.approx(big / 42.0 / 1e3) and "rotating" in copy["l2_method"]
    assert copy["copied"] == 2 * copied[0][2] and copy["by"] == "copy_, kernel"
    header = out.with_suffix(".csv").read_text().splitlines()[0].split(",")
    assert {"copy_at_size_us", "pct_of_copy_at_size"} <= set(header)

    # off by default; a copy that fails leaves its records without one and says why
    copied.clear()
    doc = harness.run_sweeps(sweeps, harness.Settings(processes=1), None, log=lambda m: None,
                             runner=inprocess_runner(state))
    assert not copied and "copy_at_size" not in doc["provenance"]

    def no_memory(nbytes, device, reps, quiet=None):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(worker, "copy_at_size", no_memory)
    doc = harness.run_sweeps(sweeps, harness.Settings(processes=1, copy_at_size_min_bytes=big),
                             None, log=lambda m: None, runner=inprocess_runner(state))
    assert not any("copy_at_size_us" in r for r in doc["records"])
    [copy] = doc["provenance"]["copy_at_size"]
    assert copy == {"bytes": big, "status": "error: RuntimeError: out of memory"}


def test_every_rotating_timing_waits_for_a_quiet_memory_system_and_says_so(monkeypatch):
    """Each process probes the memory system before each rotating timing and before its copy at
    size (never on the CPU path); a record keeps each process's wait and last probe, and is quiet
    only where every process found it so."""
    state = fake_clock(monkeypatch)
    events, busy = [], set()

    class Probe:
        def wait(self):
            events.append("wait")
            slow = state["process"] in busy  # a process that never finds it quiet
            return {"quiet_wait_ms": 2000.0 if slow else 0.5, "quiet_probe": 1.2 if slow else 1.0,
                    "quiet": not slow}

    def time_rotating(calls, reps=9, warmup=2, min_replay_us=200.0):
        for c in calls:
            c()
        events.append("time")
        return [50.0] * reps

    limits = []
    monkeypatch.setattr(worker, "quiet_probe", lambda device, max_wait_s: limits.append(max_wait_s)
                        or Probe())
    monkeypatch.setattr(timer, "time_rotating", time_rotating)
    big = harness.floor_bytes("add_rmsnorm", 64, 256, "fp32")
    sweeps = [harness.Sweep("t", "add_rmsnorm", (4, 64), (256,), ("fp32",), ("rotating",),
                            impls=("torch.rms_norm_add", "torch.eager_chain"))]
    doc = harness.run_sweeps(sweeps, harness.Settings(processes=2, copy_at_size_min_bytes=big),
                             None, log=lambda m: None, runner=inprocess_runner(state))
    # per process: 2 shapes x 2 implementations, then one copy at size (its two ways) at 64 rows
    per_process = ["wait", "time"] * 4 + ["wait", "time", "time"]
    assert events == per_process * 2 and limits == [harness.Settings.quiet_wait_s] * 2
    for r in doc["records"]:
        assert r["quiet_wait_ms"] == [0.5, 0.5] and r["quiet"] is True, r
    [copy] = doc["provenance"]["copy_at_size"]
    assert copy["quiet"] is True and copy["quiet_probe"] == [1.0, 1.0]

    busy.add(1)
    doc = harness.run_sweeps(sweeps, harness.Settings(processes=3), None, log=lambda m: None,
                             runner=inprocess_runner(state))
    assert all(r["quiet"] is False and r["quiet_probe"] == [1.0, 1.2, 1.0]
               for r in doc["records"])

    # off (harness --no-quiet-probe, an A/B test): no wait, and the records say nothing of it
    events.clear()
    doc = harness.run_sweeps(sweeps, harness.Settings(processes=1, quiet_wait_s=0.0), None,
                             log=lambda m: None, runner=inprocess_runner(state))
    assert events == ["time"] * 4 and not any("quiet" in r for r in doc["records"])
    import argparse

    cli = argparse.ArgumentParser()
    harness._add_settings(cli)
    assert harness._settings(cli.parse_args([])).quiet_wait_s == harness.Settings.quiet_wait_s > 0
    assert harness._settings(cli.parse_args(["--no-quiet-probe"])).quiet_wait_s == 0


def test_the_cpu_path_has_no_probe_and_its_records_no_quiet_fields(monkeypatch):
    state = fake_clock(monkeypatch)
    monkeypatch.setattr(timer, "time_rotating", lambda calls, reps=9, **k: [c() for c in calls]
                        and [50.0] * reps)
    sweeps = [harness.Sweep("t", "add_rmsnorm", (4,), (256,), ("fp32",), ("rotating",),
                            impls=("torch.rms_norm_add",))]
    doc = harness.run_sweeps(sweeps, harness.Settings(processes=1), None, log=lambda m: None,
                             runner=inprocess_runner(state))
    assert worker.quiet_probe("cpu", 0.5) is None
    assert not any(k.startswith("quiet") for k in doc["records"][0])
