"""The capstone tuner's choice rule and the profiler summary (pure functions, CPU), plus a GPU smoke test."""
import pytest
import torch

from fusedrms import add_rmsnorm as A
from fusedrms import capstone_gpu as G
from fusedrms import env


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
