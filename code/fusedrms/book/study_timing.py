"""The capstone study's timing processes (:mod:`fusedrms.book.study` starts them): the candidate
launches and every peer, timed by the rotating-input graph timer; Python's per-call cost; the
process Nsight Compute profiles. Each reports on stdout, one ``@@``-tagged JSON line a result.
"""
from __future__ import annotations

import json
import statistics
import threading
import time
from pathlib import Path

TAG = "@@"
EPS = 1e-5

# (rows, cols, dtype): the most informative first, so a deadline cuts the least useful tail.
SHAPES = ([(16384, 8192, "bf16"), (4096, 8192, "bf16"), (16384, 16384, "bf16"),
           (1024, 16384, "bf16"), (4096, 16384, "bf16"), (16384, 2048, "bf16"),
           (16384, 4096, "bf16"), (4096, 4096, "bf16"), (1, 4096, "bf16"), (1, 8192, "bf16")]
          + [(r, c, "bf16") for r in (1024, 128, 4096, 1, 16384) for c in (2048, 4096, 8192, 16384)]
          + [(16384, 8192, "fp16"), (4096, 4096, "fp16"), (16384, 8192, "fp32"),
             (4096, 4096, "fp32")])
SHAPES = list(dict.fromkeys(SHAPES))
# chapter 7's lever -> effect: the shapes that carry the story (large, mid, wide small batches)
LEVER_SHAPES = [(16384, 8192, "bf16"), (4096, 8192, "bf16"), (1024, 16384, "bf16"),
                (128, 16384, "bf16"), (16384, 16384, "bf16"),
                # where a rule on the batch replaced the table's launch (one row; rows split at
                # 16 of 65,536 columns; the exchange and two-pass rules at 1024; the whole row
                # at 32,768): the launch before, timed beside the one in use (BEFORE_RULE)
                (1, 4096, "bf16"), (16, 65536, "bf16"), (1024, 65536, "bf16"),
                (4096, 32768, "bf16")]
# a smoke run times one of them: every candidate still compiles and launches once per process
SMOKE_LEVER_SHAPES = [(128, 16384, "bf16")]
# where torch.compile was faster in the recording of 2c30b96 (1.13-1.52x): rows of 32 KB or more
WIDE_LEVER_SHAPES = [(4096, 32768, "bf16"), (16384, 32768, "bf16"), (16384, 16384, "bf16"),
                     (16384, 16384, "fp32"), (16384, 8192, "fp32"), (4096, 16384, "fp32")]
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def emit(kind: str, **payload) -> None:
    print(TAG + json.dumps({"kind": kind, **payload}, default=str), flush=True)


# ---------------------------------------------------------------- the candidates

def candidates(cols: int, dtype) -> dict:
    """name -> LaunchConfig: each a hypothesis from reading Inductor's and Liger's kernels.

    - ``liger``: one row per program, the whole row in registers, Liger's warps rule
      (4; 8 from 2048 columns; 16 from 8192; 32 from 32768);
    - ``whole_r1_w{2x}``: the same with twice the threads (fewer registers, more loads in flight);
    - ``inductor_c{chunk}_w16``: Inductor's shape: two loops over column chunks, one row per
      program, 512 threads, pass 1 evict_last, pass 2 evict_first, w evict_last;
    - ``two_pass_c4096_w16``: the same with wider chunks (the current 16384 winner);
    - ``whole_r2_w16``: two rows per program (more bytes in flight per program);
    - ``two_pass_c2048_w16_p{n}`` (rows of 16384 columns or more): Inductor's shape as a
      persistent grid of n programs per SM, so that the rows between pass 1 and pass 2 (x and r
      of every program in flight) fit in L2 instead of being read from DRAM twice.
    """
    import triton

    from ..kernels import add_rmsnorm as A

    block = triton.next_power_of_2(cols)
    liger_warps = 32 if block >= 32768 else 16 if block >= 8192 else 8 if block >= 2048 else 4
    out = {f"liger_w{liger_warps}": A.LaunchConfig(1, liger_warps)}
    if liger_warps * 2 <= 32:
        out[f"whole_r1_w{liger_warps * 2}"] = A.LaunchConfig(1, liger_warps * 2)
    if block <= 8192:
        out["whole_r2_w16"] = A.LaunchConfig(2, 16)
    for chunk in (2048, 4096):
        if chunk < block:
            out[f"two_pass_c{chunk}_w16"] = A.LaunchConfig(1, 16, 1, None, chunk)
    if block >= 4096:
        out["two_pass_c1024_w8"] = A.LaunchConfig(1, 8, 1, None, 1024)
    if block >= 16384:
        for programs_per_sm in (1, 2):
            out[f"two_pass_c2048_w16_p{programs_per_sm}"] = A.LaunchConfig(1, 16, 1, programs_per_sm,
                                                                           2048)
    return out


# The table's entry for the width, launched as it is: what the batch rules (one row, split,
# exchange, two passes, large and mid batches) replaced where they apply, the launch in use where
# none does
BEFORE_RULE = "ours.table"
# the launch in use timed again after every other launch of the shape: the same kernel twice in
# one process, the run-to-run change a lever must beat to count
REPEAT = "ours.current_again"
# timed beside the candidates, never a candidate for the table: the study's controls and levers
# (the in-place evict_last launch is the lever's in-place twin, against ours.current_in_place)
CONTROLS = ("ours.current_in_place", "ours.hinted_loads", "ours.without_pdl", "ours.evict_last_loads",
            "ours.evict_last_in_place", BEFORE_RULE, REPEAT)


def _flagged(fn, module, name: str, value):
    """``fn`` with ``module.name`` (a kernels module's flag) set to ``value`` for the call."""
    def call(*args):
        before = getattr(module, name)
        setattr(module, name, value)
        try:
            return fn(*args)
        finally:
            setattr(module, name, before)
    return call


def _hinted(fn):
    """``fn`` with the whole-row kernel as it was before (x, r evict_first; w after the
    reduction): the control for the cache-hint lever."""
    from ..kernels import add_rmsnorm as A

    return _flagged(fn, A, "HINTED_LOADS", True)


def _evict_last(fn):
    """``fn`` with x and r of the whole-row kernel loaded evict_last: the eviction lever (the lines
    read outlive the lines written in L2)."""
    from ..kernels import add_rmsnorm as A

    return _flagged(fn, A, "LOAD_EVICTION", "evict_last")


def _without_pdl(fn):
    """``fn`` launched without programmatic dependent launch (each call waits for the one before
    to finish before it starts launching): the control for that lever."""
    from ..kernels import direct_launch as D

    return _flagged(fn, D, "PDL", False)


def impls(op: str, cols: int, dtype) -> dict:
    """name -> (callable(x, r, w, eps), mutates_inputs)."""
    import torch.nn.functional as F

    from ..kernels import add_rmsnorm as A
    from ..kernels import peers

    out = {}
    table = A.choose_config(cols, dtype)[0]
    if op == "fused":
        out["ours.current"] = (lambda x, r, w, e: A.add_rmsnorm(x, r, w, e), False)
        out["ours.hinted_loads"] = (_hinted(out["ours.current"][0]), False)
        out["ours.evict_last_loads"] = (_evict_last(out["ours.current"][0]), False)
        out["ours.without_pdl"] = (_without_pdl(out["ours.current"][0]), False)
        for name, cfg in {**candidates(cols, dtype), BEFORE_RULE[5:]: table}.items():
            out[f"ours.{name}"] = (lambda x, r, w, e, c=cfg: A.add_rmsnorm(x, r, w, e, config=c),
                                   False)
        out["torch.compile"] = (peers.compiled_add_rmsnorm, False)
        out["torch.rms_norm_add"] = (lambda x, r, w, e: F.rms_norm(x + r, (cols,), w, e), False)
        out["torch.eager_chain"] = (peers.eager_chain, False)
        out[REPEAT] = out["ours.current"]
        return out
    out["ours.current"] = (lambda x, r, w, e: A.add_rmsnorm_residual(x, r, w, e), False)
    out["ours.hinted_loads"] = (_hinted(out["ours.current"][0]), False)
    out["ours.evict_last_loads"] = (_evict_last(out["ours.current"][0]), False)
    out["ours.without_pdl"] = (_without_pdl(out["ours.current"][0]), False)
    for name, cfg in {**candidates(cols, dtype), BEFORE_RULE[5:]: table}.items():
        out[f"ours.{name}"] = (lambda x, r, w, e, c=cfg:
                               A.add_rmsnorm_residual(x, r, w, e, config=c), False)
    out["torch.compile"] = (compiled_residual, False)
    out["liger.fused_add_rms_norm"] = (liger_fused_add, False)
    out[REPEAT] = out["ours.current"]  # the last launch before the in-place ones change the inputs
    out["ours.current_in_place"] = (lambda x, r, w, e:
                                    A.add_rmsnorm_residual(x, r, w, e, in_place=True), True)
    out["ours.evict_last_in_place"] = (_evict_last(out["ours.current_in_place"][0]), True)
    out["flashinfer.fused_add_rmsnorm"] = (flashinfer_fused_add, True)
    return out


_COMPILED_RES = {}


def compiled_residual(x, r, w, eps):
    from .. import reference
    from ..kernels import peers

    if "sc" not in _COMPILED_RES:
        _COMPILED_RES["sc"] = peers.StaticCompiled(reference.add_rmsnorm_residual,
                                                   "torch.compile_residual")
    return _COMPILED_RES["sc"].get(x, r, w, eps=eps)(x, r, w, eps)


def liger_fused_add(x, r, w, eps):
    from liger_kernel.ops.fused_add_rms_norm import fused_add_rms_norm_forward

    out = fused_add_rms_norm_forward(x, r, w, eps, 0.0, "llama")
    return out[0], out[1]


_FI_BUILD: dict = {}


def start_flashinfer_build() -> None:
    """Build FlashInfer's library in a thread (nvcc takes ~10-20 s; the timing goes on)."""
    from ..kernels import peers_flashinfer

    def build():
        try:
            t = time.time()
            _FI_BUILD["path"] = str(peers_flashinfer.build())
            _FI_BUILD["seconds"] = time.time() - t
        except Exception as e:  # noqa: BLE001 - reported as missing by the peer itself
            _FI_BUILD["error"] = f"{type(e).__name__}: {e}"[:2000]

    _FI_BUILD["thread"] = threading.Thread(target=build, daemon=True)
    _FI_BUILD["thread"].start()


def flashinfer_fused_add(x, r, w, eps):
    from ..kernels import peers_flashinfer

    if "thread" in _FI_BUILD:
        _FI_BUILD["thread"].join(timeout=180)
    return peers_flashinfer.fused_add_rmsnorm(x, r, w, eps)


def check(op: str, out, x, r, w) -> tuple[bool, str]:
    from .. import checks, reference
    import torch

    idx = torch.tensor(sorted({0, x.shape[0] // 2, x.shape[0] - 1}), device=x.device)
    f64 = torch.float64
    if op == "fused":
        expected = reference.add_rmsnorm(x[idx], r[idx], w, EPS, accum=f64, out_dtype=f64)
        rep = checks.allclose(out[idx], expected)
    else:
        y_exp, s_exp = reference.add_rmsnorm_residual(x[idx], r[idx], w, EPS, accum=f64)
        y, s = out
        rep = checks.allclose(y[idx], y_exp)
        if rep.ok:
            rep = checks.allclose(s[idx], s_exp.to(f64))
    return bool(rep.ok), str(rep)[:300]


def input_sets(rows: int, cols: int, dtype, l2: int, device="cuda", seed: int = 0) -> list:
    """(x, r) sets for the rotating timer, the first random and the others its copies, as many as
    :func:`~fusedrms.measure.timer.rotating_sets` asks for the fused op's bytes a call (the traffic
    model's; the residual op moves more), plus one shared weight."""
    import torch

    from .. import dtypes
    from ..measure import harness, timer

    k = timer.rotating_sets(harness.floor_bytes("add_rmsnorm", rows, cols, dtypes.short(dtype)), l2)
    g = torch.Generator(device=device).manual_seed(seed)
    w = (1 + 0.1 * torch.randn(cols, device=device, generator=g)).to(dtype)
    x, r = (torch.randn(rows, cols, device=device, generator=g).to(dtype) for _ in range(2))
    return [(x, r)] + [(x.clone(), r.clone()) for _ in range(k - 1)], w


def _sync(device: str) -> None:
    import torch

    if device != "cpu":
        torch.cuda.synchronize()


def _time_calls(calls, device: str, reps: int = 9) -> list[float]:
    """The one timer on a GPU; on the CPU (the study's own tests) a wall clock over the calls."""
    from ..measure import timer

    if device != "cpu":
        return timer.time_rotating(calls, reps=reps)
    out = []
    for _ in range(2):
        t0 = time.perf_counter()
        for c in calls:
            c()
        out.append((time.perf_counter() - t0) * 1e6 / len(calls))
    return out


def run_timing_worker(out_dir: Path, deadline: float, index: int, device: str = "cuda",
                      shapes=None) -> None:
    import torch

    from .. import env
    from ..kernels import peers, peers_flashinfer
    from ..measure import timer

    shapes = SHAPES if shapes is None else shapes
    start_flashinfer_build()
    if device == "cpu":
        bw, l2, gpu = None, 1 << 10, None  # two input sets: the interpreter is slow
    else:
        bw, l2, gpu = timer.copy_bandwidth_GBps(), timer.l2_bytes() or (50 << 20), env.current().gpu_name
    emit("copy", GBps=bw, l2_bytes=l2, process=index, gpu=gpu, torch=torch.__version__)
    for rows, cols, dt in shapes:
        dtype = getattr(torch, DTYPES[dt])
        if time.time() > deadline:
            emit("skipped", rows=rows, cols=cols, dtype=dt, process=index)
            continue
        try:
            sets, w = input_sets(rows, cols, dtype, l2, device)
        except Exception as e:  # noqa: BLE001
            emit("record", rows=rows, cols=cols, dtype=dt, op="*", impl="*", process=index,
                 status=f"error: {type(e).__name__}: {e}"[:300])
            continue
        for op in ("fused", "residual"):
            for name, (fn, mutates) in impls(op, cols, dtype).items():
                if time.time() > deadline:
                    break
                rec = dict(rows=rows, cols=cols, dtype=dt, op=op, impl=name, process=index,
                           sets=len(sets))
                if device == "cpu" and name == "torch.compile":
                    continue  # tens of seconds per shape on a CPU
                try:
                    x0, r0 = sets[0]
                    xc, rc = (x0.clone(), r0.clone()) if mutates else (x0, r0)
                    t0 = time.perf_counter()
                    out = fn(xc, rc, w, EPS)
                    _sync(device)
                    rec["first_call_ms"] = (time.perf_counter() - t0) * 1e3
                    rec["correct"], rec["check"] = check(op, out, x0, r0, w)
                    del out, xc, rc
                    calls = [(lambda f=fn, x=x, r=r: f(x, r, w, EPS)) for x, r in sets]
                    samples = _time_calls(calls, device)
                    rec.update(status="ok", median_us=statistics.median(samples),
                               min_us=min(samples), max_us=max(samples))
                except Exception as e:  # noqa: BLE001 - a peer that fails is reported, not fatal
                    rec["status"] = f"error: {type(e).__name__}: {e}"[:400]
                    if "illegal" in str(e).lower() or "CUDA error" in str(e):
                        emit("record", **rec)
                        emit("fatal", error=rec["status"])
                        return
                emit("record", **rec)
            peers.COMPILED_ADD_RMSNORM.reset()
            if "sc" in _COMPILED_RES:
                _COMPILED_RES["sc"].reset()
        del sets, w
        if device != "cpu":
            torch.cuda.empty_cache()
    emit("flashinfer", status=peers_flashinfer.status(),
         build={k: v for k, v in _FI_BUILD.items() if k != "thread"})
    emit("done", process=index)


# ---------------------------------------------------------------- python per-call cost

def run_python_worker(out_dir: Path, deadline: float, device: str = "cuda",
                      calls: int = 200) -> None:
    import cProfile
    import io
    import pstats

    import torch
    import torch.nn.functional as F

    from ..kernels import add_rmsnorm as A
    from ..kernels import peers, peers_flashinfer

    rows, cols = 1, 4096
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(rows, cols, device=device, generator=g).to(torch.bfloat16)
    r = torch.randn(rows, cols, device=device, generator=g).to(torch.bfloat16)
    w = (1 + 0.1 * torch.randn(cols, device=device, generator=g)).to(torch.bfloat16)

    def full_path(fn):  # every check and Triton's own launch path, on every call
        def call(*a):
            A.FAST_PATH = False
            try:
                return fn(*a)
            finally:
                A.FAST_PATH = True
        return call

    cases = {
        ("fused", "ours.current"): lambda: A.add_rmsnorm(x, r, w, EPS),
        ("fused", "ours.full_path"): lambda: full_path(A.add_rmsnorm)(x, r, w, EPS),
        ("fused", "torch.rms_norm_add"): lambda: F.rms_norm(x + r, (cols,), w, EPS),
        ("fused", "torch.eager_chain"): lambda: peers.eager_chain(x, r, w, EPS),
        ("fused", "torch.compile"): lambda: peers.compiled_add_rmsnorm(x, r, w, EPS),
        ("residual", "ours.current"): lambda: A.add_rmsnorm_residual(x, r, w, EPS),
        ("residual", "ours.full_path"): lambda: full_path(A.add_rmsnorm_residual)(x, r, w, EPS),
        ("residual", "torch.compile"): lambda: compiled_residual(x, r, w, EPS),
        ("residual", "liger.fused_add_rms_norm"): lambda: liger_fused_add(x, r, w, EPS),
        ("residual", "flashinfer.fused_add_rmsnorm"):
            lambda: peers_flashinfer.fused_add_rmsnorm(x, r, w, EPS),
    }
    for (op, name), fn in cases.items():
        if time.time() > deadline:
            emit("py", op=op, impl=name, status="skipped: time budget")
            continue
        if device == "cpu" and name == "torch.compile":
            continue
        try:
            for _ in range(min(20, calls)):
                fn()
            _sync(device)
            per = []
            for _ in range(5):
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn()
                _sync(device)
                per.append((time.perf_counter() - t0) * 1e6 / calls)
            emit("py", op=op, impl=name, status="ok", us_per_call=statistics.median(per),
                 samples=per)
        except Exception as e:  # noqa: BLE001
            emit("py", op=op, impl=name, status=f"error: {type(e).__name__}: {e}"[:300])
    # where the microseconds of the current wrapper go
    try:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(calls + 100):
            full_path(A.add_rmsnorm)(x, r, w, EPS)
        prof.disable()
        _sync(device)
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(30)
        (out_dir / "python_profile_capstone_fused.txt").write_text(buf.getvalue())
    except Exception as e:  # noqa: BLE001
        emit("py", op="profile", impl="cProfile", status=f"error: {e}"[:300])


# ---------------------------------------------------------------- the process Nsight Compute profiles

def run_ncu_target(which: str) -> None:
    """The process ncu profiles: one call of one implementation at 16384x8192 bf16, after its
    warm-up."""
    import torch

    from ..kernels import add_rmsnorm as A
    from ..kernels import peers
    from ..measure import ncu

    if which.startswith("fp8"):
        from ..kernels import rmsnorm_fp8 as Q
        from ..kernels import rmsnorm_fp8_spec as spec

        xq, wq = spec.make_inputs(16384, 7168, device="cuda")
        fn = (lambda: Q.rmsnorm_fp8_fused(xq, wq, contract="exact")) if which == "fp8_fused" else (
            lambda: Q.rmsnorm_fp8_approx(xq, wq, num_warps=4))
        ncu.profile_one_call(fn, warmup=3)
        return
    rows, cols = 16384, 8192
    x = torch.randn(rows, cols, device="cuda").to(torch.bfloat16)
    r = torch.randn(rows, cols, device="cuda").to(torch.bfloat16)
    w = (1 + 0.1 * torch.randn(cols, device="cuda")).to(torch.bfloat16)
    fn = {"ours": lambda: A.add_rmsnorm(x, r, w, EPS),
          "ours_residual": lambda: A.add_rmsnorm_residual(x, r, w, EPS),
          "ours_two_pass": lambda: A.add_rmsnorm(x, r, w, EPS,
                                                  config=A.LaunchConfig(1, 16, 1, None, 2048)),
          "inductor": lambda: peers.compiled_add_rmsnorm(x, r, w, EPS),
          "liger": lambda: liger_fused_add(x, r, w, EPS)}[which]
    ncu.profile_one_call(fn, warmup=3)
