"""The capstone tuner's choice rule and the profiler summary (pure functions, CPU), plus a GPU smoke test."""
import json

import pytest
import torch

from fusedrms.kernels import add_rmsnorm as A
from fusedrms.book import ch07 as G
from fusedrms import env, tuning


def cfg(rpp, warps, stages=1, pps=None):
    return A.LaunchConfig(rpp, warps, stages, pps)


def test_winner_minimizes_the_worst_ratio_not_the_sum():
    fast_big = cfg(1, 16)  # best at 16384 rows, terrible at 256
    balanced = cfg(2, 8)
    times = {fast_big: {256: 10.0, 16384: 100.0}, balanced: {256: 4.0, 16384: 104.0},
             cfg(4, 8): {256: 5.0, 16384: 120.0}}
    winner, regret = G.select_winner(times)
    assert winner == balanced
    assert regret[fast_big] == pytest.approx(2.5) and regret[balanced] == pytest.approx(1.04)
    assert G.top(regret, 2) == [balanced, cfg(4, 8)]


def test_winner_ignores_failed_configs_and_needs_data():
    times = {cfg(1, 4): {}, cfg(1, 8): {256: 3.0}}
    assert G.select_winner(times)[0] == cfg(1, 8)
    with pytest.raises(ValueError):
        G.select_winner({cfg(1, 4): {}})


def test_baseline_is_one_row_per_program():
    assert G.baseline_config(4096) == cfg(1, 16)
    assert G.baseline_config(2048) == cfg(1, 8)
    assert G.baseline_config(16384) == cfg(1, 16)


def test_kernel_census_counts_launches():
    events = [("add", 2.0), ("rms", 5.0), ("mul", 2.5), ("add", 2.0), ("rms", 5.0), ("mul", 2.5)]
    c = G.kernel_census(events)
    assert c["launches"] == 6
    assert [k["name"] for k in c["kernels"]] == ["rms", "mul", "add"]
    assert c["kernels"][0] == {"name": "rms", "count": 2, "device_us": 10.0}


@pytest.mark.skipif(env.current().on_gpu, reason="checks the no-GPU message")
def test_cli_explains_itself_without_a_gpu(tmp_path, capsys):
    assert G.main(["tune", "--out", str(tmp_path)]) == 2
    assert "need a GPU" in capsys.readouterr().err


@pytest.mark.gpu
def test_gpu_tune_one_key_small(tmp_path):
    import time

    trials = []
    result = G.tune_key(2048, torch.bfloat16, (64, 512), time.time() + 60, trials,
                        candidates=[cfg(1, 4), cfg(2, 8)])
    assert result is not None and result["configs_timed"] >= 2
    assert all(t["error"] is None for t in trials)


class FakeTiming:
    """Stands in for fusedrms.measure.timer on the CPU: runs fn once, returns made-up microseconds."""

    def __init__(self):
        self.calls = 0

    def time_gpu(self, fn, warmup=25, reps=100, l2="cold", graph=False):
        assert l2 in ("cold", "warm")
        fn()
        self.calls += 1
        return [1.0 + (self.calls % 7) / 10] * 3

    def copy_bandwidth_GBps(self):
        return 4000.0


@pytest.fixture
def cpu_as_gpu(monkeypatch):
    fake = FakeTiming()
    monkeypatch.setattr(G, "_timing", lambda: fake)
    monkeypatch.setattr(G.env, "require_gpu", lambda what: None)
    return fake


def test_tune_end_to_end_writes_a_table_the_wrapper_reads(cpu_as_gpu, tmp_path, monkeypatch):
    import time

    monkeypatch.setattr(G, "SEARCH_DTYPES", (torch.bfloat16,))
    no_table = tmp_path / "no_previous_table.json"
    path = G.tune_table(tmp_path, budget_s=120, cols_list=(64,), rows_list=(2, 5), previous_path=no_table)
    table = tuning.load("capstone", path)
    assert set(table["configs"]) == {(64, "bfloat16"), (64, "float16")}
    trials = json.loads((tmp_path / "capstone_tuning_trials.json").read_text())["records"]
    assert trials and all(t["error"] is None for t in trials)
    doc = json.loads(path.read_text())
    assert doc["provenance"]["rows"] == [2, 5] and "worst ratio" in doc["provenance"]["objective"]
    # an exhausted budget leaves a valid (empty) table rather than a crash
    empty = G.tune_table(tmp_path / "none", budget_s=0, cols_list=(64,), rows_list=(2,),
                   previous_path=no_table)
    assert tuning.load("capstone", empty)["configs"] == {}


def _previous_table(tmp_path, records):
    path = tmp_path / "previous.json"
    path.write_text(json.dumps({"provenance": {"gpu": env.current().gpu_name}, "records": records}))
    return path


def test_tune_times_the_previous_winner_and_keeps_unreached_keys(cpu_as_gpu, tmp_path, monkeypatch):
    monkeypatch.setattr(G, "SEARCH_DTYPES", (torch.bfloat16,))
    old = {"rows_per_program": 1, "num_warps": 2, "num_stages": 1, "programs_per_sm": 3,
           "chunk": 16}
    previous = _previous_table(tmp_path, [{"cols": 64, "dtype": "bfloat16", **old},
                                          {"cols": 128, "dtype": "float32", **old}])
    path = G.tune_table(tmp_path, budget_s=120, cols_list=(64,), rows_list=(2,), previous_path=previous)
    trials = json.loads((tmp_path / "capstone_tuning_trials.json").read_text())["records"]
    assert any(t["programs_per_sm"] == 3 and t["chunk"] == 16 and t["cols"] == 64 for t in trials)
    table = tuning.load("capstone", path)["configs"]
    assert table[(128, "float32")] == A.LaunchConfig(1, 2, 1, 3, 16)  # not reached: carried over
    doc = json.loads(path.read_text())["records"]
    assert "not re-tuned" in next(r for r in doc if r["cols"] == 128)["source"]
    assert next(r for r in doc if r["cols"] == 64)["source"] == "searched"


def test_persistent_variants_go_to_the_best_of_each_design():
    whole = [cfg(1, 16), cfg(2, 8), cfg(1, 8)]
    chunked = [A.LaunchConfig(1, 8, 1, None, 2048), A.LaunchConfig(1, 4, 1, None, 1024),
               A.LaunchConfig(1, 16, 1, None, 4096)]
    regret = {c: 1.0 + i / 10 for i, c in enumerate(chunked + whole)}  # chunked all rank first
    assert G._best_per_design(regret) == whole[:2] + chunked[:1]
    assert G._best_per_design(regret, 1, 2) == whole[:1] + chunked[:2]


def test_extras_end_to_end_on_small_shapes(cpu_as_gpu, tmp_path, monkeypatch):
    monkeypatch.setattr(G, "SEED_SHAPE", (4, 256))
    monkeypatch.setattr(G, "CENSUS_SHAPE", (8, 64))
    monkeypatch.setattr(G, "SMALL_ROWS", (1, 3))
    monkeypatch.setattr(G, "SMALL_COLS", (64,))
    path = G.extras(tmp_path, budget_s=120)
    recs = json.loads(path.read_text())["records"]
    kinds = {r["kind"] for r in recs}
    assert {"seed_as_printed", "seed_partial", "kernel_census", "copy_bandwidth",
            "graph_replay"} <= kinds, [r for r in recs if r["kind"] == "error"]
    assert "error" not in kinds
    seed = next(r for r in recs if r["kind"] == "seed_as_printed")
    assert "Conflicting meta-parameters: BLOCK" in seed["error"]
    graph = [r for r in recs if r["kind"] == "graph_replay"]
    assert len(graph) == 2 * 4 * 2 and all("median_us" in r and r["floor_us"] for r in graph)
    from fusedrms.book import ch07_results as CR
    verdict = CR.evaluate_targets([], graph_small=graph)[2]
    assert verdict.met is not None


def test_confirm_end_to_end_writes_harness_shaped_records(cpu_as_gpu, tmp_path, monkeypatch):
    from fusedrms.book import ch07_results as CR

    monkeypatch.setattr(G, "CONFIRM_SHAPES", ((3, 64, torch.bfloat16), (5, 32, torch.float32)))
    table = tmp_path / "tuning" / "capstone.json"
    table.parent.mkdir()
    table.write_text(json.dumps({"provenance": {"gpu": "none (CPU)"}, "records": [
        {"cols": 64, "dtype": "bfloat16", "rows_per_program": 2, "num_warps": 1,
         "num_stages": 1, "programs_per_sm": None}]}))
    try:
        path = G.confirm(tmp_path, budget_s=60)
    finally:
        tuning.override("capstone", None)
    recs = json.loads(path.read_text())["records"]
    assert len(recs) == 2 * 3 and all(r["status"] == "ok" for r in recs)
    points = CR.grid_points(json.loads(path.read_text()))
    assert len(points) == 6 and all(p.mode == "cold" and p.pct_floor for p in points)


def test_check_table_passes_two_pass_entries_and_catches_a_wrong_kernel(cpu_as_gpu, tmp_path,
                                                                      monkeypatch):
    entry = {"cols": 64, "dtype": "bfloat16", "rows_per_program": 1, "num_warps": 1,
             "num_stages": 1, "programs_per_sm": 2, "chunk": 16}
    table = _previous_table(tmp_path, [entry, {**entry, "dtype": "float32", "chunk": None}])
    monkeypatch.setattr(G, "CHECK_SHAPES", ((1, 0, False), (3, 3, True)))
    assert G.check_table(tmp_path, budget_s=60, table_path=table)
    monkeypatch.setattr(A, "add_rmsnorm", lambda x, r, w, eps, config: torch.zeros_like(x))
    assert not G.check_table(tmp_path, budget_s=60, table_path=table)


def test_peer_sweeps_cover_the_goal_grid_and_every_peer():
    from fusedrms.book import ch07
    from fusedrms.measure import harness

    sweeps = ch07.peer_sweeps()
    cases, not_run = harness.expand(sweeps)
    impls = {c["impl"] for c in cases}
    for name in ("capstone.fused", "capstone.fused_residual", "capstone.fused_residual_in_place",
                 "torch.compile_add", "torch.rms_norm_add", "torch.eager_chain",
                 "torch.compile_residual", "liger.fused_add_rms_norm",
                 "flashinfer.fused_add_rmsnorm", "triton.row", "liger.rms_norm",
                 "flashinfer.rms_norm", "torch.compile"):
        assert name in impls, name
    grid = {(c["rows"], c["cols"]) for c in cases if c["sweep"] == "peers" and c["dtype"] == "bf16"}
    assert {(c["rows"], c["cols"]) for c in cases if c["dtype"] == "fp32"} == set(ch07.DIAGONAL)
    assert grid == {(r, c) for r in ch07.GOAL_ROWS for c in ch07.GOAL_COLS}
    assert {c["mode"] for c in cases if c["sweep"] == "peers"} == {"rotating"}
    assert any(c["mode"] == "python" and c["rows"] == 1 and c["cols"] == 4096 for c in cases)
    assert not harness.check_floors(sweeps)
    assert harness.expand(ch07.peer_sweeps(smoke=True))[0]


def _peers_doc():
    """A small capstone_peers.json-shaped document (the harness's records)."""
    recs = []
    for rows, cols, times in ((16384, 8192, {"capstone.fused": 188.0, "torch.compile_add": 187.0,
                                             "torch.eager_chain": 700.0}),
                              (1, 4096, {"capstone.fused": 1.5, "torch.compile_add": 1.7,
                                         "torch.eager_chain": 5.0})):
        for name, t in times.items():
            nbytes = 3 * rows * cols * 2 + cols * 2
            recs.append({"status": "ok", "mode": "rotating", "op": "add_rmsnorm", "impl": name,
                         "rows": rows, "cols": cols, "dtype": "bf16", "median_us": t,
                         "floor_us": nbytes / 4.2e3, "bytes": nbytes, "processes": 3})
    recs.append({"status": "missing: not installed", "mode": "rotating", "op": "add_rmsnorm",
                 "impl": "liger.x", "rows": 1, "cols": 4096, "dtype": "bf16"})
    return {"provenance": {}, "records": recs}


def _levers_doc():
    """A capstone_levers.json-shaped document (the study's aggregated records)."""
    recs = [{"rows": 16384, "cols": 8192, "dtype": "bf16", "op": op, "impl": impl,
             "median_us": t, "floor_us": 190.0, "bytes": 805322752, "status": "ok"}
            for op in ("fused", "residual")
            for impl, t in (("ours.current", 200.0), ("ours.liger_w16", 210.0),
                            ("ours.two_pass_c2048_w16", 190.0), ("torch.compile", 187.0))]
    return {"provenance": {"inductor_kernels": {"add_rmsnorm": "@triton.jit\ndef k(): pass",
                                                "add_rmsnorm_residual": ""}}, "records": recs}


def test_readers_of_the_measured_section():
    import matplotlib

    matplotlib.use("Agg")
    from fusedrms.book import ch07

    status = {(g["rows"], g["cols"]): g for g in ch07.goal_status(_peers_doc())}
    big, small = status[(16384, 8192)], status[(1, 4096)]
    assert big["fastest_peer"] == "torch.compile_add" and big["at_most_peer"] is False
    assert abs(big["pct_of_bound"] - 100 * min(big["floor_us"], 187.0) / 188.0) < 1e-9
    assert big["near_bound"] is True
    assert small["at_most_peer"] is True and small["pct_of_bound"] is None  # under 64 MB
    levers = ch07.lever_effects(_levers_doc(), shapes=((16384, 8192),))
    two_pass = [r for r in levers if r["variant"] == "two_pass_c2048_w16"]
    assert len(two_pass) == 2 and all(r["ratio"] == 190.0 / 200.0 for r in two_pass)
    assert {r["lever"] for r in levers} == {"one row per program, Liger's warps",
                                            "two passes, 2048-column chunks, 16 warps"}
    seed = ch07.seed_predictions(_peers_doc(), [{"impl": "capstone.fused", "rows": 16384,
                                                 "cols": 8192, "dram_throughput_pct": 88.0}])
    assert seed[0]["seed"] == 2.3 and seed[0]["shapes"] == 1
    assert abs(seed[0]["measured"] - 700.0 / 188.0) < 1e-9 and seed[1]["measured"] == 88.0
    sides = ch07.side_by_side(_levers_doc())
    assert sides["inductor"].startswith("@triton.jit") and "_two_pass_tile" in sides["ours"]
    assert ch07.peers_figure(_peers_doc()) is not None
    with pytest.raises(ValueError):
        ch07.peers_figure(_peers_doc(), dtype="fp32")
