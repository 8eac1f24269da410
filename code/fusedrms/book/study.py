"""The capstone performance study (chapters 7 and 8): one entry point, one GPU call, bounded time.

    python -m fusedrms.book.study --out DIR [--budget 360]

Steps, each in its own process(es), each writing JSON into DIR as soon as it has a result; a hard
deadline stops what is left (its records say "skipped: time budget"):

1. ``timing``: candidate launches of ``capstone.fused`` and ``capstone.fused_residual`` beside
   every peer (torch.compile per shape, F.rms_norm(x + r), the eager chain, Liger, FlashInfer),
   timed by :func:`fusedrms.measure.timer.time_rotating` (a CUDA graph replaying calls over
   rotating input sets larger than 4x L2), in 3 processes one after another; the result is the
   median of the process medians. The first process logs Inductor's generated code.
2. ``python``: microseconds per call back to back from Python (no graph) at 1x4096 bf16.
3. ``fp8``: the exact fused FP8 kernel beside the diagnostic one that drops exactness.
4. ``ncu``: Nsight Compute on ours, Inductor's and Liger's kernel at 16384x8192 bf16.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

TAG = "@@"
DEFAULT_BUDGET_S = 360.0
L2_MULTIPLE = 4  # rotating input sets hold more than this many L2s
MAX_SETS = 200
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
                (128, 16384, "bf16")]
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
PROCESS_SHARES = (0.5, 0.25, 0.25)  # of the timing step; the first process compiles everything
STEP_SHARES = {"timing": 0.60, "python": 0.08, "fp8": 0.10, "ncu": 0.22}


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
    - ``whole_r2_w16``: two rows per program (more bytes in flight per program).
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
    return out


def impls(op: str, cols: int, dtype) -> dict:
    """name -> (callable(x, r, w, eps), mutates_inputs)."""
    import torch.nn.functional as F

    from ..kernels import add_rmsnorm as A
    from ..kernels import peers

    out = {}
    if op == "fused":
        out["ours.current"] = (lambda x, r, w, e: A.add_rmsnorm(x, r, w, e), False)
        for name, cfg in candidates(cols, dtype).items():
            out[f"ours.{name}"] = (lambda x, r, w, e, c=cfg: A.add_rmsnorm(x, r, w, e, config=c),
                                   False)
        out["torch.compile"] = (peers.compiled_add_rmsnorm, False)
        out["torch.rms_norm_add"] = (lambda x, r, w, e: F.rms_norm(x + r, (cols,), w, e), False)
        out["torch.eager_chain"] = (peers.eager_chain, False)
        return out
    out["ours.current"] = (lambda x, r, w, e: A.add_rmsnorm_residual(x, r, w, e), False)
    for name, cfg in candidates(cols, dtype).items():
        out[f"ours.{name}"] = (lambda x, r, w, e, c=cfg:
                               A.add_rmsnorm_residual(x, r, w, e, config=c), False)
    out["torch.compile"] = (compiled_residual, False)
    out["liger.fused_add_rms_norm"] = (liger_fused_add, False)
    out["ours.current_in_place"] = (lambda x, r, w, e:
                                    A.add_rmsnorm_residual(x, r, w, e, in_place=True), True)
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
    """Enough (x, r) sets that together they exceed L2_MULTIPLE x L2 (at least 2, at most
    MAX_SETS), plus one shared weight."""
    import torch

    size = torch.empty((), dtype=dtype).element_size()
    per_set = 2 * rows * cols * size
    k = max(2, min(MAX_SETS, math.ceil(L2_MULTIPLE * l2 / per_set)))
    g = torch.Generator(device=device).manual_seed(seed)
    w = (1 + 0.1 * torch.randn(cols, device=device, generator=g)).to(dtype)
    sets = [(torch.randn(rows, cols, device=device, generator=g).to(dtype),
             torch.randn(rows, cols, device=device, generator=g).to(dtype)) for _ in range(k)]
    return sets, w


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


# ---------------------------------------------------------------- FP8: exactness's price

FP8_SHAPES = ((16384, 7168), (4096, 7168), (16384, 4096))


def run_fp8_worker(out_dir: Path, deadline: float, device: str = "cuda",
                   shapes=FP8_SHAPES) -> None:
    import torch

    from ..kernels import rmsnorm_fp8 as Q
    from ..measure import timer

    if device == "cpu":
        bw, l2 = 1.0, 1 << 10
    else:
        bw, l2 = timer.copy_bandwidth_GBps(), timer.l2_bytes() or (50 << 20)
    variants = {"fp8.fused": lambda x, w: Q.rmsnorm_fp8_fused(x, w),
                "fp8.fused_baseline": lambda x, w: Q.rmsnorm_fp8_fused(x, w,
                                                                       config=Q.baseline_config(x.shape[1])),
                "fp8.approx_w4": lambda x, w: Q.rmsnorm_fp8_approx(x, w, num_warps=4),
                "fp8.approx_w8": lambda x, w: Q.rmsnorm_fp8_approx(x, w, num_warps=8),
                "fp8.approx_w16": lambda x, w: Q.rmsnorm_fp8_approx(x, w, num_warps=16)}
    for rows, cols in shapes:
        floor_bytes = rows * cols * 2 + rows * cols + rows * math.ceil(cols / 128) * 4 + cols * 2
        floor_us = floor_bytes / (bw * 1e3)
        per_set = rows * cols * 2
        k = max(2, min(MAX_SETS, math.ceil(L2_MULTIPLE * l2 / per_set)))
        xs = [Q.make_inputs(rows, cols, seed=i, device=device) for i in range(k)]
        ref_codes, ref_scales = Q.reference(*xs[0])
        for name, fn in variants.items():
            if time.time() > deadline:
                emit("fp8", rows=rows, cols=cols, impl=name, status="skipped: time budget")
                continue
            rec = dict(rows=rows, cols=cols, impl=name, floor_us=floor_us, copy_GBps=bw)
            try:
                codes, scales = fn(*xs[0])
                _sync(device)
                rec["differing_codes"] = int(Q.differing_codes(codes, ref_codes))
                rec["scale_max_rel_diff"] = float(((scales - ref_scales).abs()
                                                   / ref_scales.abs().clamp_min(1e-30)).max())
                calls = [(lambda f=fn, x=x, w=w: f(x, w)) for x, w in xs]
                samples = _time_calls(calls, device)
                med = statistics.median(samples)
                rec.update(status="ok", median_us=med, pct_of_floor=100 * floor_us / med)
            except Exception as e:  # noqa: BLE001
                rec["status"] = f"error: {type(e).__name__}: {e}"[:300]
            emit("fp8", **rec)
        del xs
        if device != "cpu":
            torch.cuda.empty_cache()
    if device == "cpu":
        return
    # SASS of the exact and the diagnostic kernel (instruction mix per element)
    try:
        x, w = Q.make_inputs(4, 7168, device="cuda")
        Q.rmsnorm_fp8_fused(x, w)
        Q.rmsnorm_fp8_approx(x, w)
        for name, kernel in (("fused", Q.rmsnorm_fp8_fused_kernel),
                             ("fused_split", Q.rmsnorm_fp8_fused_split_kernel),
                             ("fused_rows", Q.rmsnorm_fp8_fused_rows_kernel),
                             ("approx", Q.rmsnorm_fp8_approx_kernel)):
            sass_dump(kernel, out_dir / f"fp8_{name}")
    except Exception as e:  # noqa: BLE001
        emit("fp8", impl="sass", status=f"error: {type(e).__name__}: {e}"[:300])


def sass_dump(kernel, stem: Path) -> None:
    """Write each compiled variant's SASS (cuobjdump) and an opcode histogram as JSON."""
    import collections
    import re

    cuobjdump = shutil.which("cuobjdump")
    cache = getattr(kernel, "device_caches", None) or getattr(kernel, "cache", None)
    found = []
    if cache is None:
        return
    for dev_cache in (cache.values() if isinstance(cache, dict) else [cache]):
        entries = dev_cache[0] if isinstance(dev_cache, tuple) else dev_cache
        for compiled in entries.values():
            asm = getattr(compiled, "asm", {})
            if "cubin" in asm:
                found.append(compiled)
    hist_all = []
    for i, compiled in enumerate(found):
        sass = compiled.asm.get("sass")
        if not sass and cuobjdump:
            cubin = stem.with_suffix(f".{i}.cubin")
            cubin.write_bytes(compiled.asm["cubin"])
            sass = subprocess.run([cuobjdump, "--dump-sass", str(cubin)], capture_output=True,
                                  text=True, timeout=60).stdout
            cubin.unlink()
        if not sass:
            continue
        stem.with_suffix(f".{i}.sass.txt").write_text(sass)
        ops = collections.Counter(m.group(1).split(".")[0] for m in
                                  re.finditer(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", sass))
        hist_all.append({"variant": i, "n_regs": getattr(compiled, "n_regs", None),
                         "n_spills": getattr(compiled, "n_spills", None),
                         "metadata": {k: str(v) for k, v in
                                      getattr(compiled.metadata, "_asdict", lambda: {})().items()
                                      if k in ("num_warps", "name", "shared")},
                         "opcodes": dict(ops.most_common())})
    stem.with_suffix(".sass_hist.json").write_text(json.dumps(hist_all, indent=1))


# ---------------------------------------------------------------- Nsight Compute

NCU_SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats",
                "MemoryWorkloadAnalysis")
NCU_METRICS = "dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum"


def run_ncu_target(which: str) -> None:
    """The process ncu profiles: a few calls of one implementation at 16384x8192 bf16."""
    import torch

    from ..kernels import add_rmsnorm as A
    from ..kernels import peers

    if which.startswith("fp8"):
        from ..kernels import rmsnorm_fp8 as Q

        xq, wq = Q.make_inputs(16384, 7168, device="cuda")
        fn = (lambda: Q.rmsnorm_fp8_fused(xq, wq)) if which == "fp8_fused" else (
            lambda: Q.rmsnorm_fp8_approx(xq, wq, num_warps=4))
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
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
    for _ in range(3):
        fn()
    torch.cuda.synchronize()


NCU_TARGETS = {"fp8_fused": "regex:rmsnorm_fp8_fused", "fp8_approx": "regex:rmsnorm_fp8_approx",
               "ours": "regex:add_rmsnorm_kernel", "ours_two_pass": "regex:add_rmsnorm_chunked",
               "inductor": "regex:triton_", "liger": "regex:_fused_add_rms_norm",
               "ours_residual": "regex:add_rmsnorm"}


FP8_NCU_SECTIONS = ("SpeedOfLight", "ComputeWorkloadAnalysis", "InstructionStats", "Occupancy")


def run_ncu(out_dir: Path, deadline: float, env_vars: dict,
            targets=("ours", "inductor", "liger", "ours_two_pass", "ours_residual"),
            sections=NCU_SECTIONS) -> list[dict]:
    ncu = shutil.which("ncu") or next((p for p in ("/usr/local/cuda/bin/ncu",) if Path(p).exists()),
                                      None)
    results = []
    if ncu is None:
        return [{"status": "missing: ncu not on PATH"}]
    for which in targets:
        left = deadline - time.time()
        if left < 15:
            results.append({"target": which, "status": "skipped: time budget"})
            continue
        cmd = [ncu, "--clock-control", "none", *sum((["--section", s] for s in sections), []),
               "--metrics", NCU_METRICS, "-k", NCU_TARGETS[which], "--launch-skip", "1",
               "--launch-count", "1", sys.executable, "-m", "fusedrms.book.study",
               "ncu-target", which]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=left - 2,
                                 env=env_vars)
            (out_dir / f"ncu_{which}.txt").write_text(res.stdout[-200000:] + "\n--- stderr\n"
                                                      + res.stderr[-20000:])
            results.append({"target": which, "status": "ok" if res.returncode == 0 else
                            f"rc {res.returncode}", "file": f"ncu_{which}.txt"})
        except subprocess.TimeoutExpired:
            results.append({"target": which, "status": "timeout"})
    return results


# ---------------------------------------------------------------- the parent

def _run_child(args: list[str], deadline: float, log_path: Path, env_vars: dict,
               stderr_path: Path | None = None) -> list[dict]:
    out_dir = log_path.parent
    """Run ``python -m fusedrms.book.study ARGS``; collect its @@ lines; kill it at the deadline."""
    cmd = [sys.executable, "-m", "fusedrms.book.study", *args, "--deadline", str(deadline),
           "--out", str(out_dir)]
    err = open(stderr_path, "w") if stderr_path else subprocess.STDOUT
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env_vars)
    got = []
    timer = threading.Timer(max(1.0, deadline - time.time() + 10), proc.kill)
    timer.start()
    with open(log_path, "a") as log:
        for line in proc.stdout:
            log.write(line)
            if line.startswith(TAG):
                try:
                    got.append(json.loads(line[len(TAG):]))
                except ValueError:
                    pass
    proc.wait()
    timer.cancel()
    if stderr_path:
        err.close()
    got.append({"kind": "exit", "rc": proc.returncode, "args": args})
    return got


def aggregate_timing(msgs: list[dict]) -> list[dict]:
    """Median over processes of each (shape, op, impl); with the floor and the fastest peer."""
    copies = [m["GBps"] for m in msgs if m.get("kind") == "copy"]
    bw = statistics.median(copies) if copies else None
    groups: dict = {}
    for m in msgs:
        if m.get("kind") == "record":
            groups.setdefault((m["rows"], m["cols"], m["dtype"], m["op"], m["impl"]), []).append(m)
    out = []
    size = {"bf16": 2, "fp16": 2, "fp32": 4}
    for (rows, cols, dt, op, impl), recs in groups.items():
        ok = [r for r in recs if r.get("status") == "ok"]
        trips = 3 if op == "fused" else 4
        nbytes = trips * rows * cols * size.get(dt, 2) + cols * size.get(dt, 2)
        rec = {"rows": rows, "cols": cols, "dtype": dt, "op": op, "impl": impl,
               "processes": len(ok), "bytes": nbytes,
               "floor_us": nbytes / (bw * 1e3) if bw else None,
               "correct": all(r.get("correct") for r in ok) if ok else None,
               "status": "ok" if ok else (recs[0].get("status") if recs else "missing")}
        if ok:
            meds = [r["median_us"] for r in ok]
            rec.update(median_us=statistics.median(meds), range_us=[min(meds), max(meds)],
                       sets=ok[0].get("sets"), check=ok[0].get("check"))
            if rec["floor_us"]:
                rec["pct_of_floor"] = 100 * rec["floor_us"] / rec["median_us"]
        out.append(rec)
    # fastest peer per (shape, op), and each of ours against it
    by_case: dict = {}
    for r in out:
        by_case.setdefault((r["rows"], r["cols"], r["dtype"], r["op"]), []).append(r)
    for case, recs in by_case.items():
        peers_ok = [r for r in recs if not r["impl"].startswith("ours.") and r.get("median_us")]
        best = min(peers_ok, key=lambda r: r["median_us"]) if peers_ok else None
        for r in recs:
            if best and r.get("median_us"):
                r["fastest_peer"] = best["impl"]
                r["ratio_to_fastest_peer"] = r["median_us"] / best["median_us"]
    return out


def study(out_dir: Path, budget_s: float = DEFAULT_BUDGET_S) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    deadline = t0 + budget_s
    summary = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0)),
               "budget_s": budget_s, "steps": {}}
    log_path = out_dir / "study_log.txt"
    env_vars = dict(os.environ)
    code_dir = str(Path(__file__).resolve().parents[2])
    env_vars["PYTHONPATH"] = code_dir + os.pathsep + env_vars.get("PYTHONPATH", "")
    inductor_cache = Path(os.environ.get("TMPDIR", "/tmp")) / "fusedrms_inductor_cache"
    env_vars.setdefault("TORCHINDUCTOR_CACHE_DIR", str(inductor_cache))

    def save():
        summary["elapsed_s"] = time.time() - t0
        (out_dir / "study_summary.json").write_text(json.dumps(summary, indent=1, default=str))

    # 1. timing, 3 processes one after another; the first logs Inductor's code
    step_end = t0 + budget_s * STEP_SHARES["timing"]
    msgs = []
    start = time.time()
    span = step_end - start
    for i, share in enumerate(PROCESS_SHARES):
        end = min(step_end, time.time() + span * share) if i < len(PROCESS_SHARES) - 1 else step_end
        child_env = dict(env_vars)
        stderr_path = None
        if i == 0:
            child_env["TORCH_LOGS"] = "output_code"
            stderr_path = out_dir / "inductor_output_code.txt"
        msgs += _run_child(["timing", "--index", str(i)], end, log_path, child_env, stderr_path)
        timing = aggregate_timing(msgs)
        (out_dir / "timing.json").write_text(json.dumps(
            {"records": timing, "raw": msgs}, indent=1, default=str))
        summary["steps"][f"timing_{i}"] = {"end": time.time() - t0}
        save()
    _keep_inductor_kernels(inductor_cache, out_dir)
    _truncate(out_dir / "inductor_output_code.txt", 3 << 20)  # the first shapes are the ones read
    # 2. python per-call cost
    end = min(deadline, time.time() + budget_s * STEP_SHARES["python"])
    py = _run_child(["python"], end, log_path, env_vars)
    (out_dir / "python_calls.json").write_text(json.dumps(py, indent=1, default=str))
    summary["steps"]["python"] = {"end": time.time() - t0}
    save()
    # 3. FP8
    end = min(deadline, time.time() + budget_s * STEP_SHARES["fp8"])
    fp8 = _run_child(["fp8"], end, log_path, env_vars)
    (out_dir / "fp8.json").write_text(json.dumps(fp8, indent=1, default=str))
    summary["steps"]["fp8"] = {"end": time.time() - t0}
    save()
    # 4. Nsight Compute with what is left
    summary["steps"]["ncu"] = run_ncu(out_dir, deadline - 3, env_vars)
    save()
    try:
        print(summary_table(json.loads((out_dir / "timing.json").read_text())["records"]))
    except Exception as e:  # noqa: BLE001 - the files are what matters
        print(f"(no summary table: {type(e).__name__}: {e})")
    return out_dir


def summary_table(recs: list[dict]) -> str:
    """One line per (shape, op): ours now, our best candidate, the fastest peer (us, processes)."""
    by_case: dict = {}
    for r in recs:
        if r.get("median_us"):
            by_case.setdefault((r["rows"], r["cols"], r["dtype"], r["op"]), []).append(r)
    lines = [f"{'shape':>18} {'op':>8} {'ours':>8} {'best ours (name)':>34} {'peer':>8} peer name"]
    for (rows, cols, dt, op), rs in by_case.items():
        cur = next((r for r in rs if r["impl"] == "ours.current"), None)
        ours = [r for r in rs if r["impl"].startswith("ours.")]
        peers = [r for r in rs if not r["impl"].startswith("ours.")]
        best = min(ours, key=lambda r: r["median_us"]) if ours else None
        peer = min(peers, key=lambda r: r["median_us"]) if peers else None
        fmt = lambda r: f"{r['median_us']:8.2f}" if r else f"{'-':>8}"  # noqa: E731
        lines.append(f"{rows:>7}x{cols:<6}{dt:>4} {op:>8} {fmt(cur)} {fmt(best)} "
                     f"{(best['impl'][5:] if best else '-'):>25} {fmt(peer)} "
                     f"{peer['impl'] if peer else '-'} (n={cur['processes'] if cur else 0})")
    return "\n".join(lines)


def _truncate(path: Path, limit: int) -> None:
    if path.exists() and path.stat().st_size > limit:
        with open(path, "rb") as f:
            head = f.read(limit)
        path.write_bytes(head + b"\n[... truncated]\n")


def _keep_inductor_kernels(cache: Path, out_dir: Path) -> None:
    """Copy Inductor's generated kernels for 16384 rows x 8192 columns out of its cache."""
    dest = out_dir / "inductor_kernels"
    dest.mkdir(exist_ok=True)
    n = 0
    for path in cache.rglob("*.py") if cache.exists() else []:
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError):
            continue
        if "@triton.jit" in text and "16384" in text and "8192" in text and n < 20:
            shutil.copy(path, dest / path.name)
            n += 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fusedrms.book.study", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", nargs="?", default="study",
                   choices=("study", "timing", "python", "fp8", "ncu-target"))
    p.add_argument("target", nargs="?", default=None)
    p.add_argument("--out", type=Path, default=Path("study_out"))
    p.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S)
    p.add_argument("--deadline", type=float, default=None)
    p.add_argument("--index", type=int, default=0)
    p.add_argument("--shapes", choices=("study", "levers"), default="study")
    a = p.parse_args(argv)
    from .. import env

    if not env.current().on_gpu:
        print("the study times kernels on a GPU; this machine has none.", file=sys.stderr)
        return 2
    deadline = a.deadline or (time.time() + a.budget)
    if a.what == "study":
        study(a.out, a.budget)
    elif a.what == "timing":
        run_timing_worker(a.out, deadline, a.index,
                          shapes=LEVER_SHAPES if a.shapes == "levers" else None)
    elif a.what == "python":
        run_python_worker(a.out, deadline)
    elif a.what == "fp8":
        run_fp8_worker(a.out, deadline)
    elif a.what == "ncu-target":
        run_ncu_target(a.target)
    return 0


if __name__ == "__main__":
    sys.exit(main())


# ---------------------------------------------------------------- a tuning table from the study

def config_of(impl: str, cols: int, dtype, current) -> "object | None":
    """The LaunchConfig behind a study implementation name (``ours.<candidate>``)."""
    if impl in ("ours.current", "ours.current_in_place"):
        return current
    return candidates(cols, dtype).get(impl[len("ours."):])


SMALL_BATCH_ROWS = (1, 1024)  # the table serves batches below the large-batch rule's threshold


def table_records(recs: list[dict], rows_range=SMALL_BATCH_ROWS, gpu: str = "NVIDIA H200"
                  ) -> list[dict]:
    """One tuning record per (cols, dtype) the study timed: the candidate whose worst ratio to the
    best candidate, over every row count in ``rows_range`` and both ops, is smallest (a table is
    keyed on the width, never on rows, so one launch must serve every batch it is used for;
    large batches take :data:`fusedrms.kernels.add_rmsnorm.LARGE_BATCH_CONFIG`)."""
    import torch

    from .. import records, tuning
    from ..kernels import add_rmsnorm as A

    # "ours.current" ran the table installed on that GPU at the time of the study
    installed = tuning.load("capstone", tuning.installed_path("capstone", records.gpu_slug(gpu)))
    by_key: dict = {}
    for r in recs:
        if (r.get("median_us") and r["impl"].startswith("ours.")
                and rows_range[0] <= r["rows"] <= rows_range[1]
                and r["impl"] != "ours.current_in_place" and r.get("correct") is not False):
            by_key.setdefault((r["cols"], r["dtype"]), []).append(r)
    out = []
    for (cols, dt), rs in sorted(by_key.items()):
        dtype = getattr(torch, DTYPES[dt])
        best: dict = {}
        for r in rs:
            case = (r["rows"], r["op"])
            best[case] = min(best.get(case, math.inf), r["median_us"])
        worst: dict = {}
        for r in rs:
            worst.setdefault(r["impl"], {})[(r["rows"], r["op"])] = (
                r["median_us"] / best[(r["rows"], r["op"])])
        complete = {i: v for i, v in worst.items() if len(v) == len(best)}
        if not complete:
            continue
        ranked = sorted(complete, key=lambda i: max(complete[i].values()))
        current = A.choose_config(cols, dtype, table=installed, gpu_name=installed["gpu"],
                                  on_gpu=True)[0]
        cfg = config_of(ranked[0], cols, dtype, current)
        if cfg is None:
            continue
        out.append({"cols": cols, "dtype": DTYPES[dt], **cfg.as_dict(), "label": cfg.label(),
                    "study_name": ranked[0][len("ours."):],
                    "worst_ratio_to_best": max(complete[ranked[0]].values()),
                    "rows_timed": sorted({k[0] for k in best}),
                    "ranked": [{"name": i[len("ours."):], "worst_ratio_to_best":
                                max(complete[i].values())} for i in ranked],
                    "source": "capstone study (rotating-input graph timer, median of 3 "
                              "processes), batches of %d-%d rows" % tuple(rows_range)})
    measured = {(o["cols"], o["dtype"]): o for o in out}
    for (cols, name), cfg in sorted(installed["configs"].items()):
        twin = measured.get((cols, "bfloat16"))
        if name == "float16" and (cols, name) not in measured and twin:
            out.append({**twin, "dtype": name, "source": "bfloat16's winner: the same element "
                        "size and code path (the study timed no small float16 batch)"})
        elif not any(o["cols"] == cols and o["dtype"] == name for o in out):
            out.append({"cols": cols, "dtype": name, **cfg.as_dict(), "label": cfg.label(),
                        "source": "previous table's entry: the study timed no small batch of "
                                  "this width and dtype"})
    return out


def write_table(study_dir: Path, out_dir: Path) -> Path:
    """``out_dir/tuning/capstone.json`` from a study's ``timing.json``, with the study's
    provenance, ready for ``python -m fusedrms.tuning install out_dir``."""
    doc = json.loads((Path(study_dir) / "timing.json").read_text())
    summary = json.loads((Path(study_dir) / "study_summary.json").read_text())
    copy = next(m for m in doc["raw"] if m.get("kind") == "copy")
    provenance = {"gpu": copy.get("gpu"), "torch": copy.get("torch"),
                  "date": summary.get("started"), "copy_GBps": copy.get("GBps"),
                  "command": "python -m fusedrms.book.study (exploration), then study.write_table",
                  "objective": "minimize the worst ratio to the best candidate over batches of "
                               "%d-%d rows and both ops (fused, residual)" % SMALL_BATCH_ROWS,
                  "study_commit": summary.get("commit", "80ed6d4")}
    path = Path(out_dir) / "tuning" / "capstone.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    recs = table_records(doc["records"], gpu=copy.get("gpu") or "NVIDIA H200")
    path.write_text(json.dumps({"provenance": provenance, "records": recs}, indent=1) + "\n")
    return path


# ---------------------------------------------------------------- chapter 8: what exactness costs

def fp8_exactness_cost(out_dir: Path, budget_s: float = 60.0) -> Path:
    """``fp8_exactness_cost.json``: the exact fused FP8 kernel beside the diagnostic one that
    drops exactness (:func:`fusedrms.kernels.rmsnorm_fp8.rmsnorm_fp8_approx`), timed with the
    rotating-input graph timer, percent of the copy floor, differing codes; the SASS opcode
    counts of both kernels; Nsight Compute's compute-pipe sections on both at 16384x7168."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    deadline = t0 + budget_s
    env_vars = dict(os.environ)
    code_dir = str(Path(__file__).resolve().parents[2])
    env_vars["PYTHONPATH"] = code_dir + os.pathsep + env_vars.get("PYTHONPATH", "")
    log_path = out_dir / "fp8_exactness_cost_log.txt"
    msgs = _run_child(["fp8"], min(deadline, t0 + 0.6 * budget_s), log_path, env_vars)
    ncu = run_ncu(out_dir, deadline - 2, env_vars, targets=("fp8_fused", "fp8_approx"),
                  sections=FP8_NCU_SECTIONS)
    sass = {}
    for name in ("fused", "fused_split", "fused_rows", "approx"):
        hist = out_dir / f"fp8_{name}.sass_hist.json"
        if hist.exists():
            sass[name] = json.loads(hist.read_text())
            hist.unlink()  # kept in the record file; the SASS text itself stays beside it
    for text in out_dir.glob("fp8_*.sass.txt"):
        if text.stat().st_size > 400_000:
            text.unlink()
    from .. import records

    path = out_dir / "fp8_exactness_cost.json"
    records.write(path, [m for m in msgs if m.get("kind") == "fp8"],
                  {"sass": sass, "ncu": ncu, "elapsed_s": time.time() - t0})
    return path


# ---------------------------------------------------------------- reading what the tools wrote

NCU_KEYS = ("Duration", "DRAM Throughput", "Memory Throughput", "Compute (SM) Throughput",
            "L2 Cache Throughput", "L1/TEX Hit Rate", "L2 Hit Rate", "Registers Per Thread",
            "Block Size", "Grid Size", "Theoretical Occupancy", "Achieved Occupancy",
            "Warp Cycles Per Issued Instruction", "Executed Ipc Active", "Issue Slots Busy",
            "SM Busy", "dram__bytes_read.sum", "dram__bytes_write.sum")


def parse_ncu_text(text: str) -> dict:
    """The first value of each of :data:`NCU_KEYS` in ncu's text report, as a number."""
    import re

    out = {}
    for key in NCU_KEYS:
        m = re.search(r"^\s+" + re.escape(key) + r"\s+(\S+)?\s+([\d,.]+)\s*$", text, re.M)
        if m:
            out[key] = float(m.group(2).replace(",", ""))
    m = re.search(r"^\s+(\S+) \((\d+), 1, 1\)x\((\d+), 1, 1\)", text, re.M)
    if m:
        out["kernel"] = m.group(1)
    m = re.search(r"(\w[\w ]*?) (?:pipeline )?is the highest-utilized pipeline \(([\d.]+)%\)", text)
    if m:
        out["busiest_pipe"], out["busiest_pipe_pct"] = m.group(1).strip(), float(m.group(2))
    return out


def inductor_kernel_text(log_text: str, graph: int) -> str:
    """The Triton kernel Inductor generated for compiled graph ``[graph/0]`` of a TORCH_LOGS
    output_code log, without the log prefixes."""
    tag = f"[{graph}/0] [__output_code] "
    lines, on = [], False
    for line in log_text.splitlines():
        if tag not in line:
            if on:
                break
            continue
        body = line.split(tag, 1)[1]
        if body.startswith("@triton_heuristics"):
            on = True
        if on:
            if body.startswith("''', device_str"):
                break
            lines.append(body)
    return "\n".join(lines)


def lever_bench(out_dir: Path, budget_s: float = 90.0) -> Path:
    """``capstone_levers.json``: every candidate launch (:func:`candidates`) and every peer at
    :data:`LEVER_SHAPES`, both ops, the same rotating-input graph timer, 3 processes one after
    another (the first compiles), median over processes (:func:`aggregate_timing`)."""
    from .. import records

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    env_vars = dict(os.environ)
    code_dir = str(Path(__file__).resolve().parents[2])
    env_vars["PYTHONPATH"] = code_dir + os.pathsep + env_vars.get("PYTHONPATH", "")
    msgs = []
    code_log = out_dir / "capstone_levers_inductor_code.txt"
    for i, share in enumerate((0.5, 0.25, 0.25)):
        end = min(t0 + budget_s, time.time() + budget_s * share)
        child_env = dict(env_vars, TORCH_LOGS="output_code") if i == 0 else env_vars
        msgs += _run_child(["timing", "--index", str(i), "--shapes", "levers"], end,
                           out_dir / "capstone_levers_log.txt", child_env,
                           code_log if i == 0 else None)
    kernels = {}
    try:  # the first shape is 16384x8192 bf16: graph 0 is add + RMSNorm, graph 1 the residual op
        text = code_log.read_text()
        kernels = {"add_rmsnorm": inductor_kernel_text(text, 0),
                   "add_rmsnorm_residual": inductor_kernel_text(text, 1)}
        code_log.unlink()
    except OSError:
        pass
    path = out_dir / "capstone_levers.json"
    skipped = [m for m in msgs if m.get("kind") == "skipped"]
    records.write(path, aggregate_timing(msgs), {"timer": "CUDA graph over rotating input sets "
                  "(> 4x L2), median of 3 processes", "elapsed_s": time.time() - t0,
                  "exits": [m for m in msgs if m.get("kind") == "exit"],
                  "inductor_kernels": kernels})
    if skipped:
        from ..measure import harness

        shapes = ", ".join(f"{m['rows']}x{m['cols']} {m['dtype']}" for m in skipped[:4])
        raise harness.Incomplete(f"the lever study: {len(skipped)} shape(s) past the time "
                                 f"limit ({shapes})")
    return path
