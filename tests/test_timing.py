"""fusedrms.timing: device-event timing, L2 control, graph replay, copy bandwidth, summaries."""
import statistics

import pytest
import torch

from fusedrms import env, timing

ENV = env.current()


def test_summarize_median_and_percentiles():
    s = timing.summarize([float(v) for v in range(1, 12)])  # 1..11
    assert s["median_us"] == 6.0 and s["p10_us"] == 2.0 and s["p90_us"] == 10.0
    assert s["min_us"] == 1.0 and s["max_us"] == 11.0 and s["n"] == 11
    s = timing.summarize([5.0, 1.0, 100.0])  # one outlier moves the mean, not the median
    assert s["median_us"] == 5.0 and s["mean_us"] > 30
    with pytest.raises(ValueError, match="no samples"):
        timing.summarize([])


def test_bad_arguments_are_explained():
    with pytest.raises(ValueError, match="l2 must be 'cold' or 'warm'"):
        timing._check_args("hot", 1, 1)
    with pytest.raises(ValueError, match="reps >= 1"):
        timing._check_args("cold", 1, 0)


@pytest.mark.skipif(ENV.on_gpu, reason="checks the no-GPU message")
def test_without_gpu_a_clear_error():
    with pytest.raises(RuntimeError, match="needs a CUDA or ROCm GPU"):
        timing.time_gpu(lambda: None)
    with pytest.raises(RuntimeError, match="needs a CUDA or ROCm GPU"):
        timing.copy_bandwidth_GBps()


@pytest.mark.gpu
def test_events_time_a_known_sleep():
    cycles = 2_000_000  # about a millisecond at ~2 GHz
    samples = timing.time_gpu(lambda: torch.cuda._sleep(cycles), warmup=2, reps=10, l2="warm")
    assert len(samples) == 10
    assert 100 < statistics.median(samples) < 20_000


@pytest.mark.gpu
def test_cold_l2_is_slower_than_warm_for_data_that_fits():
    x = torch.randn(2048, 4096, device="cuda", dtype=torch.bfloat16)  # 16 MB in, 16 MB out
    y = torch.empty_like(x)
    fn = lambda: torch.mul(x, 2.0, out=y)  # noqa: E731
    # graph replay on both sides, so launch overhead does not blur the cache effect
    warm = statistics.median(timing.time_gpu(fn, reps=50, l2="warm", graph=True))
    cold = statistics.median(timing.time_gpu(fn, reps=50, l2="cold", graph=True))
    assert cold > warm
    assert timing.flush_bytes() >= 2 * (timing.l2_bytes() or 0)
    assert "flush" in timing.l2_method("cold")


@pytest.mark.gpu
def test_graph_replay_removes_launch_overhead():
    x = torch.randn(1, 4096, device="cuda")
    fn = lambda: x.mul(2).add(1).relu()  # noqa: E731 - three tiny kernels
    launched = statistics.median(timing.time_gpu(fn, reps=50, l2="warm"))
    graphed = statistics.median(timing.time_gpu(fn, reps=50, l2="warm", graph=True))
    assert graphed < launched
    assert len(timing.time_gpu(fn, reps=7, l2="cold", graph=True)) == 7


@pytest.mark.gpu
def test_copy_bandwidth_is_plausible():
    bw = timing.copy_bandwidth_GBps(256 << 20)
    assert 100 < bw < 20_000
