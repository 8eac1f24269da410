"""Chapter 7's tuner: the choice rule (minimax regret), the candidates it keeps, a table written end
to end on the CPU with a stand-in timer, and the check of a table's two-pass entries."""
import json

import pytest
import torch

from fusedrms import env, tuning
from fusedrms.book import ch07_tuning as T
from fusedrms.kernels import add_rmsnorm as A


def cfg(rpp, warps, stages=1, pps=None):
    return A.LaunchConfig(rpp, warps, stages, pps)


def test_top_ranks_by_the_worst_ratio():
    balanced, fast_big = cfg(2, 8), cfg(1, 16)
    _, regret = T.select_winner({fast_big: {256: 10.0, 16384: 100.0},
                                 balanced: {256: 4.0, 16384: 104.0},
                                 cfg(4, 8): {256: 5.0, 16384: 120.0}})
    assert T.top(regret, 2) == [balanced, cfg(4, 8)]


def test_baseline_is_one_row_per_program():
    assert T.baseline_config(4096) == cfg(1, 16)
    assert T.baseline_config(2048) == cfg(1, 8)
    assert T.baseline_config(16384) == cfg(1, 16)


@pytest.mark.gpu
def test_gpu_tune_one_key_small(tmp_path):
    import time

    trials = []
    result = T.tune_key(2048, torch.bfloat16, (64, 512), time.time() + 60, trials,
                        candidates=[cfg(1, 4), cfg(2, 8)])
    assert result is not None and result["configs_timed"] >= 2
    assert all(t["error"] is None for t in trials)


def test_tune_end_to_end_writes_a_table_the_wrapper_reads(cpu_as_gpu, tmp_path, monkeypatch):
    import time

    monkeypatch.setattr(T, "SEARCH_DTYPES", (torch.bfloat16,))
    no_table = tmp_path / "no_previous_table.json"
    path = T.tune_table(tmp_path, budget_s=120, cols_list=(64,), rows_list=(2, 5), previous_path=no_table)
    table = tuning.load("capstone", path)
    assert set(table["configs"]) == {(64, "bfloat16"), (64, "float16")}
    trials = json.loads((tmp_path / "capstone_tuning_trials.json").read_text())["records"]
    assert trials and all(t["error"] is None for t in trials)
    doc = json.loads(path.read_text())
    assert doc["provenance"]["rows"] == [2, 5] and "worst ratio" in doc["provenance"]["objective"]
    # an exhausted budget leaves a valid (empty) table rather than a crash
    empty = T.tune_table(tmp_path / "none", budget_s=0, cols_list=(64,), rows_list=(2,),
                   previous_path=no_table)
    assert tuning.load("capstone", empty)["configs"] == {}


def _previous_table(tmp_path, records):
    path = tmp_path / "previous.json"
    path.write_text(json.dumps({"provenance": {"gpu": env.current().gpu_name}, "records": records}))
    return path


def test_tune_times_the_previous_winner_and_keeps_unreached_keys(cpu_as_gpu, tmp_path, monkeypatch):
    monkeypatch.setattr(T, "SEARCH_DTYPES", (torch.bfloat16,))
    old = {"rows_per_program": 1, "num_warps": 2, "num_stages": 1, "programs_per_sm": 3,
           "chunk": 16}
    previous = _previous_table(tmp_path, [{"cols": 64, "dtype": "bfloat16", **old},
                                          {"cols": 128, "dtype": "float32", **old}])
    path = T.tune_table(tmp_path, budget_s=120, cols_list=(64,), rows_list=(2,), previous_path=previous)
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
    assert T._best_per_design(regret) == whole[:2] + chunked[:1]
    assert T._best_per_design(regret, 1, 2) == whole[:1] + chunked[:2]


def test_check_table_passes_two_pass_entries_and_catches_a_wrong_kernel(cpu_as_gpu, tmp_path,
                                                                      monkeypatch):
    entry = {"cols": 64, "dtype": "bfloat16", "rows_per_program": 1, "num_warps": 1,
             "num_stages": 1, "programs_per_sm": 2, "chunk": 16}
    table = _previous_table(tmp_path, [entry, {**entry, "dtype": "float32", "chunk": None}])
    monkeypatch.setattr(T, "CHECK_SHAPES", ((1, 0, False), (3, 3, True)))
    assert T.check_table(tmp_path, budget_s=60, table_path=table)
    monkeypatch.setattr(A, "add_rmsnorm", lambda x, r, w, eps, config: torch.zeros_like(x))
    assert not T.check_table(tmp_path, budget_s=60, table_path=table)

