"""Chapter 7: the profiler summary, the extras and the confirmation run on the CPU (a stand-in
timer), the peer sweeps, and the page's sentences in every data state."""
import json
import re
import statistics

import pytest
import torch

from fusedrms.book import ch07 as G, ch07_results as CR
from fusedrms import env, tuning


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
    return CR.peer_summary(CR.peer_rows(CR.peer_points(doc), op, CR.peer_attempts(doc, op)))


SHAPES = ((1, 4096), (4096, 8192), (16384, 8192))


def test_every_peer_timed_and_beaten_reads_as_all_shapes():
    doc = peer_doc({s: {"capstone.fused": 10.0, "torch.compile_add": 11.0,
                        "torch.rms_norm_add": 20.0} for s in SHAPES})
    s = summary(doc)
    verdict = reads_well(CR.peer_verdict(s))
    assert verdict.startswith("at all 3 shapes the capstone is at least as fast as every peer;")
    assert "timed" not in verdict and "closest" in verdict and "torch.compile" in verdict
    assert CR.missing_note(s) == ""
    large = reads_well(CR.large_shapes_clause(s))
    assert "torch.compile, the fastest peer timed there," in large and "not timed" not in large


def test_a_peer_timed_at_one_shape_is_named_once_and_never_a_win():
    # torch.compile is timed at the small shape only, where it wins; elsewhere it is skipped
    times = {s: {"capstone.fused": 10.0, "torch.rms_norm_add": 20.0} for s in SHAPES}
    times[(1, 4096)]["torch.compile_add"] = 9.0
    doc = peer_doc(times, skipped=[("torch.compile_add", r, c) for r, c in SHAPES[1:]])
    s = summary(doc)
    assert s["not_slower_timed"] == 2 and s["complete"] == 1 and s["not_slower"] == 0
    verdict = reads_well(CR.peer_verdict(s))
    assert verdict.startswith("at 2 of the 3 shapes the capstone is at least as fast as every "
                              "peer timed there;")
    assert "1.11x the time of torch.compile (1x4096 bf16)" in verdict
    note = reads_well(CR.missing_note(s))
    assert note == ("torch.compile was timed at only 1 of the 3 shapes; no shape counts as a "
                    "win over a peer not timed there")
    large = reads_well(CR.large_shapes_clause(s))
    assert "F.rms_norm(x + r), the fastest peer timed there," in large
    assert large.endswith("torch.compile was not timed there")


def test_a_peer_never_timed_still_counts_as_missing():
    doc = peer_doc({s: {"capstone.fused": 10.0, "torch.eager_chain": 30.0} for s in SHAPES},
                   skipped=[("torch.compile_add", r, c) for r, c in SHAPES]
                   + [("liger.fused_add_rms_norm", 1, 4096)])
    s = summary(doc)
    assert s["missing"] == {"torch.compile_add": 3, "liger.fused_add_rms_norm": 1}
    note = reads_well(CR.missing_note(s))
    assert note.startswith("torch.compile was not timed at any of the 3 shapes and "
                           "Liger-Kernel was timed at only 2 of them;")
    verdict = reads_well(CR.peer_verdict(s))
    assert verdict.startswith("at all 3 shapes") and "the eager chain" in verdict
    # without the skipped records a never-timed peer would be invisible
    assert CR.peer_summary(CR.peer_rows(CR.peer_points(doc)))["missing"] == {}


def test_slower_everywhere_and_one_shape_read_well():
    slow = summary(peer_doc({s: {"capstone.fused": 10.0, "torch.compile_add": 5.0}
                             for s in SHAPES}))
    assert reads_well(CR.peer_verdict(slow)).startswith(
        "at all 3 shapes the capstone is slower than the fastest peer; at worst it takes 2.00x")
    one = summary(peer_doc({(1, 4096): {"capstone.fused": 10.0, "torch.compile_add": 5.0}}))
    assert reads_well(CR.peer_verdict(one)).startswith("at the one shape compared, the capstone")
    missing_one = dict(one, missing={"torch.eager_chain": 1})
    assert reads_well(CR.missing_note(missing_one)).startswith(
        "the eager chain was not timed at the one shape;")


def test_nothing_recorded_says_so():
    s = CR.peer_summary([])
    assert "not recorded yet" in reads_well(CR.peer_verdict(s))
    assert CR.missing_note(s) == ""
    assert "not recorded yet" in reads_well(CR.large_shapes_clause(s))
    assert "not recorded yet" in reads_well(CR.eager_clause([]))
    assert "not recorded yet" in CR.lever_sentence([])
    assert "not recorded yet" in CR.dram_clause(None)
    assert CR.study_peer_rows(None) == [] and CR.study_peer_clause([]) == ""
    assert CR.peer_rows(CR.peer_points(None), "add_rmsnorm", CR.peer_attempts(None)) == []


def residual_doc(times, skipped=()):
    """peer_doc for the residual-writing op (its capstone is capstone.fused_residual)."""
    doc = peer_doc(times, skipped)
    for r in doc["records"]:
        r["op"] = "add_rmsnorm_residual"
    return doc


def test_headline_names_both_variants_and_never_counts_a_missing_peer_as_a_win():
    plain = peer_doc({s: {"capstone.fused": 10.0, "torch.rms_norm_add": 20.0} for s in SHAPES},
                     skipped=[("torch.compile_add", r, c) for r, c in SHAPES])
    times = {s: {"capstone.fused_residual": 10.0, "liger.fused_add_rms_norm": 9.0}
             for s in SHAPES}
    times[SHAPES[0]]["liger.fused_add_rms_norm"] = 12.0
    times[SHAPES[1]]["flashinfer.fused_add_rmsnorm"] = 20.0
    res = residual_doc(times)
    s, sr = summary(plain), summary(res, "add_rmsnorm_residual")
    text = reads_well(CR.headline(s, sr))
    assert text.startswith("at all 3 shapes the fused kernel is at least as fast as every peer "
                           "timed there; at 1 of the 3 shapes its residual-writing variant")
    assert "taking at worst 1.11x the time of Liger-Kernel" in text
    assert ("FlashInfer was timed at only some of the shapes and torch.compile was not timed "
            "at all, and no shape counts as a win") in text
    # each variant's peers, the untimed ones included
    fu = CR.peers_of(CR.peer_rows(CR.peer_points(plain), "add_rmsnorm",
                                  CR.peer_attempts(plain, "add_rmsnorm")),
                     CR.peer_attempts(plain, "add_rmsnorm"))
    rs = CR.peers_of(CR.peer_rows(CR.peer_points(res), "add_rmsnorm_residual"))
    assert reads_well(CR.peer_list_text(fu, rs)) == (
        "F.rms_norm(x + r) and torch.compile for the plain op, and Liger-Kernel and FlashInfer "
        "for the residual-writing one")
    assert CR.peer_list_text(fu, fu) == "F.rms_norm(x + r) and torch.compile"
    assert CR.peer_list_text(set(), set()) == ""


def test_headline_in_every_data_state():
    empty = CR.peer_summary([])
    assert reads_well(CR.headline(empty, empty)) == ("the comparison with the peers is not "
                                                     "recorded yet")
    one = summary(peer_doc({(1, 4096): {"capstone.fused": 10.0, "torch.compile_add": 5.0}}))
    text = reads_well(CR.headline(one, empty))
    assert text.startswith("at the one shape compared the fused kernel is slower than the "
                           "fastest peer, taking at worst 2.00x the time of torch.compile;")
    assert text.endswith("its residual-writing variant with its peers is not recorded yet")
    slow = summary(peer_doc({s: {"capstone.fused": 10.0, "torch.eager_chain": 5.0}
                             for s in SHAPES}))
    assert reads_well(CR.headline(slow, slow)).startswith(
        "at all 3 shapes the fused kernel is slower than the fastest peer, taking at worst "
        "2.00x the time of the eager chain")


def test_above_floor_clause_only_where_the_printed_share_passes_100():
    rows = [{"rows": 16384, "cols": 8192, "pct_floor": 101.2},
            {"rows": 4096, "cols": 8192, "pct_floor": 100.4}, {"rows": 1, "cols": 1,
                                                               "pct_floor": None}]
    assert CR.above_floor_clause(rows) == ", or beat it, as the capstone does at 16384x8192 " \
                                          "(101% of it)"
    rows[1]["pct_floor"] = 103.0
    assert CR.above_floor_clause(rows) == ", or beat it, as the capstone does at 2 shapes " \
                                          "(at most 103% of it)"
    assert CR.above_floor_clause(rows[2:]) == "" and CR.above_floor_clause([]) == ""


def test_words_for_numbers():
    assert CR.ratio_text(1.004) == "1.004x" and CR.ratio_text(1.0) == "1.00x"
    assert CR.ratio_text(0.996) == "0.996x" and CR.ratio_text(1.0897) == "1.09x"
    assert CR.sentences("torch.compile was timed", "", "the eager chain") == \
        "torch.compile was timed. The eager chain"
    assert CR.display_name("torch.eager_chain", prose=True) == "the eager chain"
    assert CR.display_name("something.new") == "something.new"
    assert CR.display_names(["torch.compile_add", "torch.compile_residual",
                             "torch.rms_norm_add"]) == ["F.rms_norm(x + r)", "torch.compile"]


def test_eager_clause_takes_the_true_median():
    text = reads_well(CR.eager_clause([2.0, 3.0, 4.0, 10.0]))
    assert "a median 3.50x faster at the 4 shapes" in text and "above the bound" in text
    assert "2.00x faster at the one shape" in CR.eager_clause([2.0]) and "within" in \
        CR.eager_clause([2.0])


def lever(name, **changes):
    shapes = {(1024, int(k[1:])): v for k, v in changes.items()}
    return {"lever": name, "tests": "t", "shapes": len(shapes), "changes": shapes,
            "best_pct": min(shapes.values()), "worst_pct": max(shapes.values()),
            "median_pct": statistics.median(shapes.values())}


def test_lever_sentence_follows_the_sign_of_the_change():
    # negative: a shorter time. Only "b" shortened it by more than 3%; "c" lengthened it
    levers = [lever("a", c2048=-1.0, c4096=2.0), lever("b", c2048=-8.0, c4096=-1.0),
              lever("c", c2048=4.0, c4096=9.0)]
    text = CR.lever_sentence(levers)
    assert text == ("Counting a change only where it exceeds 3%, 1 of the 3 levers shortened the "
                    "time, the most \u201cb\u201d, by 8.0% at 1024x2048, and 1 of the 3 "
                    "lengthened it, the most \u201cc\u201d, by 9.0% at 1024x4096")
    none = CR.lever_sentence([lever("a", c2048=-1.0), lever("c", c2048=2.0)])
    assert none == ("Counting a change only where it exceeds 3%, no lever shortened the time, "
                    "and none lengthened it")
    assert CR.lever_sentence([lever("b", c2048=-8.0)]) == (
        "Counting a change only where it exceeds 3%, the lever shortened the time by 8.0% at "
        "1024x2048, and did not lengthen it")


def test_a_lever_must_beat_the_gap_between_two_runs_of_the_launch_in_use():
    levers = [lever("b", c2048=-8.0, c4096=-1.0), lever("c", c2048=4.0, c4096=9.0)]
    repeat = {(1024, 2048): -8.2, (1024, 4096): -0.04}  # the same kernel, 8.2% apart at 2048
    text = CR.lever_sentence(levers, repeat=repeat)
    assert text.startswith("Counting a change only where it exceeds 3% plus the gap between two "
                           "runs of the launch in use (8.2% at 1024x2048), no lever shortened")
    assert text.endswith("and 1 of the 2 levers lengthened it, the most \u201cc\u201d, by 9.0% "
                         "at 1024x4096")
    assert CR.change_text(-0.04) == "0.0%" and CR.change_text(10.66) == "+10.7%"
    assert CR.change_text(-8.18) == "-8.2%"


def test_launch_repeat_compares_the_launch_in_use_across_runs():
    levers_doc = _levers_doc()  # ours.current: 200 µs at 16384x8192
    peers = CR.peer_points(peer_doc({(16384, 8192): {"capstone.fused": 190.0}}))
    assert CR.launch_repeat(levers_doc, peers) == {(16384, 8192): pytest.approx(-5.0)}
    assert CR.launch_repeat(None, peers) == {} and CR.launch_repeat(levers_doc, []) == {}


def test_study_rows_compare_the_capstone_with_compile_in_the_same_run():
    rows = CR.study_peer_rows(_levers_doc())
    assert [(r["rows"], r["cols"]) for r in rows] == [(16384, 8192)]
    assert rows[0]["ratio"] == pytest.approx(200.0 / 187.0)
    text = reads_well(CR.study_peer_clause(rows))
    assert text.endswith("timed torch.compile at one shape, where the capstone takes 1.07x its "
                         "time at 16384x8192")


def test_dram_clause_names_each_profiled_shape():
    recs = [{"impl": "capstone.fused", "rows": 16384, "cols": 8192, "status": "ok",
             "dram_throughput_pct": 89.86}, {"impl": "torch.rms_norm_add", "rows": 1, "cols": 1,
                                             "dram_throughput_pct": 50.0}]
    assert CR.dram_clause(recs) == ("Nsight Compute measures the capstone's DRAM throughput at "
                                    "90% of its peak at 16384x8192")
    assert CR.dram_clause(recs, against="85%").endswith("16384x8192, against 85%")
    assert "not recorded yet" in CR.dram_clause([], against="85%")
    assert "against" not in CR.dram_clause([], against="85%")


def test_processes_phrase_says_what_the_records_hold():
    def doc(*counts):
        return {"records": [{"sweep": "peers", "status": "ok", "processes": n} for n in counts]
                + [{"sweep": "peers", "status": "skipped: time budget", "processes": 9}]}

    assert CR.processes_phrase(doc(3, 3)) == "medians over three processes"
    assert CR.processes_phrase(doc(1, 3, 2)) == "medians over one to three processes"
    assert CR.processes_phrase(doc(1)) == "the median of one process"
    assert CR.processes_phrase(None) == "" and CR.processes_phrase(doc()) == ""
