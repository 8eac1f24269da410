"""Chapter 9's GPU experiment: forward + backward of RMSNorm and fused add + RMSNorm, timed against
eager autograd, ``torch.compile`` and Liger-Kernel (out of place, and in place: its default for
RMSNorm), plus the backward alone against its floor and against the peers' backward alone.

    python -m fusedrms.book.ch09 --out DIR [--smoke] [--processes 3]   (on a GPU machine)

:func:`record` writes ``DIR/ch09_backward.json`` (:data:`FILES`). How a number is made:

1. Each implementation's step is ``y = f(inputs)`` then ``torch.autograd.grad`` of the outputs with
   given output gradients (the residual output gets one too), so nothing accumulates in ``.grad``.
   Before timing, its gradients are compared with the float64 formula
   (:func:`fusedrms.reference.rmsnorm_backward`); the verdict is stored with the time.
2. One timer for everything: :mod:`fusedrms.measure.timer`, a CUDA graph replayed over rotating
   copies of the inputs that together exceed the L2, so every call reads from DRAM; µs per call.
3. The whole sweep runs in ``processes`` separate Python processes one after another (default 3);
   a record holds the median of the process medians and their range (min-max).
4. The floor is the traffic model's bytes (:func:`fusedrms.traffic.training_bytes` for forward +
   backward, the backward's own step for the backward alone) at the copy bandwidth each process
   measures; records state the percentage of it.

The readers that turn the file into the chapter's tables, plot and sentences are
:mod:`fusedrms.book.ch09_page`.
"""
from __future__ import annotations

from .. import env  # first

import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from .. import checks, records, reference, traffic

FILES = {"ch09_backward.json": "forward + backward against the peers, the backward alone, its grid, "
                               "dw determinism"}
RECORD_NAME = "ch09_backward"
SOURCES = ("kernels/rmsnorm_backward.py", "kernels/rmsnorm.py::loud_scale",
           "kernels/rmsnorm.py::num_warps_for", "reference.py::rmsnorm_backward",
           "reference.py::add_rmsnorm_residual", "measure/timer.py", "book/ch09.py::record",
           "traffic.py", "kernels/peers.py")
# H200 at 1cc9902: 133 s (warm-up and checks, then three timing processes); the peers' backward
# alone and Liger in place add ~88 cases, ~40 s; the rows of 16384 columns 20 cases, ~60 s with
# their compiles (estimates, not yet recorded)
ESTIMATE_S = 235
EPS = 1e-5
F64 = torch.float64
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}
OPS = ("rmsnorm", "add_rmsnorm")
SHAPES = tuple((r, c, "bf16") for r in (1024, 4096, 16384) for c in (2048, 4096, 8192)) + (
    (4096, 4096, "fp32"), (16384, 4096, "fp32"))
# rows of 16384 columns, past the grid: the backward alone, ours with dw updated first (the rule,
# DW_FIRST) and last (the loop before it), against the peers' backward alone
WIDE_SHAPES = ((4096, 16384, "bf16"), (8192, 16384, "fp32"))
WIDE_DESIGNS = ("two_stage", "dw_last")
SMOKE_SHAPES = ((1024, 2048, "bf16"),)
SMOKE_WIDE_SHAPES = ((256, 16384, "bf16"),)  # ours only: the same code paths
PROCESS_TIMEOUT_S = 420  # a hard limit per timing process: a hung case, never a slow one
WARM_TIMEOUT_S = 300
# forward + backward, in the order they are timed (peers that may fail to capture come last);
# "liger.in_place" writes dx over dy (no dx allocated): Liger's default for RMSNorm
TRAIN_IMPLS = ("triton.two_stage", "triton.atomic", "torch.eager", "torch.rms_norm", "liger",
               "liger.in_place", "torch.compile")
OURS = ("triton.two_stage", "triton.atomic")
MUTATES = ("liger.in_place",)  # its step writes into the bundle: checked on a copy
# the backward alone of the peers whose backward can be called alone: Liger's kernels (after
# Liger's own forward) and torch.compile of the backward formula from the saved r (after ours)
BACKWARD_PEERS = ("liger", "liger.in_place", "torch.compile")
# the backward alone (our kernels), with the traffic step that is its floor
BACKWARD_IMPLS = {("rmsnorm", "two_stage"): "rmsnorm_backward",
                  ("rmsnorm", "atomic"): "rmsnorm_backward_atomic",
                  ("rmsnorm", "recompute_r"): "rmsnorm_backward_recompute",
                  ("rmsnorm", "no_prefetch"): "rmsnorm_backward",
                  ("rmsnorm", "one_row"): "rmsnorm_backward",
                  ("add_rmsnorm", "two_stage"): "add_rmsnorm_backward",
                  ("add_rmsnorm", "one_row"): "add_rmsnorm_backward"}
# the grid of the two-stage backward: programs per SM against the default rule
PROGRAM_SHAPES = ((1024, 4096, "bf16"), (16384, 2048, "bf16"), (16384, 8192, "bf16"))
PROGRAMS_PER_SM = (1, 2, 4, 8)
# stage 2 alone (the dw reduce) over the one-row design's partials at 16384 rows: the tile it
# had (rows x columns of partials per step, warps) and the library's
REDUCE_SHAPES = ((16384, 2048, "bf16"), (16384, 4096, "bf16"), (16384, 8192, "bf16"))
REDUCE_TILES = {"32x64": (32, 64, 4), "128x16": (128, 16, 8)}
DETERMINISM_SHAPE = (16384, 4096, "bf16")
DETERMINISM_RUNS = 50  # five runs once gave one dw pattern: the arrival order varies, not every run


# ---------------------------------------------------------------- implementations (GPU side)

def _liger():
    """(rms_norm Function, fused add Function) or raise ImportError with the reason."""
    from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    return LigerRMSNormFunction, LigerFusedAddRMSNormFunction


def liger_status() -> str | None:
    """None when Liger-Kernel imports, else why not (the page reports the peer as missing)."""
    try:
        _liger()
    except Exception as e:  # noqa: BLE001 - any import failure means the peer is missing
        return f"{type(e).__name__}: {e}"
    return None


def _eager_add(x, residual, w, eps):
    return reference.add_rmsnorm_residual(x, residual, w, eps)


def _torch_rms_norm(x, w, eps):
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps)


def _torch_rms_norm_add(x, residual, w, eps):
    s = x + residual
    return _torch_rms_norm(s, w, eps), s


class _Compiled:
    """``torch.compile(dynamic=False)`` of the eager function, one per (op, rows, cols, dtype):
    forward and backward (AOTAutograd) specialized to the shape, as the book's other compiled
    peers are; the recording compiles every shape ahead, side by side, into a shared cache."""

    def __init__(self):
        self.fns = {}

    def get(self, op, rows, cols, dtype, what: str = "train"):
        """``what``: "train" (the eager forward, autograd's backward) or "backward"
        (:func:`backward_formula` alone)."""
        from ..kernels import peers

        key = (op, rows, cols, dtype, what)
        if key not in self.fns:
            peers._raise_recompile_limits()
            base = (backward_formula if what == "backward" else
                    reference.rmsnorm if op == "rmsnorm" else _eager_add)
            self.fns[key] = torch.compile(peers._fresh_copy(base), dynamic=False)
        return self.fns[key]


_COMPILED = _Compiled()


def forward_fn(impl: str, op: str, cols: int, dtype: torch.dtype):
    """``f(*inputs, w) -> outputs`` for one implementation (inputs: x, or x and residual)."""
    from ..kernels import rmsnorm_backward as B

    if impl in OURS:
        mode = "atomic" if impl == "triton.atomic" else "two_stage"
        if op == "rmsnorm":
            return lambda x, w: B.rmsnorm(x, w, EPS, mode)
        return lambda x, r, w: B.add_rmsnorm(x, r, w, EPS, mode)
    if impl == "torch.eager":
        return (lambda x, w: reference.rmsnorm(x, w, EPS)) if op == "rmsnorm" else (
            lambda x, r, w: _eager_add(x, r, w, EPS))
    if impl == "torch.rms_norm":
        return (lambda x, w: _torch_rms_norm(x, w, EPS)) if op == "rmsnorm" else (
            lambda x, r, w: _torch_rms_norm_add(x, r, w, EPS))
    if impl == "torch.compile":
        return lambda *args: _COMPILED.get(op, args[0].shape[0], cols, dtype)(*args, EPS)
    if impl in ("liger", "liger.in_place"):
        rms, fused_add = _liger()
        in_place = impl == "liger.in_place"  # casting mode "llama"; in place: dx over dy
        if op == "rmsnorm":
            return lambda x, w: rms.apply(x, w, EPS, 0.0, "llama", in_place)
        return lambda x, r, w: fused_add.apply(x, r, w, EPS, 0.0, "llama", in_place)
    raise KeyError(f"unknown implementation {impl!r}")


def backward_formula(x, w, dy, rstd, d_sum=None):
    """``(dx, dw)``: the book's formula (:func:`fusedrms.reference.rmsnorm_backward`) from the
    saved r, in fp32, each cast once: the backward a reader would give torch.compile (``d_sum``:
    the gradient arriving at the fused add's residual output)."""
    grads = reference.rmsnorm_backward(x, w, dy, accum=torch.float32, d_sum=d_sum,
                                       rows_scale=rstd)
    return grads["dx"].to(x.dtype), grads["dw"].to(w.dtype)


def peer_backward_case(impl: str, op: str, w: torch.Tensor, bundle: torch.Tensor):
    """``(step, saved, check_bundle)`` of a peer's backward alone (:data:`BACKWARD_PEERS`).
    ``saved``: what its forward saved and the output gradients, ``[x, dy]`` or ``[s, dy, ds]``
    (r is not rotated, as for ours); ``step(saved)``: the gradients in the training step's order,
    ``(dx, dw)`` or ``(dx, dx, dw)`` (dx is also the residual's); ``check_bundle``: the training
    layout :func:`check_gradients` reads (``[s, 0, dy, ds]`` for the fused add)."""
    from ..kernels import rmsnorm_backward as B

    add = op == "add_rmsnorm"
    rows, cols = bundle.shape[1:]
    if impl == "torch.compile":
        _, s, rstd = B.forward(bundle[0], w, EPS, residual=bundle[1] if add else None)
        saved = torch.stack([s, bundle[2], bundle[3]]) if add else bundle[:2]
        f = _COMPILED.get(op, rows, cols, bundle.dtype, what="backward")

        def step(b):
            dx, dw = f(b[0], w, b[1], rstd, b[2] if add else None)
            return (dx, dx, dw) if add else (dx, dw)
    elif not add:  # Liger 0.8.5's kernels, keywords as its functions name them
        from liger_kernel.ops import rms_norm as LR

        in_place = impl == "liger.in_place"
        _, _, rstd, block, warps, mode = LR.rms_norm_forward(
            X=bundle[0], W=w, eps=EPS, offset=0.0, casting_mode="llama", row_mode=None)
        saved = bundle[:2]

        def step(b):
            return LR.rms_norm_backward(dY=b[1], X=b[0], W=w, RSTD=rstd, offset=0.0,
                                        casting_mode=mode, BLOCK_SIZE=block, num_warps=warps,
                                        in_place=in_place, row_mode=None)
    else:
        from liger_kernel.ops import fused_add_rms_norm as LA

        in_place = impl == "liger.in_place"
        _, s, rstd, block, warps, stages, mode = LA.fused_add_rms_norm_forward(
            X=bundle[0], R=bundle[1], W=w, eps=EPS, offset=0.0, casting_mode="llama")
        saved = torch.stack([s, bundle[2], bundle[3]])

        def step(b):
            dx, _, dw = LA.fused_add_rms_norm_backward(
                dY=b[1], dS_out=b[2], S=b[0], W=w, RSTD=rstd, offset=0.0, casting_mode=mode,
                BLOCK_SIZE=block, num_warps=warps, num_stages=stages, in_place=in_place)
            return dx, dx, dw
    check_bundle = (torch.stack([saved[0], torch.zeros_like(saved[0]), saved[1], saved[2]])
                    if add else saved)
    return step, saved, check_bundle


def make_bundle(op: str, rows: int, cols: int, dtype: torch.dtype, seed: int = 0,
                device="cuda") -> torch.Tensor:
    """The per-call inputs stacked in one tensor, so a rotation copies them together:
    ``[x, dy]`` for rmsnorm, ``[x, residual, dy, ds]`` for the fused add (ds: the gradient arriving
    at its residual output)."""
    g = torch.Generator(device=device).manual_seed(seed)
    n = 2 if op == "rmsnorm" else 4
    return torch.randn((n, rows, cols), generator=g, device=device).to(dtype)


def train_step(impl: str, op: str, cols: int, dtype: torch.dtype, w: torch.Tensor):
    """``step(bundle) -> (input grads..., dw)``: forward, then backward with the bundle's output
    gradients."""
    fwd = forward_fn(impl, op, cols, dtype)

    def step(bundle):
        if op == "rmsnorm":
            x = bundle[0].detach().requires_grad_()
            y = fwd(x, w)
            return torch.autograd.grad(y, (x, w), bundle[1])
        x, r = (bundle[i].detach().requires_grad_() for i in (0, 1))
        y, s = fwd(x, r, w)
        return torch.autograd.grad((y, s), (x, r, w), (bundle[2], bundle[3]))
    return step


def backward_step(op: str, design: str, w: torch.Tensor, rstd: torch.Tensor,
                  programs: int | None = None):
    """``step(bundle)`` of our backward alone. The bundle holds what the forward saved and the
    output gradients: ``[x, dy]`` (rmsnorm) or ``[s, dy, ds]`` (fused add); ``rstd`` is the saved
    row scale (4 bytes per row, not rotated), unused by the ``recompute_r`` design;
    ``no_prefetch`` is the two-stage design loading each tile only when its turn comes;
    ``one_row`` the two-stage design stepping one row at a time (the grid its rule gives);
    ``dw_last`` the two-stage design updating dw after the row's dot product (``DW_FIRST`` off)."""
    from ..kernels import rmsnorm_backward as B

    mode = "atomic" if design == "atomic" else "two_stage"
    saved_r = None if design == "recompute_r" else rstd
    tile_rows = 1 if design == "one_row" else None

    def step(bundle):
        d_sum = None if op == "rmsnorm" else bundle[2]
        return B.backward(bundle[0], w, bundle[1], EPS, d_sum=d_sum, rstd=saved_r, dw_mode=mode,
                          programs=programs, prefetch=False if design == "no_prefetch" else None,
                          tile_rows=tile_rows, dw_first=False if design == "dw_last" else None)
    return step


def reduce_step(programs: int, cols: int, tile: str, dw: torch.Tensor):
    """``step(partials)``: stage 2 alone, :func:`fusedrms.kernels.rmsnorm_backward.reduce_partials`
    with one of :data:`REDUCE_TILES`."""
    from ..kernels import rmsnorm_backward as B

    block_p, block_cols, warps = REDUCE_TILES[tile]

    def step(partials):
        return B.reduce_partials(partials, dw, programs, cols, block_p, block_cols, warps)
    return step


CHECK_ROWS = 2048  # dx is compared on at most about this many rows, spread evenly (a host check of
# every row at 16384 x 8192 took seconds per case); the compare runs on the GPU, in float64


def check_gradients(op: str, bundle: torch.Tensor, w: torch.Tensor, grads) -> tuple[bool, str]:
    """Every gradient against the float64 formula: dw on every column, dx (and the residual's
    gradient) on :data:`CHECK_ROWS` rows spread evenly, first, middle and last included."""
    from ..measure.worker import sample_rows

    x, dy = bundle[0], bundle[-1 if op == "rmsnorm" else 2]
    d_sum = None
    if op == "add_rmsnorm":
        x = (bundle[0].to(F64) + bundle[1].to(F64)).to(bundle.dtype)  # s as the forward stores it
        d_sum = bundle[3]
    ref = reference.rmsnorm_backward(x, w, dy, EPS, accum=F64, d_sum=d_sum,
                                     range_dtype=torch.float32)
    named = {"dx": grads[0], "dw": grads[-1]}
    if op == "add_rmsnorm":
        named["dresidual"] = grads[1]
    messages, ok = [], True
    rows = torch.tensor(sample_rows(x.shape[0], CHECK_ROWS), device=x.device)
    for name, got in named.items():
        key = "dw" if name == "dw" else "dx"
        n = x.shape[0] if key == "dw" else x.shape[1]
        want, scale = ref[key], ref[f"{key}_scale"]
        if key == "dx":
            got, want, scale = got[rows], want[rows], scale[rows]
        rep = checks.allclose(got, want, n=n, scale=scale, on_device=True)
        ok &= rep.ok
        if not rep.ok:
            messages.append(f"{name}: {rep.message}")
    return ok, "; ".join(messages) or "dx and dw within tolerance of the float64 formula"


# ---------------------------------------------------------------- timing (one timer)

def time_rotating(step, bundle: torch.Tensor, bytes_per_call: int, reps: int) -> tuple[float, str]:
    """µs per call of ``step(bundle_copy)``: :func:`fusedrms.measure.timer.time_rotating_us`."""
    from ..measure import timer

    return timer.time_rotating_us(lambda b, _w: step(b), bundle, None, bytes_per_call, reps=reps)


def _sync() -> None:
    if env.current().on_gpu:
        torch.cuda.synchronize()


def _reps(wall_ms: float, smoke: bool) -> int:
    if smoke:
        return 3
    return max(5, min(15, int(400 / max(wall_ms * 20, 1e-3))))


def measure_case(kind: str, op: str, impl: str, rows: int, cols: int, dt: str, copy_GBps: float,
                 smoke: bool = False, warm_only: bool = False, check: bool = True) -> dict:
    """One (kind, op, implementation, shape): checked, then timed. Errors become records.
    ``warm_only``: the first call (it compiles into the shared caches) and the check, nothing
    timed. ``check``: compare the gradients with the float64 formula (done once, in the warm-up,
    not in every timing process)."""
    from ..kernels import rmsnorm_backward as B

    dtype = DTYPES[dt]
    device = env.current().device
    rec = {"kind": kind, "op": op, "impl": impl, "rows": rows, "cols": cols, "dtype": dt}
    per_sm = int(impl.split("/")[0]) if kind == "programs" else None
    one_row = kind in ("backward", "reduce") and impl in ("one_row", *REDUCE_TILES)
    programs = B.programs_for(rows, cols, dtype, device, per_sm=per_sm,
                              tile_rows=1 if one_row else None)
    if kind == "reduce":  # read the fp32 partials, write dw
        nbytes = programs * cols * 4 + cols * dtype.itemsize
    elif kind == "train":
        nbytes = traffic.training_bytes(op, rows, cols, dt, programs=programs)["total"]
    else:  # a peer's backward alone against the floor of ours (two-stage dw) at its shape
        step_name = ("rmsnorm_backward" if kind == "programs" else
                     BACKWARD_IMPLS.get((op, impl), BACKWARD_IMPLS[(op, "two_stage")]))
        nbytes = traffic.price(step_name, rows, cols, dt, programs=programs).bytes_total
    rec.update(bytes=nbytes, floor_us=nbytes / (copy_GBps * 1e3), programs=programs)
    started = time.perf_counter()
    try:
        w = torch.randn(cols, generator=torch.Generator(device=device).manual_seed(1),
                        device=device).to(dtype).requires_grad_(kind == "train")
        bundle = make_bundle(op, rows, cols, dtype, device=device)
        check_bundle = bundle
        if kind == "reduce":
            bundle = torch.randn((programs, cols), device=device)
            step = reduce_step(programs, cols, impl, torch.empty(cols, dtype=dtype, device=device))
            check_bundle = None
        elif kind == "train":
            step = train_step(impl, op, cols, dtype, w)
        elif impl in BACKWARD_PEERS:  # a peer's forward, then its backward alone, checked
            step, bundle, check_bundle = peer_backward_case(impl, op, w, bundle)
        else:  # the forward's saved tensors, then the backward alone
            residual = None if op == "rmsnorm" else bundle[1]
            _, s, rstd = B.forward(bundle[0], w, EPS, residual=residual)
            bundle = bundle[:2] if s is None else torch.stack([s, bundle[2], bundle[3]])
            if kind == "programs":
                step = backward_step(op, "two_stage", w, rstd, programs=programs)
            else:
                step = backward_step(op, impl, w, rstd)
            check_bundle = None  # the suite and the tests check these kernels
        # an in-place step writes dx over dy: its first call and its peak run on a copy, so the
        # check compares with the gradients the bundle asks for
        fresh = (lambda: bundle.clone()) if impl in MUTATES else (lambda: bundle)
        t0 = time.perf_counter()
        grads = step(fresh())
        _sync()
        rec["first_call_ms"] = (time.perf_counter() - t0) * 1e3
        if check and check_bundle is not None:
            rec["check_ok"], rec["check"] = check_gradients(op, check_bundle, w.detach(), grads)
        del grads
        if check and kind == "train":  # measured once, where the gradients are checked
            rec["peak_MiB"] = step_peak_MiB(step, fresh())
        if warm_only:
            rec["case_s"] = round(time.perf_counter() - started, 2)
            return rec
        t0 = time.perf_counter()
        step(bundle)
        _sync()
        wall_ms = (time.perf_counter() - t0) * 1e3
        us, how = time_rotating(step, bundle, nbytes, _reps(wall_ms, smoke))
        rec.update(us=us, method=how, pct_floor=100.0 * rec["floor_us"] / us)
        rec["case_s"] = round(time.perf_counter() - started, 2)  # where a process's time goes
    except Exception as e:  # noqa: BLE001 - a failing peer is a result, the sweep goes on
        rec.update(error=f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:300])
    return rec


def step_peak_MiB(step, bundle: torch.Tensor) -> float | None:
    """The memory one training step allocates beyond what exists before it (what autograd saves,
    the gradients, temporaries), in MiB: the caching allocator's peak. None off the GPU."""
    if not env.current().on_gpu:
        return None
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    grads = step(bundle)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    del grads
    return round(peak / 2**20, 2)


def determinism(rows: int, cols: int, dt: str, runs: int = DETERMINISM_RUNS) -> list[dict]:
    """Run each dw design ``runs`` times on the same inputs: how many distinct dw bit patterns,
    and how far apart (in units of the last place) the most distant two are."""
    from ..kernels import rmsnorm_backward as B

    dtype = DTYPES[dt]
    bundle = make_bundle("rmsnorm", rows, cols, dtype, seed=3)
    w = torch.randn(cols, device="cuda").to(dtype)
    out = []
    for mode in B.DW_MODES:
        dws = [B.backward(bundle[0], w, bundle[1], EPS, dw_mode=mode)[1] for _ in range(runs)]
        torch.cuda.synchronize()
        distinct = len({bytes(d.float().cpu().numpy().tobytes()) for d in dws})
        spread = max(int(checks.ulp_distance(a, b).max()) for a in dws for b in dws)
        out.append({"kind": "determinism", "impl": mode, "rows": rows, "cols": cols, "dtype": dt,
                    "runs": runs, "distinct": distinct, "max_ulp_apart": spread})
    return out


# ---------------------------------------------------------------- processes and the record

def cases(smoke: bool = False) -> list[dict]:
    """Every (kind, op, impl, shape) of one process's sweep, in the order it runs."""
    shapes = SMOKE_SHAPES if smoke else SHAPES
    out = []
    for rows, cols, dt in shapes:
        for op in OPS:
            # ours first, then the backward alone, then the peers (compiling ones last)
            out += [dict(kind="train", op=op, impl=i, rows=rows, cols=cols, dt=dt) for i in OURS]
            out += [dict(kind="backward", op=o, impl=d, rows=rows, cols=cols, dt=dt)
                    for (o, d) in BACKWARD_IMPLS if o == op]
            out += [dict(kind="train", op=op, impl=i, rows=rows, cols=cols, dt=dt)
                    for i in TRAIN_IMPLS if i not in OURS]
            out += [dict(kind="backward", op=op, impl=i, rows=rows, cols=cols, dt=dt)
                    for i in BACKWARD_PEERS]
    wide_impls = WIDE_DESIGNS if smoke else (*WIDE_DESIGNS, *BACKWARD_PEERS)
    for rows, cols, dt in (SMOKE_WIDE_SHAPES if smoke else WIDE_SHAPES):
        out += [dict(kind="backward", op=op, impl=i, rows=rows, cols=cols, dt=dt)
                for op in OPS for i in wide_impls]
    for rows, cols, dt in (SMOKE_SHAPES[:1] if smoke else PROGRAM_SHAPES):
        out += [dict(kind="programs", op="rmsnorm", impl=f"{n}/SM", rows=rows, cols=cols, dt=dt)
                for n in PROGRAMS_PER_SM]
    for rows, cols, dt in (SMOKE_SHAPES[:1] if smoke else REDUCE_SHAPES):
        out += [dict(kind="reduce", op="rmsnorm", impl=t, rows=rows, cols=cols, dt=dt)
                for t in REDUCE_TILES]
    return out


def case_key(d: dict) -> tuple:
    """What names a case: from a case of :func:`cases` (``dt``) or a record (``dtype``)."""
    dtype = d["dtype"] if "dtype" in d else d["dt"]
    return (d["kind"], d["op"], d["impl"], d["rows"], d["cols"], dtype)


def worker(spec: dict) -> dict:
    """One process's sweep (``spec``: smoke, liger_missing, and for the warm-up ``warm_only`` with
    ``only``, the indices of :func:`cases` this process compiles; ``check``: check every case,
    else only those whose indices ``recheck`` lists)."""
    from ..measure import timer

    env.require_gpu("Chapter 9's measurement")
    warm_only = spec.get("warm_only", False)
    copy_GBps = 1.0 if warm_only else timer.copy_bandwidth_GBps()
    every = cases(spec.get("smoke", False))
    recheck = set(spec.get("recheck", ()))
    recs = []
    for i in spec.get("only", range(len(every))):
        c = every[i]
        if c["impl"].startswith("liger") and spec.get("liger_missing"):
            continue
        recs.append(measure_case(c["kind"], c["op"], c["impl"], c["rows"], c["cols"], c["dt"],
                                 copy_GBps, spec.get("smoke", False), warm_only=warm_only,
                                 check=spec.get("check", True) or i in recheck))
    return {"copy_GBps": copy_GBps, "records": recs}


def aggregate(parts: list[dict]) -> list[dict]:
    """Median of the process medians per case, with their range; the first process's check.

    A case a process did not reach, or where it raised, is counted out of that process only;
    ``processes`` says how many processes timed each case."""
    by_key: dict = {}
    for index, part in enumerate(parts):
        for r in part["records"]:
            key = case_key(r)
            by_key.setdefault(key, []).append((index, r))
    out = []
    for key, items in by_key.items():
        timed = [r for _, r in items if "us" in r]
        first = items[0][1]
        rec = {k: first[k] for k in ("kind", "op", "impl", "rows", "cols", "dtype", "bytes",
                                     "programs") if k in first}
        for k in ("check_ok", "check", "method", "peak_MiB"):
            if k in first:
                rec[k] = first[k]
        errors = [r["error"] for _, r in items if "error" in r]
        if errors:
            rec["error"] = errors[0]
        if timed:
            times = [r["us"] for r in timed]
            floors = [r["floor_us"] for r in timed]
            rec.update(us=statistics.median(times), us_min=min(times), us_max=max(times),
                       process_us=times, processes=len(times),
                       floor_us=statistics.median(floors),
                       first_call_ms=timed[0].get("first_call_ms"))
            rec["pct_floor"] = 100.0 * rec["floor_us"] / rec["us"]
        out.append(rec)
    return out


def _run_process(spec: dict, index: int, log, timeout_s: float | None = None) -> dict | None:
    with tempfile.TemporaryDirectory() as tmp:
        spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "out.json"
        spec_path.write_text(json.dumps(spec))
        try:
            proc = subprocess.run([sys.executable, "-m", "fusedrms.book.ch09", "worker",
                                   "--spec", str(spec_path), "--out", str(out_path)],
                                  capture_output=True, text=True, timeout=timeout_s,
                                  env={**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": "1"})
        except subprocess.TimeoutExpired:
            log(f"[ch09] process {index + 1} passed its limit of {timeout_s:.0f} s")
            return None
        if proc.returncode != 0 or not out_path.exists():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            log(f"[ch09] process {index + 1} failed (exit {proc.returncode}): {' | '.join(tail)}")
            return None
        return json.loads(out_path.read_text())


COMPILE_COST_S = 6.0  # a cold torch.compile of forward and backward, one shape (H200 warm-up logs)
KEY_COST_S = 12.0  # the Triton kernels of one (op, columns, dtype): ours and Liger's, every design


def warm_parts(every: list[dict], workers: int) -> list[list[int]]:
    """Indices of ``every`` split over at most ``workers`` processes. The cases that share Triton
    kernels (same op, columns and dtype; rows do not change them) stay in one process, so each
    kernel compiles once; torch.compile's cases (one cold compile per shape) fill the gaps. The
    heaviest part goes first to the least loaded process."""
    groups: dict[tuple, list[int]] = {}
    units = []
    for i, c in enumerate(every):
        if c["impl"] == "torch.compile":
            units.append((COMPILE_COST_S, [i]))
        else:
            groups.setdefault((c["op"], c["cols"], c["dt"]), []).append(i)
    units += [(KEY_COST_S + 0.4 * len(g), g) for g in groups.values()]
    units.sort(key=lambda u: -u[0])
    workers = max(1, min(workers, len(units)))
    loads, parts = [0.0] * workers, [[] for _ in range(workers)]
    for cost, idx in units:
        k = loads.index(min(loads))
        loads[k] += cost
        parts[k] += idx
    return [sorted(p) for p in parts if p]


def warm_ahead(smoke: bool, workers: int, log) -> dict:
    """Every case's first call, the cases spread over ``workers`` processes side by side, so that
    the timing processes find torch.compile's and Triton's kernels in the shared on-disk caches.
    Each case's gradients are checked there too. Returns the warm-up's record per case key
    (``first_call_ms``: for torch.compile, its cold compile; ``check_ok``, ``check``)."""
    from concurrent.futures import ThreadPoolExecutor

    every = cases(smoke)
    specs = [{"smoke": smoke, "warm_only": True, "only": part}
             for part in warm_parts(every, workers)]
    workers = len(specs)
    t0 = time.time()
    with ThreadPoolExecutor(workers) as pool:
        parts = list(pool.map(lambda ix: _run_process(ix[1], ix[0], log, WARM_TIMEOUT_S),
                              enumerate(specs)))
    first = {case_key(r): r
             for p in parts if p for r in p["records"] if "first_call_ms" in r}
    raised = [r for r in first.values() if "error" in r]
    log(f"[ch09] warm-up: {len(first) - len(raised)} of {len(every)} cases compiled and checked in "
        f"{workers} processes side by side, {time.time() - t0:.0f} s"
        + ("; raised: " + "; ".join(f"{r['impl']} {r['kind']} {r['op']} {r['rows']}x{r['cols']} "
                                     f"{r['dtype']}: {r['error']}" for r in raised[:4])
           if raised else ""))
    return first


def not_checked(every: list[dict], first: dict) -> list[int]:
    """The indices of ``every`` whose warm-up record is missing or raised, and so has no check
    (11 cases of an H100 recording at 4a06932, eight warm-up processes side by side on 80 GB;
    the largest at 16384 x 8192). A timing process checks them, alone on the GPU."""
    out = []
    for i, c in enumerate(every):
        warm = first.get(case_key(c))
        if warm is None or "error" in warm:
            out.append(i)
    return out


def record(out_dir, tune: bool = False, log=print, smoke: bool = False, processes: int = 3,
           timeout_s: float | None = None) -> list[Path]:
    """Measure and write ``out_dir/ch09_backward.json``; returns the files written.

    Every case is compiled first, side by side (:func:`warm_ahead`), then timed in each of
    ``processes`` processes, one after the other. A case not timed in every process fails the
    recording (its file is still written, so the failure can be read).
    ``smoke``: one small shape, one process, few repetitions (the same code paths, in seconds).
    ``tune`` is accepted for the record command and unused (nothing here is tuned)."""
    from ..measure import harness

    env.require_gpu("Chapter 9's measurement")
    out_dir = Path(out_dir)
    if smoke:
        processes = 1
    timeout_s = timeout_s or PROCESS_TIMEOUT_S
    start = time.time()
    # Liger's import takes seconds: it runs while the warm-up compiles (a warm-up process
    # without Liger records its cases as errors, which only the timing processes would report)
    pool = concurrent.futures.ThreadPoolExecutor(1)
    liger = pool.submit(liger_status)
    pool.shutdown(wait=False)
    first = (warm_ahead(smoke, harness.warm_worker_count(harness.Settings()), log)
             if processes > 1 else {})  # one process compiles as it goes: nothing to share
    missing = liger.result()
    recheck = not_checked(cases(smoke), first) if first else []
    if recheck:
        log(f"[ch09] the first timing process checks the {len(recheck)} case(s) the warm-up did not")
    parts = []
    for index in range(processes):
        log(f"[ch09] process {index + 1}/{processes}")
        # the warm-up checked every case: the timing processes only time (unless none ran), but
        # the first one to finish checks what the warm-up did not (aggregate keeps its check)
        spec = {"smoke": smoke, "liger_missing": bool(missing), "check": not first}
        if recheck and not parts:
            spec["recheck"] = recheck
        part = _run_process(spec, index, log, timeout_s)
        if part is not None:
            parts.append(part)
            slow = sorted((r for r in part["records"] if "case_s" in r),
                          key=lambda r: -r["case_s"])[:3]
            log(f"[ch09] process {index + 1}: {len(part['records'])} cases, "
                f"copy {part['copy_GBps']:.0f} GB/s ({time.time() - start:.0f} s); slowest: "
                + ", ".join(f"{r['impl']} {r['op']} {r['rows']}x{r['cols']} {r['case_s']} s"
                            for r in slow))
    if not parts:
        raise RuntimeError("no measuring process finished; see the log above")
    recs = aggregate(parts)
    for r in recs:
        warm = first.get(case_key(r), {})
        if "first_call_ms" in warm and r["impl"] == "torch.compile":
            r["compile_s"] = round(warm["first_call_ms"] / 1e3, 3)
        for k in ("check_ok", "check", "peak_MiB"):  # checked once, in the warm-up
            if k in warm and k not in r:
                r[k] = warm[k]
    if missing:
        recs.append({"kind": "peer_missing", "impl": "liger", "reason": missing})
    try:
        recs += determinism(*(SMOKE_SHAPES[0] if smoke else DETERMINISM_SHAPE))
    except Exception as e:  # noqa: BLE001
        recs.append({"kind": "determinism", "error": f"{type(e).__name__}: {e}"[:300]})
    path = records.write(out_dir / next(iter(FILES)), recs, extra={
        "smoke": smoke, "processes": len(parts), "copy_GBps": [p["copy_GBps"] for p in parts],
        "eps": EPS, "timer": next((r["method"] for r in recs if "method" in r), None),
        "seconds": round(time.time() - start, 1)})
    log(f"[ch09] wrote {path} in {time.time() - start:.0f} s")
    untimed = [r for r in recs if r.get("kind") in ("train", "backward", "programs", "reduce")
               and r.get("processes", 0) < processes]
    problems = ([f"{len(untimed)} case(s) not timed in all {processes} processes ("
                 + "; ".join(f"{r['impl']} {r['op']} {r['rows']}x{r['cols']} {r['dtype']}: "
                             f"{r.get('error', 'not reached')}" for r in untimed[:6]) + ")"]
                if untimed else []) + ([f"Liger is missing ({missing})"] if missing else [])
    if problems:
        raise harness.Incomplete("chapter 9: " + "; ".join(problems))
    return [path]


# ---------------------------------------------------------------- command line

def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fusedrms.book.ch09", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd")
    w = sub.add_parser("worker", help="internal: one measuring process")
    w.add_argument("--spec", required=True)
    w.add_argument("--out", required=True)
    p.add_argument("--out", default=".", help="folder for ch09_backward.json")
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--processes", type=int, default=3)
    p.add_argument("--timeout", type=float, default=None,
                   help="a hard limit per timing process, in seconds")
    args = p.parse_args(argv)
    if args.cmd == "worker":
        spec = json.loads(Path(args.spec).read_text())
        Path(args.out).write_text(json.dumps(worker(spec)))
        return 0
    if not env.current().on_gpu:
        print("chapter 9's measurement needs a GPU; the chapter shows the recorded one.",
              file=sys.stderr)
        return 2
    record(args.out, smoke=args.smoke, processes=args.processes, timeout_s=args.timeout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
