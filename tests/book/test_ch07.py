"""Chapter 7: the profiler summary, the extras and the confirmation run on the CPU (a stand-in
timer), the peer sweeps, and the page's sentences in every data state."""
import json
import re
import statistics

import pytest
import torch

from fusedrms.book import ch07 as G, ch07_results as CR
from fusedrms import env, records, tuning


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


def test_the_peers_and_the_grid_together_time_goal_1s_grid_in_every_dtype_once():
    from fusedrms.book import ch07
    from fusedrms.measure import harness

    peers = [c for c in harness.expand(ch07.peer_sweeps())[0] if c["sweep"] == "peers"]
    grid, _ = harness.expand(ch07.grid_sweeps())
    key = lambda c: (c["op"], c["impl"], c["rows"], c["cols"], c["dtype"])  # noqa: E731
    assert not {key(c) for c in peers} & {key(c) for c in grid}  # the diagonal once
    both = {(c["op"], c["rows"], c["cols"], c["dtype"]) for c in peers + grid}
    assert both == {(op, n, c, dt) for op in ("add_rmsnorm", "add_rmsnorm_residual")
                    for n in ch07.GOAL_ROWS for c in ch07.GOAL_COLS for dt in ("bf16", "fp16", "fp32")}
    for op in ("add_rmsnorm", "add_rmsnorm_residual"):  # every peer beside the capstone's shape
        at = lambda rows, dt: {c["impl"] for c in peers + grid  # noqa: E731
                               if (c["op"], c["rows"], c["cols"], c["dtype"]) == (op, rows, 2048, dt)}
        assert at(1, "fp32") == at(1, "bf16") and at(16384, "fp16") == at(16384, "bf16")
    assert {c["mode"] for c in grid} == {"rotating"} and not harness.check_floors(ch07.grid_sweeps())
    smoke, _ = harness.expand(ch07.grid_sweeps(smoke=True))
    assert smoke and {(c["rows"], c["cols"]) for c in smoke} == {ch07.GRID_SMOKE_SHAPE}


def test_the_grid_timed_ahead_in_the_same_run_is_reused(tmp_path, monkeypatch):
    from dataclasses import asdict

    from fusedrms.book import ch07
    from fusedrms.measure import harness

    run = {"id": "this-run", "chapters": ("ch02", "ch07")}
    doc = {"provenance": {"run_id": "this-run", "sweeps": [asdict(s) for s in ch07.grid_sweeps()]},
           "records": []}
    (tmp_path / ch07.GRID_FILE).write_text(json.dumps(doc))
    monkeypatch.setattr(ch07.env, "require_gpu", lambda what: None)
    monkeypatch.setattr(harness, "run_documents", lambda *a, **k: pytest.fail("timed again"))
    said = []
    assert ch07.ahead(tmp_path, log=said.append, run=run) == [tmp_path / ch07.GRID_FILE]
    assert "grid: timed earlier in this recording" in said[0]
    timed = []
    monkeypatch.setattr(harness, "run_documents",
                        lambda documents, *a, **k: timed.append(documents) or {"doc": {"records": []}})
    ch07.grid_bench(tmp_path, 1, run={"id": "another-run", "chapters": ("ch07",)})
    assert list(timed[0]) == ["doc"] and timed[0]["doc"][1] == tmp_path / ch07.GRID_FILE


def test_peers_timed_by_chapter_6_in_the_same_run_are_reused_and_no_others(tmp_path, monkeypatch):
    from dataclasses import asdict

    from fusedrms.book import ch07

    path = tmp_path / ch07.PEERS_FILE
    sweeps = ch07.peer_sweeps()
    run = {"id": "this-run", "chapters": ("ch06", "ch07")}
    assert not ch07.timed_in_this_run(path, sweeps, run)  # no file yet

    def write(run_id, listed):
        records.write(path, [], {"run_id": run_id, "sweeps": [asdict(s) for s in listed]})

    write("this-run", sweeps)
    assert ch07.timed_in_this_run(path, sweeps, run)
    assert not ch07.timed_in_this_run(path, sweeps, None)  # chapter 7 on its own times them
    write("an-earlier-run", sweeps)
    assert not ch07.timed_in_this_run(path, sweeps, run)
    write("this-run", sweeps[:-1])  # another grid: not this chapter's question
    assert not ch07.timed_in_this_run(path, sweeps, run)


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


# ---------------------------------------------------------------- the page's sentences, every data state


REGISTRY_NAMES = ("compile_add", "compile_residual", "eager_chain", "rms_norm_add", "liger.",
                  "flashinfer.", "capstone.")


def reads_well(text):
    """No registry names, no doubled words, no '1 shapes', no nested parentheses, no -0."""
    assert not any(name in text for name in REGISTRY_NAMES), text
    words = re.findall(r"[\w.%]+", text.lower())
    assert all(a != b for a, b in zip(words, words[1:])), text
    assert not re.search(r"\b1 shapes\b|\b-0(\.0+)?%|\(\(|\([^)]*\(", text), text
    assert "  " not in text and not text.endswith("."), text
    return text


def peer_doc(times, skipped=()):
    """A capstone_peers.json-shaped document: {(rows, cols): {impl: µs}} timed, plus skipped
    records (impl, rows, cols) that name a peer the recording meant to time."""
    recs = [{"sweep": "peers", "op": "add_rmsnorm", "impl": impl, "rows": rows, "cols": cols,
             "dtype": "bf16", "mode": "rotating", "status": "ok", "median_us": us,
             "pct_of_floor": 100.0 * 3 * rows * cols * 2 / 4.2e3 / us}
            for (rows, cols), got in times.items() for impl, us in got.items()]
    recs += [{"sweep": "peers", "op": "add_rmsnorm", "impl": impl, "rows": rows, "cols": cols,
              "dtype": "bf16", "mode": "rotating", "status": "skipped: time budget"}
             for impl, rows, cols in skipped]
    return {"provenance": {}, "records": recs}


def summary(doc, op="add_rmsnorm"):
    return CR.peer_summary(CR.peer_table(doc, op))


SHAPES = ((1, 4096), (4096, 8192), (16384, 8192))


def residual_doc(times, skipped=()):
    """peer_doc for the residual-writing op (its capstone is capstone.fused_residual)."""
    doc = peer_doc(times, skipped)
    for r in doc["records"]:
        r["op"] = "add_rmsnorm_residual"
    return doc


def lever(name, **changes):
    shapes = {(1024, int(k[1:])): v for k, v in changes.items()}
    return {"lever": name, "tests": "t", "shapes": len(shapes), "changes": shapes,
            "best_pct": min(shapes.values()), "worst_pct": max(shapes.values()),
            "median_pct": statistics.median(shapes.values())}


def test_launch_repeat_compares_the_launch_in_use_across_runs():
    levers_doc = _levers_doc()  # ours.current: 200 µs at 16384x8192
    peers = CR.peer_points(peer_doc({(16384, 8192): {"capstone.fused": 190.0}}))
    assert CR.launch_repeat(levers_doc, peers) == {(16384, 8192): pytest.approx(-5.0)}
    assert CR.launch_repeat(None, peers) == {} and CR.launch_repeat(levers_doc, []) == {}


def test_the_lever_threshold_is_the_largest_change_of_the_launch_in_use_timed_twice():
    from fusedrms.book import ch07_story

    doc = _levers_doc()  # ours.current: 200 µs at 16384x8192, both ops
    assert CR.in_run_repeat(doc) == {}  # timed once
    assert ch07_story.lever_threshold(doc) == ch07_story.UNREPEATED_THRESHOLD_PCT
    again = [{**r, "rows": rows, "impl": impl, "median_us": us}
             for r in doc["records"] if r["impl"] == "ours.current"
             for rows, impl, us in ((16384, "ours.current_again", 203.0),
                                    (4096, "ours.current", 50.0),
                                    (4096, "ours.current_again", 49.0))]
    doc["records"] += again
    assert CR.in_run_repeat(doc) == {(16384, 8192): pytest.approx(1.5),
                                     (4096, 8192): pytest.approx(-2.0)}
    assert ch07_story.lever_threshold(doc) == pytest.approx(2.0)  # the larger change, either sign
    # the residual op's launch is its own repeat; a shape timed once adds nothing
    assert CR.in_run_repeat(doc, op="add_rmsnorm_residual") == CR.in_run_repeat(doc)
    assert CR.in_run_repeat(None) == {}
    assert ch07_story.lever_threshold(None) == ch07_story.UNREPEATED_THRESHOLD_PCT


def test_a_peer_timed_at_one_shape_is_never_a_win_where_it_was_not_timed():
    # torch.compile is timed at the small shape only, where it wins; elsewhere it is skipped
    times = {s: {"capstone.fused": 10.0, "torch.rms_norm_add": 20.0} for s in SHAPES}
    times[(1, 4096)]["torch.compile_add"] = 9.0
    doc = peer_doc(times, skipped=[("torch.compile_add", r, c) for r, c in SHAPES[1:]])
    s = summary(doc)
    assert s["not_slower_timed"] == 2 and s["complete"] == 1 and s["not_slower"] == 0
    assert s["missing"] == {"torch.compile_add": 2}


def test_a_peer_never_timed_still_counts_as_missing():
    doc = peer_doc({s: {"capstone.fused": 10.0, "torch.eager_chain": 30.0} for s in SHAPES},
                   skipped=[("torch.compile_add", r, c) for r, c in SHAPES]
                   + [("liger.fused_add_rms_norm", 1, 4096)])
    s = summary(doc)
    assert s["missing"] == {"torch.compile_add": 3, "liger.fused_add_rms_norm": 1}
    assert s["complete"] == 0
    # without the skipped records a never-timed peer would be invisible
    assert CR.peer_summary(CR.peer_rows(CR.peer_points(doc)))["missing"] == {}


def test_change_text_never_prints_minus_zero():
    assert CR.change_text(-0.04) == "0.0%" and CR.change_text(10.66) == "+10.7%"
    assert CR.change_text(-8.18) == "-8.2%"


def test_the_wide_row_profiles_fail_the_recording_only_where_ncu_could_run(monkeypatch, tmp_path):
    import json

    from fusedrms.measure import harness, ncu

    def profile(impl, op, rows, cols, dt, timeout_s, log):
        ok = impl == "capstone.fused"
        return {"status": "ok" if ok else "failed", "impl": impl, "rows": rows, "cols": cols,
                "raw_tail": "...", **({"bytes_read": 2.1e9} if ok else {"reason": "timed out"})}

    monkeypatch.setattr(ncu, "profile_with_ncu", profile)
    monkeypatch.setattr(ncu, "find_ncu", lambda: "/usr/local/cuda/bin/ncu")
    with pytest.raises(harness.Incomplete, match="torch.compile_add at 16384x32768 bf16"):
        G.wide_bytes(tmp_path, log=lambda *a: None)
    recs = json.loads((tmp_path / "capstone_wide_ncu.json").read_text())["records"]
    assert [r["impl"] for r in recs] == list(G.WIDE_NCU_IMPLS)  # written before the failure
    assert all("raw_tail" not in r for r in recs) and recs[0]["bytes_read"] == 2.1e9
    monkeypatch.setattr(ncu, "find_ncu", lambda: None)  # no ncu here: the file says why, no raise
    assert G.wide_bytes(tmp_path, log=lambda *a: None).name == "capstone_wide_ncu.json"
    monkeypatch.setattr(ncu, "profile_with_ncu", None)  # a smoke run profiles nothing
    G.wide_bytes(tmp_path, smoke=True, log=lambda *a: None)
    recs = json.loads((tmp_path / "capstone_wide_ncu.json").read_text())["records"]
    assert {r["status"] for r in recs} == {"skipped"} and len(recs) == 2


def test_the_in_place_pair_profiles_the_same_kernel_both_ways_into_its_own_file(monkeypatch, tmp_path):
    import json

    from fusedrms.measure import ncu

    seen = []

    def profile(impl, op, rows, cols, dt, timeout_s, log):
        seen.append((impl, op, rows, cols, dt))
        return {"status": "ok", "impl": impl, "rows": rows, "cols": cols, "raw_tail": "..."}

    monkeypatch.setattr(ncu, "profile_with_ncu", profile)
    assert G.in_place_bytes(tmp_path, log=lambda *a: None).name == "capstone_in_place_ncu.json"
    assert seen == [(i, *G.IN_PLACE_NCU_SHAPE) for i in G.IN_PLACE_NCU_IMPLS]
    assert seen[0][1] == "add_rmsnorm_residual" and seen[1][0].endswith("_in_place")
    recs = json.loads((tmp_path / "capstone_in_place_ncu.json").read_text())["records"]
    assert [r["impl"] for r in recs] == list(G.IN_PLACE_NCU_IMPLS)
    assert "capstone_in_place_ncu.json" in G.FILES


def test_the_gap_between_runs_counts_only_at_one_commit():
    """The launch in use timed by the study and by the peers run differs by the runs' noise only
    when both ran one kernel with one timer: at one commit."""
    at = lambda commit: {"provenance": {"commit": commit}}  # noqa: E731
    assert CR.one_recording(at("abc"), at("abc"))
    assert not CR.one_recording(at("abc"), at("def"))
    assert not CR.one_recording(at(None), at(None)) and not CR.one_recording(None, at("abc"))


def test_peer_rows_compare_the_capstone_call_asked_for():
    """The residual op's rows for its out-of-place call by default, for its in-place one when
    asked: each against the fastest peer at the shape."""
    op = "add_rmsnorm_residual"
    pts = [CR.Point(impl, op, 16384, 4096, "bf16", us, None)
           for impl, us in (("capstone.fused_residual", 132.0), ("liger.fused_add_rms_norm", 133.0),
                            ("capstone.fused_residual_in_place", 134.0))]
    assert [r["capstone_us"] for r in CR.peer_rows(pts, op)] == [132.0]
    rows = CR.peer_rows(pts, op, mine="capstone.fused_residual_in_place")
    assert [(r["capstone_us"], r["peer"]) for r in rows] == [(134.0, "liger.fused_add_rms_norm")]
    assert rows[0]["ratio"] == pytest.approx(134 / 133)
