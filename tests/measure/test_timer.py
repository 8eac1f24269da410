"""fusedrms.measure.timer: device-event timing, L2 control, graph replay, copy bandwidth, summaries."""
import statistics

import pytest
import torch

from fusedrms import env
from fusedrms.measure import timer

ENV = env.current()


def test_summarize_median_and_percentiles():
    s = timer.summarize([float(v) for v in range(1, 12)])  # 1..11
    assert s["median_us"] == 6.0 and s["p10_us"] == 2.0 and s["p90_us"] == 10.0
    assert s["min_us"] == 1.0 and s["max_us"] == 11.0 and s["n"] == 11
    s = timer.summarize([5.0, 1.0, 100.0])  # one outlier moves the mean, not the median
    assert s["median_us"] == 5.0 and s["mean_us"] > 30
    with pytest.raises(ValueError, match="no samples"):
        timer.summarize([])


def test_bad_arguments_are_explained():
    with pytest.raises(ValueError, match="l2 must be 'cold' or 'warm'"):
        timer._check_args("hot", 1, 1)
    with pytest.raises(ValueError, match="reps >= 1"):
        timer._check_args("cold", 1, 0)


def test_hold_and_graph_calls_rules():
    timer._check_args("warm", 0, 1, hold=True, graph_calls=1)
    with pytest.raises(ValueError, match="hold=True is for l2='warm'"):
        timer._check_args("cold", 1, 1, hold=True)
    with pytest.raises(ValueError, match="a cold graph holds one call"):
        timer._check_args("cold", 1, 1, graph_calls=20)
    for bad in (0, -3, 2.5):
        with pytest.raises(ValueError, match="graph_calls must be a whole number"):
            timer._check_args("warm", 1, 1, graph_calls=bad)
    assert timer.calls_per_replay("warm", graph=False, graph_calls=7) == 1
    assert timer.calls_per_replay("cold", graph=True) == 1
    assert timer.calls_per_replay("warm", graph=True) == timer.GRAPH_CALLS
    assert timer.calls_per_replay("warm", graph=True, graph_calls=1) == 1
    assert "spins before every timed call" in timer.l2_method("warm", hold=True)
    assert timer.l2_method("warm", graph=True, hold=True, graph_calls=1).endswith(
        "1 call per graph replay")
    assert timer.l2_method("warm", graph=True, graph_calls=5).startswith("warm: 5 calls")
    with pytest.raises(ValueError, match="hold=True"):  # refused before any GPU is needed
        timer.time_gpu(lambda: None, l2="cold", hold=True)


@pytest.mark.skipif(ENV.on_gpu, reason="checks the no-GPU message")
def test_without_gpu_a_clear_error():
    with pytest.raises(RuntimeError, match="needs a CUDA or ROCm GPU"):
        timer.time_gpu(lambda: None)
    with pytest.raises(RuntimeError, match="needs a CUDA or ROCm GPU"):
        timer.copy_bandwidth_GBps()


@pytest.mark.gpu
def test_events_time_a_known_sleep():
    cycles = 2_000_000  # about a millisecond at ~2 GHz
    samples = timer.time_gpu(lambda: torch.cuda._sleep(cycles), warmup=2, reps=10, l2="warm")
    assert len(samples) == 10
    assert 100 < statistics.median(samples) < 20_000


@pytest.mark.gpu
def test_cold_l2_is_slower_than_warm_for_data_that_fits():
    x = torch.randn(2048, 4096, device="cuda", dtype=torch.bfloat16)  # 16 MB in, 16 MB out
    y = torch.empty_like(x)
    fn = lambda: torch.mul(x, 2.0, out=y)  # noqa: E731
    # graph replay on both sides, so launch overhead does not blur the cache effect
    warm = statistics.median(timer.time_gpu(fn, reps=50, l2="warm", graph=True))
    cold = statistics.median(timer.time_gpu(fn, reps=50, l2="cold", graph=True))
    assert cold > warm
    assert timer.flush_bytes() >= 2 * (timer.l2_bytes() or 0)
    assert "flush" in timer.l2_method("cold")


@pytest.mark.gpu
def test_graph_replay_removes_launch_overhead():
    x = torch.randn(1, 4096, device="cuda")
    fn = lambda: x.mul(2).add(1).relu()  # noqa: E731 - three tiny kernels
    launched = statistics.median(timer.time_gpu(fn, reps=50, l2="warm"))
    graphed = statistics.median(timer.time_gpu(fn, reps=50, l2="warm", graph=True))
    assert graphed < launched
    assert len(timer.time_gpu(fn, reps=7, l2="cold", graph=True)) == 7


@pytest.mark.gpu
def test_copy_bandwidth_is_plausible():
    bw = timer.copy_bandwidth_GBps(256 << 20)
    assert 100 < bw < 20_000


class FakeEvent:
    """Stands in for torch.cuda.Event: a shared fake clock advanced by every recorded call."""
    clock = [0.0]

    def __init__(self, enable_timing=True):
        self.t = None

    def record(self):
        self.t = FakeEvent.clock[0]

    def elapsed_time(self, other):  # milliseconds, like CUDA events
        return other.t - self.t


def fake_cuda(monkeypatch, call_ms=0.004):
    """Enough of torch.cuda for time_gpu's control flow to run on the CPU."""
    calls = {"fn": 0, "flush": 0, "replay": 0, "captured": 0}

    class FakeGraph:
        def replay(self):
            calls["replay"] += 1
            FakeEvent.clock[0] += call_ms * calls["captured_per_graph"]

    class FakeGraphCtx:
        def __init__(self, g):
            calls["capturing"] = True

        def __enter__(self):
            calls["captured_before"] = calls["fn"]

        def __exit__(self, *a):
            calls["captured_per_graph"] = calls["fn"] - calls["captured_before"]
            calls["capturing"] = False

    class FakeStream:
        def wait_stream(self, other):
            pass

    import contextlib

    monkeypatch.setattr(timer.env, "require_gpu", lambda what: None)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", FakeGraphCtx)
    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: FakeStream())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(timer, "flush_l2", lambda: calls.__setitem__("flush", calls["flush"] + 1))

    def fn():
        calls["fn"] += 1
        if not calls.get("capturing"):
            FakeEvent.clock[0] += call_ms
    return fn, calls


def test_time_gpu_control_flow_warm_and_cold(monkeypatch):
    fn, calls = fake_cuda(monkeypatch)
    samples = timer.time_gpu(fn, warmup=3, reps=7, l2="warm")
    assert len(samples) == 7 and calls["fn"] == 10 and calls["flush"] == 0
    assert all(s == pytest.approx(4.0) for s in samples)  # 0.004 ms = 4 µs per call
    calls["fn"] = 0
    samples = timer.time_gpu(fn, warmup=2, reps=5, l2="cold")
    assert calls["fn"] == 7 and calls["flush"] == 2 + 1 + 5  # warm-up, once before, every rep


def test_time_gpu_graph_divides_by_calls_per_replay(monkeypatch):
    fn, calls = fake_cuda(monkeypatch)
    samples = timer.time_gpu(fn, warmup=1, reps=4, l2="warm", graph=True)
    assert calls["captured_per_graph"] == timer.GRAPH_CALLS
    assert calls["replay"] == 5 and len(samples) == 4
    assert all(s == pytest.approx(4.0) for s in samples)  # per call, not per replay
    samples = timer.time_gpu(fn, warmup=0, reps=3, l2="cold", graph=True)
    assert calls["captured_per_graph"] == 1 and len(samples) == 3


def test_a_rotation_moves_more_than_four_l2s_per_pass():
    l2 = 60 << 20
    assert timer.rotating_sets(1 << 40, l2) == 2  # huge calls: two sets already evict each other
    assert timer.rotating_sets(16 << 20, l2) == 15  # 4 x 60 MiB / 16 MiB
    # 1x2048 bf16 (12 KB a call): 20480 sets, not a count capped at 200 that fits in L2
    assert timer.rotating_sets(3 * 4096, l2) == 20480
    for nbytes in (3 * 4096, 64 << 10, 5 << 20, 100 << 20):
        sets = timer.rotating_sets(nbytes, l2)
        assert sets * nbytes >= timer.ROTATING_L2S * l2 and ((sets - 1) * nbytes < 4 * l2 or sets == 2)
    assert timer.rotating_sets(1, l2) == timer.rotating_sets(0, l2) == timer.MAX_ROTATING_SETS
    assert timer.rotation_method(20480, 3 * 4096, l2) == (
        "rotating: a graph replays calls over 20480 input sets; a pass moves 4.0x L2")


@pytest.mark.gpu
def test_gpu_a_rotation_calls_each_set_once_before_its_capture():
    """Tens of thousands of small calls: the Python work is two passes (the estimate and the
    capture), with only the first few calls warming the side stream."""
    counts = [0] * 200
    xs = [torch.randn(1024, device="cuda") for _ in counts]

    def call(i):
        counts[i] += 1
        return xs[i] * 2.0

    timer.time_rotating([lambda i=i: call(i) for i in range(len(xs))], reps=2, min_replay_us=0)
    head = timer.WARM_CALLS
    assert counts[:head] == [1 + 1 + 3 + 1] * head  # warm, estimate, side stream, capture
    assert counts[head:] == [1 + 1] * (len(xs) - head)


@pytest.mark.gpu
def test_gpu_rotating_timer():
    from fusedrms.kernels import rmsnorm as T

    x, w = torch.randn(1024, 4096, device="cuda"), torch.randn(4096, device="cuda")
    us, how = timer.time_rotating_us(T.rmsnorm_row, x, w, T.bytes_moved(1024, 4096, torch.float32))
    assert 1.0 < us < 1e4 and "rotating" in how
    if "graph replay" not in how:  # timings then include launch overhead: say so, don't stop -x
        import warnings

        warnings.warn(f"the row kernel could not be captured in a CUDA graph: {how}")


@pytest.mark.gpu
def test_gpu_rotating_timer_gives_per_call_times():
    import torch

    xs = [torch.randn(1 << 20, device="cuda") for _ in range(4)]
    samples = timer.time_rotating([lambda x=x: x.mul_(1.0) for x in xs], reps=5)
    assert len(samples) == 5 and all(0 < s < 1e4 for s in samples)


@pytest.mark.gpu
def test_gpu_rotating_timer_gives_each_captured_call_its_own_output():
    import torch

    xs = [torch.randn(1 << 16, device="cuda") for _ in range(3)]
    addresses = []

    def call(x):
        y = x * 2.0
        addresses.append(y.data_ptr())
        return y

    # min_replay_us=0: one pass per replay, so the last three calls are the captured ones
    timer.time_rotating([lambda x=x: call(x) for x in xs], reps=2, min_replay_us=0)
    assert len(set(addresses[-3:])) == 3, "pooled outputs: every call wrote at one address"


@pytest.mark.gpu
def test_held_warm_graph_shows_l2_flattering_a_small_input():
    x = torch.randn(1024, 4096, device="cuda", dtype=torch.bfloat16)  # 8 MB in, 8 MB out
    y = torch.empty_like(x)
    fn = lambda: torch.mul(x, 2.0, out=y)  # noqa: E731
    warm = statistics.median(timer.time_gpu(fn, reps=50, l2="warm", hold=True, graph=True,
                                            graph_calls=1))
    cold = statistics.median(timer.time_gpu(fn, reps=50, l2="cold", graph=True))
    assert cold > warm > 0


def test_rotating_warm_up_lasts_at_least_its_time():
    from fusedrms.measure import timer

    # a short replay repeats until the GPU has been busy ROTATING_WARM_MS
    n = timer.warm_replays(400.0, 2)
    assert n * 400.0 >= timer.ROTATING_WARM_MS * 1000 > (n - 1) * 400.0
    # a replay longer than the warm-up still runs the asked-for replays, never fewer
    assert timer.warm_replays(50_000.0, 2) == 2
    assert timer.warm_replays(50_000.0, 0) == 1
    assert timer.warm_replays(0.0, 2, warm_ms=0.0) == 2


class _Clock:
    """A clock that moves only when the code under test sleeps."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


def test_a_quiet_probe_returns_at_once():
    clock = _Clock()
    got = timer.wait_until_quiet(lambda: 101.0, 100.0, clock=clock, sleep=clock.sleep)
    assert got == {"quiet_wait_ms": 0.0, "quiet_probe": 1.01, "quiet": True}


def test_the_wait_lasts_until_the_probe_comes_within_the_tolerance():
    clock = _Clock()
    probes = iter([130.0, 115.0, 103.0, 101.5])
    got = timer.wait_until_quiet(lambda: next(probes), 100.0, tolerance=0.02, poll_s=0.01,
                                 clock=clock, sleep=clock.sleep)
    assert got["quiet"] and got["quiet_probe"] == 1.015
    assert got["quiet_wait_ms"] == pytest.approx(30.0)


def test_a_memory_system_that_stays_busy_is_reported_not_waited_on_forever():
    clock = _Clock()
    got = timer.wait_until_quiet(lambda: 120.0, 100.0, max_wait_s=0.5, poll_s=0.1,
                                 clock=clock, sleep=clock.sleep)
    assert got["quiet"] is False and got["quiet_probe"] == 1.2
    assert 500.0 <= got["quiet_wait_ms"] < 700.0


@pytest.mark.parametrize("reference", [0.0, -1.0, float("nan")])
def test_a_probe_needs_a_positive_reference(reference):
    with pytest.raises(ValueError, match="reference_us"):
        timer.wait_until_quiet(lambda: 1.0, reference)


def test_a_probe_waits_at_most_its_limit_each_time_and_its_budget_in_all():
    clock = _Clock()
    probe = timer.QuietProbe(lambda: 120.0, 100.0, max_wait_s=0.1, budget_s=0.25, poll_s=0.01,
                             clock=clock, sleep=clock.sleep)
    waits = [probe.wait() for _ in range(5)]
    assert [w["quiet_wait_ms"] for w in waits] == pytest.approx([100.0, 100.0, 50.0, 0.0, 0.0],
                                                               abs=10.0)
    assert not any(w["quiet"] for w in waits) and all(w["quiet_probe"] == 1.2 for w in waits)
    assert probe.spent_s == pytest.approx(0.25, abs=0.03)


@pytest.mark.gpu
def test_the_gpu_probe_copies_and_reports_within_its_limit():
    # the GPU check runs these tests side by side: the GPU may be busy, so quiet is not asserted
    probe = timer.QuietProbe.on_gpu(64 << 20, max_wait_s=0.2)
    assert probe.reference_us > 0
    got = probe.wait()
    assert got["quiet_probe"] > 0 and got["quiet_wait_ms"] < 1000.0, got
    assert got["quiet"] is (got["quiet_probe"] <= 1 + timer.QUIET_TOLERANCE)
