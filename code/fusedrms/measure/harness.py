"""The book's benchmark harness: every speed claim in the book comes from here.

    python -m fusedrms.measure.harness                       # a small default sweep, 3 processes
    python -m fusedrms.measure.harness run --op add_rmsnorm --rows 1024,4096 --cols 4096 --dtypes bf16
    python -m fusedrms.measure.harness plan h200 --out bench_grid.json       # the recorded H200 grid
    python -m fusedrms.measure.harness show [FILE]           # print a result file (the recorded one by default)
    python -m fusedrms.measure.plots FILE --out STEM         # bandwidth and % of floor, PNG + SVG

The timing rules, measured, are chapter 6's (:mod:`fusedrms.book.ch06`); Nsight Compute is
:mod:`fusedrms.measure.ncu`.

How a number is made (see :mod:`fusedrms.measure.timer` for the details of one measurement):

1. Every case (implementation x op x rows x cols x dtype x mode) runs in ``--processes`` separate
   Python processes (default 3), one after another. A process warms each implementation up (the
   first call, with its JIT or ``torch.compile`` cost, is timed on its own as ``first_call_ms``),
   checks its output on sampled rows against :mod:`fusedrms.reference`, then times it with device
   events and keeps the median, p10 and p90.
2. The result is the median of the process medians, with their range (min-max).
3. Each process also measures the device's copy bandwidth; bytes from the traffic model
   (:mod:`fusedrms.traffic`) divided by it give the floor, and each result is reported as a
   percentage of that floor.

Modes: ``cold`` (L2 flushed before every call), ``warm`` (back to back), ``graph`` (CUDA graph
replay, back to back: launch overhead removed), ``rotating`` (a graph replays calls over input
sets whose pass moves at least 4x L2, so inputs come from DRAM: the cost of a call in a stream)
and ``python`` (calls from Python).

Before any timing, every case runs once in several processes side by side (``--warm-workers``):
Triton's and Inductor's on-disk caches are shared, so the timing processes load compiled kernels
(``torch.compile`` included) instead of compiling them; ``compile_s`` is that first, cold compile.
Every case is then timed in every process: a case that is not timed (an error, a missing peer, a
time limit) makes the document incomplete (:func:`incomplete`), and the chapters' recordings fail.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import csv
import fnmatch
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .. import cli, dtypes, env, records

NO_GPU_EXIT = 2
LINE_TAG = "@@"  # worker protocol: lines starting with this are JSON messages
DTYPES = dtypes.ACTIVATIONS
COMPILED_PEERS = ("torch.compile", "torch.compile_add", "torch.compile_residual")
EPS = 1e-5
MODES = ("rotating", "cold", "warm", "graph", "python")
PYTHON_CALLS = 200  # python mode: calls back to back per sample


class FloorUnavailable(RuntimeError):
    """The traffic model cannot price this op, so no floor (and no % of floor) exists for it."""


class NoGPU(RuntimeError):
    pass


# ---------------------------------------------------------------- the floor (traffic model)

def floor_bytes(op: str, rows: int, cols: int, dtype: str) -> int:
    """Bytes that ``op`` must move at this shape, from :func:`fusedrms.traffic.price`."""
    try:
        from .. import traffic
    except ModuleNotFoundError as e:
        raise FloorUnavailable(f"the traffic model (fusedrms.traffic) cannot be imported ({e}); "
                               f"no floor can be computed") from None
    step_of = getattr(traffic, "OP_STEP", {})
    if op not in step_of:
        raise FloorUnavailable(f"the traffic model has no step for op {op!r} "
                               f"(traffic.OP_STEP knows {sorted(step_of)}); no floor for it")
    return int(traffic.price(step_of[op], rows, cols, dtypes.torch_dtype(dtype)).bytes_total)


def floor_us(nbytes: int, copy_GBps: float) -> float:
    """Time to move ``nbytes`` at the copy bandwidth, in µs (GB = 10^9 bytes)."""
    return nbytes / (copy_GBps * 1e9) * 1e6


# ---------------------------------------------------------------- what to run

@dataclass
class Sweep:
    """A grid of cases: every implementation of ``op`` matching ``impls`` at every shape x dtype."""

    name: str
    op: str
    rows: tuple
    cols: tuple
    dtypes: tuple = ("bf16",)
    modes: tuple = ("cold",)
    impls: tuple = ("*",)  # fnmatch patterns on implementation names

    def __post_init__(self):
        bad = [m for m in self.modes if m not in MODES]
        if bad:
            raise ValueError(f"unknown mode(s) {bad}; use {', '.join(MODES)}")
        for d in self.dtypes:
            dtypes.torch_dtype(d)


PLANS = {
    # The recorded grid (chapter 6's record, after the tables are tuned): every case is timed.
    "h200": [
        Sweep("grid", "add_rmsnorm", (1, 16, 256, 1024, 4096, 16384), (2048, 4096, 8192, 16384),
              ("bf16",)),
        # the same shapes as a call in a stream (graph replay over rotating inputs): chapter 6's
        # second timing question, beside the isolated call above
        Sweep("stream", "add_rmsnorm", (1, 16, 256, 1024, 4096, 16384),
              (2048, 4096, 8192, 16384), ("bf16",), ("rotating",)),
        Sweep("grid", "add_rmsnorm", (1, 1024, 16384), (4096, 8192), ("fp16", "fp32")),
        Sweep("rmsnorm", "rmsnorm", (1, 1024, 16384), (4096, 8192), ("bf16", "fp32")),
        Sweep("graph", "add_rmsnorm", (1, 16, 256), (2048, 8192), ("bf16",), ("warm", "graph")),
        Sweep("graph", "rmsnorm", (1, 256), (4096,), ("fp32",), ("warm", "graph")),
        Sweep("l2", "add_rmsnorm", (256, 1024, 4096, 16384), (4096,), ("bf16",),
              ("cold", "warm")),
        Sweep("extra_ops", "add_rmsnorm_residual", (4096, 16384), (4096, 8192), ("bf16",)),
        Sweep("extra_ops", "rmsnorm_fp8", (4096, 16384), (4096, 8192), ("bf16",)),
    ],
    # What `python -m fusedrms.measure.harness` runs with no arguments: a minute on a GPU.
    "default": [
        Sweep("default", "add_rmsnorm", (1024, 4096, 16384), (4096,), ("bf16",)),
    ],
}


@dataclass
class Settings:
    processes: int = 3
    warmup: int = 10
    reps: int = 50
    time_cap_s: float = 0.1  # per timing: fewer reps (never below min_reps) for slow calls
    min_reps: int = 10
    rotating_reps: int = 9  # graph replays per rotating timing (each many calls long)
    warm_workers: int = 0  # processes that compile every case side by side first (0: by CPU count)
    timeout_s: float | None = None  # a hard limit per timing process: a hung case ends it
    allow_missing_floor: bool = False
    # from this many bytes a call, each process also times a copy of the call's bytes at that
    # size (worker.copy_at_size) beside its rotating cases; 0: never
    copy_at_size_min_bytes: int = 0
    # before each rotating timing, wait at most this long for a quiet memory system (0: no probe;
    # timer.QuietProbe, whose process-wide budget bounds the sum)
    quiet_wait_s: float = 0.5


def warm_worker_count(settings: Settings) -> int:
    """Compiling processes to run side by side: half the CPU cores, at most 8."""
    if settings.warm_workers:
        return settings.warm_workers
    return max(1, min(8, (os.cpu_count() or 2) // 2))


class Incomplete(RuntimeError):
    """A recording that did not time every case it lists: a failure, never a footnote."""


def is_compiled_peer(name: str) -> bool:
    return name in COMPILED_PEERS


def expand(sweeps: list[Sweep]) -> tuple[list[dict], list[dict]]:
    """(cases to run, cases not run with the reason), from the registry."""
    from .. import registry

    run, not_run = [], []
    for sw in sweeps:
        impls = [i for i in registry.impls(sw.op)
                 if any(fnmatch.fnmatch(i.name, p) for p in sw.impls)]
        for dt in sw.dtypes:
            for rows in sw.rows:
                for cols in sw.cols:
                    for impl in impls:
                        for mode in sw.modes:
                            case = dict(sweep=sw.name, op=sw.op, impl=impl.name, rows=rows,
                                        cols=cols, dtype=dt, mode=mode)
                            if not impl.supports("cuda", dtypes.torch_dtype(dt), cols):
                                not_run.append({**case, "status": "unsupported: "
                                                + _why_unsupported(impl, dt, cols)})
                            else:
                                run.append(case)
    return run, not_run


def _why_unsupported(impl, dt: str, cols: int) -> str:
    if "cuda" not in impl.devices:
        return f"no GPU path ({impl.gpu_only_reason or 'devices ' + str(impl.devices)})"
    if dtypes.torch_dtype(dt) not in impl.dtypes:
        return f"dtype {dt} not supported"
    return f"{cols} columns over its limit of {impl.col_limit('cuda')}{impl.width_note()}"


def case_key(c: dict) -> tuple:
    return (c["sweep"], c["op"], c["impl"], c["rows"], c["cols"], c["dtype"], c["mode"])


def warm_ahead(cases: list[dict], workers: int, log=print, device: str = "cuda") -> dict:
    """Run every case once, its shapes spread over ``workers`` processes side by side: Triton's
    and Inductor's caches (shared on disk) are then warm for the timing processes. Returns the
    first call's time per (op, impl, rows, cols, dtype), in ms: with ``torch.compile``, the cold
    compile (measured while the other processes compile too)."""
    shapes = list(dict.fromkeys((c["op"], c["rows"], c["cols"], c["dtype"]) for c in cases))
    if not shapes:
        return {}
    workers = max(1, min(workers, len(shapes)))
    # the slowest shapes to compile (those with torch.compile) dealt first, round robin
    compiled = {(c["op"], c["rows"], c["cols"], c["dtype"]) for c in cases
                if is_compiled_peer(c["impl"])}
    shapes.sort(key=lambda k: k not in compiled)
    parts = [[c for c in cases if (c["op"], c["rows"], c["cols"], c["dtype"]) in set(shapes[i::workers])]
             for i in range(workers)]
    # one compile thread each: the processes are the parallelism (no pool to start per process)
    env_vars = {**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    procs, spec_paths = [], []
    t0 = time.time()
    for part in parts:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump({"cases": part, "settings": asdict(Settings()), "warm_only": True,
                       "device": device}, f)
            spec_paths.append(f.name)
        procs.append(subprocess.Popen([sys.executable, "-m", "fusedrms.measure.worker",
                                       spec_paths[-1]], stdout=subprocess.PIPE, text=True,
                                      env=env_vars))
    first: dict = {}
    results = [[] for _ in procs]

    def read(i, proc):
        for line in proc.stdout:
            if line.startswith(LINE_TAG):
                results[i].append(json.loads(line[len(LINE_TAG):]))
            else:
                sys.stderr.write(line)

    threads = [threading.Thread(target=read, args=(i, p)) for i, p in enumerate(procs)]
    for t in threads:
        t.start()
    for t, p, path in zip(threads, procs, spec_paths):
        t.join()
        p.wait()
        os.unlink(path)
    for msgs in results:
        for m in msgs:
            if m.get("kind") == "warm" and m.get("status") == "ok":
                first[(m["op"], m["impl"], m["rows"], m["cols"], m["dtype"])] = m["first_call_ms"]
    failed = [p.returncode for p in procs if p.returncode not in (0, None)]
    log(f"warm-up: {len(first)} of {len({(c['op'], c['impl'], c['rows'], c['cols'], c['dtype']) for c in cases})} "
        f"implementation x shape pairs compiled in {workers} processes side by side, "
        f"{time.time() - t0:.0f} s" + (f"; {len(failed)} process(es) failed" if failed else ""))
    return first


def incomplete(recs: list[dict]) -> list[dict]:
    """The cases a document lists but did not time (an unsupported combination is not one)."""
    return [r for r in recs if r.get("status") != "ok"
            and not str(r.get("status", "")).startswith("unsupported")]


def require_complete(doc: dict, what: str) -> None:
    """Raise :class:`Incomplete` naming the cases ``doc`` did not time."""
    missing = incomplete(doc.get("records", []))
    if missing:
        named = "; ".join(f"{r['impl']} {r['op']} {r['rows']}x{r['cols']} {r['dtype']} {r['mode']}: "
                          f"{r.get('status')}" for r in missing[:8])
        raise Incomplete(f"{what}: {len(missing)} case(s) not timed ({named}"
                         + (" ..." if len(missing) > 8 else "") + ")")


# ---------------------------------------------------------------- many processes (the parent)

def _no_gpu_message() -> str:
    return ("No GPU here: the benchmark times kernels with device events and needs a CUDA or "
            "ROCm GPU (none is visible, or FUSEDRMS_FORCE_CPU is set). The book shows the "
            "recorded H200 results instead: `python -m fusedrms.measure.harness show` prints them, "
            "`python -m fusedrms.measure.plots FILE` draws them.")


def _progress(total: int, desc: str):
    try:
        from tqdm import tqdm

        return tqdm(total=total, desc=desc, unit="case", mininterval=5, file=sys.stderr)
    except ImportError:  # tqdm missing: a plain counter
        class _Plain:
            n = 0

            def update(self, k=1):
                self.n += k

            def close(self):
                pass

        return _Plain()


def _run_process(cases: list[dict], settings: Settings, deadline: float | None, index: int,
                 bar, log, device_info: dict) -> tuple[list[dict], float | None, str | None]:
    """Start one worker process; return (its records, its copy bandwidth, a failure or None)."""
    spec = {"cases": cases, "settings": asdict(settings), "deadline": deadline}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
        spec_path = f.name
    cmd = [sys.executable, "-m", "fusedrms.measure.worker", spec_path]
    # one compile thread: the warm-up filled the caches, and a pool costs seconds to start
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, bufsize=1,
                            env={**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": "1"})
    hard_limit = None if deadline is None else max(deadline - time.time(), 0) + 30
    killer = None
    if hard_limit is not None:  # a hung compile must not hang the whole run
        killer = threading.Timer(hard_limit, proc.kill)
        killer.start()
    try:
        got, bw, failure = consume(proc.stdout, index, bar, log, device_info)
        proc.wait()
    finally:
        if killer:
            killer.cancel()
        os.unlink(spec_path)
    if proc.returncode not in (0, None) and failure is None:
        failure = f"worker exited with code {proc.returncode}"
    return complete(got, cases, index, failure), bw, failure


def consume(lines, index: int, bar, log, device_info: dict
            ) -> tuple[list[dict], float | None, str | None]:
    """Read a worker's output: its records, its copy bandwidth and a fatal error if any."""
    got, bw, failure = [], None, None
    for line in lines:
        if not line.startswith(LINE_TAG):
            sys.stderr.write(line)  # the worker's own prints and warnings
            continue
        msg = json.loads(line[len(LINE_TAG):])
        kind = msg.pop("kind")
        if kind == "copy":
            bw = msg["GBps"]
            device_info.update(l2_bytes=msg.get("l2_bytes"), flush_bytes=msg.get("flush_bytes"))
            log(f"process {index + 1}: copy bandwidth {bw:.0f} GB/s")
        elif kind == "record":
            got.append({**msg, "process": index})
            bar.update(1)
        elif kind == "copy_at_size":  # the floor's copy at a call's size, beside its cases
            device_info.setdefault("copy_at_size", []).append({**msg, "process": index})
        elif kind == "fatal":
            failure = msg["error"]
        elif kind == "phases":  # where the process's time went: the recording's time budget
            total = msg.pop("total_s", 0.0)
            log(f"process {index + 1}: {total:.0f} s, of which "
                + ", ".join(f"{name} {sec:.1f} s" for name, sec in msg.items()))
    return got, bw, failure


def complete(got: list[dict], cases: list[dict], index: int, failure: str | None) -> list[dict]:
    """Add a 'not run' record for every case a crashed worker never reported."""
    seen = {case_key(r) for r in got}
    return got + [{**c, "process": index, "status": f"not run: {failure or 'worker ended'}"}
                  for c in cases if case_key(c) not in seen]


def _all_correct(flags) -> bool | None:
    """False if any process saw a wrong output, None if the output was not checked, else True."""
    flags = list(flags)
    if any(f is False for f in flags):
        return False
    return None if any(f is None for f in flags) else True


def process_quantiles(meds: list[float]) -> tuple[float, float]:
    """p10 and p90 of the process medians (one process: that value)."""
    from .compare import quantile_of

    return quantile_of(meds, 0.10), quantile_of(meds, 0.90)


def copies_at_size(per_process: list[dict]) -> dict:
    """{bytes: the median over processes of the copy at that size, its process medians, GB/s,
    the faster way} from the worker's ``copy_at_size`` records; a size no process timed has its
    statuses."""
    by_bytes: dict = {}
    for r in per_process:
        by_bytes.setdefault(r["bytes"], []).append(r)
    out = {}
    for nbytes, rs in sorted(by_bytes.items()):
        meds = [r["median_us"] for r in sorted(rs, key=lambda r: r["process"])
                if r.get("status") == "ok"]
        if not meds:
            out[nbytes] = {"bytes": nbytes, "status": "; ".join(sorted({r["status"] for r in rs}))}
            continue
        med = statistics.median(meds)
        # which way of copying was faster (worker.COPY_WAYS), in each process that timed it
        by = sorted({r["by"] for r in rs if r.get("status") == "ok" and r.get("by")})
        out[nbytes] = {"bytes": nbytes, "status": "ok", "median_us": med,
                       "process_medians_us": meds, "GBps": nbytes / (med * 1e3),
                       "copied": rs[0].get("copied"), "by": ", ".join(by) or None,
                       "l2_method": rs[0].get("l2_method"),
                       **quiet_fields(sorted((r for r in rs if r.get("status") == "ok"),
                                             key=lambda r: r["process"]))}
    return out


def quiet_fields(ok: list[dict]) -> dict:
    """What the processes' waits for a quiet memory system (timer.QuietProbe) say of one
    timing: each process's wait and last probe, and whether every process found it quiet."""
    if not any("quiet" in r for r in ok):
        return {}
    return {"quiet_wait_ms": [r.get("quiet_wait_ms") for r in ok],
            "quiet_probe": [r.get("quiet_probe") for r in ok],
            "quiet": all(r.get("quiet") is True for r in ok)}


def _copies_of(copies: dict, recs: list[dict]) -> dict:
    """A document's ``copy_at_size`` entry: the copies at the sizes of its own records."""
    mine = [c for b, c in copies.items() if b in {r.get("bytes") for r in recs}]
    return {"copy_at_size": mine} if mine else {}


def aggregate(per_process: list[dict], copy_bw: list[float], allow_missing_floor: bool = True,
              expected: int | None = None, copies: dict | None = None) -> list[dict]:
    """One record per case: the median of process medians, their p10-p90 and range, % of floor.

    With ``expected`` processes, a case that fewer of them timed is marked incomplete (its
    numbers are kept; its status names the processes that did not time it). ``copies``
    (:func:`copies_at_size`): a rotating case whose bytes were copied at size also gets that
    copy's time, and its own time as a share of it."""
    bw = statistics.median(copy_bw) if copy_bw else None
    groups: dict = {}
    for r in per_process:
        groups.setdefault(case_key(r), []).append(r)
    out = []
    for key, rs in groups.items():
        ok = [r for r in rs if r.get("status") == "ok"]
        c = dict(zip(("sweep", "op", "impl", "rows", "cols", "dtype", "mode"), key))
        rec = dict(c, processes=len(ok))
        if not ok:
            statuses = sorted({r.get("status", "?") for r in rs})
            rec["status"] = statuses[0] if len(statuses) == 1 else "; ".join(statuses)
            out.append(rec)
            continue
        meds = [r["median_us"] for r in sorted(ok, key=lambda r: r["process"])]
        proc_p10, proc_p90 = process_quantiles(meds)
        rec.update(status="ok", median_us=statistics.median(meds), min_median_us=min(meds),
                   max_median_us=max(meds), process_medians_us=meds,
                   process_p10_us=proc_p10, process_p90_us=proc_p90,
                   p10_us=statistics.median(r["p10_us"] for r in ok),
                   p90_us=statistics.median(r["p90_us"] for r in ok),
                   reps=ok[0]["n"],
                   first_call_ms=[round(r["first_call_ms"], 3) for r in ok],
                   correct=_all_correct(r["correct"] for r in ok), check=ok[0]["check"],
                   l2_method=ok[0]["l2_method"])
        # warm-up calls (event timers), or the rotating timer's warm-up time and input sets
        for key in ("warmup", "warm_ms", "sets"):
            if ok[0].get(key) is not None:
                rec[key] = ok[0][key]
        rec.update(quiet_fields(sorted(ok, key=lambda r: r["process"])))
        if expected and len(ok) < expected:
            others = sorted({r.get("status", "?") for r in rs if r.get("status") != "ok"})
            rec["status"] = (f"timed in {len(ok)} of {expected} processes"
                             + (f" ({'; '.join(others)})" if others else ""))
        try:
            nbytes = floor_bytes(c["op"], c["rows"], c["cols"], c["dtype"])
            rec["bytes"] = nbytes
            if bw:
                rec["copy_GBps"] = bw
                rec["floor_us"] = floor_us(nbytes, bw)
                rec["pct_of_floor"] = 100 * rec["floor_us"] / rec["median_us"]
                rec["achieved_GBps"] = nbytes / (rec["median_us"] * 1e3)
            copy = (copies or {}).get(nbytes, {})
            if c["mode"] == "rotating" and copy.get("status") == "ok":
                rec["copy_at_size_us"] = copy["median_us"]
                rec["pct_of_copy_at_size"] = 100 * copy["median_us"] / rec["median_us"]
        except FloorUnavailable as e:
            if not allow_missing_floor:
                raise
            rec["floor_error"] = str(e)
        out.append(rec)
    return out


def check_floors(sweeps: list[Sweep]) -> list[str]:
    """Problems with the floor for each op of the sweeps (empty when all can be priced)."""
    problems = []
    for op in dict.fromkeys(sw.op for sw in sweeps):
        try:
            floor_bytes(op, 1, 128, "fp32")
        except FloorUnavailable as e:
            problems.append(str(e))
    return problems


def run_sweeps(sweeps: list[Sweep], settings: Settings, out: str | Path | None = None,
               log=print, runner=None, warm=None) -> dict:
    """Run every case of ``sweeps`` in ``settings.processes`` separate processes, one after the
    other, after compiling every case side by side (:func:`warm_ahead`); write and return the
    result document. ``doc["incomplete"]`` lists the cases not timed (see :func:`require_complete`).
    """
    return run_documents({"doc": (sweeps, out)}, settings, log=log, runner=runner,
                         warm=warm)["doc"]


def timing_key(c: dict) -> tuple:
    """What a timing measures: the case without the sweep that lists it."""
    return case_key(c)[1:]


def _relabel(per_process: list[dict], cases: list[dict]) -> list[dict]:
    """The records of ``cases``, each under its own sweep name, from records timed once per key."""
    by_key: dict = {}
    for r in per_process:
        by_key.setdefault(timing_key(r), []).append(r)
    return [{**r, "sweep": c["sweep"]} for c in cases for r in by_key.get(timing_key(c), [])]


def run_documents(documents: dict, settings: Settings, log=print, runner=None, warm=None,
                  provenance: dict | None = None) -> dict:
    """Several result documents from one run: ``documents`` maps a name to ``(sweeps, out)``.
    A case two documents (or two sweeps) list is timed once, in the same processes as every other
    case, and appears in each under its own sweep name; one warm-up compiles them all. Each
    document is written to its ``out`` (if any) with its own sweeps and ``provenance`` added.
    Returns name -> document."""
    runner = runner or _run_process
    if runner is _run_process and not env.current().on_gpu:
        raise NoGPU(_no_gpu_message())
    every_sweep = [sw for sweeps, _ in documents.values() for sw in sweeps]
    problems = check_floors(every_sweep)
    if problems and not settings.allow_missing_floor:
        raise FloorUnavailable("; ".join(problems) + ". Fix the traffic model, or pass "
                               "--allow-missing-floor to record times without a floor.")
    for p in problems:
        log(f"warning: {p}")
    expanded = {name: expand(sweeps) for name, (sweeps, _) in documents.items()}
    cases = list({timing_key(c): c for name in expanded for c in expanded[name][0]}.values())
    start = time.time()
    from ..kernels import peers

    # Liger's import takes seconds: it runs while the warm-up's processes compile
    pool = concurrent.futures.ThreadPoolExecutor(1)
    liger = pool.submit(peers.liger_status)
    pool.shutdown(wait=False)
    workers = warm_worker_count(settings)
    if warm is None:  # one timing process compiles as it goes: nothing to share ahead of it
        warm = (warm_ahead if runner is _run_process and settings.processes > 1
                else (lambda *a, **k: {}))
    first_calls = warm(cases, workers, log=log)
    listed = sum(len(run) for run, _ in expanded.values())
    log(f"{len(cases)} cases x {settings.processes} processes ({listed} listed by "
        f"{len(documents)} document(s)); "
        f"{sum(len(nr) for _, nr in expanded.values())} combinations unsupported")
    bar = _progress(len(cases) * settings.processes, "bench")
    per_process, bws, failures, device_info = [], [], [], {}  # device_info: from the workers
    extra = {"settings": asdict(settings), "warm_workers": workers, "liger": liger.result(),
             **(provenance or {}),
             "method": "median of per-process medians of device-event timings; range = min-max "
                       "of process medians; p10/p90 = median over processes; compile_s = the "
                       f"first call while {workers} processes compiled side by side"}
    if len(documents) > 1:
        extra["timed_with"] = sorted(documents)
    docs = {}
    for i in range(settings.processes):
        deadline = time.time() + settings.timeout_s if settings.timeout_s else None
        t0 = time.time()
        log(f"process {i + 1}/{settings.processes} ({len(cases)} cases) starting at "
            f"+{t0 - start:.0f} s")
        got, bw, failure = runner(cases, settings, deadline, i, bar, log, device_info)
        timed = sum(1 for r in got if r.get("status") == "ok")
        log(f"process {i + 1}/{settings.processes} finished in {time.time() - t0:.0f} s: "
            f"{timed} of {len(cases)} timed" + (f"; {failure}" if failure else ""))
        per_process += got
        if bw:
            bws.append(bw)
        if failure:
            failures.append(f"process {i}: {failure}")
        if failure and failure.startswith("No GPU"):
            raise NoGPU(failure)
        for name, (sweeps, out) in documents.items():
            run, not_run = expanded[name]
            copies = copies_at_size(device_info.get("copy_at_size", []))
            recs = aggregate(_relabel(per_process, run), bws, allow_missing_floor=True,
                             expected=settings.processes, copies=copies)
            for r in recs:
                ms = first_calls.get((r["op"], r["impl"], r["rows"], r["cols"], r["dtype"]))
                if ms is not None and is_compiled_peer(r["impl"]):
                    r["compile_s"] = round(ms / 1e3, 3)
            recs += not_run
            run_extra = {**extra, "sweeps": [asdict(s) for s in sweeps],
                         **{k: v for k, v in device_info.items() if k != "copy_at_size"},
                         **_copies_of(copies, recs),
                         "copy_GBps_per_process": bws, "failures": failures,
                         "elapsed_s": round(time.time() - start, 1)}
            docs[name] = {"provenance": {**records.provenance(), **run_extra}, "records": recs,
                          "incomplete": incomplete(recs)}
            if out:
                write_results(out, recs, run_extra)
    bar.close()
    for sweeps, out in documents.values():
        if out:
            log(f"wrote {out} and {Path(out).with_suffix('.csv')}")
    return docs


# ---------------------------------------------------------------- files: JSON + CSV, loading

CSV_FIELDS = ("sweep", "op", "impl", "rows", "cols", "dtype", "mode", "status", "median_us",
              "min_median_us", "max_median_us", "p10_us", "p90_us", "processes", "reps",
              "bytes", "copy_GBps", "floor_us", "pct_of_floor", "achieved_GBps", "correct",
              "first_call_ms", "compile_s", "process_medians_us", "l2_method", "copy_at_size_us",
              "pct_of_copy_at_size")


def write_results(path: str | Path, recs: list[dict], extra: dict) -> Path:
    """JSON through :func:`fusedrms.records.write` (provenance included) and a CSV beside it."""
    path = records.write(path, recs, extra)
    write_csv(path.with_suffix(".csv"), recs)
    return path


def write_csv(path: str | Path, recs: list[dict]) -> Path:
    path = Path(path)
    fields = list(CSV_FIELDS) + sorted({k for r in recs for k in r} - set(CSV_FIELDS))
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in recs:
            w.writerow({k: (";".join(str(v) for v in r[k]) if isinstance(r.get(k), list)
                            else r.get(k, "")) for k in fields})
    return path


def load(path_or_name: str | Path = "bench_grid", machine: str | None = None) -> dict:
    """A result document: a path to a JSON file, or the name of a recorded file."""
    p = Path(path_or_name)
    if p.suffix == ".json" or p.exists():
        if not p.exists():
            raise FileNotFoundError(f"no result file at {p}")
        return json.loads(p.read_text())
    return records.load(str(path_or_name), machine)


def recorded(name: str, machine: str | None = None) -> dict | None:
    """A recorded file, or None with a printed note when it has not been recorded yet."""
    try:
        doc = records.load(name, machine)
    except FileNotFoundError as e:
        print(f"(not recorded yet: {e})")
        return None
    return doc


def select(doc: dict, **where) -> list[dict]:
    """Records whose fields equal every ``where`` value (a tuple/list/set value means 'any of')."""
    def match(r):
        for k, v in where.items():
            if isinstance(v, (tuple, list, set)):
                if r.get(k) not in v:
                    return False
            elif r.get(k) != v:
                return False
        return True

    return [r for r in doc["records"] if match(r)]


def format_table(recs: list[dict], limit: int | None = None) -> str:
    """A plain-text table of results (what ``show`` prints and the chapter displays)."""
    head = (f"{'implementation':22} {'op':12} {'rows':>6} {'cols':>6} {'dtype':5} {'mode':5} "
            f"{'median µs':>10} {'range µs':>17} {'% floor':>8} {'GB/s':>7}")
    lines = [head, "-" * len(head)]
    for r in recs[:limit]:
        if r.get("status") != "ok":
            lines.append(f"{r['impl']:22} {r['op']:12} {r['rows']:>6} {r['cols']:>6} "
                         f"{r['dtype']:5} {r['mode']:5} {r.get('status', '')}")
            continue
        rng = f"{r['min_median_us']:.1f}-{r['max_median_us']:.1f}"
        pct = f"{r['pct_of_floor']:.0f}%" if r.get("pct_of_floor") is not None else "n/a"
        gbs = f"{r['achieved_GBps']:.0f}" if r.get("achieved_GBps") is not None else "n/a"
        lines.append(f"{r['impl']:22} {r['op']:12} {r['rows']:>6} {r['cols']:>6} {r['dtype']:5} "
                     f"{r['mode']:5} {r['median_us']:>10.2f} {rng:>17} {pct:>8} {gbs:>7}")
    return "\n".join(lines)


# ---------------------------------------------------------------- the timing rules, measured

def pick_target(op: str = "add_rmsnorm") -> str:
    """The kernel the rules and the profile look at: capstone, else Triton, else HIP, else a peer."""
    from .. import registry

    impls = [i for i in registry.impls(op) if "cuda" in i.devices]
    for prefix in ("capstone.", "triton.", "hip."):
        for i in impls:
            if i.kernel and i.name.startswith(prefix):
                return i.name
    for i in impls:
        if not is_compiled_peer(i.name):
            return i.name
    raise KeyError(f"no implementation of {op} runs on a GPU")


# ---------------------------------------------------------------- command line

def _modes(text: str) -> tuple:
    modes = cli.names(text)
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown mode(s) {', '.join(bad)}; use {', '.join(MODES)}")
    return modes


def _add_settings(p):
    p.add_argument("--processes", type=cli.whole(1, 64), default=3,
                   help="separate timing processes, one after the other (default 3)")
    p.add_argument("--warm-workers", type=cli.whole(0, 64), default=0,
                   help="processes that compile every case side by side first (default: half "
                        "the CPU cores, at most 8)")
    p.add_argument("--warmup", type=cli.whole(0), default=10)
    p.add_argument("--reps", type=cli.whole(1), default=50)
    p.add_argument("--time-cap", type=cli.number(0.0, above=True), default=0.1,
                   help="seconds per timing; slow calls get fewer reps (at least 10)")
    p.add_argument("--timeout-s", type=cli.number(0.0, above=True), default=None,
                   help="a hard limit per timing process; cases it does not reach are reported "
                        "as not timed and the command exits 1")
    p.add_argument("--no-quiet-probe", dest="quiet_wait_s", action="store_const", const=0.0,
                   default=Settings.quiet_wait_s,
                   help="time without first waiting for a quiet memory system (an A/B test)")
    p.add_argument("--allow-missing-floor", action="store_true",
                   help="record times even if the traffic model cannot price an op")
    p.add_argument("--out", default="bench_results.json", type=cli.output_file,
                   help="JSON path (a CSV goes beside)")


def _settings(a) -> Settings:
    return Settings(processes=a.processes, warm_workers=a.warm_workers, warmup=a.warmup,
                    reps=a.reps, time_cap_s=a.time_cap, timeout_s=a.timeout_s,
                    allow_missing_floor=a.allow_missing_floor, quiet_wait_s=a.quiet_wait_s)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0].startswith("-"):
        argv = ["run"] + argv
    p = argparse.ArgumentParser(prog="python -m fusedrms.measure.harness", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="time implementations over a grid")
    r.add_argument("--op", type=cli.op, default="add_rmsnorm")
    r.add_argument("--rows", type=cli.whole_list(1), default=(1024, 4096, 16384))
    r.add_argument("--cols", type=cli.whole_list(1), default=(4096,))
    r.add_argument("--dtypes", type=cli.dtype_names, default=("bf16",))
    r.add_argument("--modes", type=_modes, default=("cold",))
    r.add_argument("--impls", type=cli.names, default=("*",),
                   help="names or patterns, e.g. 'triton.*'")
    _add_settings(r)
    pl = sub.add_parser("plan", help="run a named plan of sweeps (h200: the recorded grid)")
    pl.add_argument("name", choices=sorted(PLANS))
    _add_settings(pl)
    sh = sub.add_parser("show", help="print a result file (default: the recorded H200 grid)")
    sh.add_argument("file", nargs="?", default="bench_grid", type=cli.result_file())
    sh.add_argument("--limit", type=cli.whole(1), default=None)
    a = p.parse_args(argv)

    try:
        if a.cmd == "show":
            doc = load(a.file)
            print(records.describe(doc))
            print(format_table(doc["records"], a.limit))
            return 0
        if a.cmd in ("run", "plan"):
            sweeps = PLANS[a.name] if a.cmd == "plan" else [
                Sweep("run", a.op, a.rows, a.cols, a.dtypes, a.modes, a.impls)]
            doc = run_sweeps(sweeps, _settings(a), a.out)
            print(format_table([r for r in doc["records"] if r.get("status") == "ok"]))
            try:
                require_complete(doc, "the sweep")
            except Incomplete as e:
                print(f"fusedrms.measure.harness: {e}", file=sys.stderr)
                return 1
            return 0
    except (NoGPU, FloorUnavailable) as e:
        print(f"fusedrms.measure.harness: {e}", file=sys.stderr)
        return NO_GPU_EXIT
    except RuntimeError as e:
        if "needs a CUDA or ROCm GPU" in str(e):
            print(f"fusedrms.measure.harness: {e}\n{_no_gpu_message()}", file=sys.stderr)
            return NO_GPU_EXIT
        raise
    except (FileNotFoundError, KeyError, ValueError) as e:
        print(f"fusedrms.measure.harness: {e}", file=sys.stderr)
        return 1
    return 1


if __name__ == "__main__":
    sys.exit(main())
