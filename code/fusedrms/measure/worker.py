"""One timing process of the harness (:mod:`fusedrms.measure.harness` starts it):

    python -m fusedrms.measure.worker SPEC.json

It times the cases of its spec and writes one JSON line per result (lines starting with
:data:`~fusedrms.measure.harness.LINE_TAG`); with ``warm_only`` it calls each case once instead,
compiling it into the shared on-disk caches (:func:`warm_worker`).
"""
from __future__ import annotations

import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

from .. import dtypes, env
from .harness import (EPS, LINE_TAG, NO_GPU_EXIT, PYTHON_CALLS, FloorUnavailable, Settings,
                      _no_gpu_message, floor_bytes, is_compiled_peer)


def _emit(kind: str, **payload) -> None:
    sys.stdout.write(LINE_TAG + json.dumps({"kind": kind, **payload}, default=str) + "\n")
    sys.stdout.flush()


def make_inputs(op: str, rows: int, cols: int, dtype, device="cuda", seed: int = 0) -> tuple:
    """Arguments for an implementation of ``op`` (see :mod:`fusedrms.registry` for signatures)."""
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(rows, cols, device=device, dtype=torch.float32, generator=g).to(dtype)
    w = (1 + 0.1 * torch.randn(cols, device=device, generator=g)).to(dtype)
    if op.startswith("add_"):
        r = torch.randn(rows, cols, device=device, dtype=torch.float32, generator=g).to(dtype)
        return (x, r, w, EPS)
    return (x, w, EPS)


def python_call_us(call, device: str = "cuda", reps: int = 10,
                   calls: int = PYTHON_CALLS) -> list[float]:
    """What a caller pays per call from Python, back to back (a decode step's situation): wall
    clock over ``calls`` calls, synchronized at the end; one sample per batch of calls."""
    for _ in range(20):
        call()
    _sync(device)
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            call()
        _sync(device)
        out.append((time.perf_counter() - t0) * 1e6 / calls)
    return out


def interleaved_python_calls(calls: dict, device: str = "cuda", reps: int = 10,
                             calls_per_batch: int = PYTHON_CALLS, errors: dict | None = None) -> dict:
    """:func:`python_call_us` of several calls, one batch of each in turn (A B C A B C ...), so
    that a drift of the host's speed (the H200's host gave 11-16 us for F.rms_norm within one
    recording) moves every call's samples alike: the i-th samples were taken in the same round.
    {name: samples}. ``errors``: a call that raises is dropped there ({name: exception}) and the
    others go on; without it the exception propagates."""
    samples: dict = {name: [] for name in calls}
    for _ in range(reps):
        for name, fn in calls.items():
            if errors is not None and name in errors:
                continue
            try:
                samples[name] += python_call_us(fn, device, reps=1, calls=calls_per_batch)
            except Exception as e:  # noqa: BLE001 - reported by the caller
                if errors is None:
                    raise
                errors[name] = e
    return {name: got for name, got in samples.items() if errors is None or name not in errors}


def _l2_of(device) -> int:
    """The L2 a rotation is sized by: the GPU's, else (the CPU path of the tests) 50 MiB."""
    from . import timer

    return (timer.l2_bytes() if device != "cpu" else None) or (50 << 20)


def rotating_inputs(op: str, rows: int, cols: int, dtype: str, device, first: tuple
                    ) -> tuple[list[tuple], str]:
    """Input sets for the rotating timer, ``first`` and copies of its matrices, as many as
    :func:`~fusedrms.measure.timer.rotating_sets` asks for a call of ``op`` (its reads and
    writes); and the record's sentence for them."""
    from . import timer

    l2 = _l2_of(device)
    matrices = [i for i, a in enumerate(first) if hasattr(a, "dim") and a.dim() == 2]
    try:
        nbytes = floor_bytes(op, rows, cols, dtype)
    except FloorUnavailable:  # an op the traffic model lacks: its matrices read and written once
        nbytes = 2 * sum(first[i].numel() * first[i].element_size() for i in matrices)
    sets = timer.rotating_sets(nbytes, l2)
    copies = [tuple(a.clone() if i in matrices else a for i, a in enumerate(first))
              for _ in range(sets - 1)]
    return [first] + copies, timer.rotation_method(sets, nbytes, l2)


# The copy at size moves a call's bytes two ways and keeps the faster: copy_ (the floor's own call)
# and an elementwise kernel over 4-byte words. Captured in a graph, copy_ is a memcpy node, and at
# some sizes that ran ~20% slower than the kernel (H100, halves of 33,556,480 bytes: 29.4 us
# against 24.5; of 512 to 1024 MiB: 2,436 GB/s against 3,020); elsewhere the two were within 0.6%,
# and the floor's 1 GiB copy_, launched on its own, matched the kernel
COPY_WAYS = ("copy_", "kernel")
COPY_ALIGN = 16  # each half is rounded up to whole 16-byte vectors of the kernel's int32 words


def quiet_probe(device, max_wait_s: float):
    """The probe each rotating timing waits on, at most ``max_wait_s`` each
    (:class:`~fusedrms.measure.timer.QuietProbe`): on the CPU path, none."""
    from . import timer

    return None if device == "cpu" else timer.QuietProbe.on_gpu(max_wait_s=max_wait_s)


def copy_at_size(nbytes: int, device, reps: int, quiet=None) -> dict:
    """A copy of a call's ``nbytes`` (half read, half written) with the rotating timer and as
    many buffers as a call of that size rotates over: what a plain copy of the same bytes
    reaches at this size, beside the 1 GiB copy the floor is priced at. Both
    :data:`COPY_WAYS` are timed and the faster kept (``by``; every way's median in ``ways_us``).
    Each half is rounded up to :data:`COPY_ALIGN` bytes (``copied``) and the times scaled back to
    ``nbytes``. A record's fields (with ``quiet``, a :class:`~fusedrms.measure.timer.QuietProbe`,
    the wait for it before the timings)."""
    import torch

    from . import timer

    l2 = _l2_of(device)
    sets = timer.rotating_sets(nbytes, l2)
    half = -(-nbytes // 2 // COPY_ALIGN) * COPY_ALIGN
    sources = [torch.empty(half, dtype=torch.uint8, device=device) for _ in range(sets)]
    # each call writes memory of its own, as the timed calls do (time_rotating holds outputs)
    calls = {"copy_": [(lambda s=s: torch.empty_like(s).copy_(s)) for s in sources],
             "kernel": [(lambda s=s.view(torch.int32): torch.mul(s, 1)) for s in sources]}
    scale = nbytes / (2 * half)
    waited = quiet.wait() if quiet is not None else {}
    samples = {way: [t * scale for t in timer.time_rotating(calls[way], reps=reps)]
               for way in COPY_WAYS}
    del sources, calls
    ways_us = {way: statistics.median(s) for way, s in samples.items()}
    by = min(COPY_WAYS, key=ways_us.get)
    return {"bytes": nbytes, "copied": 2 * half, "sets": sets, "by": by, "ways_us": ways_us,
            "l2_method": timer.rotation_method(sets, nbytes, l2), **waited,
            **timer.summarize(samples[by])}


def sample_rows(rows: int, k: int = 16) -> list[int]:
    """A few rows spread over the matrix (first, last, middle): enough to catch a wrong kernel."""
    picks = {0, rows - 1, rows // 2} | {round(i * (rows - 1) / (k - 1)) for i in range(k)}
    return sorted(p for p in picks if 0 <= p < rows)


def check_output(op: str, out, args: tuple) -> tuple[bool | None, str]:
    """Compare sampled rows of ``out`` with the float64 reference; (ok, message)."""
    from .. import checks, reference
    import torch

    idx = torch.tensor(sample_rows(args[0].shape[0]), device=args[0].device)
    f64 = torch.float64
    if op == "rmsnorm":
        x, w, eps = args
        expected = reference.rmsnorm(x[idx], w, eps, accum=f64, out_dtype=f64)
        report = checks.allclose(out[idx], expected)
    elif op == "add_rmsnorm":
        x, r, w, eps = args
        expected = reference.add_rmsnorm(x[idx], r[idx], w, eps, accum=f64, out_dtype=f64)
        report = checks.allclose(out[idx], expected)
    elif op == "add_rmsnorm_residual":
        x, r, w, eps = args
        y_exp, s_exp = reference.add_rmsnorm_residual(x[idx], r[idx], w, eps, accum=f64)
        y, s = out
        report = checks.allclose(y[idx], y_exp)
        if report.ok:
            report = checks.allclose(s[idx], s_exp.to(f64))
    else:
        return None, f"not checked by the harness (op {op}); see python -m fusedrms.verify"
    return bool(report.ok), str(report)


def _adapt(t_est_us: float, mode: str, s: Settings) -> tuple[int, int]:
    """(warmup, reps) so that one timing stays near ``time_cap_s``."""
    from . import timer

    per_call = t_est_us * (timer.GRAPH_CALLS if mode == "graph" else 1) / 1e6
    if mode == "cold":
        per_call += 1e-4  # the flush
    reps = max(s.min_reps, min(s.reps, int(s.time_cap_s / max(per_call, 1e-7))))
    warmup = max(3, min(s.warmup, reps // 2))
    return warmup, reps


def _sync(device: str = "cuda") -> None:
    import torch

    if device != "cpu":
        torch.cuda.synchronize()


def context_lost(device: str = "cuda") -> bool:
    """Whether an error left the GPU unusable. A sticky error (an illegal address, a trap) fails
    every later call in the process; a refused launch or attribute (FlashInfer's shared memory
    request past a block's limit) fails only itself, and the next case can run."""
    import torch

    if device == "cpu":
        return False
    try:
        torch.cuda.synchronize()
        torch.ones(1, device=device).add_(1).item()
        return False
    except Exception:  # noqa: BLE001 - any failure here means the context is gone
        return True


def _sync_wall_ms(fn, device: str = "cuda") -> tuple[float, object]:
    _sync(device)
    t0 = time.perf_counter()
    out = fn()
    _sync(device)
    return (time.perf_counter() - t0) * 1e3, out


class _Phases(dict):
    """Wall seconds per phase of a timing process (inputs, first calls and checks, timing per
    mode), emitted at its end so that the recording's log says where its time went."""

    @contextlib.contextmanager
    def __call__(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self[name] = self.get(name, 0.0) + time.perf_counter() - t0


def run_worker(spec: dict) -> int:
    """Run ``spec['cases']`` in this process, emitting one JSON line per result."""
    import torch

    from .. import registry
    from . import timer

    device = spec.get("device", "cuda")  # "cpu" only in the harness's own tests
    if device != "cpu" and not env.current().on_gpu:
        _emit("fatal", error=_no_gpu_message())
        return NO_GPU_EXIT
    s = Settings(**spec["settings"])
    deadline = spec.get("deadline")
    if spec.get("warm_only"):
        return warm_worker(spec["cases"], device)
    started = time.perf_counter()
    phase = _Phases()
    with phase("copy bandwidth"):
        bw = timer.copy_bandwidth_GBps()
        quiet = quiet_probe(device, s.quiet_wait_s) if s.quiet_wait_s > 0 else None
    _emit("copy", GBps=bw, l2_bytes=timer.l2_bytes(), flush_bytes=timer.flush_bytes())
    cases = spec["cases"]
    copied: set = set()  # the byte counts whose copy at size this process has timed
    by_shape: dict = {}
    for c in cases:
        by_shape.setdefault((c["op"], c["rows"], c["cols"], c["dtype"]), []).append(c)
    for (op, rows, cols, dt), group in by_shape.items():
        if deadline and time.time() > deadline:
            for c in group:
                _emit("record", **c, status="not run: the process's time limit")
            continue
        dtype = dtypes.torch_dtype(dt)
        with phase("inputs"):
            args = make_inputs(op, rows, cols, dtype, device)
        rotating_sets: list = []
        by_impl: dict = {}
        for c in group:
            by_impl.setdefault(c["impl"], []).append(c)
        # in-place peers overwrite the inputs: they run last, and are checked on copies
        order = sorted(by_impl, key=lambda n: registry.get(n).mutates)
        python_cases: dict = {}  # name -> (call, record base): timed together, after the loop
        for name in order:
            impl_cases = by_impl[name]
            if deadline and time.time() > deadline:
                for c in impl_cases:
                    _emit("record", **c, status="not run: the process's time limit")
                continue
            impl = registry.get(name)
            call = (lambda f=impl.fn: f(*args))
            first = time.perf_counter()
            try:
                if impl.mutates:
                    copies = tuple(a.clone() if i < 2 else a for i, a in enumerate(args))
                    first_ms, out = _sync_wall_ms(lambda: impl.fn(*copies), device)
                    del copies
                else:
                    first_ms, out = _sync_wall_ms(call, device)
                ok, message = check_output(op, out, args)
                del out
                est = None
                if any(c["mode"] not in ("rotating", "python") for c in impl_cases):
                    est = statistics.median(timer.time_gpu(call, warmup=2, reps=5, l2="warm"))
            except Exception as e:  # noqa: BLE001 - report and go on with the next case
                from ..kernels import peers

                phase["first calls and checks"] = (phase.get("first calls and checks", 0.0)
                                                   + time.perf_counter() - first)
                missing = isinstance(e, peers.PeerMissing)
                for c in impl_cases:
                    _emit("record", **c, status=(f"missing: {e}" if missing else
                                                 f"error: {type(e).__name__}: {e}")[:500])
                if context_lost(device):
                    _emit("fatal", error=f"CUDA context lost after {name}: {e}"[:500])
                    return 1
                continue
            phase["first calls and checks"] = (phase.get("first calls and checks", 0.0)
                                               + time.perf_counter() - first)
            for c in impl_cases:
                mode = c["mode"]
                base = dict(c, first_call_ms=first_ms, correct=ok, check=message, copy_GBps=bw)
                if mode == "python":
                    python_cases[name] = (call, base)
                    continue
                timed = time.perf_counter()
                try:
                    if mode == "rotating":
                        if not rotating_sets:
                            with phase("inputs"):
                                rotating_sets, rotation = rotating_inputs(
                                    op, rows, cols, dt, device, args)
                        calls = [(lambda f=impl.fn, a=a: f(*a)) for a in rotating_sets]
                        if quiet is not None:  # the record says how long it waited
                            base.update(quiet.wait())
                        samples = timer.time_rotating(calls, reps=s.rotating_reps)
                        base.update(warm_ms=timer.ROTATING_WARM_MS, l2_method=rotation,
                                    sets=len(rotating_sets))
                    else:
                        warmup, reps = _adapt(est, mode, s)
                        l2 = "cold" if mode == "cold" else "warm"
                        base.update(warmup=warmup,
                                    l2_method=timer.l2_method(l2, graph=mode == "graph"))
                        samples = timer.time_gpu(call, warmup=warmup, reps=reps, l2=l2,
                                                  graph=mode == "graph")
                    _emit("record", **base, status="ok", **timer.summarize(samples))
                except Exception as e:  # noqa: BLE001
                    _emit("record", **base, status=f"error: {type(e).__name__}: {e}"[:500])
                finally:
                    phase[f"timing ({mode})"] = (phase.get(f"timing ({mode})", 0.0)
                                                 + time.perf_counter() - timed)
            # free the compiled graphs of this shape, unless a compiled peer's Python calls wait
            if is_compiled_peer(name) and not any(map(is_compiled_peer, python_cases)):
                _free_compiled_graphs()
        if python_cases:
            with phase("timing (python)"):
                _time_python_calls(python_cases, device, s.min_reps)
            if any(is_compiled_peer(name) for name in python_cases):
                _free_compiled_graphs()
        del args, rotating_sets
        if device != "cpu":
            torch.cuda.empty_cache()
        if (s.copy_at_size_min_bytes and any(c["mode"] == "rotating" for c in group)
                and not (deadline and time.time() > deadline)):
            with phase("copy at size"):
                _copy_at_size_once(op, rows, cols, dt, device, s, copied, quiet)
    _emit("phases", total_s=time.perf_counter() - started,
          **{name: round(seconds, 2) for name, seconds in phase.items()})
    _emit("done")
    return 0


def _copy_at_size_once(op: str, rows: int, cols: int, dt: str, device, s: Settings,
                       copied: set, quiet=None) -> None:
    """Time and emit :func:`copy_at_size` for this shape's bytes, once per process and byte count,
    where a call moves at least ``s.copy_at_size_min_bytes``."""
    try:
        nbytes = floor_bytes(op, rows, cols, dt)
    except FloorUnavailable:
        return
    if nbytes < s.copy_at_size_min_bytes or nbytes in copied:
        return
    copied.add(nbytes)
    try:
        _emit("copy_at_size", status="ok", **copy_at_size(nbytes, device, s.rotating_reps, quiet))
    except Exception as e:  # noqa: BLE001 - a reference that failed is reported, never a zero
        _emit("copy_at_size", bytes=nbytes, status=f"error: {type(e).__name__}: {e}"[:500])


def _free_compiled_graphs() -> None:
    """Free the compiled peers' graphs of the shape just timed."""
    from ..kernels import peers

    for sc in peers.COMPILED:
        sc.reset()


def _time_python_calls(python_cases: dict, device: str, reps: int) -> None:
    """The shape's python-mode cases ({name: (call, record base)}), their batches interleaved,
    one record each."""
    from . import timer

    errors: dict = {}
    samples = interleaved_python_calls({name: call for name, (call, _) in python_cases.items()},
                                       device, reps=reps, errors=errors)
    others = len(python_cases) - 1
    for name, (_, base) in python_cases.items():
        base = dict(base, warmup=20, l2_method=(
            f"python: {PYTHON_CALLS} calls back to back from Python, no graph; wall clock to the "
            f"last kernel's end, per call" + (f"; batches taken in turn with {others} other "
                                              f"implementations" if others else "")))
        if name in errors:
            e = errors[name]
            _emit("record", **base, status=f"error: {type(e).__name__}: {e}"[:500])
        else:
            _emit("record", **base, status="ok", **timer.summarize(samples[name]))


def warm_worker(cases: list[dict], device: str = "cuda") -> int:
    """Call every implementation of ``cases`` once per shape (compiling it into the shared on-disk
    caches) and emit its first call's wall time: the warm-up phase, not a measurement."""
    import torch

    from .. import registry

    groups: dict = {}
    for c in cases:
        groups.setdefault((c["op"], c["rows"], c["cols"], c["dtype"]), {})[c["impl"]] = c
    for (op, rows, cols, dt), by_impl in groups.items():
        args = make_inputs(op, rows, cols, dtypes.torch_dtype(dt), device)
        for name in sorted(by_impl, key=lambda n: registry.get(n).mutates):
            impl = registry.get(name)
            key = dict(op=op, impl=name, rows=rows, cols=cols, dtype=dt)
            try:
                call_args = tuple(a.clone() if i < 2 else a for i, a in enumerate(args)) \
                    if impl.mutates else args
                ms, out = _sync_wall_ms(lambda: impl.fn(*call_args), device)
                del out
                _emit("warm", **key, first_call_ms=ms, status="ok")
            except Exception as e:  # noqa: BLE001 - the timing processes report it as the case's
                _emit("warm", **key, status=f"error: {type(e).__name__}: {e}"[:300])
                if context_lost(device):
                    return 1
            if is_compiled_peer(name):
                _free_compiled_graphs()
        del args
        if device != "cpu":
            torch.cuda.empty_cache()
    _emit("done")
    return 0


if __name__ == "__main__":
    sys.exit(run_worker(json.loads(Path(sys.argv[1]).read_text())))
