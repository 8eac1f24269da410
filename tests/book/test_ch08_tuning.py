"""Chapter 8's tuner (fusedrms.book.ch08_tuning): every candidate checked bit for bit, one record
per candidate and width, each width's winner by the worst ratio to the best, and the table the
wrapper reads (only on its GPU, only for its widths)."""
import dataclasses
import json

import torch

from fusedrms import env, tuning
from fusedrms.book import ch08_tuning as tune
from fusedrms.kernels import rmsnorm_fp8 as q

ENV = env.current()


def load(path):
    return tuning.load("fp8", path)


def test_block_reciprocal_matches_the_baseline_at_the_corners():
    """Signed zeros, zero and tiny blocks (the 2^64 lift), infinite scales, subnormal x."""
    rec = tune.candidate_exactness(q.FusedConfig(8, None, "block_reciprocal"), shapes=((3, 129),),
                                seeds=(0,))
    assert rec["bit_exact"] and rec["differing_codes"] == 0, rec["failures"]
    assert rec["exact_checks"] == 1 + len(tune.edge_inputs())


def test_tuning_table_takes_only_bit_exact_rows_and_only_on_its_gpu(tmp_path, monkeypatch):
    recs = [
        {"kind": "candidate", "num_warps": 16, "maxnreg": 64, "division": "per_element",
         "cols": 7168, "bit_exact": True, "fused_graph_us_16384": 227.0, "fused_graph_us_32768": 446.0},
        {"kind": "candidate", "num_warps": 4, "maxnreg": None, "division": "block_reciprocal",
         "cols": 7168, "bit_exact": False, "fused_graph_us_16384": 90.0, "fused_graph_us_32768": 180.0},
        {"kind": "candidate", "num_warps": 8, "maxnreg": None, "division": "block_reciprocal",
         "cols": 7168, "bit_exact": True, "fused_graph_us_16384": 150.0, "fused_graph_us_32768": 300.0},
        {"kind": "candidate", "num_warps": 2, "maxnreg": None, "division": "block_reciprocal",
         "cols": 7168, "bit_exact": True, "error": "RuntimeError: x"}]
    rows2 = {**recs[2], "rows_per_program": 2, "fused_graph_us_16384": 149.0}
    assert tune.write_tuning_table(tmp_path / "r.json", recs + [rows2], log=lambda *a: None) == \
        {(7168, "exact"): q.FusedConfig(8, None, "block_reciprocal", 2)}
    assert load(tmp_path / "r.json")["configs"][(7168, "exact")].rows_per_program == 2
    best = tune.best_candidate(recs)
    assert (best["num_warps"], best["division"]) == (8, "block_reciprocal")
    assert tune.best_candidate(recs[1:2]) is None
    assert tune.best_candidate(recs, contract="served") is None  # nothing timed under it
    partial = {**recs[2], "num_warps": 2, "fused_graph_us_16384": 10.0}
    del partial["fused_graph_us_32768"]  # timed at one shape only: cannot win
    assert tune.best_candidate(recs + [partial])["num_warps"] == 8
    # the served contract has its own winner, from its own times and its own exactness
    served = {"served_bit_exact": True, "served_graph_us_16384": 100.0,
              "served_graph_us_32768": 200.0}
    recs[0].update(served)
    recs[2].update(served, served_graph_us_16384=120.0)
    recs[1].update(served, served_bit_exact=False, served_graph_us_16384=50.0)
    path = tmp_path / "fp8_tuning.json"
    winners = tune.write_tuning_table(path, recs, log=lambda *a: None)
    cfg, served_cfg = q.FusedConfig(8, None, "block_reciprocal"), q.FusedConfig(16, 64, "per_element")
    assert winners == {(7168, "exact"): cfg, (7168, "served"): served_cfg}
    table = load(path)
    assert table["configs"] == {(7168, "exact"): cfg, (7168, "served"): served_cfg}
    doc = json.loads(path.read_text())
    doc["records"].append({"cols": 4096, "num_warps": 3, "maxnreg": None, "division": "x",
                           "bit_exact": True})
    doc["records"].append({"cols": 2048, "num_warps": 4, "division": "per_element",
                           "bit_exact": False})
    doc["records"].append({"cols": 2048, "num_warps": 4, "division": "per_element",
                           "bit_exact": True, "contract": "loose"})
    doc["records"].append({"cols": 2048, "num_warps": 4, "division": "per_element",
                           "bit_exact": True, "contract": "served", "rows_per_program": 2})
    path.write_text(json.dumps(doc))
    # malformed, inexact, unknown contracts and a rows kernel under the served contract: skipped
    assert load(path)["configs"] == {(7168, "exact"): cfg, (7168, "served"): served_cfg}
    assert load(tmp_path / "missing.json")["configs"] == {}
    # used only on a GPU of the table's name, for its width; the baseline elsewhere
    h200 = dataclasses.replace(ENV, backend="cuda", device=torch.device("cuda"),
                               gpu_name="NVIDIA H200")
    monkeypatch.setitem(tuning._ACTIVE, "fp8", {**table, "gpu": "NVIDIA H200"})
    monkeypatch.setattr(env, "current", lambda: h200)
    assert q.choose_config(7168)[0] == served_cfg  # the default contract is the served one
    assert q.choose_config(7168, "served")[0] == served_cfg
    assert q.choose_config(7168, "exact")[0] == cfg
    assert q.choose_config(4096)[0] == q.baseline_config(4096)
    # a table tuned before the served contract had entries of its own: the exact entry serves both
    monkeypatch.setitem(tuning._ACTIVE, "fp8", {**table, "gpu": "NVIDIA H200",
                                                "configs": {(7168, "exact"): cfg}})
    assert q.choose_config(7168, "served") == (cfg, "tuned on NVIDIA H200 for 7168 columns, "
                                                    "the exact contract's entry")
    monkeypatch.setitem(tuning._ACTIVE, "fp8", {**table, "gpu": "NVIDIA H200"})
    monkeypatch.setattr(env, "current", lambda: dataclasses.replace(h200, gpu_name="NVIDIA A100"))
    assert q.choose_config(7168)[0] == q.baseline_config(7168)


def _cand(cols, warps, **times):
    return {"kind": "candidate", "num_warps": warps, "maxnreg": None,
            "division": "block_reciprocal", "cols": cols, "bit_exact": True,
            "served_bit_exact": True, **times}


def test_each_width_gets_its_own_winner_by_the_geometric_mean(tmp_path, monkeypatch):
    """Chapter 6's grid times fp8.fused at 4096 and 8192 columns: each width is tuned at its own
    rows, and a candidate fast at the largest call but slow at the small one does not win."""
    recs = [_cand(7168, 4, served_graph_us_4096=30.0, served_graph_us_32768=200.0),
            _cand(7168, 8, served_graph_us_4096=45.0, served_graph_us_32768=180.0),
            _cand(8192, 4, served_graph_us_4096=33.0, served_graph_us_16384=110.0),
            _cand(8192, 16, served_graph_us_4096=38.0, served_graph_us_16384=138.0),
            {**_cand(4096, 2, served_graph_us_16384=40.0), "served_bit_exact": False},
            _cand(4096, 8, served_graph_us_16384=62.0)]
    # the sum of times would pick warps 8 at 7168 (225 us against 230): the mean of the logs
    # weighs 30 against 45 us at 4096 rows as much as 200 against 180 at 32768
    assert tune.best_candidate(recs, contract="served")["num_warps"] == 4
    assert tune.best_candidate(recs, contract="served", rows=32768)["num_warps"] == 8
    assert tune.best_candidate(recs, contract="served", cols=8192)["num_warps"] == 4
    assert tune.best_candidate(recs, contract="served", cols=4096)["num_warps"] == 8
    assert tune.best_candidate(recs, contract="served", cols=2048) is None
    assert [r["cols"] for r in tune.candidate_table({"records": recs})] == [7168, 7168]
    assert len(tune.candidate_table({"records": recs}, None)) == 6
    path = tmp_path / "fp8.json"
    winners = tune.write_tuning_table(path, recs, log=lambda *a: None)
    assert {k: c.num_warps for k, c in winners.items()} == {
        (7168, "served"): 4, (8192, "served"): 4, (4096, "served"): 8}
    doc = json.loads(path.read_text())
    assert "4096/32768x7168" in doc["provenance"]["objective"]
    assert [r["served_graph_us_16384"] for r in doc["records"] if r["cols"] == 8192] == [110.0]
    table = load(path)
    h200 = dataclasses.replace(ENV, backend="cuda", device=torch.device("cuda"),
                               gpu_name="NVIDIA H200")
    monkeypatch.setitem(tuning._ACTIVE, "fp8", {**table, "gpu": "NVIDIA H200"})
    monkeypatch.setattr(env, "current", lambda: h200)
    assert q.choose_config(8192) == (winners[(8192, "served")],
                                     "tuned on NVIDIA H200 for 8192 columns")
    assert q.choose_config(2048)[0] == q.baseline_config(2048)


def test_candidates_are_recorded_per_width_and_a_split_tile_only_where_it_splits(monkeypatch):
    from fusedrms.measure import timer

    # each width is checked on a row of its own as well (it compiles its own tile)
    assert tune.check_shapes_at(1024) == tune.CANDIDATE_CHECK_SHAPES + ((64, 1024),)
    assert tune.check_shapes_at(7168) == tune.CANDIDATE_CHECK_SHAPES

    monkeypatch.setattr(tune, "check_shapes_at", lambda cols: ((3, 129),))  # the interpreter is slow
    monkeypatch.setattr(tune, "edge_inputs", lambda device=None: [])
    monkeypatch.setattr(timer, "time_gpu", lambda fn, warmup, reps, **kw: (fn(), [5.0, 4.0, 6.0])[1])
    split = q.FusedConfig(4, None, "block_reciprocal", 1, "split")
    configs = (q.FusedConfig(4, None, "block_reciprocal"), split)
    recs = tune.candidates_records(configs, {896: (2,), 1024: (3,)}, log=lambda *a: None)
    naive = [r for r in recs if r["kind"] == "naive_reference"]
    assert [(r["cols"], r["naive_graph_us_2"]) for r in naive] == [(896, 5.0), (896, 5.0)]
    cands = [(r["cols"], r["tile"]) for r in recs if r["kind"] == "candidate"]
    # 896 columns are 7 blocks (4 + 2 + 1): split; 1024 are 8 blocks: the padded tile already
    assert cands == [(896, "padded"), (896, "split"), (1024, "padded")]
    at_1024 = recs[-1]
    assert at_1024["bit_exact"] and at_1024["served_bit_exact"], at_1024
    assert {k for k in at_1024 if k.endswith("_us_3")} == {
        "fused_graph_us_3", "fused_us_3", "served_graph_us_3", "served_us_3"}
    assert not tune.applies_at(split, 1024) and tune.applies_at(split, 896)


def test_a_lean_candidate_carries_its_proof_and_a_failed_proof_makes_it_inexact(monkeypatch):
    from fusedrms.measure import timer

    monkeypatch.setattr(tune, "check_shapes_at", lambda cols: ((3, 129),))  # the interpreter is slow
    monkeypatch.setattr(tune, "edge_inputs", lambda device=None: [])
    monkeypatch.setattr(timer, "time_gpu", lambda fn, warmup, reps, **kw: (fn(), [5.0])[1])
    lean = q.FusedConfig(4, None, "block_reciprocal", lean=True)
    monkeypatch.setattr(q, "_LEAN_REPORTS", {})
    rec = tune.candidates_records((lean,), {256: (2,)}, log=lambda *a: None)[-1]
    assert rec["lean"] is True and rec["bit_exact"] and rec["served_bit_exact"]
    assert rec["lean_division_errors"]["checked"] > 0
    assert "served_graph_us_2" in rec
    monkeypatch.setattr(tune, "lean_proof", lambda: {"absmax / 448": 3, "448 / absmax": 0,
                                                      "1 / scale": 0, "checked": 10})
    rec = tune.candidates_records((lean,), {256: (2,)}, log=lambda *a: None)[-1]
    assert rec["bit_exact"] is False and rec["served_bit_exact"] is False
    assert "served_graph_us_2" not in rec  # never timed under the served contract
    assert tune.best_candidate([rec], contract="served", cols=256) is None
    path_rec = {**rec, "bit_exact": True, "fused_graph_us_2": 5.0}
    assert tune.best_candidate([path_rec], cols=256)["lean"] is True
