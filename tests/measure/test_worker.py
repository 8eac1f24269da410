"""The timing process: its Python-call mode, and telling a lost GPU context from a failed case."""
from __future__ import annotations

import pytest

from fusedrms.measure import harness, worker
from tests.measure.test_harness import fake_clock, inprocess_runner


def _fake_batches(monkeypatch, times: dict):
    """python_call_us replaced: it logs which call ran and returns that call's next time."""
    order = []

    def fake(fn, device="cuda", reps=10, calls=worker.PYTHON_CALLS):
        name = fn()
        order.append(name)
        return [next(times[name])]
    monkeypatch.setattr(worker, "python_call_us", fake)
    return order


def test_batches_are_taken_in_turn_and_the_ith_samples_share_a_round(monkeypatch):
    order = _fake_batches(monkeypatch, {"a": iter([1.0, 2.0, 3.0]), "b": iter([4.0, 5.0, 6.0])})
    got = worker.interleaved_python_calls({"a": lambda: "a", "b": lambda: "b"}, "cpu", reps=3)
    assert order == ["a", "b"] * 3
    assert got == {"a": [1.0, 2.0, 3.0], "b": [4.0, 5.0, 6.0]}


def test_a_call_that_raises_is_dropped_and_reported_or_propagates(monkeypatch):
    _fake_batches(monkeypatch, {"a": iter([1.0, 2.0])})

    def broken():
        raise RuntimeError("no kernel image")
    errors: dict = {}
    got = worker.interleaved_python_calls({"a": lambda: "a", "b": broken}, "cpu", reps=2,
                                          errors=errors)
    assert got == {"a": [1.0, 2.0]} and isinstance(errors["b"], RuntimeError)
    with pytest.raises(RuntimeError, match="no kernel image"):
        worker.interleaved_python_calls({"b": broken}, "cpu", reps=1)


def test_the_python_sweep_times_a_shapes_implementations_in_turn(monkeypatch):
    """Every implementation of the shape gets its record, and says it was timed in turn."""
    state = fake_clock(monkeypatch)
    impls = ("torch.rms_norm_add", "torch.eager_chain")
    seen = []
    real = worker.python_call_us

    def logged(fn, device="cuda", reps=10, calls=worker.PYTHON_CALLS):
        seen.append(fn)
        return real(fn, device, reps=reps, calls=2)
    monkeypatch.setattr(worker, "python_call_us", logged)
    sweep = [harness.Sweep("py", "add_rmsnorm", (1,), (64,), ("fp32",), ("python",), impls=impls)]
    doc = harness.run_sweeps(sweep, harness.Settings(processes=1, min_reps=3), None,
                             log=lambda m: None, runner=inprocess_runner(state))
    recs = {r["impl"]: r for r in doc["records"]}
    assert set(recs) == set(impls)
    for rec in recs.values():
        assert rec["status"] == "ok" and rec["median_us"] > 0, rec
        assert "taken in turn with 1 other implementations" in rec["l2_method"]
    assert len(seen) == 6 and seen[0] is not seen[1] and seen[0] is seen[2]


def test_an_error_on_the_cpu_never_counts_as_a_lost_gpu_context():
    assert worker.context_lost("cpu") is False


@pytest.mark.gpu
def test_gpu_a_refused_request_leaves_the_context_usable():
    """An out-of-memory request fails only itself: the worker goes on with the next case
    (matching "CUDA error" in the message stopped a whole recording at FlashInfer's refusal)."""
    import torch

    with pytest.raises(RuntimeError):
        torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
    assert worker.context_lost("cuda") is False


@pytest.mark.parametrize("faster", worker.COPY_WAYS)
def test_the_copy_at_size_keeps_the_faster_way_scaled_to_the_calls_bytes(monkeypatch, faster):
    """Both ways copy the same bytes over the same rotating buffers; the faster way's samples,
    scaled from the halves as rounded up (whole COPY_ALIGN bytes) to the call's bytes, make the
    record, and every way's median is kept beside it."""
    import torch

    from fusedrms.measure import timer

    timed = []

    def time_rotating(calls, reps=9, warmup=2, min_replay_us=200.0):
        outs = [call() for call in calls]
        way = "copy_" if outs[0].dtype == torch.uint8 else "kernel"
        timed.append((way, [o.view(torch.uint8) for o in outs]))
        base = 10.0 if way == faster else 12.0
        return [base + i % 3 for i in range(reps)]  # median base + 1

    monkeypatch.setattr(timer, "time_rotating", time_rotating)
    nbytes = 2 * 1000 + 6  # halves of 1003 bytes, copied as 1008
    got = worker.copy_at_size(nbytes, "cpu", reps=5)
    assert [way for way, _ in timed] == list(worker.COPY_WAYS)
    (_, by_copy), (_, by_kernel) = timed
    assert len(by_copy) == got["sets"] == timer.rotating_sets(nbytes, 50 << 20)
    assert all(a.numel() == 1008 and torch.equal(a, b) for a, b in zip(by_copy, by_kernel))
    scale = nbytes / (2 * 1008)
    assert got["bytes"] == nbytes and got["copied"] == 2 * 1008 and got["by"] == faster
    assert got["median_us"] == pytest.approx(11.0 * scale) and got["n"] == 5
    assert got["ways_us"] == pytest.approx({way: (11.0 if way == faster else 13.0) * scale
                                            for way in worker.COPY_WAYS})


@pytest.mark.gpu
def test_gpu_the_copy_at_size_keeps_the_faster_way_to_copy_a_calls_bytes():
    """A copy of a 64 MB call's bytes (half read, half written; 4096 x 2048 bf16 residual op's)
    over rotating buffers, both ways: a positive time, the faster way's, a rate within reach of
    the 1 GiB copy's (the floor's), and the rotation's sets in its method."""
    from fusedrms.measure import timer

    nbytes = 2 * 33_556_480  # a half that is not a multiple of 4 KiB
    got = worker.copy_at_size(nbytes, "cuda", reps=5)
    assert got["bytes"] == nbytes and got["n"] == 5 and got["median_us"] > 0
    assert got["copied"] % (2 * worker.COPY_ALIGN) == 0
    assert nbytes <= got["copied"] < nbytes + 2 * worker.COPY_ALIGN
    assert set(got["ways_us"]) == set(worker.COPY_WAYS)
    assert got["median_us"] == min(got["ways_us"].values()) == got["ways_us"][got["by"]]
    assert got["sets"] == timer.rotating_sets(nbytes, timer.l2_bytes()) >= 2
    assert f"{got['sets']} input sets" in got["l2_method"]
    rate = nbytes / (got["median_us"] * 1e3)
    assert 0.3 < rate / timer.copy_bandwidth_GBps() < 1.5, rate
