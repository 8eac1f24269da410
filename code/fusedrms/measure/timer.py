"""Timing GPU work honestly: device events, warm-up, a stated L2 state, optional graph replay.

A kernel launch returns before the kernel runs, so a CPU clock around a call measures the launch,
not the work. :func:`time_gpu` brackets every call with a pair of device events (CUDA events, or
HIP events on ROCm builds of torch) and reads them all after one final synchronize.

L2 state (``l2``):

- ``"cold"``: before every timed call a buffer of ``flush_bytes()`` (at least twice the L2, and at
  least 256 MiB) is read, which evicts the inputs from L2, so each call reads them from DRAM, and
  the GPU then spins for a moment (:func:`flush_l2`). This is a *flush*, not a rotation of input
  buffers. The flush and the spin keep the GPU busy while the CPU queues the next call, which hides
  the launch overhead from the measurement.
- ``"warm"``: calls run back to back with nothing in between; inputs that fit in L2 stay there,
  and when a call is shorter than its launch, the gap the GPU spends waiting for the CPU is counted.

``hold=True`` (warm only) spins the GPU before every timed call without touching memory, as the
cold flush does: the CPU's launch path is hidden and the inputs stay in L2, so warm and cold differ
only in where the data comes from.

``graph=True`` captures the calls in a CUDA/HIP graph and times its replay. With ``l2="warm"`` one
replay holds ``GRAPH_CALLS`` calls (``graph_calls`` overrides it) and each sample is the replay's
time divided by that number: the back-to-back cost without the CPU's per-launch work. With
``l2="cold"`` the graph holds one call, replayed after each flush.

Every function returns microseconds. Without a GPU they raise a RuntimeError that says so.
"""
from __future__ import annotations

import statistics
from typing import Callable

from .. import env

GRAPH_CALLS = 20  # calls per graph replay in warm graph mode
# Rotating replays warm up for this long: after an idle moment (a first call and its CPU check)
# two replays were not a steady state (H200, 16384x2048 bf16: 53.8 us after 2 replays, 49.1
# after 50; 4096x2048: 14.3 and 15.6), and a model's layers run on a busy GPU.
ROTATING_WARM_MS = 25.0
# A rotation's pass over its input sets moves at least this many L2s, so a call's inputs come
# from DRAM. Counting sets instead (at most 200) left calls under ~0.3 MB in L2: on an H100 the
# residual op at 16x2048 bf16 took 1.63 us over 64 sets, 2.22 over 200 out of place (1.80 in
# place: its 25.6 MB of inputs fit) and 2.21 over 400, where both ops read from DRAM.
ROTATING_L2S = 4
MAX_ROTATING_SETS = 1 << 15  # each set costs a Python call at capture; 1x2048 bf16 needs 20480
WARM_CALLS = 64  # calls run before a rotation's estimate: compiles, caches, the side stream
MIN_FLUSH_BYTES = 256 << 20
_FLUSH: dict = {}


def _torch():
    import torch

    return torch


def l2_bytes() -> int | None:
    """The device's L2 size in bytes as torch reports it (None if torch does not say)."""
    torch = _torch()
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    size = getattr(props, "L2_cache_size", None)
    return int(size) if size else None


def flush_bytes() -> int:
    """Size of the buffer read before each cold call: 2x L2, at least 256 MiB."""
    return max(2 * (l2_bytes() or 0), MIN_FLUSH_BYTES)


HOLD_CYCLES = 400_000  # ~0.2 ms at 2 GHz: the GPU spins while the CPU queues the timed call


def flush_l2() -> None:
    """Evict the L2 by *reading* a buffer larger than it, then hold the GPU briefly.

    Reading rather than zeroing matters: a zeroing flush leaves the L2 full of dirty lines, and the
    timed kernel then pays for writing them back. A read leaves only clean lines, and the write-back
    of the previous call's outputs happens here, untimed. The short spin that follows keeps the GPU
    busy until the CPU has queued the start event and the call, so a slow Python wrapper does not
    leave the GPU idle inside the timed interval.
    """
    torch = _torch()
    key = torch.cuda.current_device()
    if key not in _FLUSH:
        _FLUSH[key] = torch.zeros(flush_bytes() // 8, dtype=torch.int64, device="cuda")
    _FLUSH[key].sum()
    hold_gpu()


def hold_gpu() -> None:
    """Spin the GPU for ``HOLD_CYCLES`` (no memory traffic) while the CPU queues the timed call."""
    _torch().cuda._sleep(HOLD_CYCLES)


def l2_method(l2: str, graph: bool = False, hold: bool = False,
              graph_calls: int | None = None) -> str:
    """One sentence naming how the L2 was handled, stored with every result."""
    if l2 == "cold":
        size = flush_bytes() >> 20
        how = f"flush: a {size} MiB buffer is read before every timed call (L2 "
        how += f"{(l2_bytes() or 0) >> 20} MiB)"
        return how + ("; one call per graph replay" if graph else "")
    calls = graph_calls or GRAPH_CALLS
    if hold:
        how = "warm: the GPU spins before every timed call, inputs stay in L2 when they fit"
        if graph:
            how += f"; {calls} call{'s' if calls > 1 else ''} per graph replay"
        return how
    if graph:
        return f"warm: {calls} calls back to back inside one graph replay"
    return "warm: calls back to back, inputs stay in L2 when they fit"


def _check_args(l2: str, warmup: int, reps: int, hold: bool = False,
                graph_calls: int | None = None) -> None:
    if l2 not in ("cold", "warm"):
        raise ValueError(f"l2 must be 'cold' or 'warm', got {l2!r}")
    if reps < 1 or warmup < 0:
        raise ValueError(f"need reps >= 1 and warmup >= 0, got reps={reps}, warmup={warmup}")
    if hold and l2 == "cold":
        raise ValueError("hold=True is for l2='warm' (a cold call is always held after its flush)")
    if graph_calls is not None and (int(graph_calls) != graph_calls or graph_calls < 1):
        raise ValueError(f"graph_calls must be a whole number >= 1, got {graph_calls!r}")
    if graph_calls not in (None, 1) and l2 == "cold":
        raise ValueError("a cold graph holds one call (each call needs its own flush)")


def calls_per_replay(l2: str, graph: bool, graph_calls: int | None = None) -> int:
    """How many calls one timed replay holds: 1 without a graph or when cold."""
    if not graph or l2 == "cold":
        return 1
    return int(graph_calls or GRAPH_CALLS)


def _capture(fn: Callable[[], object], calls: int, warm: Callable[[], object] | None = None):
    """A graph holding ``calls`` calls of ``fn``, after three calls of ``warm`` (default ``fn``)
    on a side stream, as torch asks."""
    torch = _torch()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            (warm or fn)()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    torch.cuda.synchronize()
    return graph


def time_gpu(fn: Callable[[], object], warmup: int = 25, reps: int = 100, l2: str = "cold",
             graph: bool = False, hold: bool = False,
             graph_calls: int | None = None) -> list[float]:
    """Microseconds per call of ``fn()`` (no arguments), one sample per rep, from device events.

    ``warmup`` calls run first and are not timed (they include JIT compilation and first-touch
    costs). See the module docstring for ``l2``, ``hold``, ``graph`` and ``graph_calls``.
    """
    _check_args(l2, warmup, reps, hold, graph_calls)
    env.require_gpu("Timing with device events")
    torch = _torch()
    cold = l2 == "cold"
    per_replay = calls_per_replay(l2, graph, graph_calls)
    call = fn
    if graph:
        g = _capture(fn, per_replay)
        call = g.replay
    for _ in range(warmup):
        if cold:
            flush_l2()
        elif hold:
            hold_gpu()
        call()
    if cold:
        flush_l2()  # allocate the flush buffer outside the timed loop
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for start, end in zip(starts, ends):
        if cold:
            flush_l2()
        elif hold:
            hold_gpu()
        start.record()
        call()
        end.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1000.0 / per_replay for s, e in zip(starts, ends)]


def warm_replays(replay_us: float, warmup: int, warm_ms: float = ROTATING_WARM_MS) -> int:
    """Replays to run untimed: ``warmup`` at least, and enough to keep the GPU busy ``warm_ms``."""
    return max(warmup, min(10_000, -(-int(warm_ms * 1000.0) // max(int(replay_us), 1))))


def time_rotating(calls: list[Callable[[], object]], reps: int = 9, warmup: int = 2,
                  min_replay_us: float = 200.0) -> list[float]:
    """Microseconds per call, back to back, with inputs coming from DRAM: one CUDA/HIP graph
    replays ``calls`` (one call per input set, as many as :func:`rotating_sets` says, so each
    call's inputs were evicted by the others), repeated inside the graph until a replay lasts at
    least ``min_replay_us``. Each sample is one replay's time divided by the calls in it;
    untimed replays first (:func:`warm_replays`) bring the GPU to a steady state.
    Every call in the graph writes its outputs to memory of its own (what ``calls`` return is
    held until the graph is captured), so no call finds its output lines still in L2.
    """
    env.require_gpu("Timing with device events")
    _check_args("warm", warmup, reps)
    torch = _torch()
    if not calls:
        raise ValueError("time_rotating needs at least one call")
    # A rotation of small calls holds tens of thousands: each is called once before the capture
    # (the estimate below), and the first few also warm the capture's side stream, so that the
    # Python work per call is paid twice, not six times
    head = calls[:WARM_CALLS]
    for c in head:
        c()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for c in calls:
        c()
    end.record()
    torch.cuda.synchronize()
    pass_us = max(start.elapsed_time(end) * 1000.0, 1e-3)
    passes = max(1, min(64, int(min_replay_us / pass_us) + 1))

    held = []

    def one_replay():
        # each captured call keeps its outputs until capture ends, so the graph gives every call
        # its own output memory, as a model's layers get: pooled outputs at one address stay in
        # L2 between calls and flatter out-of-place against in-place (H200, 1024x4096 bf16:
        # 8.8 us pooled, 10.2 us rotating outputs, 10.3 in place)
        held.clear()
        for _ in range(passes):
            for c in calls:
                held.append(c())

    graph = _capture(one_replay, 1, warm=lambda: [c() for c in head])
    held.clear()
    for _ in range(warm_replays(pass_us * passes, warmup)):
        graph.replay()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends):
        s.record()
        graph.replay()
        e.record()
    torch.cuda.synchronize()
    n = passes * len(calls)
    del graph
    return [s.elapsed_time(e) * 1000.0 / n for s, e in zip(starts, ends)]


def median_us(fn: Callable[[], object], warmup: int = 2, reps: int = 5) -> float:
    """Median microseconds of ``fn()``: device events (warm L2) on a GPU, a wall clock on the CPU
    path, where the interpreter's time says nothing about a GPU but shows what work costs."""
    _check_args("warm", warmup, reps)
    if env.current().on_gpu:
        return statistics.median(time_gpu(fn, warmup=warmup, reps=reps, l2="warm"))
    import time

    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(samples)


COPY_WARMUP = 60


def copy_bandwidth_GBps(nbytes: int = 1 << 30, reps: int = 20) -> float:
    """Device-to-device copy bandwidth in GB/s (10^9 bytes/s), counting read + write bytes.

    The median of ``reps`` timed copies of ``nbytes`` (default 1 GiB, far larger than any L2). The
    book calls the time to move a kernel's bytes at this rate its floor: a reference, not a hard
    limit (a kernel that mostly reads can land a few percent under it, as chapter 6 shows).
    """
    env.require_gpu("Measuring copy bandwidth")
    # a cold GPU reads far lower (2.8 against 4.2 TB/s on an H200): 60 copies bring the clocks up
    us = timed_copy(nbytes)(reps, COPY_WARMUP)
    return 2 * nbytes / (us * 1e-6) / 1e9


def timed_copy(nbytes: int) -> Callable[[int, int], float]:
    """A device copy of ``nbytes`` (random bytes into a buffer of its own) and a function
    ``copy_us(reps, warmup)``: the median microseconds of ``reps`` copies back to back, after
    ``warmup`` untimed ones. The floor's copy (:func:`copy_bandwidth_GBps`) and the quiet probe's
    (:meth:`QuietProbe.on_gpu`); the buffers live as long as the function."""
    torch = _torch()
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)

    def copy_us(reps: int, warmup: int) -> float:
        return statistics.median(time_gpu(lambda: dst.copy_(src), warmup=warmup, reps=reps,
                                          l2="warm"))
    return copy_us


def rotating_sets(bytes_per_call: int, l2: int) -> int:
    """How many input sets a rotation needs: enough that one pass over them moves at least
    :data:`ROTATING_L2S` L2s (what each call reads and writes, ``bytes_per_call``), so each set's
    lines were evicted before its next call; at least 2, at most :data:`MAX_ROTATING_SETS`."""
    return max(2, min(MAX_ROTATING_SETS, -(-ROTATING_L2S * l2 // max(int(bytes_per_call), 1))))


def rotation_method(sets: int, bytes_per_call: int, l2: int) -> str:
    """The rotating timer's sentence for a record: the sets, and how many L2s a pass moves."""
    return (f"rotating: a graph replays calls over {sets} input sets; a pass moves "
            f"{sets * bytes_per_call / l2:.1f}x L2")


def time_rotating_us(call, x, w, bytes_per_call: int, reps: int = 7) -> tuple[float, str]:
    """Microseconds per call of ``call(x_i, w)``, back to back over rotating copies of ``x``:
    :func:`time_rotating` (the one rotating timer) over :func:`rotating_sets` copies.

    A steady-state measurement, like a model running layer after layer: each call reads an input
    the previous calls have pushed out of L2 (so x comes from DRAM) and its output's write-back is
    paid within the run. Where a call cannot be captured in a graph, plain launches are timed
    instead (the CPU's launch cost may then show) and the method says so.
    """
    env.require_gpu("timing a kernel")
    l2 = l2_bytes() or 64 << 20
    copies = rotating_sets(bytes_per_call, l2)
    xs = [x] + [x.clone() for _ in range(copies - 1)]
    calls = [(lambda xi=xi: call(xi, w)) for xi in xs]
    how = rotation_method(copies, bytes_per_call, l2)
    try:
        samples = time_rotating(calls, reps=reps)
    except Exception:  # noqa: BLE001 - not capturable: time plain launches instead
        _torch().cuda.synchronize()
        samples = [t / len(calls) for t in
                   time_gpu(lambda: [c() for c in calls], warmup=2, reps=reps, l2="warm")]
        how = f"plain launches over {copies} rotating input sets (graph capture failed)"
    return float(statistics.median(samples)), how + f", median of {reps}"


# ---------------------------------------------------------------- a quiet memory system

# Work the driver does on its own takes DRAM bandwidth from a kernel timed meanwhile. In an H100
# grid (4a06932), after a process freed its 16384x65536 cases (tens of GB, torch.cuda.empty_cache)
# the case it timed next ran 15-16% slow: 16384x2048 fp16, the residual op, 106.2 us, while the
# same worker and timer in a fresh process gave 91.5 and the peers timed seconds later were not
# slowed. A likely cause: the driver zeroes freed memory with its copy engines (scrub on free, on
# for GH100 in NVIDIA's open kernel modules). Whatever the cause, a copy shows the bandwidth lost.
QUIET_BYTES = 128 << 20  # each of the probe's two buffers: a copy moves about 5x an H100's L2
QUIET_TOLERANCE = 0.02  # a probe copy this much slower than the process's first is not quiet
# The slow cases above lost ~15% over ~50 ms of warm-up and timing; a wait of half a second covers
# that many times over, and a process waits 15 s at most in all, so that a GPU that stays busy
# (another tenant, a clock that drifted since the reference) costs seconds, not minutes
QUIET_MAX_WAIT_S = 0.5
QUIET_BUDGET_S = 15.0
QUIET_POLL_S = 0.005


def wait_until_quiet(probe_us: Callable[[], float], reference_us: float,
                     tolerance: float = QUIET_TOLERANCE, max_wait_s: float = QUIET_MAX_WAIT_S,
                     poll_s: float = QUIET_POLL_S, clock=None, sleep=None) -> dict:
    """Probe until ``probe_us()`` is within ``tolerance`` of ``reference_us``, for at most
    ``max_wait_s`` (0: one probe). Returns the record's fields: the wait in ms, the last probe
    over the reference, and whether it came within the tolerance (``quiet``)."""
    import time

    clock, sleep = clock or time.perf_counter, sleep or time.sleep
    if not reference_us > 0:
        raise ValueError(f"reference_us must be a positive time, got {reference_us!r}")
    start = clock()
    while True:
        ratio = probe_us() / reference_us
        waited = clock() - start
        if ratio <= 1 + tolerance or waited >= max_wait_s:
            return {"quiet_wait_ms": round(waited * 1e3, 1), "quiet_probe": round(ratio, 4),
                    "quiet": ratio <= 1 + tolerance}
        sleep(poll_s)


class QuietProbe:
    """Before each timing, :meth:`wait` probes until ``probe_us()`` runs as fast as it did at
    first (``reference_us``): the memory system is then free for the timing. Each wait lasts at
    most ``max_wait_s``, and all of them together ``budget_s``; once that is spent, each wait is
    one probe, which the record still reports. :meth:`on_gpu` makes the copy this uses."""

    def __init__(self, probe_us: Callable[[], float], reference_us: float,
                 max_wait_s: float = QUIET_MAX_WAIT_S, budget_s: float = QUIET_BUDGET_S,
                 **wait_options):
        self.probe_us, self.reference_us = probe_us, reference_us
        self.max_wait_s, self.budget_s, self.spent_s = max_wait_s, budget_s, 0.0
        self.wait_options = wait_options  # wait_until_quiet's tolerance, poll_s, clock, sleep

    @classmethod
    def on_gpu(cls, nbytes: int = QUIET_BYTES, **limits) -> "QuietProbe":
        """A copy of ``nbytes`` as the probe, its reference timed now: make it after
        :func:`copy_bandwidth_GBps` has brought the clocks up."""
        env.require_gpu("Probing the memory system")
        copy_us = timed_copy(nbytes)
        return cls(lambda: copy_us(5, 2), copy_us(15, 2), **limits)

    def wait(self) -> dict:
        left = max(0.0, min(self.max_wait_s, self.budget_s - self.spent_s))
        got = wait_until_quiet(self.probe_us, self.reference_us, max_wait_s=left,
                               **self.wait_options)
        self.spent_s += got["quiet_wait_ms"] / 1e3
        return got


def summarize(samples: list[float]) -> dict:
    """Median, p10, p90, mean, min, max and count of a list of timings (µs)."""
    if not samples:
        raise ValueError("no samples to summarize")
    from .compare import quantile_of

    s = sorted(samples)
    return {"median_us": statistics.median(s), "p10_us": quantile_of(s, 0.10), "p90_us": quantile_of(s, 0.90),
            "mean_us": statistics.fmean(s), "min_us": s[0], "max_us": s[-1], "n": len(s)}
