"""Chapter 7's readers of recorded files, tested on temporary files shaped like the harness's."""
import json

import pytest

from fusedrms.book import ch07_results as R


def write(tmp_path, name, records, provenance=None):
    d = tmp_path / "h200"
    d.mkdir(exist_ok=True)
    prov = provenance or {"gpu": "NVIDIA H200", "driver": "1", "cuda": "13.0", "torch": "2.11",
                          "triton": "3.6.0", "python": "3.12.3", "date": "2026-11-29T20:30:00",
                          "commit": "abcdef1234567"}
    (d / f"{name}.json").write_text(json.dumps({"provenance": prov, "records": records}))


def rec(impl, rows, cols, dtype, us, pct=None, **kw):
    return {"impl": impl, "op": "add_rmsnorm", "rows": rows, "cols": cols, "dtype": dtype,
            "median_us": us, "pct_floor": pct, **kw}


GRID = [
    rec("capstone.fused", 16384, 8192, "bfloat16", 190.0, 97.0),
    rec("torch.rms_norm_add", 16384, 8192, "bfloat16", 390.0, 47.0),
    rec("torch.eager_chain", 16384, 8192, "bf16", 715.0, 26.0),
    rec("capstone.fused", 4096, 2048, "torch.bfloat16", 16.0, 75.0),
    {"impl": "torch.compile_add", "op": "add_rmsnorm", "rows": 4096, "cols": 2048,
     "dtype": "bf16", "median_us": 15.0, "pct_of_floor": 80.0, "mode": "cold", "status": "ok"},
    rec("capstone.fused", 256, 4096, "bfloat16", 3.0, None, floor_us=1.5, mode="graph"),
    rec("capstone.fused", 4096, 2048, "bf16", 9.0, 130.0, mode="warm"),  # L2-warm: not a target
    rec("torch.rms_norm_add", 4096, 2048, "bf16", 1.0, 99.0, status="error: boom"),
    {"impl": "capstone.fused", "rows": "x"},  # malformed
    rec("capstone.fused", 8, 8, "int8", 1.0),  # unknown dtype
    rec("capstone.fused", 8, 8, "bf16", float("nan")),  # NaN time
]


def test_load_missing_and_present(tmp_path, capsys):
    assert R.load("bench_grid", data_dir=tmp_path) is None
    assert "no recorded bench_grid.json" in capsys.readouterr().out
    write(tmp_path, "bench_grid", GRID)
    doc = R.load("bench_grid", data_dir=tmp_path)
    assert "NVIDIA H200" in R.provenance_line(doc) and "abcdef1234" in R.provenance_line(doc)


def test_grid_points_skip_malformed_and_normalize(tmp_path):
    write(tmp_path, "bench_grid", GRID)
    pts = R.grid_points(R.load("bench_grid", data_dir=tmp_path))
    assert len(pts) == 7
    assert {p.mode for p in pts} == {"cold", "warm", "graph"}
    assert {p.dtype for p in pts} == {"bf16"}
    graph = [p for p in pts if p.graph]
    assert len(graph) == 1 and graph[0].pct_floor == pytest.approx(50.0)


def test_census_and_tuning_readers():
    extra = {"records": [
        {"kind": "kernel_census", "impl": "torch.eager_chain", "rows": 4096, "cols": 4096,
         "dtype": "bfloat16", "launches_per_call": 5,
         "kernels": [{"name": "vectorized_elementwise_kernel<add>" + "x" * 100,
                      "count_per_call": 2, "device_us_per_call": 30.0}]},
        {"kind": "kernel_census", "impl": "torch.rms_norm_add", "error": "no such impl"},
        {"kind": "seed_as_printed", "error": "Conflicting meta-parameters: BLOCK."}]}
    lines = R.census_lines(extra)
    assert "5 kernels per call" in lines[0] and lines[1].strip().startswith("2 x")
    assert lines[1].rstrip().endswith("30.0 us") and "..." in lines[1]
    assert "not recorded" in lines[2]
    assert R.extra_records(extra, "seed_as_printed")[0]["error"].startswith("Conflicting")
    tuning = {"records": [{"cols": 2048, "dtype": "bfloat16", "label": "rows/prog 4",
                           "times_us": {"256": 3.0, "4096": 15.0},
                           "baseline_times_us": {"256": 6.0}}, {"cols": "bad"}]}
    rows = R.tuning_rows(tuning)
    assert len(rows) == 1 and rows[0]["times_us"] == {256: 3.0, 4096: 15.0}
    assert rows[0]["baseline_times_us"] == {256: 6.0} and rows[0]["heuristic_times_us"] == {}


def test_grid_points_ignore_sweeps_that_retime_grid_shapes():
    from fusedrms.book import ch07_results as cr

    rec = dict(impl="capstone.fused", op="add_rmsnorm", rows=4096, cols=4096, dtype="bf16",
               mode="cold", status="ok", median_us=30.0, pct_of_floor=80.0)
    doc = {"records": [dict(rec, sweep="grid"), dict(rec, sweep="l2", median_us=99.0),
                       dict(rec, sweep="extra_ops", median_us=98.0)]}
    points = cr.grid_points(doc)
    assert [p.median_us for p in points] == [30.0]




def test_tie_counts_decide_only_outside_the_recorded_band():
    from fusedrms.book import ch07_results as R

    rows = [{"capstone_us": 9.0, "peer_us": 10.0}, {"capstone_us": 10.2, "peer_us": 10.0},
            {"capstone_us": 11.0, "peer_us": 10.0}, {"capstone_us": 1.0, "peer_us": 9.0,
                                                     "missing": ["torch.compile_add"]}]
    counts = R.tie_counts(rows, 0.05)  # the shape with a peer missing is never counted
    assert (counts["faster"], counts["tie"], counts["slower"], counts["shapes"]) == (1, 1, 1, 3)
    assert R.tie_counts(rows, None) is None


def test_peers_doc_adds_the_fp16_and_fp32_grid_of_the_same_run_only(tmp_path, monkeypatch):
    # chapter 7's grid (capstone_peers_grid) counts with its peers when one recording's run timed
    # both; a grid of another run (another GPU, commit or floor, say) or none leaves the peers alone
    from fusedrms import records

    monkeypatch.setattr(records, "DATA_DIR", tmp_path)
    peers = [rec("capstone.fused", 1024, 8192, "bf16", 20.0, sweep="peers", mode="rotating"),
             rec("torch.compile_add", 1024, 8192, "bf16", 22.0, sweep="peers", mode="rotating")]
    grid = [rec("capstone.fused", 16, 2048, "fp32", 3.0, sweep="peers", mode="rotating"),
            rec("torch.compile_add", 16, 2048, "fp32", 2.5, sweep="peers", mode="rotating")]

    def shapes(run_id):
        write(tmp_path, "capstone_peers", peers, {"gpu": "NVIDIA H200", "run_id": "r1"})
        write(tmp_path, R.PEERS_GRID, grid, {"gpu": "NVIDIA H200", "run_id": run_id})
        doc, name = R.peers_doc(machine="h200")
        assert name == "capstone_peers"
        return sorted((r["rows"], r["cols"], r["dtype"]) for r in R.peer_table(doc, "add_rmsnorm"))

    assert shapes("r1") == [(16, 2048, "fp32"), (1024, 8192, "bf16")]
    assert shapes("r2") == [(1024, 8192, "bf16")]
    (tmp_path / "h200" / f"{R.PEERS_GRID}.json").unlink()
    assert [(r["rows"], r["dtype"]) for r in R.peer_table(R.peers_doc("h200")[0], "add_rmsnorm")] == [
        (1024, "bf16")]
    merged, done = R.with_grid({"provenance": {}, "records": peers}, {"provenance": {}, "records": grid})
    assert not done and merged["records"] == peers  # no run named: nothing says they belong together
