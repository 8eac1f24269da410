"""Chapter 8's timings: the naive pair and ``fp8.fused`` timed in fresh processes, one after another.

One process gives one median per case; the run-to-run spread that decides whether two times differ
only shows across processes (clocks, caches and the allocator start afresh in each). So
:func:`timing_in_processes` runs :func:`timing_records` in ``TIMING_PROCESSES`` processes and
:func:`merge_processes` keeps, per shape and kernel, the median over processes and the process
medians themselves (``{name}_process_us``), from which the page reads the p10-p90 spread and the
tie band (:mod:`fusedrms.measure.compare`).

    python -m fusedrms.book.ch08_timing --out timing.json [--shapes 2x7168,4096x7168]   # one process
"""
from __future__ import annotations

from .. import env  # first: decides GPU or interpreter before any @triton.jit

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from ..kernels.rmsnorm_fp8 import baseline_config, rmsnorm_fp8_fused, rmsnorm_fp8_naive
from .ch08 import TIMING_SHAPES, make_inputs

TIMING_PROCESSES = 3
PROCESS_TIMEOUT_S = 240  # a hard limit per process (the four shapes take about 10 s on an H200)
# the chapter's story times the exact contract (the naive pair, the tuned fused kernel, its untuned
# baseline); "fused" is the library's fp8.fused, the served contract the chapter ends with
KERNELS = ("naive", "fused_exact", "fused_baseline", "fused")
SUFFIXES = ("", "_graph")  # "": a Python call, L2 flushed; "_graph": the same replayed from a graph
CALL_COLS = 7168  # the Python call, back to back, of one row


def timing_records(shapes=TIMING_SHAPES, warmup: int = 10, reps: int = 50, log=print) -> list[dict]:
    """Median times of :data:`KERNELS` (cold L2), priced by the traffic model and the copy floor,
    and the Python call of ``fp8.fused`` beside ``F.rms_norm``'s."""
    from ..measure import timer  # written by the measurement chapter; imported here so CPU use never needs it

    out = []
    try:
        copy_GBps = float(timer.copy_bandwidth_GBps())
        log(f"  copy bandwidth: {copy_GBps:.0f} GB/s")
    except Exception as e:  # noqa: BLE001
        copy_GBps = None
        out.append({"kind": "error", "step": "copy_bandwidth", "error": f"{type(e).__name__}: {e}"})
        log(f"  copy bandwidth FAILED: {e}")
    for rows, cols in shapes:
        rec = {"kind": "timing", "rows": rows, "cols": cols, "copy_GBps": copy_GBps}
        x, w = make_inputs(rows, cols, 0)
        # graph=False: what a Python caller sees (launch overhead included);
        # graph=True: the kernels replayed from a CUDA graph, so Python's overhead is not counted
        for graph, suffix in ((False, ""), (True, "_graph")):
            try:
                for name, fn in (("naive", lambda x, w: rmsnorm_fp8_naive(x, w, contract="exact")),
                                 ("fused_exact",
                                  lambda x, w: rmsnorm_fp8_fused(x, w, contract="exact")),
                                 ("fused_baseline", lambda x, w: rmsnorm_fp8_fused(
                                     x, w, config=baseline_config(x.shape[-1]),
                                     contract="exact")),
                                 ("fused", rmsnorm_fp8_fused)):
                    times = timer.time_gpu(lambda: fn(x, w), warmup, reps, l2="cold", graph=graph)
                    times = sorted(float(t) for t in times)
                    rec[f"{name}{suffix}_us"] = times[len(times) // 2]
                    rec[f"{name}{suffix}_us_min"] = times[0]
            except Exception as e:  # noqa: BLE001
                rec[f"error{suffix}"] = f"{type(e).__name__}: {e}"
        price_into(rec)
        del x, w
        out.append(rec)
        log(f"  time {rows}x{cols}: " + ", ".join(
            f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in rec.items()
            if k not in ("kind", "rows", "cols")))
    try:
        out.append(python_call_record())
        log(f"  python call: {out[-1]}")
    except Exception as e:  # noqa: BLE001
        out.append({"kind": "error", "step": "python_call", "error": f"{type(e).__name__}: {e}"})
    return out


def python_call_record(cols: int = CALL_COLS, calls: int = 2000, reps: int = 7) -> dict:
    """Wall time per call of ``fp8.fused`` and ``F.rms_norm`` on one bf16 row, called back to back
    from Python, ``reps`` batches of ``calls`` each, the two calls' batches taken in turn
    (:func:`fusedrms.measure.worker.interleaved_python_calls`, as chapter 7's Python calls).
    ``call_ratio`` is the median over the pairs of fp8.fused's time over F.rms_norm's."""
    import torch.nn.functional as F

    from ..measure import worker

    x, w = make_inputs(1, cols, 0)
    samples = worker.interleaved_python_calls(
        {"fused": lambda: rmsnorm_fp8_fused(x, w),
         "rms_norm": lambda: F.rms_norm(x, (cols,), w, 1e-6)},
        "cuda", reps=reps, calls_per_batch=calls)
    rec = {"kind": "python_call", "rows": 1, "cols": cols, "batches": reps, "calls": calls}
    for name, got in samples.items():
        rec[f"{name}_call_us"] = statistics.median(got)
    rec["call_ratio"] = statistics.median(f / r for f, r in zip(samples["fused"],
                                                                samples["rms_norm"]))
    return rec


def price_into(rec: dict) -> dict:
    """Speedups, bytes and floors of one timing record, from its times and ``copy_GBps``."""
    for suffix in SUFFIXES:  # the naive pair against the fused kernel of the same contract
        naive = rec.get(f"naive{suffix}_us")
        if naive and rec.get(f"fused_exact{suffix}_us"):
            rec[f"speedup{suffix}"] = naive / rec[f"fused_exact{suffix}_us"]
        if naive and rec.get(f"fused_baseline{suffix}_us"):
            rec[f"speedup_baseline{suffix}"] = naive / rec[f"fused_baseline{suffix}_us"]
    try:
        from .. import traffic

        copy_GBps = rec.get("copy_GBps")
        for name in ("naive", "fused"):
            price = traffic.price(f"rmsnorm_fp8_{name}", rec["rows"], rec["cols"], "bf16")
            rec[f"{name}_bytes_read"] = int(price.bytes_read)
            rec[f"{name}_bytes_written"] = int(price.bytes_written)
            rec[f"{name}_bytes"] = int(price.bytes_total)
            if copy_GBps:  # the floor: these bytes moved at the measured copy bandwidth
                rec[f"{name}_floor_us"] = price.bytes_total / copy_GBps / 1e3
                for suffix in SUFFIXES:
                    if f"{name}{suffix}_us" in rec:
                        rec[f"{name}{suffix}_floor_fraction"] = (
                            rec[f"{name}_floor_us"] / rec[f"{name}{suffix}_us"])
                    for same_bytes in ("fused_exact", "fused_baseline"):
                        if name == "fused" and f"{same_bytes}{suffix}_us" in rec:
                            rec[f"{same_bytes}{suffix}_floor_fraction"] = (
                                rec["fused_floor_us"] / rec[f"{same_bytes}{suffix}_us"])
    except Exception as e:  # noqa: BLE001
        rec["traffic_error"] = f"{type(e).__name__}: {e}"
    return rec


def merge_processes(runs: list[list[dict]]) -> list[dict]:
    """One timing record per shape from each process's records: every time the median over the
    processes that measured it, with the process medians as ``{name}_process_us``; minima the
    minimum; the copy bandwidth the median. Errors are kept, each once per process."""
    out = [r for run in runs for r in run if r.get("kind") not in ("timing", "python_call")]
    calls = [r for run in runs for r in run if r.get("kind") == "python_call"]
    if calls:  # the median over processes, each process's own beside it
        merged_call = {"kind": "python_call", "rows": calls[0]["rows"], "cols": calls[0]["cols"],
                       "processes": len(calls)}
        for key in ("fused_call_us", "rms_norm_call_us", "call_ratio"):
            got = [r[key] for r in calls if isinstance(r.get(key), (int, float))]
            if got:
                merged_call[key], merged_call[f"{key}_process"] = statistics.median(got), got
        out.append(merged_call)
    shapes: dict = {}
    for run in runs:
        for r in run:
            if r.get("kind") == "timing":
                shapes.setdefault((r["rows"], r["cols"]), []).append(r)
    for (rows, cols), recs in shapes.items():
        merged = {"kind": "timing", "rows": rows, "cols": cols, "processes": len(recs)}
        copies = [r["copy_GBps"] for r in recs if r.get("copy_GBps")]
        merged["copy_GBps"] = statistics.median(copies) if copies else None
        for name in KERNELS:
            for suffix in SUFFIXES:
                key = f"{name}{suffix}_us"
                medians = [r[key] for r in recs if isinstance(r.get(key), (int, float))]
                if medians:
                    merged[key] = statistics.median(medians)
                    merged[f"{name}{suffix}_process_us"] = medians
                    merged[f"{key}_min"] = min(r.get(f"{key}_min", r[key]) for r in recs if key in r)
        errors = sorted({r[k] for r in recs for k in ("error", "error_graph") if r.get(k)})
        if errors:
            merged["errors"] = errors
        for suffix in SUFFIXES:  # a time missing in a process is an error of that process
            got = [r for r in recs if f"error{suffix}" in r]
            if got:
                merged[f"error{suffix}"] = got[0][f"error{suffix}"]
        out.append(price_into(merged))
    return out


def timing_in_processes(shapes=TIMING_SHAPES, processes: int = TIMING_PROCESSES,
                        log=print, timeout_s: float = PROCESS_TIMEOUT_S) -> list[dict]:
    """:func:`timing_records` in ``processes`` fresh processes, one after another (never side by
    side: they would share the GPU), merged by :func:`merge_processes`. Without a GPU the timer
    cannot run at all: one in-process attempt records why."""
    if not env.current().on_gpu:
        return timing_records(shapes, log=log)
    code_dir = str(Path(__file__).resolve().parents[2])
    child_env = dict(os.environ, PYTHONPATH=code_dir + os.pathsep + os.environ.get("PYTHONPATH", ""))
    runs = []
    spec = ",".join(f"{r}x{c}" for r, c in shapes)
    for i in range(processes):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "timing.json"
            cmd = [sys.executable, "-m", "fusedrms.book.ch08_timing", "--out", str(path),
                   "--shapes", spec]
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, env=child_env,
                                      timeout=timeout_s)
                log(f"  timing process {i + 1}/{processes}:\n" + done.stdout[-3000:]
                    + done.stderr[-1500:])
                if done.returncode != 0 or not path.exists():
                    raise RuntimeError(f"exit {done.returncode}: {done.stderr.strip()[-300:]}")
                runs.append(json.loads(path.read_text()))
            except (subprocess.TimeoutExpired, RuntimeError, ValueError) as e:
                runs.append([{"kind": "error", "step": f"timing process {i + 1}",
                              "error": f"{type(e).__name__}: {e}"[:400]}])
    return merge_processes(runs)


def _shapes(text: str) -> tuple:
    try:
        return tuple(tuple(int(v) for v in part.lower().split("x")) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shapes: expected ROWSxCOLS,... got {text!r}") from None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fusedrms.book.ch08_timing",
                                description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="JSON file for this process's records")
    p.add_argument("--shapes", type=_shapes, default=TIMING_SHAPES)
    a = p.parse_args(argv)
    if not env.current().on_gpu:
        print("chapter 8's timings need a GPU; the chapter shows the recorded ones.", file=sys.stderr)
        return 2
    a.out.write_text(json.dumps(timing_records(a.shapes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
