"""The capstone performance study (chapters 7 and 8): one entry point, one GPU call, bounded time.

    python -m fusedrms.book.study --out DIR [--budget 360]

Steps, each in its own process(es), each writing JSON into DIR as soon as it has a result; a hard
deadline stops what is left (its records say "skipped: time budget"):

1. ``timing``: candidate launches of ``capstone.fused`` and ``capstone.fused_residual`` beside
   every peer (torch.compile per shape, F.rms_norm(x + r), the eager chain, Liger, FlashInfer),
   timed by :func:`fusedrms.measure.timer.time_rotating` (a CUDA graph replaying calls over
   rotating input sets, a pass moving at least 4x L2), in 3 processes one after another; the result is the
   median of the process medians. The first process logs Inductor's generated code.
2. ``python``: microseconds per call back to back from Python (no graph) at 1x4096 bf16.
3. ``fp8``: the exact fused FP8 kernel beside the diagnostic one that drops exactness.
4. ``ncu``: Nsight Compute on ours, Inductor's and Liger's kernel at 16384x8192 bf16.

This module is the parent and the command line; the child processes run
:mod:`fusedrms.book.study_timing` (steps 1, 2 and what ncu profiles) and
:mod:`fusedrms.book.study_fp8` (step 3).
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

from .study_fp8 import run_fp8_worker
from .study_timing import (CONTROLS, DTYPES, LEVER_SHAPES, SMOKE_LEVER_SHAPES, TAG,
                           WIDE_LEVER_SHAPES, candidates, run_ncu_target, run_python_worker,
                           run_timing_worker)

DEFAULT_BUDGET_S = 360.0
PROCESS_SHARES = (0.5, 0.25, 0.25)  # of the timing step; the first process compiles everything
STEP_SHARES = {"timing": 0.60, "python": 0.08, "fp8": 0.10, "ncu": 0.22}


# ---------------------------------------------------------------- Nsight Compute

NCU_SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats",
                "MemoryWorkloadAnalysis")
NCU_METRICS = "dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum"
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
               "--metrics", NCU_METRICS, "-k", NCU_TARGETS[which], "--profile-from-start",
               "off", "--launch-count", "1", sys.executable, "-m", "fusedrms.book.study",
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
    """Run ``python -m fusedrms.book.study ARGS``; collect its @@ lines; kill it at the deadline."""
    out_dir = log_path.parent
    cmd = [sys.executable, "-m", "fusedrms.book.study", *args, "--deadline", str(deadline),
           "--out", str(out_dir)]
    err = open(stderr_path, "w") if stderr_path else subprocess.STDOUT
    # one compile thread: a pool costs seconds to start and one graph gains nothing from it
    env_vars = {"TORCHINDUCTOR_COMPILE_THREADS": "1", **env_vars}
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
    large batches take :func:`fusedrms.kernels.add_rmsnorm.large_batch_config`)."""
    import torch

    from .. import records, tuning
    from ..kernels import add_rmsnorm as A

    # "ours.current" ran the table installed on that GPU at the time of the study
    installed = tuning.load("capstone", tuning.installed_path("capstone", records.gpu_slug(gpu)))
    by_key: dict = {}
    for r in recs:
        if (r.get("median_us") and r["impl"].startswith("ours.")
                and rows_range[0] <= r["rows"] <= rows_range[1]
                and r["impl"] not in CONTROLS and r.get("correct") is not False):
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


def lever_bench(out_dir: Path, budget_s: float = 90.0, smoke: bool = False) -> Path:
    """``capstone_levers.json``: every candidate launch (:func:`study_timing.candidates`) and
    every peer at :data:`study_timing.LEVER_SHAPES`, both ops, the same rotating-input graph
    timer, 3 processes one after another (the first compiles), median over processes
    (:func:`aggregate_timing`). ``smoke``: one shape (:data:`study_timing.SMOKE_LEVER_SHAPES`)."""
    from .. import records
    from ..measure import timer

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    env_vars = dict(os.environ)
    code_dir = str(Path(__file__).resolve().parents[2])
    env_vars["PYTHONPATH"] = code_dir + os.pathsep + env_vars.get("PYTHONPATH", "")
    msgs = []
    code_log = out_dir / "capstone_levers_inductor_code.txt"
    # a smoke run: one process with the whole budget (the first process compiles everything)
    for i, share in enumerate((1.0,) if smoke else (0.5, 0.25, 0.25)):
        end = min(t0 + budget_s, time.time() + budget_s * share)
        child_env = dict(env_vars, TORCH_LOGS="output_code") if i == 0 else env_vars
        shapes = "smoke-levers" if smoke else "levers"
        msgs += _run_child(["timing", "--index", str(i), "--shapes", shapes], end,
                           out_dir / "capstone_levers_log.txt", child_env,
                           code_log if i == 0 else None)
    kernels = {}
    try:  # the first shape's graph 0 is add + RMSNorm, graph 1 the residual op
        text = code_log.read_text()
        kernels = {"add_rmsnorm": inductor_kernel_text(text, 0),
                   "add_rmsnorm_residual": inductor_kernel_text(text, 1)}
        code_log.unlink()
    except OSError:
        pass
    path = out_dir / "capstone_levers.json"
    skipped = [m for m in msgs if m.get("kind") == "skipped"]
    records.write(path, aggregate_timing(msgs), {"timer": "CUDA graph over rotating input sets "
                  f"(a pass moves at least {timer.ROTATING_L2S}x L2), median of 3 processes",
                  "elapsed_s": time.time() - t0,
                  "exits": [m for m in msgs if m.get("kind") == "exit"],
                  "inductor_kernels": kernels})
    if skipped:
        from ..measure import harness

        shapes = ", ".join(f"{m['rows']}x{m['cols']} {m['dtype']}" for m in skipped[:4])
        raise harness.Incomplete(f"the lever study: {len(skipped)} shape(s) past the time "
                                 f"limit ({shapes})")
    return path


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
    p.add_argument("--shapes", choices=("study", "levers", "smoke-levers", "wide"),
                   default="study")
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
                          shapes={"levers": LEVER_SHAPES, "smoke-levers": SMOKE_LEVER_SHAPES,
                                  "wide": WIDE_LEVER_SHAPES}.get(a.shapes))
    elif a.what == "python":
        run_python_worker(a.out, deadline)
    elif a.what == "fp8":
        run_fp8_worker(a.out, deadline)
    elif a.what == "ncu-target":
        run_ncu_target(a.target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
