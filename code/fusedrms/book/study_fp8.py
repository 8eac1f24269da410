"""The capstone study's FP8 step (``python -m fusedrms.book.study fp8``): the exact fused FP8
kernel beside the diagnostic one that drops exactness, timed by the rotating-input graph timer,
with the SASS opcode counts of each kernel.
"""
from __future__ import annotations

import json
import math
import shutil
import statistics
import subprocess
import time
from pathlib import Path

from .study_timing import _sync, _time_calls, emit

FP8_SHAPES = ((16384, 7168), (4096, 7168), (16384, 4096), (32768, 7168))
ROUNDS = 5  # each variant timed once per round, interleaved; five, so one slow window is an outlier

# The exactness levers, one at a time, on fp8.fused's unpadded kernel (DeepSeek-V3's width only):
# impl -> (departures, the stated specification it is checked against, or None: none can state it)
LEVERS = {
    "lever.none": ({}, {}),
    "lever.pairwise_sum": ({"sum_order": "pairwise"}, {"sum_order": "pairwise"}),
    "lever.any_order_sum": ({"sum_order": "compiler"}, None),
    "lever.rsqrt": ({"exact_r": False}, None),
    "lever.reciprocal": ({"division": "reciprocal"}, {"division": "reciprocal"}),
    "lever.pairwise_reciprocal": ({"sum_order": "pairwise", "division": "reciprocal"},
                                  {"sum_order": "pairwise", "division": "reciprocal"}),
    "lever.all_three": ({"sum_order": "compiler", "exact_r": False, "division": "reciprocal"},
                        None),
}


def run_fp8_worker(out_dir: Path, deadline: float, device: str = "cuda",
                   shapes=FP8_SHAPES, rounds: int = ROUNDS) -> None:
    import torch

    from ..kernels import rmsnorm_fp8 as Q
    from ..kernels import rmsnorm_fp8_departures as D
    from ..kernels import rmsnorm_fp8_spec as spec
    from ..measure import timer

    if device == "cpu":
        bw, l2 = 1.0, 1 << 10
    else:
        bw, l2 = timer.copy_bandwidth_GBps(), timer.l2_bytes() or (50 << 20)
    # the exact contract at the tuned launch and at the baseline: what the diagnostic drops
    variants = {"fp8.fused_exact": (lambda x, w: Q.rmsnorm_fp8_fused(x, w, contract="exact"), {}),
                "fp8.fused_baseline": (lambda x, w: Q.rmsnorm_fp8_fused(
                    x, w, config=Q.baseline_config(x.shape[1]), contract="exact"), {}),
                "fp8.approx_w4": (lambda x, w: Q.rmsnorm_fp8_approx(x, w, num_warps=4), None),
                "fp8.approx_w8": (lambda x, w: Q.rmsnorm_fp8_approx(x, w, num_warps=8), None),
                "fp8.approx_w16": (lambda x, w: Q.rmsnorm_fp8_approx(x, w, num_warps=16), None)}
    for name, (kw, stated) in LEVERS.items():
        variants[name] = ((lambda x, w, kw=kw: D.rmsnorm_fp8_departing(x, w, **kw)), stated)
    for rows, cols in shapes:
        floor_bytes = rows * cols * 2 + rows * cols + rows * math.ceil(cols / 128) * 4 + cols * 2
        floor_us = floor_bytes / (bw * 1e3)
        k = timer.rotating_sets(floor_bytes, l2)
        xs = [spec.make_inputs(rows, cols, seed=i, device=device) for i in range(k)]
        ref_codes, ref_scales = spec.reference(*xs[0], contract="exact")
        here = {n: v for n, v in variants.items()
                if not n.startswith("lever.") or Q.split_pieces(spec.n_blocks(cols))}
        recs, samples = {}, {}
        for name, (fn, stated) in here.items():
            rec = dict(rows=rows, cols=cols, impl=name, floor_us=floor_us, copy_GBps=bw)
            try:
                codes, scales = fn(*xs[0])
                _sync(device)
                rec["differing_codes"] = int(spec.differing_codes(codes, ref_codes))
                rec["scale_max_rel_diff"] = float(((scales - ref_scales).abs()
                                                   / ref_scales.abs().clamp_min(1e-30)).max())
                if name.startswith("lever."):
                    rec["stated_spec"] = stated
                    if stated is not None:  # equal to its own stated specification?
                        own = spec.reference(*xs[0], contract="exact", **stated)
                        rec["own_spec_ok"] = bool(spec.compare(codes, scales, *own).ok)
                        del own
                recs[name], samples[name] = rec, []
            except Exception as e:  # noqa: BLE001
                rec["status"] = f"error: {type(e).__name__}: {e}"[:300]
                emit("fp8", **rec)
        for _ in range(rounds):
            for name in recs:
                if time.time() > deadline:
                    break
                fn = here[name][0]
                calls = [(lambda f=fn, x=x, w=w: f(x, w)) for x, w in xs]
                try:
                    samples[name].append(statistics.median(_time_calls(calls, device)))
                except Exception as e:  # noqa: BLE001
                    recs[name]["status"] = f"error: {type(e).__name__}: {e}"[:300]
        for name, rec in recs.items():
            got = samples[name]
            if "status" not in rec and got:
                med = statistics.median(got)
                rec.update(status="ok", median_us=med, pct_of_floor=100 * floor_us / med,
                           round_us=got)
            elif "status" not in rec:
                rec["status"] = "skipped: time budget"
            emit("fp8", **rec)
        del xs
        if device != "cpu":
            torch.cuda.empty_cache()
    if device == "cpu":
        return
    # SASS of the exact and the diagnostic kernel (instruction mix per element)
    try:
        x, w = spec.make_inputs(4, 7168, device="cuda")
        Q.rmsnorm_fp8_fused(x, w, contract="exact")
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

