"""Fixtures shared by the tests of chapter 7's GPU studies (book/ch07.py, book/ch07_tuning.py)."""
import pytest


class FakeTiming:
    """Stands in for fusedrms.measure.timer on the CPU: runs fn once, returns made-up microseconds."""

    def __init__(self):
        self.calls = 0

    def time_gpu(self, fn, warmup=25, reps=100, l2="cold", graph=False):
        assert l2 in ("cold", "warm")
        fn()
        self.calls += 1
        return [1.0 + (self.calls % 7) / 10] * 3

    def copy_bandwidth_GBps(self):
        return 4000.0


@pytest.fixture
def cpu_as_gpu(monkeypatch):
    """Chapter 7's studies on the CPU: the timer stands in, and no GPU is required."""
    from fusedrms import env
    from fusedrms.book import ch07, ch07_tuning

    fake = FakeTiming()
    monkeypatch.setattr(ch07_tuning, "_timing", lambda: fake)  # median_us times through this one
    monkeypatch.setattr(ch07, "_timing", lambda: fake)  # the copy bandwidth of extras and confirm
    monkeypatch.setattr(env, "require_gpu", lambda what: None)
    return fake
