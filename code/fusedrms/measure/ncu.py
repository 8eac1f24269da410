"""Nsight Compute on one kernel at one shape: the profile chapter 6 shows (and issue-style studies
reuse). ``ncu --clock-control none`` with the SpeedOfLight, Occupancy, LaunchStats, WarpStateStats
and MemoryWorkloadAnalysis sections, and the DRAM bytes from ``dram__bytes_read.sum`` /
``dram__bytes_write.sum``. Missing values are None, never 0; without ncu the summary says why.

    python -m fusedrms.measure.ncu --impl capstone.fused --rows 16384 --cols 8192 --out ncu_summary.json
"""
from __future__ import annotations

import argparse
import csv
import subprocess
import sys
from pathlib import Path

from .. import cli, dtypes, env, records
from .harness import FloorUnavailable, floor_bytes, pick_target
from .worker import make_inputs

# ---------------------------------------------------------------- Nsight Compute

NCU_SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats", "MemoryWorkloadAnalysis")
NCU_METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum")  # the bytes, counted by the GPU


def find_ncu() -> str | None:
    import shutil

    for cand in (shutil.which("ncu"), "/usr/local/cuda/bin/ncu"):
        if cand and Path(cand).exists():
            return cand
    return None


def kernel_names(impl_name: str, op: str, rows: int, cols: int, dt: str) -> list[str]:
    """Names of the GPU kernels one call of ``impl_name`` launches (from torch.profiler)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from .. import registry

    fn = registry.get(impl_name).fn
    args = make_inputs(op, rows, cols, dtypes.torch_dtype(dt))
    fn(*args)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(*args)
        torch.cuda.synchronize()
    names = []
    for e in prof.events():
        dev = str(getattr(e, "device_type", ""))
        if "CUDA" in dev and e.name not in names and not e.name.startswith(("cuda", "Memcpy",
                                                                             "Memset")):
            names.append(e.name)
    return names


def base_name(kernel: str) -> str:
    """``void ns::foo<T>(args)`` -> ``foo``: the part ncu's ``-k`` matches by default."""
    name = kernel.removeprefix("void ").split("(")[0].split("<")[0]
    return name.split("::")[-1].strip()


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except (ValueError, AttributeError):
        return None


_TO_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
          "second": 1e6, "s": 1e6}
_TO_GBPS = {"byte/second": 1e-9, "Kbyte/second": 1e-6, "Mbyte/second": 1e-3,
            "Gbyte/second": 1.0, "Tbyte/second": 1e3, "byte/s": 1e-9, "GB/s": 1.0, "TB/s": 1e3}


_TO_BYTES = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}


def parse_ncu_csv(text: str) -> list[dict]:
    """Per-kernel metrics from ``ncu --csv --page details`` output (other lines ignored)."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        return []
    rows = list(csv.DictReader([ln for ln in lines[start:] if ln.startswith('"')]))
    kernels: dict = {}
    for r in rows:
        k = kernels.setdefault(r.get("ID"), {"kernel": r.get("Kernel Name"), "metrics": {}})
        section, name, unit = r.get("Section Name", ""), r.get("Metric Name", ""), \
            r.get("Metric Unit", "")
        k["metrics"][f"{section} / {name}"] = {"unit": unit, "value": r.get("Metric Value")}
        value = _number(r.get("Metric Value", ""))
        if value is None:
            continue
        sol = "Speed Of Light" in section
        if name == "DRAM Throughput" and unit == "%":
            k["dram_throughput_pct"] = value
        elif name == "Memory Throughput" and unit == "%" and sol:
            k["sol_memory_pct"] = value
        elif name == "Compute (SM) Throughput" and unit == "%":
            k["sol_compute_pct"] = value
        elif name == "Duration" and unit in _TO_US:
            k["duration_us"] = value * _TO_US[unit]
        elif name == "Memory Throughput" and unit in _TO_GBPS:
            k["dram_GBps"] = value * _TO_GBPS[unit]
        elif name == "L2 Hit Rate" and unit == "%":
            k["l2_hit_pct"] = value
        elif name == "Mem Busy" and unit == "%":
            k["mem_busy_pct"] = value
        elif name in ("dram__bytes_read.sum", "dram__bytes_write.sum") and unit in _TO_BYTES:
            k[name.split("__")[1].replace(".sum", "")] = value * _TO_BYTES[unit]
    return list(kernels.values())


def profile_with_ncu(impl_name: str | None = None, op: str = "add_rmsnorm", rows: int = 16384,
                     cols: int = 8192, dt: str = "bf16", timeout_s: float = 120,
                     log=print) -> dict:
    """Nsight Compute on one kernel, filtered by name. Missing values are ``None``, never 0."""
    summary = {"status": "unavailable", "op": op, "rows": rows, "cols": cols, "dtype": dt,
               "dram_throughput_pct": None, "sol_memory_pct": None, "duration_us": None,
               "dram_GBps": None}
    try:
        summary["impl"] = impl_name = impl_name or pick_target(op)
        ncu = find_ncu()
        if ncu is None:
            summary["reason"] = "ncu not found (neither on PATH nor /usr/local/cuda/bin/ncu)"
            return summary
        names = kernel_names(impl_name, op, rows, cols, dt)
        summary["kernels_launched"] = names
        if not names:
            summary["reason"] = "torch.profiler saw no kernel for this implementation"
            return summary
        bases = sorted({base_name(n) for n in names})
        import re

        regex = "|".join(re.escape(b) for b in bases)
        summary["kernel_filter"] = f"regex:{regex}"
        cmd = [ncu, "--clock-control", "none", "--target-processes", "all",
               "-k", f"regex:{regex}", "--profile-from-start", "off",
               "--launch-count", str(len(bases)),
               *sum((["--section", s] for s in NCU_SECTIONS), []), "--metrics", ",".join(NCU_METRICS),
               "--csv", "--page", "details",
               sys.executable, "-m", "fusedrms.measure.ncu", "profile-target", "--impl", impl_name,
               "--op", op, "--rows", str(rows), "--cols", str(cols), "--dtype", dt]
        summary["command"] = " ".join(cmd)
        log("running: " + summary["command"])
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        summary["ncu_exit_code"] = proc.returncode
        summary["raw_tail"] = (proc.stdout + proc.stderr)[-3000:]
        kernels = parse_ncu_csv(proc.stdout)
        if not kernels:
            why = "ERR_NVGPUCTRPERM: no permission for GPU counters" if "ERR_NVGPUCTRPERM" in \
                proc.stdout + proc.stderr else "ncu printed no metrics for the filtered kernel"
            summary["reason"] = f"{why} (exit code {proc.returncode})"
            return summary
        summary["kernels"] = kernels
        main = max(kernels, key=lambda k: k.get("duration_us") or 0)
        for k in ("kernel", "dram_throughput_pct", "sol_memory_pct", "sol_compute_pct",
                  "duration_us", "dram_GBps", "l2_hit_pct", "mem_busy_pct", "bytes_read",
                  "bytes_write"):
            summary[k] = main.get(k)
        if summary.get("bytes_read") is not None and summary.get("bytes_write") is not None:
            summary["dram_bytes"] = summary["bytes_read"] + summary["bytes_write"]
        if summary["duration_us"] is not None and summary["dram_GBps"] is not None:
            summary["implied_bytes"] = summary["dram_GBps"] * 1e3 * summary["duration_us"]
        try:
            summary["model_bytes"] = floor_bytes(op, rows, cols, dt)
        except FloorUnavailable as e:
            summary["floor_error"] = str(e)
        summary["status"] = "ok" if summary["duration_us"] is not None else "partial"
    except subprocess.TimeoutExpired:
        summary["reason"] = f"ncu did not finish within {timeout_s:.0f} s"
    except Exception as e:  # noqa: BLE001 - record why, never a zero
        summary["reason"] = f"{type(e).__name__}: {e}"[:500]
    return summary


def profile_one_call(fn, warmup: int = 5) -> None:
    """``warmup`` calls of ``fn()`` unprofiled (compiling and autotuning: Inductor's autotuner
    launches candidate configs under the kernel's own name), then one call between
    cudaProfilerStart and Stop, the only one ncu (``--profile-from-start off``) sees."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def profile_target(impl_name: str, op: str, rows: int, cols: int, dt: str) -> None:
    """What ncu runs: one implementation at one shape, :func:`profile_one_call`."""
    from .. import registry

    fn = registry.get(impl_name).fn
    args = make_inputs(op, rows, cols, dtypes.torch_dtype(dt))
    profile_one_call(lambda: fn(*args))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fusedrms.measure.ncu", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd")
    pr = sub.add_parser("profile-target", help=argparse.SUPPRESS)
    for q in (p, pr):
        q.add_argument("--impl", default=None)
        q.add_argument("--op", type=cli.op, default="add_rmsnorm")
        q.add_argument("--rows", type=cli.whole(1), default=16384)
        q.add_argument("--cols", type=cli.whole(1), default=8192)
        q.add_argument("--dtype", type=cli.dtype_name, default="bf16")
    p.add_argument("--timeout", type=cli.number(0.0, above=True), default=120)
    p.add_argument("--out", default="ncu_summary.json")
    a = p.parse_args(argv)
    try:
        env.require_gpu("Profiling with Nsight Compute")
    except RuntimeError as e:
        print(f"fusedrms.measure.ncu: {e}", file=sys.stderr)
        return 2
    if a.cmd == "profile-target":
        profile_target(a.impl, a.op, a.rows, a.cols, a.dtype)
        return 0
    s = profile_with_ncu(a.impl, a.op, a.rows, a.cols, a.dtype, a.timeout)
    records.write(a.out, [s])
    print(f"ncu: {s['status']}" + (f" ({s.get('reason')})" if s.get("reason") else "") + f"; wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
