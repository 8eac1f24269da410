"""Reading chapter 7's recorded results: the harness grid, the capstone extras and the tuning table.

Every reader here is defensive: records written by other modules may lack a field or spell a dtype
differently, and a missing file is reported (``None``), never a traceback on the page. The targets
of the capstone issue are evaluated by :func:`evaluate_targets`, which returns one verdict per target
with the measured gap, so the page prints "met / not met" from data instead of asserting it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .. import records

CAPSTONE = "capstone.fused"
CAPSTONE_OPS = {"capstone.fused": "add_rmsnorm", "capstone.fused_residual": "add_rmsnorm_residual"}
MB = 10 ** 6


def load(name: str, machine: str | None = None, data_dir: Path | None = None) -> dict | None:
    """The record file ``name`` or None (with a line saying what is missing)."""
    try:
        if data_dir is None:
            return records.load(name, machine)
        return json.loads((Path(data_dir) / (machine or records.COMMITTED) / f"{name}.json").read_text())
    except FileNotFoundError:
        print(f"(no recorded {name}.json for {machine} yet: the GPU session writes it)")
        return None
    except (json.JSONDecodeError, OSError) as e:
        print(f"(recorded {name}.json could not be read: {e})")
        return None


def tuning_table() -> dict | None:
    """The capstone's tuning table the kernels use (this GPU's if installed, else the H200's)."""
    from .. import tuning

    doc = tuning.document("capstone")
    if doc is None:
        print("(no capstone tuning table is installed)")
    return doc


def provenance_line(doc: dict | None) -> str:
    if not doc:
        return "(no recorded file)"
    try:
        return records.describe(doc)
    except (KeyError, TypeError):
        return f"Recorded: {doc.get('provenance', {})}"


def _dtype(value) -> str | None:
    from .. import traffic

    try:
        return traffic.dtype_name(value)
    except Exception:  # noqa: BLE001
        return None


def _num(value):
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if v == v else None


def _mode(rec: dict) -> str:
    """``cold`` (L2 flushed), ``warm`` or ``graph`` (warm, graph-replayed), as the harness names them."""
    mode = str(rec.get("mode") or "").lower()
    if "graph" in mode or rec.get("graph") is True:
        return "graph"
    return "warm" if mode == "warm" else "cold"


@dataclass(frozen=True)
class Point:
    """One timed (impl, shape) of the harness grid, normalized."""

    impl: str
    op: str
    rows: int
    cols: int
    dtype: str  # bf16 / fp16 / fp32
    median_us: float
    pct_floor: float | None
    mode: str = "cold"
    floor_us: float | None = None
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def graph(self) -> bool:
        return self.mode == "graph"

    @property
    def shape(self) -> tuple:
        return (self.rows, self.cols, self.dtype)


def grid_points(doc: dict | None, sweeps: tuple = ("grid", "graph")) -> list[Point]:
    """The usable records of a harness file (``bench_grid``); malformed ones are skipped.

    Only the harness's ``grid`` and ``graph`` sweeps count: its ``l2`` and ``extra_ops`` sweeps
    re-time grid shapes under other conditions and would overwrite the grid's numbers.
    """
    out = []
    for rec in (doc or {}).get("records", []) if isinstance(doc, dict) else []:
        if not isinstance(rec, dict) or rec.get("status", "ok") != "ok":
            continue
        if "sweep" in rec and rec["sweep"] not in sweeps:
            continue
        try:
            impl, op = str(rec["impl"]), str(rec.get("op", ""))
            rows, cols = int(rec["rows"]), int(rec["cols"])
        except (KeyError, TypeError, ValueError):
            continue
        dtype, median = _dtype(rec.get("dtype")), _num(rec.get("median_us"))
        if dtype is None or median is None or median <= 0:
            continue
        pct = _num(rec.get("pct_floor", rec.get("pct_of_floor")))
        floor = _num(rec.get("floor_us"))
        if pct is None and floor is not None:
            pct = 100.0 * floor / median
        if floor is None and pct is not None:
            floor = pct * median / 100.0
        out.append(Point(impl, op, rows, cols, dtype, median, pct, _mode(rec), floor, rec))
    return out


def bytes_moved(op: str, rows: int, cols: int, dtype: str) -> int:
    from .. import traffic

    return traffic.price(traffic.OP_STEP[op], rows, cols, dtype).bytes_total


def is_peer(impl: str) -> bool:
    return impl.startswith(("torch.", "liger.", "flashinfer.", "vllm."))


def peers_by_shape(points: list[Point], op: str = "add_rmsnorm", mode: str = "cold") -> dict:
    """{shape: {impl: µs}} for the capstone and every peer of ``op``, in one timing mode."""
    table: dict = {}
    for p in points:
        if p.mode != mode or (p.op and p.op != op):
            continue
        if p.impl == CAPSTONE or is_peer(p.impl):
            table.setdefault(p.shape, {})[p.impl] = p.median_us
    return table


@dataclass
class Verdict:
    target: str
    met: bool | None  # None: no data
    detail: str
    worst: dict | None = None

    def line(self) -> str:
        status = {True: "met", False: "NOT met", None: "no data"}[self.met]
        return f"{self.target}: {status} -- {self.detail}"


def evaluate_targets(points: list[Point], graph_small: list[dict] | None = None,
                     impl: str = CAPSTONE) -> list[Verdict]:
    """The issue's four targets, each with the measured worst case and its gap."""
    mine = [p for p in points if p.impl == impl and p.mode == "cold"]
    verdicts = []
    for lo, hi, need, name in ((64 * MB, None, 95.0, ">= 95% of floor, shapes moving >= 64 MB"),
                               (8 * MB, 64 * MB, 80.0, ">= 80% of floor, shapes moving 8-64 MB")):
        sel = []
        for p in mine:
            if p.pct_floor is None:
                continue
            b = bytes_moved(p.op or "add_rmsnorm", p.rows, p.cols, p.dtype)
            if b >= lo and (hi is None or b < hi):
                sel.append((p.pct_floor, p, b))
        if not sel:
            verdicts.append(Verdict(name, None, "no recorded shape in this range"))
            continue
        worst_pct, p, b = min(sel, key=lambda t: t[0])
        ok = worst_pct >= need
        verdicts.append(Verdict(name, ok, f"{len(sel)} shapes; worst {worst_pct:.1f}% at "
                                f"{p.rows}x{p.cols} {p.dtype} ({b / MB:.1f} MB)"
                                + ("" if ok else f", gap {need - worst_pct:.1f} points"),
                                {"rows": p.rows, "cols": p.cols, "dtype": p.dtype,
                                 "pct_floor": worst_pct}))
    # small shapes: graph-replayed kernel time <= floor + 2 us
    small = []
    for p in points:
        if p.impl == impl and p.graph and p.floor_us is not None:
            b = bytes_moved(p.op or "add_rmsnorm", p.rows, p.cols, p.dtype)
            if b < 8 * MB:
                small.append((p.median_us - p.floor_us, p.rows, p.cols, p.dtype, "harness"))
    if not small:
        for rec in graph_small or []:
            us, fl = _num(rec.get("median_us")), _num(rec.get("floor_us"))
            if rec.get("impl") != impl or us is None or fl is None:
                continue
            dt = _dtype(rec.get("dtype")) or "?"
            b = bytes_moved(rec.get("op") or "add_rmsnorm", int(rec["rows"]), int(rec["cols"]), dt)
            if b < 8 * MB:
                small.append((us - fl, rec["rows"], rec["cols"], dt, f"capstone extras, L2 "
                              f"{rec.get('l2', '?')}"))
    name = "small shapes (< 8 MB): graph-replay time <= floor + 2 us"
    if not small:
        verdicts.append(Verdict(name, None, "no graph-replay records"))
    else:
        over, rows, cols, dt, src = max(small, key=lambda t: t[0])
        ok = over <= 2.0
        verdicts.append(Verdict(name, ok, f"{len(small)} timings ({src}); worst {over:+.2f} us "
                                f"over the floor at {rows}x{cols} {dt}"
                                + ("" if ok else f", gap {over - 2.0:.2f} us"),
                                {"rows": rows, "cols": cols, "dtype": dt, "over_floor_us": over}))
    # no grid shape slower than the fastest peer
    table = peers_by_shape(points)
    losses, compared = [], 0
    for shape, times in table.items():
        peer_times = {k: v for k, v in times.items() if is_peer(k)}
        if CAPSTONE not in times or not peer_times:
            continue
        compared += 1
        best_peer = min(peer_times, key=peer_times.get)
        ratio = times[CAPSTONE] / peer_times[best_peer]
        if ratio > 1.0:
            losses.append((ratio, shape, best_peer))
    name = "no grid shape slower than the fastest peer"
    if not compared:
        verdicts.append(Verdict(name, None, "no shape with both the capstone and a peer"))
    elif not losses:
        verdicts.append(Verdict(name, True, f"faster than or equal to every peer on all "
                                            f"{compared} shapes"))
    else:
        ratio, (rows, cols, dt), peer = max(losses)
        verdicts.append(Verdict(name, False, f"slower on {len(losses)} of {compared} shapes; worst "
                                f"{rows}x{cols} {dt}: {ratio:.2f}x the time of {peer}",
                                {"rows": rows, "cols": cols, "dtype": dt, "ratio": ratio,
                                 "peer": peer}))
    return verdicts


def extra_records(doc: dict | None, kind: str) -> list[dict]:
    return [r for r in (doc or {}).get("records", []) if isinstance(r, dict) and r.get("kind") == kind]


def census_lines(doc: dict | None, width: int = 72) -> list[str]:
    """One block per PyTorch route: kernels per call, each with its device time."""
    lines = []
    for rec in extra_records(doc, "kernel_census"):
        if "error" in rec:
            lines.append(f"{rec.get('impl')}: not recorded ({rec['error']})")
            continue
        lines.append(f"{rec.get('impl')} ({rec.get('description', '')}), "
                     f"{rec.get('rows')}x{rec.get('cols')} {rec.get('dtype')}: "
                     f"{_num(rec.get('launches_per_call')) or 0:g} kernels per call")
        for k in rec.get("kernels", []):
            name = str(k.get("name", "?"))
            name = name if len(name) <= width else name[:width - 3] + "..."
            lines.append(f"    {(_num(k.get('count_per_call')) or 0):g} x {name}  "
                         f"{(_num(k.get('device_us_per_call')) or 0):.1f} us")
    return lines


def tuning_rows(doc: dict | None) -> list[dict]:
    """Per tuned key: winner, its times, and the heuristic's and baseline's at the same rows."""
    out = []
    for rec in (doc or {}).get("records", []):
        try:
            row = {"cols": int(rec["cols"]), "dtype": str(rec["dtype"]),
                   "winner": rec.get("label") or "?", "source": rec.get("source", "")}
        except (KeyError, TypeError, ValueError):
            continue
        for key in ("times_us", "heuristic_times_us", "baseline_times_us", "previous_times_us"):
            row[key] = {int(k): _num(v) for k, v in (rec.get(key) or {}).items()
                        if _num(v) is not None}
        previous = rec.get("previous") or {}
        # the table in use before this run, timed again: shown when the search replaced it
        row["replaced_previous"] = bool(previous) and any(
            previous.get(k) != rec.get(k) for k in ("rows_per_program", "num_warps", "num_stages",
                                                   "programs_per_sm", "chunk"))
        out.append(row)
    return out


# ---------------------------------------------------------------- page readers (chapter 7's page)

PEER_SWEEPS = ("grid", "graph", "peers")  # the harness sweeps that time shapes (not "python")


def peers_doc() -> tuple[dict | None, str | None]:
    """The recorded comparison of the capstone with every peer: ``capstone_peers`` (chapter 7's
    own run, every peer, one timer) when recorded, else the harness grid of chapter 6. Returns
    ``(doc, name)``; ``(None, None)`` when neither is recorded."""
    for name in ("capstone_peers", "bench_grid"):
        try:
            return records.load(name), name
        except FileNotFoundError:
            continue
        except (json.JSONDecodeError, OSError):
            continue
    return None, None


def peer_points(doc: dict | None) -> list[Point]:
    return grid_points(doc, sweeps=PEER_SWEEPS)


def _capstone_for(op: str) -> str:
    return {v: k for k, v in CAPSTONE_OPS.items()}.get(op, CAPSTONE)


def peer_rows(points: list[Point], op: str = "add_rmsnorm") -> list[dict]:
    """One row per shape timed for ``op``: the capstone's time and share of the copy floor, the
    fastest peer and its time, and the ratio (capstone / fastest peer; below 1 is faster).
    Sorted by the bytes the fused design moves."""
    mine = _capstone_for(op)
    by_shape: dict = {}
    for p in points:
        if p.mode != "cold" or (p.op and p.op != op):
            continue
        if p.impl == mine or is_peer(p.impl):
            by_shape.setdefault(p.shape, {})[p.impl] = p
    timed = {k for got in by_shape.values() for k in got if is_peer(k)}  # peers timed anywhere
    rows = []
    for shape, got in by_shape.items():
        peers = {k: v for k, v in got.items() if is_peer(k)}
        if mine not in got or not peers:
            continue
        best = min(peers.values(), key=lambda p: p.median_us)
        me = got[mine]
        rows.append({"rows": shape[0], "cols": shape[1], "dtype": shape[2],
                     "MB": bytes_moved(op, *shape) / MB, "capstone_us": me.median_us,
                     "pct_floor": me.pct_floor, "peer": best.impl, "peer_us": best.median_us,
                     "peer_pct_floor": best.pct_floor, "ratio": me.median_us / best.median_us,
                     "peers": {k: v.median_us for k, v in peers.items()},
                     # peers the recording timed elsewhere but not here: never counted as a win
                     "missing": sorted(timed - set(peers))})
    return sorted(rows, key=lambda r: (r["MB"], r["dtype"]))


def peer_summary(rows: list[dict], large_MB: float = 64.0) -> dict:
    """Counts and extremes of :func:`peer_rows`: shapes compared, shapes where every peer was
    timed (``complete``) and where the capstone is at least as fast as every peer there, how
    many shapes each peer is missing at, the worst and best ratio, and the capstone's share of the
    copy floor over shapes moving ``large_MB`` or more (median and minimum)."""
    if not rows:
        return {"compared": 0}
    worst = max(rows, key=lambda r: r["ratio"])
    best = min(rows, key=lambda r: r["ratio"])
    large = sorted(r["pct_floor"] for r in rows if r["MB"] >= large_MB and r["pct_floor"])
    large_peer = sorted(r["peer_pct_floor"] for r in rows
                        if r["MB"] >= large_MB and r["peer_pct_floor"])
    complete = [r for r in rows if not r.get("missing")]
    missing: dict = {}
    for r in rows:
        for name in r.get("missing", []):
            missing[name] = missing.get(name, 0) + 1
    return {"compared": len(rows), "complete": len(complete),
            "not_slower": sum(r["ratio"] <= 1.0 for r in complete), "missing": missing,
            "worst": worst, "best": best, "large": len(large),
            "large_pct_median": large[len(large) // 2] if large else None,
            "large_pct_min": large[0] if large else None,
            "large_peer_pct_median": large_peer[len(large_peer) // 2] if large_peer else None,
            "peers": sorted({k for r in rows for k in r["peers"]})}


def eager_ratios(points: list[Point], large_MB: float = 64.0) -> list[float]:
    """Eager chain time / capstone time at the shapes moving ``large_MB`` or more (sorted)."""
    eager = {p.shape: p.median_us for p in points if p.impl == "torch.eager_chain"
             and p.mode == "cold"}
    return sorted(eager[p.shape] / p.median_us for p in points
                  if p.impl == CAPSTONE and p.mode == "cold" and p.shape in eager
                  and bytes_moved("add_rmsnorm", *p.shape) / MB >= large_MB)


def python_calls(doc: dict | None, op: str = "add_rmsnorm") -> dict:
    """{impl: µs per call} from the harness's ``python`` sweep (back-to-back calls from Python,
    no graph), for ``op``; empty when not recorded."""
    out = {}
    for rec in (doc or {}).get("records", []):
        if not isinstance(rec, dict) or rec.get("sweep") != "python" or rec.get("op") != op:
            continue
        us = _num(rec.get("median_us"))
        if rec.get("status", "ok") == "ok" and us:
            out[str(rec["impl"])] = us
    return out


def lever_summary(effects: list[dict] | None, op: str = "add_rmsnorm") -> list[dict]:
    """Per lever of the performance study (rows of ``ch07.lever_effects``: lever, tests, variant,
    op, rows, cols, before_us, after_us): the best variant's change at each shape, summarized as
    the median, lowest and highest change in percent over the shapes, in the study's order."""
    per: dict = {}
    for e in effects or []:
        if e.get("op") != op or not e.get("before_us") or not e.get("after_us"):
            continue
        shape = (e["rows"], e["cols"])
        change = 100.0 * (e["after_us"] - e["before_us"]) / e["before_us"]
        lever = per.setdefault(e["lever"], {"tests": e.get("tests", ""), "shapes": {}})
        lever["shapes"][shape] = min(change, lever["shapes"].get(shape, change))
    out = []
    for name, lever in per.items():
        changes = sorted(lever["shapes"].values())
        out.append({"lever": name, "tests": lever["tests"], "shapes": len(changes),
                    "median_pct": changes[len(changes) // 2], "best_pct": changes[0],
                    "worst_pct": changes[-1]})
    return out
