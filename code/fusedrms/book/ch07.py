"""Chapter 7's GPU studies: tune the capstone per (cols, dtype) (:mod:`fusedrms.book.ch07_tuning`),
and record the evidence the chapter shows next to the measurement harness's grid. Recorded by
``python -m fusedrms.record --chapters 7 [--tune]`` (:func:`record`); each step also runs alone::

    python -m fusedrms.book.ch07 tune   --out DIR --budget 80   # capstone_tuning(_trials).json
    python -m fusedrms.book.ch07 extras --out DIR --budget 40   # capstone_extra.json
    python -m fusedrms.book.ch07 confirm --out DIR --budget 20  # capstone_confirm.json
    python -m fusedrms.book.ch07 check --out DIR --table T      # the table's two-pass entries

**Extras** (``capstone_extra.json``, one list of records, each with a ``kind``):
``seed_as_printed`` (the listing's launch error), ``seed_partial`` (what BLOCK < cols does),
``kernel_census`` (the kernels each PyTorch route launches, from torch.profiler),
``graph_replay`` (small shapes: graph-replayed kernel times against floor + 2 µs) and
``copy_bandwidth``.
"""
from __future__ import annotations

from .. import env  # first

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from ..kernels import add_rmsnorm as A, add_rmsnorm_chunked
from .. import cli, dtypes, records, registry, tuning
from .ch07_results import PEERS_GRID
from .ch07_tuning import (EPS, TUNE_COLS, _device, _timing, check_table, log, median_us,
                          tune_table)

SMALL_ROWS = (1, 64, 256, 1024)
SMALL_COLS = (2048, 4096, 8192)
SEED_SHAPE = (64, 4096)  # rows, cols for the seed listing's two faults
CENSUS_SHAPE = (4096, 4096)  # bf16, for the profiler's kernel census


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _traffic():
    try:
        from .. import traffic
    except ImportError as e:
        raise RuntimeError("fusedrms.traffic (chapter 2's module) is missing; floors come from "
                           "traffic.floor_us") from e
    return traffic


# ---------------------------------------------------------------- extras

def _impls(names) -> dict:
    """name -> registry.Impl for the capstone and the torch peers, imported directly (not through
    registry.load_all, so another chapter's module failing to import cannot stop this study)."""
    from ..kernels import peers  # noqa: F401  (registers the torch peers)

    known = registry._IMPLS  # what has registered so far: add_rmsnorm and peers
    missing = [n for n in names if n not in known]
    if missing:
        raise KeyError(f"not registered: {', '.join(missing)}")
    return {n: known[n] for n in names}


def kernel_census(events) -> dict:
    """Summarize device events ``[(name, µs), ...]`` of ``calls`` calls into kernels per call."""
    names: dict = {}
    for name, us in events:
        n = names.setdefault(name, {"name": name, "count": 0, "device_us": 0.0})
        n["count"] += 1
        n["device_us"] += float(us)
    return {"kernels": sorted(names.values(), key=lambda k: -k["device_us"]),
            "launches": sum(k["count"] for k in names.values())}


def profile_kernels(fn, calls: int = 5) -> dict:
    """Kernels launched by ``calls`` calls of ``fn`` (torch.profiler, device events only)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    _sync()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        for _ in range(calls):
            fn()
        _sync()
    events = []
    for e in prof.events():
        if str(getattr(e, "device_type", "")).endswith("CUDA"):
            events.append((e.name[:200], e.time_range.elapsed_us()))
    census = kernel_census(events)
    for k in census["kernels"]:
        k["count_per_call"] = k["count"] / calls
        k["device_us_per_call"] = k["device_us"] / calls
    census["launches_per_call"] = census["launches"] / calls
    census["calls"] = calls
    return census


def _step(name: str, fn, out: list) -> None:
    t0 = time.time()
    try:
        fn(out)
        log(f"{name}: ok ({time.time() - t0:.1f} s)")
    except Exception as e:  # noqa: BLE001  (each step is independent)
        out.append({"kind": "error", "step": name, "error": f"{type(e).__name__}: {e}"})
        log(f"{name}: FAILED {type(e).__name__}: {e}")


def extras(out_dir: Path, budget_s: float) -> Path:
    env.require_gpu("the capstone extras")
    from . import seed_capstone as seed

    start = time.time()
    path = out_dir / "capstone_extra.json"
    out: list = []
    bf16 = torch.bfloat16

    dev = _device()
    seed_rows, seed_cols = SEED_SHAPE

    def seed_as_printed(out):
        x, r = (torch.randn(seed_rows, seed_cols, device=dev) for _ in range(2))
        w = torch.randn(seed_cols, device=dev)
        res = seed.launch_as_printed(x, r, w)
        out.append({"kind": "seed_as_printed", "rows": seed_rows, "cols": seed_cols,
                    "dtype": "float32", **res})
        log(f"seed listing as printed: {res}")

    def seed_partial(out):
        x, r = (torch.randn(seed_rows, seed_cols, device=dev) for _ in range(2))
        w = torch.randn(seed_cols, device=dev)
        for block in seed.SEED_BLOCKS + (seed_cols,):
            res = seed.partial_normalization_error(x, r, w, block)
            out.append({"kind": "seed_partial", "dtype": "float32", **res})
            log(f"seed kernel with BLOCK={block} on {seed_cols} columns: {res}")

    def census(out):
        rows, cols = CENSUS_SHAPE
        x, r = (torch.randn(rows, cols, device=dev, dtype=bf16) for _ in range(2))
        w = torch.randn(cols, device=dev, dtype=bf16)
        for name in ("torch.eager_chain", "torch.rms_norm_add", "capstone.fused",
                     "capstone.fused_residual"):
            try:
                impl = _impls([name])[name]
            except (KeyError, ImportError) as e:
                out.append({"kind": "kernel_census", "impl": name, "error": str(e)})
                continue
            c = profile_kernels(lambda: impl.fn(x, r, w, EPS))
            out.append({"kind": "kernel_census", "impl": name, "op": impl.op,
                        "description": impl.description, "rows": rows, "cols": cols,
                        "dtype": "bfloat16", **c})
            log(f"{name}: {c['launches_per_call']:g} kernels per call: "
                + "; ".join(f"{k['name'][:70]} x{k['count_per_call']:g}" for k in c["kernels"]))

    bandwidth = {}

    def copy_bw(out):
        bandwidth["GBps"] = float(_timing().copy_bandwidth_GBps())
        out.append({"kind": "copy_bandwidth", "GBps": bandwidth["GBps"]})
        log(f"copy bandwidth {bandwidth['GBps']:.0f} GB/s")

    def graph_replay(out):
        traffic = _traffic()
        bw = bandwidth.get("GBps")
        names = ("capstone.fused", "capstone.fused_residual", "torch.rms_norm_add",
                 "torch.eager_chain")
        for cols in SMALL_COLS:
            for rows in SMALL_ROWS:
                if time.time() > start + budget_s:
                    log("graph replay: budget spent, stopping")
                    return
                x, r = (torch.randn(rows, cols, device=dev, dtype=bf16) for _ in range(2))
                w = torch.randn(cols, device=dev, dtype=bf16)
                fused_floor = traffic.floor_us("add_rmsnorm", rows, cols, bf16, bw) if bw else None
                impls = _impls(names)
                for name in names:
                    impl = impls[name]
                    floor = traffic.floor_us(impl.op, rows, cols, bf16, bw) if bw else None
                    for l2 in ("warm", "cold"):
                        rec = {"kind": "graph_replay", "impl": name, "op": impl.op, "rows": rows,
                               "cols": cols, "dtype": "bfloat16", "l2": l2, "floor_us": floor}
                        try:
                            us = median_us(lambda: impl.fn(x, r, w, EPS), warmup=5, reps=30,
                                           l2=l2, graph=True)
                            rec.update(median_us=us, target_us=None if floor is None else floor + 2,
                                       met=None if floor is None else us <= floor + 2)
                        except Exception as e:  # noqa: BLE001
                            rec["error"] = f"{type(e).__name__}: {str(e)[:200]}"
                        out.append(rec)
                fused = [o for o in out if o.get("kind") == "graph_replay" and o["rows"] == rows
                         and o["cols"] == cols and o["impl"] == "capstone.fused"]
                log(f"graph replay {rows}x{cols} bf16: capstone.fused "
                    + ", ".join(f"{o['l2']} {o.get('median_us', float('nan')):.2f} us" for o in fused)
                    + (f" (floor {fused_floor:.2f} us)" if fused_floor else ""))

    for name, fn in (("seed as printed", seed_as_printed), ("seed partial", seed_partial),
                     ("kernel census", census), ("copy bandwidth", copy_bw),
                     ("graph replay", graph_replay)):
        _step(name, fn, out)
        records.write(path, out, {"eps": EPS})
    log(f"extras done in {time.time() - start:.1f} s -> {path}")
    return path


CONFIRM_SHAPES = tuple((rows, cols, torch.bfloat16) for cols in (2048, 4096, 8192, 16384)
                       for rows in (256, 1024, 4096, 16384)) + tuple(
    (rows, cols, torch.float32) for cols in (2048, 8192) for rows in (1024, 16384))
CONFIRM_PEERS = ("torch.rms_norm_add", "torch.eager_chain")


def confirm(out_dir: Path, budget_s: float, table_path: Path | None = None) -> Path:
    """Time the capstone *with the new tuning table* next to the eager peers, L2 flushed, in one
    process (``capstone_confirm.json``, records shaped like the harness's: impl, op, rows, cols,
    dtype, mode, median_us, floor_us, pct_of_floor). The harness's grid may have run before the
    table existed; this is the tuned kernel's own evidence."""
    env.require_gpu("confirming the tuned capstone")
    start = time.time()
    table_path = Path(table_path or out_dir / "tuning" / "capstone.json")
    if table_path.exists():  # a table just tuned in this recording, not installed yet
        tuning.override("capstone", tuning.load("capstone", table_path))
    else:
        table_path = tuning.installed_path("capstone", records.gpu_slug(env.current().gpu_name))
    bw = float(_timing().copy_bandwidth_GBps())
    traffic = _traffic()
    impls = _impls(("capstone.fused",) + CONFIRM_PEERS)
    out = []
    path = out_dir / "capstone_confirm.json"
    for rows, cols, dtype in CONFIRM_SHAPES:
        if time.time() > start + budget_s:
            log("confirm: budget spent, stopping")
            break
        x, r = (torch.randn(rows, cols, device=_device(), dtype=dtype) for _ in range(2))
        w = torch.randn(cols, device=_device(), dtype=dtype)
        cfg, source = A.config_and_source(rows, cols, dtype, _device(), write_sum=False)
        floor = traffic.floor_us("add_rmsnorm", rows, cols, dtype, bw)
        line = []
        for name, impl in impls.items():
            rec = {"impl": name, "op": "add_rmsnorm", "rows": rows, "cols": cols,
                   "dtype": dtypes.long_name(dtype), "mode": "cold", "copy_GBps": bw,
                   "floor_us": floor}
            if name == "capstone.fused":
                rec.update(config=cfg.label(), config_source=source)
            try:
                us = median_us(lambda: impl.fn(x, r, w, EPS), warmup=3, reps=15, l2="cold")
                rec.update(status="ok", median_us=us, pct_of_floor=100 * floor / us)
                line.append(f"{name} {us:.2f} us ({100 * floor / us:.0f}%)")
            except Exception as e:  # noqa: BLE001
                rec["status"] = f"error: {type(e).__name__}: {str(e)[:200]}"
                line.append(f"{name} FAILED")
            out.append(rec)
        records.write(path, out, {"copy_GBps": bw, "table": str(table_path)})
        log(f"confirm {rows}x{cols} {dtypes.long_name(dtype)}: " + ", ".join(line))
        del x, r, w
    records.write(path, out, {"copy_GBps": bw, "table": str(table_path)})
    log(f"confirm done in {time.time() - start:.1f} s -> {path}")
    return path


# ---------------------------------------------------------------- every peer, one timer

# The capstone beside every peer, with the one timer of the issue: a CUDA graph replays calls over
# rotating input sets, a pass moving at least 4x L2 (inputs come from DRAM), medians over 3 processes
# (torch.compile's too, its cache warm after the first). Then what a call costs from Python.
GOAL_ROWS, GOAL_COLS = (1, 16, 128, 1024, 4096, 16384), (2048, 4096, 8192, 16384, 32768, 65536)
PEER_IMPLS = ("capstone.*", "torch.*", "liger.*", "flashinfer.*")
DIAGONAL = ((1, 4096), (1024, 8192), (16384, 16384), (1024, 65536))


def peer_sweeps(smoke: bool = False) -> list:
    from ..measure import harness

    S = harness.Sweep
    if smoke:
        return [S("peers", "add_rmsnorm", (1024,), (4096,), ("bf16",), ("rotating",), PEER_IMPLS),
                S("peers", "add_rmsnorm_residual", (1024,), (4096,), ("bf16",), ("rotating",),
                  PEER_IMPLS),
                S("python", "add_rmsnorm", (1,), (4096,), ("bf16",), ("python",), PEER_IMPLS)]
    bf16 = (GOAL_ROWS, GOAL_COLS, ("bf16",), ("rotating",), PEER_IMPLS)
    out = [S("peers", "add_rmsnorm", *bf16), S("peers", "add_rmsnorm_residual", *bf16),
           S("python", "add_rmsnorm", (1,), (4096,), ("bf16",), ("python",), PEER_IMPLS),
           S("python", "add_rmsnorm_residual", (1,), (4096,), ("bf16",), ("python",), PEER_IMPLS)]
    # fp16 and fp32: a diagonal (decode-sized, mid, the largest, the widest), where they teach
    # something new
    for rows, cols in DIAGONAL:
        for op in ("add_rmsnorm", "add_rmsnorm_residual"):
            out.append(S("peers", op, (rows,), (cols,), ("fp16", "fp32"), ("rotating",),
                         PEER_IMPLS))
    out.append(S("peers_rmsnorm", "rmsnorm", (1024, 16384), (4096, 8192), ("bf16",),
                 ("rotating",), ("triton.row", "torch.*", "liger.*", "flashinfer.*")))
    return out


PEERS_FILE = "capstone_peers.json"
# The rest of goal 1's grid in fp16 and fp32 (the diagonal is timed with the peers): too long to
# share chapter 6's device call, so a call before chapter 7's times it into the same folder
# (``record --ahead 7``), or chapter 7 times it itself.
GRID_FILE = f"{PEERS_GRID}.json"
GRID_DTYPES = ("fp16", "fp32")
GRID_SMOKE_SHAPE = (16, 2048)


def grid_sweeps(smoke: bool = False) -> list:
    """Goal 1's grid in fp16 and fp32 at every shape :func:`peer_sweeps` does not time them (the
    diagonal), both ops beside every peer; ``smoke``: one small shape."""
    from ..measure import harness

    S = harness.Sweep
    ops = ("add_rmsnorm", "add_rmsnorm_residual")
    if smoke:
        rows, cols = GRID_SMOKE_SHAPE
        return [S("peers", op, (rows,), (cols,), ("fp32",), ("rotating",), PEER_IMPLS) for op in ops]
    out = []
    for rows in GOAL_ROWS:
        cols = tuple(c for c in GOAL_COLS if (rows, c) not in DIAGONAL)
        out += [S("peers", op, (rows,), cols, GRID_DTYPES, ("rotating",), PEER_IMPLS) for op in ops]
    return out


def timed_in_this_run(path: Path, sweeps: list, run: dict | None) -> bool:
    """Whether ``path`` holds exactly ``sweeps``, timed earlier in the recording ``run`` (chapter
    6's grid times them beside its own cases when a recording includes both chapters)."""
    from dataclasses import asdict

    if run is None or not Path(path).exists():
        return False
    prov = json.loads(Path(path).read_text()).get("provenance", {})
    wanted = json.loads(json.dumps([asdict(s) for s in sweeps]))
    return prov.get("run_id") == run["id"] and prov.get("sweeps") == wanted


def _bench(path: Path, sweeps: list, what: str, timeout_s: float, smoke: bool, run: dict | None,
           log=log) -> Path:
    """``sweeps`` through the harness into ``path`` (3 processes each), or the file an earlier part
    of the same recording ``run`` wrote with them; either way complete, or it raises."""
    from ..measure import harness
    from .ch06 import timing_settings

    env.require_gpu(f"timing {what}")
    if timed_in_this_run(path, sweeps, run):
        log(f"{what}: timed earlier in this recording ({path.name})")
        harness.require_complete(harness.load(path), what)
        return path
    doc = harness.run_documents({"doc": (sweeps, path)}, timing_settings(timeout_s, smoke), log=log,
                                provenance={"run_id": run["id"]} if run else None)["doc"]
    harness.require_complete(doc, what)
    return path


def peers_bench(out_dir: Path, timeout_s: float, smoke: bool = False,
                run: dict | None = None) -> Path:
    """``capstone_peers.json``: :func:`peer_sweeps`, or the file chapter 6's grid wrote with them
    in the same recording ``run``."""
    return _bench(Path(out_dir) / PEERS_FILE, peer_sweeps(smoke), "chapter 7's peers", timeout_s,
                  smoke, run)


def grid_bench(out_dir: Path, timeout_s: float, smoke: bool = False, run: dict | None = None,
               log=log) -> Path:
    """``capstone_peers_grid.json``: :func:`grid_sweeps`, or the file an earlier call of the same
    recording ``run`` wrote (``record --ahead 7``)."""
    return _bench(Path(out_dir) / GRID_FILE, grid_sweeps(smoke), "chapter 7's fp16 and fp32 grid",
                  timeout_s, smoke, run, log)


def ahead(out_dir, log=log, smoke: bool = False, run: dict | None = None) -> list[Path]:
    """What a call before chapter 7's times into the same recording (``record --ahead 7``): the
    fp16 and fp32 grid, which :func:`record` then finds timed in its run."""
    return [grid_bench(Path(out_dir), PEERS_TIMEOUT_S, smoke=smoke, run=run, log=log)]


# ---------------------------------------------------------------- the chapter's recording

FILES = {
    "capstone_extra.json": "the seed listing's faults, the kernel census, graph-replay small shapes",
    "capstone_confirm.json": "the capstone with the table in use, next to the eager peers",
    "capstone_peers.json": "both ops beside every peer, rotating-input graph timer, 3 processes",
    GRID_FILE: "goal 1's grid in fp16 and fp32 (but the diagonal), the same peers and timer",
    "capstone_levers.json": "every candidate launch (lever) at 4 shapes, both ops, same timer",
    "capstone_wide_ncu.json": "Nsight Compute's DRAM bytes, ours and Inductor's, at the widest rows",
    "capstone_in_place_ncu.json": "Nsight Compute's DRAM bytes, the residual op in place and out of "
                                  "place, where in place trails",
}
TUNING_FILES = {
    "tuning/capstone.json": "the winner per (cols, dtype) (written with --tune)",
    "capstone_tuning_trials.json": "every configuration the tuner timed (written with --tune)",
}
EXTRAS_BUDGET_S, TUNE_BUDGET_S, CHECK_BUDGET_S, CONFIRM_BUDGET_S = 40, 300, 40, 60
SMOKE_LEVERS_BUDGET_S = 40  # one shape, one process: it compiles every candidate and torch.compile
LEVERS_BUDGET_S = 360  # a limit, far above the need (9 shapes, both ops, 3 processes; 5 shapes
# took 72 s on the H200 at 501bfdd; the four added compile two more widths): a shape past it fails
# the recording
PEERS_TIMEOUT_S = 300  # per timing process: a hard limit for a hung case, far above its ~60 s
ESTIMATE_S = 250  # H200 at 501bfdd: 103 s after chapter 6 timed its peers (the levers 72 s of it);
# the four lever shapes added since, two of them new widths to compile, perhaps 100 more; the
# in-place profile pair about 20 (H100: 8 s a profile)
TUNING_ESTIMATE_S = TUNE_BUDGET_S + CHECK_BUDGET_S + 20
# record --ahead 7 (ESTIMATE_S counts the grid timed ahead): 64 shapes x both ops x every peer,
# 3 processes, after one warm-up
AHEAD_ESTIMATE_S = 330
# where the wide-row losses were: which bytes are extra, ours against Inductor's kernel
WIDE_NCU_SHAPE = ("add_rmsnorm", 16384, 32768, "bf16")
WIDE_NCU_IMPLS = ("capstone.fused", "torch.compile_add")
# where writing in place trailed writing out of place (the H200 at eceb0b6: 1.01-1.02x from 16384
# rows): whether the same kernel moves other bytes when its outputs are its inputs
IN_PLACE_NCU_SHAPE = ("add_rmsnorm_residual", 16384, 8192, "bf16")
IN_PLACE_NCU_IMPLS = ("capstone.fused_residual", "capstone.fused_residual_in_place")
SOURCES = ("tuning/h200/capstone.json", "kernels/add_rmsnorm.py", "kernels/add_rmsnorm_chunked.py",
           "kernels/add_rmsnorm_split.py", "kernels/add_rmsnorm_exchange.py",
           "kernels/direct_launch.py",
           "kernels/rounding.py", "kernels/peers.py", "kernels/peers_flashinfer.py",
           "kernels/flashinfer_norm.cu",
           "measure/timer.py", "measure/harness.py", "measure/worker.py", "traffic.py",
           "book/ch07.py::record", "book/ch07_tuning.py", "book/study.py", "book/study_timing.py",
           "book/seed_capstone.py", "book/ch06.py::record")  # ch06 times the peers in a joint run


def record(out_dir, tune: bool = False, log=log, smoke: bool = False,
           run: dict | None = None) -> list[Path]:
    """Chapter 7 on the GPU: the extras, then (``tune``) the tuner and the check of its two-pass
    entries, then the confirmation run with the table in use (the new one when just tuned).
    ``smoke``: every step with a budget of a few seconds (each stops cleanly at its budget).
    ``run``: the recording this is part of (its peers may have been timed with chapter 6's grid)."""
    env.require_gpu("recording chapter 7")
    out_dir = Path(out_dir)
    budget = (lambda s: 4) if smoke else (lambda s: s)
    written = [extras(out_dir, budget(EXTRAS_BUDGET_S))]
    table = None
    if tune:
        tune_table(out_dir, budget(TUNE_BUDGET_S), cols_list=TUNE_COLS[:1] if smoke else TUNE_COLS)
        table = out_dir / "tuning" / "capstone.json"
        written += [table, out_dir / "capstone_tuning_trials.json"]
        if not check_table(out_dir, budget(CHECK_BUDGET_S), table):
            raise RuntimeError(f"the tuned table {table} failed its check: do not install it")
    try:
        written.append(confirm(out_dir, budget(CONFIRM_BUDGET_S), table))
        written.append(peers_bench(out_dir, PEERS_TIMEOUT_S, smoke=smoke, run=run))
        written.append(grid_bench(out_dir, PEERS_TIMEOUT_S, smoke=smoke, run=run))
        from . import study

        written.append(study.lever_bench(out_dir, SMOKE_LEVERS_BUDGET_S if smoke else LEVERS_BUDGET_S,
                                         smoke=smoke))
        written.append(wide_bytes(out_dir, smoke=smoke))
        written.append(in_place_bytes(out_dir, smoke=smoke))
    finally:
        tuning.override("capstone", None)
    return written


def wide_bytes(out_dir, smoke: bool = False, log=log) -> Path:
    """``capstone_wide_ncu.json``: :func:`profile_pair` of ours and Inductor's kernel at
    :data:`WIDE_NCU_SHAPE`."""
    return profile_pair(Path(out_dir) / "capstone_wide_ncu.json", WIDE_NCU_SHAPE, WIDE_NCU_IMPLS,
                        smoke, log)


def in_place_bytes(out_dir, smoke: bool = False, log=log) -> Path:
    """``capstone_in_place_ncu.json``: :func:`profile_pair` of the residual op out of place and in
    place at :data:`IN_PLACE_NCU_SHAPE`."""
    return profile_pair(Path(out_dir) / "capstone_in_place_ncu.json", IN_PLACE_NCU_SHAPE,
                        IN_PLACE_NCU_IMPLS, smoke, log)


def profile_pair(path: Path, shape: tuple, impls: tuple, smoke: bool = False, log=log) -> Path:
    """Nsight Compute (``--clock-control none``) on each of ``impls`` at ``shape`` (op, rows, cols,
    dtype), with the DRAM bytes each read and wrote, into ``path``. A profile that did not run
    fails the recording where ncu exists; without ncu the file says why. ``smoke``: no profile
    (each costs 10-25 s, the GPU check's smoke runs beside its tests); the file says so."""
    from ..measure import harness, ncu

    op, rows, cols, dt = shape
    if smoke:
        return records.write(path, [{"status": "skipped", "reason": "a smoke run", "impl": i,
                                     "op": op, "rows": rows, "cols": cols, "dtype": dt}
                                    for i in impls])
    recs = []
    for impl in impls:
        summary = ncu.profile_with_ncu(impl, op, rows, cols, dt, timeout_s=90, log=log)
        summary.pop("raw_tail", None)
        recs.append(summary)
        log(f"ncu {impl} {rows}x{cols} {dt}: {summary['status']} {summary.get('reason', '')}")
    records.write(path, recs)
    failed = [r["impl"] for r in recs if r.get("status") != "ok"]
    if failed and ncu.find_ncu() is not None:
        raise harness.Incomplete(f"chapter 7: Nsight Compute did not profile {', '.join(failed)} "
                                 f"at {rows}x{cols} {dt}")
    return path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fusedrms.book.ch07", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=("tune", "extras", "confirm", "check", "peers"))
    p.add_argument("--out", type=cli.output_dir, required=True, help="folder for the JSON files")
    p.add_argument("--budget", type=cli.number(0.0, above=True), default=60.0,
                   help="seconds (stops cleanly after)")
    p.add_argument("--table", type=Path, default=None,
                   help="check: the table to check (default: the committed H200 table)")
    p.add_argument("--previous", type=Path, default=None,
                   help="tune: the table in use (default: the committed H200 table); its winners "
                        "are timed again and kept for keys the budget does not reach")
    a = p.parse_args(argv)
    if not env.current().on_gpu:
        print("the capstone studies time kernels and need a GPU; this machine has none. The "
              "chapter shows the recorded H200 files instead.", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    if a.what == "tune":
        tune_table(a.out, a.budget, previous_path=a.previous)
    elif a.what == "check":
        return 0 if check_table(a.out, a.budget, a.table) else 1
    else:
        {"extras": extras, "confirm": confirm, "peers": peers_bench}[a.what](a.out, a.budget)
    return 0


if __name__ == "__main__":
    sys.exit(main())


# ---------------------------------------------------------------- readers for the measured section
# Data for the chapter's cells (rows of dicts: the page renders them); no prose, no verdicts.
# Each reads one file of one recording: capstone_peers.json, capstone_levers.json.

STUDY_OPS = {"fused": "add_rmsnorm", "residual": "add_rmsnorm_residual"}
STUDY_IMPLS = {("add_rmsnorm", "ours.current"): "capstone.fused",
               ("add_rmsnorm_residual", "ours.current"): "capstone.fused_residual",
               ("add_rmsnorm_residual", "ours.current_in_place"): "capstone.fused_residual_in_place",
               ("add_rmsnorm", "torch.compile"): "torch.compile_add",
               ("add_rmsnorm_residual", "torch.compile"): "torch.compile_residual"}
OURS = {"add_rmsnorm": "capstone.fused", "add_rmsnorm_residual": "capstone.fused_residual"}
GOAL_BOUND_PCT, GOAL_MIN_BYTES = 97.0, 64 << 20
SEED_PREDICTIONS = {"speedup_over_eager": 2.3, "dram_pct": "mid-80s"}  # seed 000's listing


def normalized(doc: dict) -> list[dict]:
    """Measured records of a study or a harness file in one shape: op, impl (registry names;
    study candidates as ``capstone[<name>]``), rows, cols, dtype, median_us, floor_us (at the
    book's copy floor, :func:`fusedrms.records.at_copy_floor`), bytes."""
    out = []
    for r in records.at_copy_floor(doc)["records"]:
        if r.get("status") != "ok" or not r.get("median_us"):
            continue
        if r.get("mode") not in (None, "rotating"):
            continue
        op = STUDY_OPS.get(r["op"], r["op"])
        impl = STUDY_IMPLS.get((op, r["impl"]), r["impl"])
        if impl.startswith("ours."):
            impl = f"capstone[{impl[5:]}]"
        out.append({"op": op, "impl": impl, "rows": r["rows"], "cols": r["cols"],
                    "dtype": dtypes.short(r["dtype"]), "median_us": r["median_us"],
                    "floor_us": r.get("floor_us"),
                    "bytes": r.get("bytes"), "processes": r.get("processes"),
                    "correct": r.get("correct")})
    return out


def _is_peer(impl: str) -> bool:
    return not impl.startswith("capstone")


def goal_status(doc: dict, op: str = "add_rmsnorm") -> list[dict]:
    """Per shape: ours, the fastest peer, ours / fastest peer, and ours as a percent of the faster
    of (copy floor, fastest peer) for shapes moving at least 64 MB; with the two checks as
    booleans (None where a check does not apply or a number is missing)."""
    recs = [r for r in normalized(doc) if r["op"] == op]
    by_shape: dict = {}
    for r in recs:
        by_shape.setdefault((r["rows"], r["cols"], r["dtype"]), {})[r["impl"]] = r
    rows = []
    for (n, c, dt), impls in sorted(by_shape.items(), key=lambda kv: (kv[0][2], kv[0][1], kv[0][0])):
        ours = impls.get(OURS[op])
        peers = [r for name, r in impls.items() if _is_peer(name)]
        best = min(peers, key=lambda r: r["median_us"]) if peers else None
        row = {"rows": n, "cols": c, "dtype": dt, "ours_us": ours and ours["median_us"],
               "fastest_peer": best and best["impl"], "peer_us": best and best["median_us"],
               "floor_us": (ours or best or {}).get("floor_us"),
               "bytes": (ours or best or {}).get("bytes"), "ratio": None, "pct_of_bound": None,
               "at_most_peer": None, "near_bound": None}
        if ours and best:
            row["ratio"] = ours["median_us"] / best["median_us"]
            row["at_most_peer"] = row["ratio"] <= 1.0
            if row["floor_us"] and row["bytes"] and row["bytes"] >= GOAL_MIN_BYTES:
                bound = min(row["floor_us"], best["median_us"])
                row["pct_of_bound"] = 100.0 * bound / ours["median_us"]
                row["near_bound"] = row["pct_of_bound"] >= GOAL_BOUND_PCT
        rows.append(row)
    return rows


HINT_LEVER = "x and r evict_first, w after the reduction"  # the whole-row kernel before
LEVERS = (  # (study candidate, lever, what it tests) - study_timing.candidates
    ("liger_w", "one row per program, Liger's warps", "Liger's launch in our kernel"),
    ("whole_r1_w", "twice the threads", "fewer values per thread, more loads in flight"),
    ("whole_r2_w16", "two rows per program", "more bytes in flight per program"),
    ("two_pass_c2048_w16", "two passes, 2048-column chunks, 16 warps", "Inductor's launch"),
    ("two_pass_c4096_w16", "two passes, 4096-column chunks", "wider chunks"),
    ("two_pass_c1024_w8", "two passes, 1024-column chunks, 8 warps", "narrower chunks"),
    ("hinted_loads", HINT_LEVER, "the whole-row kernel before"),
    ("evict_last_loads", "x and r loaded evict_last", "the lines read outlive the lines written"),
    ("without_pdl", "no programmatic dependent launch", "the launch before"),
)


def lever_effects(doc: dict, shapes=((16384, 8192), (4096, 8192), (1024, 16384), (128, 16384),
                                     (16384, 16384)),
                  dtype: str = "bf16") -> list[dict]:
    """Lever -> effect from ``capstone_levers.json``: each candidate launch against the launch in
    use (``ours``: the table, or the large-batch rule) at a few shapes, both ops: time before,
    after, and the ratio after / before."""
    recs = normalized(doc)
    index = {(r["op"], r["impl"], r["rows"], r["cols"], r["dtype"]): r["median_us"] for r in recs}
    out = []
    for prefix, lever, tests in LEVERS:
        for op in OURS:
            for n, c in shapes:
                base = index.get((op, OURS[op], n, c, dtype))
                hits = [(impl, t) for (o, impl, rr, cc, dt), t in index.items()
                        if o == op and rr == n and cc == c and dt == dtype
                        and impl.startswith(f"capstone[{prefix}")]
                for impl, t in hits:
                    out.append({"lever": lever, "tests": tests, "variant": impl[9:-1], "op": op,
                                "rows": n, "cols": c, "before_us": base, "after_us": t,
                                "ratio": t / base if base else None})
    return out


def seed_predictions(doc: dict, ncu_summary: list[dict] | None = None) -> list[dict]:
    """Seed 000's two predictions against one recording: the capstone's speedup over the eager
    chain (median and range over shapes moving 64 MB or more, from ``capstone_peers.json``) and
    Nsight Compute's DRAM throughput of the capstone (``ncu_summary.json``'s records)."""
    recs = normalized(doc)
    index = {(r["impl"], r["rows"], r["cols"], r["dtype"]): r for r in recs
             if r["op"] == "add_rmsnorm"}
    speedups = []
    for (impl, n, c, dt), r in index.items():
        eager = index.get(("torch.eager_chain", n, c, dt))
        if impl == "capstone.fused" and eager and (r["bytes"] or 0) >= GOAL_MIN_BYTES:
            speedups.append(eager["median_us"] / r["median_us"])
    speedups.sort()
    rows = [{"prediction": "speedup over the eager chain",
             "seed": SEED_PREDICTIONS["speedup_over_eager"],
             "measured": speedups[len(speedups) // 2] if speedups else None,
             "low": speedups[0] if speedups else None, "high": speedups[-1] if speedups else None,
             "shapes": len(speedups)}]
    for s in ncu_summary or []:
        rows.append({"prediction": f"DRAM throughput, {s.get('impl')} {s.get('rows')}x{s.get('cols')}",
                     "seed": SEED_PREDICTIONS["dram_pct"], "measured": s.get("dram_throughput_pct"),
                     "low": None, "high": None, "shapes": 1})
    return rows


def side_by_side(levers_doc: dict) -> dict:
    """Inductor's generated kernel for add + RMSNorm at 16384x8192 bf16 (kept by the lever bench
    from TORCH_LOGS=output_code) and ours (the two-pass kernel large batches run), as text."""
    from ..viz import source as S

    kernels = levers_doc.get("provenance", {}).get("inductor_kernels") or {}
    return {"inductor": kernels.get("add_rmsnorm", ""),
            "inductor_residual": kernels.get("add_rmsnorm_residual", ""),
            "ours": S.file_section(Path(add_rmsnorm_chunked.__file__), "chunked-kernel")}


def peers_figure(doc: dict, op: str = "add_rmsnorm", dtype: str = "bf16", rows=None):
    """Percent of the copy floor per shape, one marker per implementation (ours and every peer):
    x is the shape (rows x cols, in the order of the bytes moved)."""
    from ..measure.plots import MARKERS, _figure

    recs = [r for r in normalized(doc) if r["op"] == op and r["dtype"] == dtype and r["floor_us"]
            and (rows is None or r["rows"] in rows)
            and (r["impl"] == OURS[op] or _is_peer(r["impl"]))]
    if not recs:
        raise ValueError(f"nothing to draw for op={op!r}, dtype={dtype!r}")
    shapes = sorted({(r["rows"], r["cols"]) for r in recs}, key=lambda s: s[0] * s[1])
    xpos = {s: i for i, s in enumerate(shapes)}
    fig = _figure(max(6.0, 0.32 * len(shapes) + 3), 3.6)
    ax = fig.subplots()
    for k, impl in enumerate(sorted({r["impl"] for r in recs}, key=lambda i: (i != OURS[op], i))):
        pts = sorted((xpos[(r["rows"], r["cols"])], 100 * r["floor_us"] / r["median_us"])
                     for r in recs if r["impl"] == impl)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=MARKERS[k % len(MARKERS)],
                linestyle="-" if impl == OURS[op] else ":", label=impl,
                linewidth=2 if impl == OURS[op] else 1)
    ax.set_xticks(range(len(shapes)), [f"{n}x{c}" for n, c in shapes], rotation=60, fontsize=7)
    ax.set_ylabel("% of the copy floor")
    ax.axhline(100, color="grey", linewidth=0.6)
    ax.legend(fontsize=7, ncol=2)
    return fig
