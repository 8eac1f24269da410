"""code/scripts/scoreboard.py: each shape's verdict against the fastest peer inside the
recording's tie band, a peer missing as a miss (never a win), large calls below 90% of the floor,
in place against out of place; FP8's floor, codes and Python call; the backward's verdicts, floor
and grid; the committed recording and a folder of one's own."""
import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "code" / "scripts"))

import scoreboard  # noqa: E402

FUSED, RESIDUAL = "add_rmsnorm", "add_rmsnorm_residual"
DATA = ROOT / "code" / "fusedrms" / "data" / "h200"


def _line(out, prefix):
    return next(line for line in out if line.startswith(prefix))


def _rec(impl, op, rows, cols, us, spread=0.002, floor_us=None, status="ok"):
    # three processes whose p10-p90 width is about ``spread`` of the median
    rec = {"sweep": "peers", "op": op, "impl": impl, "rows": rows, "cols": cols, "dtype": "bf16",
           "mode": "rotating", "processes": 3, "status": status}
    if status == "ok":
        rec.update(median_us=us, process_medians_us=[us * (1 - spread / 2), us, us * (1 + spread / 2)])
        if floor_us is not None:
            rec.update(floor_us=floor_us, pct_of_floor=100 * floor_us / us, copy_GBps=3000.0)
    return rec


def _call(impl, op, us, lo=None, hi=None):
    # the harness's python sweep: back-to-back calls from Python, with the process medians' range
    return {"sweep": "python", "mode": "python", "op": op, "impl": impl, "rows": 1, "cols": 4096,
            "dtype": "bf16", "status": "ok", "median_us": us, "min_median_us": lo or us * 0.98,
            "max_median_us": hi or us * 1.02}


CALLS = [_call("capstone.fused", FUSED, 12.0), _call("torch.rms_norm_add", FUSED, 27.0),
         _call("capstone.fused_residual", RESIDUAL, 21.0),
         _call("capstone.fused_residual_in_place", RESIDUAL, 21.2)]  # ranges overlap: no cost


def _folder(tmp_path, records, calls=CALLS) -> Path:
    folder = tmp_path / "rec"
    folder.mkdir(parents=True)
    doc = {"provenance": {"gpu": "NVIDIA H100 80GB HBM3", "commit": "c0ffee" * 7, "date": "2026-12-07",
                          "run_id": "run1"},
           "records": records + calls}
    (folder / "capstone_peers.json").write_text(json.dumps(doc))
    return folder


def _rows(capsys, folder, *flags):
    assert scoreboard.main([str(folder), *flags]) == 0
    out = capsys.readouterr().out.splitlines()
    return out, {tuple(line.split()[:3]): line for line in out if line.split()[:1] in
                 (["fused"], ["residual"], ["in"])}


def test_a_shape_slower_than_a_peer_beyond_the_band_misses_and_one_inside_it_is_a_tie(tmp_path, capsys):
    records = [_rec("capstone.fused", FUSED, 16, 4096, 10.5), _rec("torch.compile_add", FUSED, 16, 4096, 10.0),
               _rec("capstone.fused", FUSED, 32, 4096, 10.01), _rec("torch.compile_add", FUSED, 32, 4096, 10.0)]
    out, rows = _rows(capsys, _folder(tmp_path, records))
    slower = rows[("fused", "16x4096", "bf16")]
    assert "slower" in slower and "slower than a peer" in slower and "1.050" in slower
    tie = rows[("fused", "32x4096", "bf16")]
    assert " tie " in tie and tie.rstrip().endswith("-")  # no miss
    assert "fused: 2 shapes, 0 faster, 1 ties, 1 slower" in _line(out, "fused: ")
    # the two Python calls pass; goal 5 (no chapter 6 grid here) misses once; of goal 1's grid
    # (3 variants x 108 shapes) only the fused op's 16x4096 bf16 is timed
    assert out[-1] == "325 of 329 rows miss a bar"


def test_a_peer_missing_at_a_shape_is_a_miss_never_a_win(tmp_path, capsys):
    # Liger is timed at one shape and skipped at the other: that shape is not a win
    records = [_rec("capstone.fused", FUSED, 16, 4096, 5.0), _rec("torch.compile_add", FUSED, 16, 4096, 10.0),
               _rec("liger.rms_norm_add", FUSED, 16, 4096, 9.0),
               _rec("capstone.fused", FUSED, 32, 4096, 5.0), _rec("torch.compile_add", FUSED, 32, 4096, 10.0),
               _rec("liger.rms_norm_add", FUSED, 32, 4096, None, status="skipped: time")]
    out, rows = _rows(capsys, _folder(tmp_path, records), "--misses")
    assert ("fused", "32x4096", "bf16") in rows and ("fused", "16x4096", "bf16") not in rows
    assert "missing liger.rms_norm_add" in rows[("fused", "32x4096", "bf16")]
    count = _line(out, "fused: ")
    assert "1 missing a peer" in count
    assert "1 faster, 0 ties, 0 slower among those with every peer timed" in count  # not 2


def test_a_timing_begun_while_the_memory_system_was_busy_is_a_miss(tmp_path, capsys):
    # ours at 16 rows and the fastest peer at 32 rows were timed by a process whose quiet probe
    # never came within its tolerance; a slower peer found busy is not the comparison
    ours16 = dict(_rec("capstone.fused", FUSED, 16, 4096, 5.0), quiet=False)
    peer32 = dict(_rec("torch.compile_add", FUSED, 32, 4096, 10.0), quiet=False)
    slow64 = dict(_rec("liger.rms_norm_add", FUSED, 64, 4096, 20.0), quiet=False)
    records = [ours16, _rec("torch.compile_add", FUSED, 16, 4096, 10.0),
               dict(_rec("capstone.fused", FUSED, 32, 4096, 5.0), quiet=True), peer32,
               _rec("capstone.fused", FUSED, 64, 4096, 5.0), _rec("torch.compile_add", FUSED, 64, 4096, 10.0),
               slow64]
    out, rows = _rows(capsys, _folder(tmp_path, records))
    assert "timed while the memory system was busy: capstone" in rows[("fused", "16x4096", "bf16")]
    assert "busy: torch.compile" in rows[("fused", "32x4096", "bf16")]
    assert "busy" not in rows[("fused", "64x4096", "bf16")]


def test_a_large_call_below_90_percent_of_the_floor_misses_and_in_place_shows_its_cost(tmp_path, capsys):
    # 1024 x 65536 bf16 residual: 537 MB; out of place at 95% of the floor, in place at 85%
    floor = 100.0
    records = [_rec("capstone.fused_residual", RESIDUAL, 1024, 65536, floor / 0.95, floor_us=floor),
               _rec("capstone.fused_residual_in_place", RESIDUAL, 1024, 65536, floor / 0.85, floor_us=floor),
               _rec("torch.compile_residual", RESIDUAL, 1024, 65536, 150.0, floor_us=floor)]
    out, rows = _rows(capsys, _folder(tmp_path, records))
    assert "floor" not in rows[("residual", "1024x65536", "bf16")].split("  ")[-1]
    in_place = rows[("in", "place", "1024x65536")]
    assert "below 90% of the floor" in in_place and "85.0%" in in_place
    assert in_place.endswith("slower than out of place")
    assert f"{0.95 / 0.85:.3f}" in in_place
    assert "floor at the copy each process measured (no chapter 2 here)" in out[0]


def test_every_shape_of_goal_1s_grid_not_timed_is_a_miss_per_variant_and_dtype(tmp_path, capsys):
    # the fused op timed at one shape of the grid and one outside it: 35 bf16 shapes, and every
    # fp16 and fp32 shape, are not timed for it; the residual op's variants time none
    records = [_rec("capstone.fused", FUSED, 1024, 4096, 5.0), _rec("torch.compile_add", FUSED, 1024, 4096, 10.0),
               _rec("capstone.fused", FUSED, 32, 4096, 5.0), _rec("torch.compile_add", FUSED, 32, 4096, 10.0)]
    out, _ = _rows(capsys, _folder(tmp_path, records))
    assert _line(out, "fused bf16: ") == ("fused bf16: 1 of 36 shapes of goal 1's grid timed; timed: "
                                         "1024x4096; the other 35 not timed  miss")
    assert _line(out, "fused fp32: ").startswith("fused fp32: 0 of 36 shapes of goal 1's grid timed; "
                                                 "timed: none; the other 36")
    assert _line(out, "in place fp16: ").startswith("in place fp16: 0 of 36 shapes")
    # where most are timed, the line names the shapes not timed
    more = records + [_rec(impl, FUSED, n, c, us) for n in (1, 16, 128, 1024, 4096, 16384)
                      for c in (2048, 4096, 8192, 16384, 32768, 65536) if (n, c) != (1, 2048)
                      for impl, us in (("capstone.fused", 5.0), ("torch.compile_add", 10.0))]
    out_more, _ = _rows(capsys, _folder(tmp_path / "more", more))
    assert _line(out_more, "fused bf16: ") == ("fused bf16: 35 of 36 shapes of goal 1's grid timed; "
                                              "not timed: 1x2048  miss")
    # 35 + 36 + 36 for the fused op, 108 for each residual variant; the rows themselves pass
    assert out[-1] == f"{35 + 72 + 216 + 1} of {2 + 323 + 2 + 2} rows miss a bar"


def test_the_fp16_and_fp32_grid_file_counts_with_the_peers_of_the_same_recording(tmp_path, capsys):
    # capstone_peers_grid.json (chapter 7's fp16 and fp32 grid, timed by another call into the
    # folder): its shapes are scored like the peers' and leave goal 1's untimed list
    records = [_rec("capstone.fused", FUSED, 1024, 4096, 5.0), _rec("torch.compile_add", FUSED, 1024, 4096, 10.0)]
    folder = _folder(tmp_path, records)
    grid = [{**_rec(impl, FUSED, n, c, us), "dtype": "fp32"}
            for n in (1, 16, 128, 1024, 4096, 16384) for c in (2048, 4096, 8192, 16384, 32768, 65536)
            for impl, us in (("capstone.fused", 5.0), ("torch.compile_add", 10.0 if n > 1 else 4.0))]
    doc = {"provenance": {"gpu": "NVIDIA H100 80GB HBM3", "commit": "c0ffee" * 7, "run_id": "run2"},
           "records": grid}
    (folder / "capstone_peers_grid.json").write_text(json.dumps(doc))
    out, rows = _rows(capsys, folder, "--misses")  # another run's grid: left out, said so
    assert "capstone_peers (capstone_peers_grid.json, from another run, left out)" in out[0]
    assert _line(out, "fused fp32: ").startswith("fused fp32: 0 of 36 shapes")
    doc["provenance"]["run_id"] = "run1"
    (folder / "capstone_peers_grid.json").write_text(json.dumps(doc))
    out, rows = _rows(capsys, folder, "--misses")
    assert "capstone_peers and capstone_peers_grid" in out[0]
    assert not any(line.startswith("fused fp32: ") for line in out)  # all 36 timed
    assert _line(out, "fused fp16: ").startswith("fused fp16: 0 of 36 shapes")
    slower = [k for k in rows if k[0] == "fused" and "slower than a peer" in rows[k]]
    assert sorted(slower) == sorted(("fused", f"1x{c}", "fp32") for c in (2048, 4096, 8192, 16384, 32768, 65536))
    (folder / "capstone_peers.json").rename(folder / "peers.json")  # the grid alone, timed ahead
    out, rows = _rows(capsys, folder, "--misses")
    assert "capstone_peers_grid, floor" in out[0] and not any(line.startswith("fused fp32: ") for line in out)
    assert _line(out, "fused bf16: ").startswith("fused bf16: 0 of 36 shapes")
    (folder / "peers.json").rename(folder / "capstone_peers.json")
    (folder / "capstone_peers_grid.json").unlink()
    out, _ = _rows(capsys, folder, "--misses")
    assert _line(out, "fused fp32: ").startswith("fused fp32: 0 of 36 shapes")


def test_in_place_slower_than_out_of_place_beyond_the_band_misses_goal_2_in_a_graph(tmp_path, capsys):
    # 1024x4096: in place 2% longer than out of place (the band here is about 0.2%); 4096x4096: 0.1%
    records = []
    for rows, in_place_us in ((1024, 10.2), (4096, 40.04)):
        out_us = 10.0 if rows == 1024 else 40.0
        records += [_rec("capstone.fused_residual", RESIDUAL, rows, 4096, out_us),
                    _rec("capstone.fused_residual_in_place", RESIDUAL, rows, 4096, in_place_us),
                    _rec("liger.fused_add_rms_norm", RESIDUAL, rows, 4096, 2 * out_us)]
    out, rows = _rows(capsys, _folder(tmp_path, records))
    slower = rows[("in", "place", "1024x4096")]
    assert "1.020" in slower and slower.endswith("slower than out of place")
    assert "out of place" not in rows[("in", "place", "4096x4096")].split("  ")[-1]
    assert "1 slower than out of place beyond the band" in _line(out, "in place: ")
    assert "out of place" not in rows[("residual", "1024x4096", "bf16")].split("  ")[-1]


def test_python_calls_miss_when_slower_than_f_rms_norm_or_in_place_costs_in_every_process(tmp_path, capsys):
    records = [_rec("capstone.fused", FUSED, 16, 4096, 5.0), _rec("torch.compile_add", FUSED, 16, 4096, 10.0)]
    out, _ = _rows(capsys, _folder(tmp_path, records))
    assert not any(line.endswith("miss") for line in out if line.startswith("Python call"))
    assert "(0.44x)" in _line(out, "Python call 1x4096 bf16: capstone.fused")
    slow = [_call("capstone.fused", FUSED, 30.0), _call("torch.rms_norm_add", FUSED, 27.0),
            _call("capstone.fused_residual", RESIDUAL, 21.0, 20.8, 21.3),
            _call("capstone.fused_residual_in_place", RESIDUAL, 22.0, 21.5, 22.4)]
    out, _ = _rows(capsys, _folder(tmp_path / "slow", records, slow))
    assert _line(out, "Python call 1x4096 bf16: capstone.fused").endswith("miss")
    assert _line(out, "Python call 1x4096 bf16: in place").endswith("miss")
    # the two calls; goal 5: no grid here, a call slower than the baseline; goal 1's grid but 16x4096
    assert out[-1].startswith("327 of ")
    out, _ = _rows(capsys, _folder(tmp_path / "none", records, []))
    assert "Python calls: not timed in this recording  miss" in out


def test_the_committed_recording_prints_every_variant(capsys):
    assert scoreboard.main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("NVIDIA H200, commit ")
    for variant in ("fused", "residual", "in place", "rmsnorm", "add_rmsnorm"):
        assert f"\n{variant}: " in out
    assert "\nfp8.fused Python call: " in out and "\nfp8.fused codes: " in out


def test_a_folder_without_peers_or_a_path_that_is_no_folder_says_so(tmp_path, capsys):
    assert scoreboard.main([str(tmp_path)]) == 1
    assert "no capstone_peers.json, capstone_peers_grid.json or bench_grid.json in" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        scoreboard.main([str(tmp_path / "nothing")])
    assert e.value.code == 2
    assert "folder: " in capsys.readouterr().err


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"records": 3}'])
def test_a_peers_file_that_is_not_a_recording_is_named_without_a_traceback(tmp_path, capsys, text):
    (tmp_path / "capstone_peers.json").write_text(text)
    assert scoreboard.main([str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "capstone_peers.json" in out and ("could not be read" in out or "no harness records" in out)


def _recorded(tmp_path, name, floor=True):
    """A folder holding a copy of the committed ``name``.json (and chapter 2's copy, ``floor``)."""
    folder = tmp_path / "rec"
    folder.mkdir(exist_ok=True)
    for n in (name, "traffic_bandwidth") if floor else (name,):
        shutil.copy(DATA / f"{n}.json", folder)
    return folder, json.loads((folder / f"{name}.json").read_text())


def _backward_rows(out):
    return {tuple(line.split()[:3]): line for line in out if line.split()[:1] in (["rmsnorm"], ["add_rmsnorm"])}


def test_the_backward_misses_a_slower_step_a_missing_peer_an_untimed_grid_shape_and_a_low_floor(tmp_path, capsys):
    folder, doc = _recorded(tmp_path, "ch09_backward")
    wide = {(r, c, d) for r, c, d in scoreboard.ch09.WIDE_SHAPES}
    recs = [r for r in doc["records"] if (r.get("rows"), r.get("cols"), r.get("dtype")) not in wide]

    def at(kind, impl, rows, cols, op="rmsnorm"):
        return next(r for r in recs if (r.get("kind"), r.get("impl"), r.get("op"), r.get("rows"), r.get("cols"),
                                        r.get("dtype")) == (kind, impl, op, rows, cols, "bf16"))
    slow = at("train", "triton.two_stage", 1024, 2048)
    slow["us"] = 10 * at("train", "torch.compile", 1024, 2048)["us"]
    slow["process_us"] = [slow["us"]] * 3
    recs.remove(at("backward", "liger", 16384, 2048))
    at("backward", "torch.compile", 4096, 2048)["check_ok"] = False  # timed, gradient wrong: not compared
    recs.remove(at("backward", "two_stage", 1024, 4096))
    low = at("backward", "two_stage", 16384, 8192)  # 814 MB, 93% of the floor as recorded
    low["us"] *= 2
    low["process_us"] = [low["us"]] * 3
    (folder / "ch09_backward.json").write_text(json.dumps({**doc, "records": recs}))
    assert scoreboard.main([str(folder), "--misses"]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = _backward_rows(out)
    assert "train slower than F.rms_norm" in rows[("rmsnorm", "1024x2048", "bf16")]  # its fastest peer
    assert "backward: missing liger" in rows[("rmsnorm", "16384x2048", "bf16")]
    assert "backward: missing torch.compile" in rows[("rmsnorm", "4096x2048", "bf16")]
    assert "backward not timed" in rows[("rmsnorm", "1024x4096", "bf16")]
    assert "backward not timed" in rows[("rmsnorm", "4096x16384", "bf16")]  # the wide grid
    assert "below 80% of the floor" in rows[("rmsnorm", "16384x8192", "bf16")]
    assert ("add_rmsnorm", "16384x8192", "bf16") not in rows  # untouched, 97% of its floor
    assert "Goals 1 and 2: no capstone_peers.json" in out[0] and "Goal 3: no fp8_quant.json in this recording" in out


def test_fp8_misses_a_low_floor_a_differing_code_and_a_slow_python_call(tmp_path, capsys):
    folder, doc = _recorded(tmp_path, "fp8_quant")
    assert scoreboard.main([str(folder), "--misses"]) == 0
    before = capsys.readouterr().out
    assert "codes differ" not in before and "fp8.fused Python call" not in before  # both within the goal
    for r in doc["records"]:
        if r.get("kind") == "python_call":
            r["call_ratio"] = 1.6
        if r.get("kind") == "exactness" and r is next(x for x in doc["records"] if x.get("kind") == "exactness"):
            r["fused_differing_codes"] = 5
        if r.get("kind") == "timing" and r["rows"] == 16384:  # 356 MB, 86% of its floor as recorded
            r["fused_graph_us"] *= 2
            r["fused_graph_process_us"] = [r["fused_graph_us"]] * 3
    (folder / "fp8_quant.json").write_text(json.dumps(doc))
    assert scoreboard.main([str(folder), "--misses"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "below 80% of the floor" in _line(out, "fp8.fused 16384x7168")
    assert _line(out, "fp8.fused codes: ").endswith("miss") and "5 of" in _line(out, "fp8.fused codes: ")
    assert "1.60x" in _line(out, "fp8.fused Python call: ") and "above 1.5x" in _line(out, "fp8.fused Python call: ")


def test_without_chapter_2_a_large_fp8_call_has_no_floor_and_misses(tmp_path, capsys):
    folder, _ = _recorded(tmp_path, "fp8_quant", floor=False)
    assert scoreboard.main([str(folder)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "no floor measured" in _line(out, "fp8.fused 32768x7168")
    assert "no floor measured" not in _line(out, "fp8.fused 2x7168")  # 0.06 MB: no bar


def _goal5(tmp_path, capsys, *flags):
    out, _ = _rows(capsys, tmp_path, *flags)
    return out[out.index(next(line for line in out if line.startswith("Goal 5, against"))):]


def test_goal_5_compares_triton_row_the_hip_ladder_and_the_python_call_with_a_baseline(tmp_path, capsys):
    for name in ("bench_grid", "capstone_peers", "traffic_bandwidth"):
        shutil.copy(DATA / f"{name}.json", tmp_path)
    lines = _goal5(tmp_path, capsys)
    assert "eceb0b6d27" in lines[0] or "commit" in lines[0]
    assert not any(line.endswith("miss") for line in lines[1:-1])  # the same file: no regression
    grid = json.loads((tmp_path / "bench_grid.json").read_text())
    row = [r for r in grid["records"] if r.get("impl") == "triton.row"]
    row[0]["median_us"] *= 1.2
    grid["records"].remove(next(r for r in grid["records"] if r.get("impl") == "hip.block"))
    (tmp_path / "bench_grid.json").write_text(json.dumps(grid))
    peers = json.loads((tmp_path / "capstone_peers.json").read_text())
    call = next(r for r in peers["records"] if r.get("sweep") == "python" and r["impl"] == "capstone.fused")
    call["min_median_us"], call["max_median_us"] = 2 * call["max_median_us"], 3 * call["max_median_us"]
    (tmp_path / "capstone_peers.json").write_text(json.dumps(peers))
    lines = _goal5(tmp_path, capsys, "--misses")
    assert "1.200x" in _line(lines, "triton.row: 12 of 12") and _line(lines, "triton.row").endswith("miss")
    assert _line(lines, "hip.block: 11 of 12 shapes timed").endswith("miss")
    assert not any(line.startswith("hip.serial") for line in lines)  # unchanged: not printed with --misses
    assert _line(lines, "Python call of capstone.fused").endswith("miss")


def test_goal_5_refuses_a_baseline_of_another_gpu_and_needs_a_folder(tmp_path, capsys):
    shutil.copy(DATA / "bench_grid.json", tmp_path)
    base = tmp_path / "base"
    base.mkdir()
    grid = json.loads((DATA / "bench_grid.json").read_text())
    grid["provenance"]["gpu"] = "NVIDIA H100 80GB HBM3"
    (base / "bench_grid.json").write_text(json.dumps(grid))
    lines = _goal5(tmp_path, capsys, "--baseline", str(base))
    assert "another GPU" in lines[1] and lines[1].endswith("miss")
    assert scoreboard.main([]) == 0
    assert "Goal 5: pass a recording's folder" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        scoreboard.main([str(tmp_path), "--baseline", str(tmp_path / "nothing")])


def test_a_broken_manifest_beside_the_file_is_named_without_a_traceback(tmp_path, capsys):
    shutil.copy(DATA / "fp8_quant.json", tmp_path)
    (tmp_path / "MANIFEST.json").write_text("{not json")
    assert scoreboard.main([str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "MANIFEST.json is not valid JSON" in out and "could not be read" in out
