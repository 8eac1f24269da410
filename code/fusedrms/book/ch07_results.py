"""Reading chapter 7's recorded results: the harness grid, the capstone extras and the tuning table.

Every reader here is defensive: records written by other modules may lack a field or spell a dtype
differently, and a missing file is reported (``None``), never a traceback on the page.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from .. import records
from . import page

CAPSTONE = "capstone.fused"
# the residual-writing capstone, out of place (the registry's default call) and in place
CAPSTONE_RESIDUAL, CAPSTONE_IN_PLACE = "capstone.fused_residual", "capstone.fused_residual_in_place"
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
# chapter 7's fp16 and fp32 grid, beside capstone_peers in the same recording (ch07.GRID_FILE)
PEERS_GRID = "capstone_peers_grid"


def with_grid(peers: dict, grid: dict | None) -> tuple[dict, bool]:
    """``peers`` (``capstone_peers``) with the records of ``grid`` (``capstone_peers_grid``)
    appended where both come from one recording's run (the same ``run_id``; their shapes never
    overlap), and whether they were. A grid of another run is left out: its GPU, commit or copy
    floor may differ."""
    def run_id(doc):
        return (doc.get("provenance") or {}).get("run_id") if isinstance(doc, dict) else None

    if run_id(peers) is None or run_id(grid) != run_id(peers) or not isinstance(
            grid.get("records"), list):
        return peers, False
    return {**peers, "records": list(peers.get("records", [])) + grid["records"]}, True


def peers_doc(machine: str | None = None) -> tuple[dict | None, str | None]:
    """The recorded comparison of the capstone with every peer: ``capstone_peers`` (chapter 7's
    own run, every peer, one timer) with its fp16 and fp32 grid where the same run timed it
    (:func:`with_grid`), else the harness grid of chapter 6, with every floor at the book's copy
    floor (:func:`fusedrms.records.at_copy_floor`), not at the copy each process measured. Returns
    ``(doc, name)``; ``(None, None)`` when neither is recorded. ``machine`` names a committed
    recording (the prose's); default: the one a reader sees."""
    for name in ("capstone_peers", "bench_grid"):
        try:
            doc = records.at_copy_floor(records.load(name, machine))
        except (FileNotFoundError, json.JSONDecodeError, OSError):
            continue
        if name == "capstone_peers":
            try:
                grid = records.at_copy_floor(records.load(PEERS_GRID, machine))
            except (FileNotFoundError, json.JSONDecodeError, OSError):
                grid = None
            doc, _ = with_grid(doc, grid)
        return doc, name
    return None, None


def peer_points(doc: dict | None) -> list[Point]:
    return grid_points(doc, sweeps=PEER_SWEEPS)


def _capstone_for(op: str) -> str:
    return {v: k for k, v in CAPSTONE_OPS.items()}.get(op, CAPSTONE)


def peer_attempts(doc: dict | None, op: str = "add_rmsnorm", unsupported: bool = False) -> dict:
    """{shape: {peer impl}} of every peer the recording meant to time for ``op`` at each shape,
    timed or not (a record skipped for time, or missing a library, still names its peer); a peer
    that cannot run the shape is not meant to (``unsupported``: those instead)."""
    out: dict = {}
    for rec in (doc or {}).get("records", []) if isinstance(doc, dict) else []:
        if not isinstance(rec, dict) or rec.get("sweep", "peers") not in PEER_SWEEPS:
            continue
        if _mode(rec) != "cold" or (rec.get("op") and rec.get("op") != op):
            continue
        if str(rec.get("status", "")).startswith("unsupported") != unsupported:
            continue
        impl, dtype = str(rec.get("impl", "")), _dtype(rec.get("dtype"))
        try:
            shape = (int(rec["rows"]), int(rec["cols"]), dtype)
        except (KeyError, TypeError, ValueError):
            continue
        if is_peer(impl) and dtype is not None:
            out.setdefault(shape, set()).add(impl)
    return out


def peer_unsupported(doc: dict | None, op: str = "add_rmsnorm") -> dict:
    """{shape: {peer impl}} of the peers that cannot run ``op`` at each shape (FlashInfer's fused
    op past its shared memory): listed by the harness as unsupported, never timed, never missing."""
    return peer_attempts(doc, op, unsupported=True)


def peer_rows(points: list[Point], op: str = "add_rmsnorm", attempted: dict | None = None,
              unsupported: dict | None = None, mine: str | None = None) -> list[dict]:
    """One row per shape timed for ``op``: the capstone's time and share of the copy floor, the
    fastest peer timed there and its time, the ratio (capstone / that peer; below 1 is faster),
    and ``missing``: the peers not timed there although the recording timed them elsewhere or
    meant to time them there (``attempted``, from :func:`peer_attempts`), but for those that
    cannot run the shape (``unsupported``, from :func:`peer_unsupported`: the row's
    ``unsupported``). Sorted by the bytes the fused design moves. ``mine``: the capstone's
    implementation compared (default: the op's own; the residual op's in-place one, say)."""
    mine = mine or _capstone_for(op)
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
        cannot = set((unsupported or {}).get(shape, ()))
        expected = (timed | set((attempted or {}).get(shape, ()))) - cannot
        rows.append({"rows": shape[0], "cols": shape[1], "dtype": shape[2],
                     "MB": bytes_moved(op, *shape) / MB, "capstone_us": me.median_us,
                     "pct_floor": me.pct_floor, "peer": best.impl, "peer_us": best.median_us,
                     "peer_pct_floor": best.pct_floor, "ratio": me.median_us / best.median_us,
                     "copy_pct_floor": _copy_pct_floor(me),
                     "peers": {k: v.median_us for k, v in peers.items()},
                     # each median with its p10-p90 across processes, as the tables show it
                     "capstone_spread": _with_spread(me), "peer_spread": _with_spread(best),
                     # peers not timed here: never counted as a win
                     "missing": sorted(expected - set(peers)), "unsupported": sorted(cannot)})
    return sorted(rows, key=lambda r: (r["MB"], r["dtype"]))


def peer_table(doc: dict | None, op: str = "add_rmsnorm", points: list[Point] | None = None,
               mine: str | None = None) -> list[dict]:
    """:func:`peer_rows` of a peers recording for ``op``, with the peers it meant to time and
    those that cannot run a shape (``points``: :func:`peer_points` of ``doc``, if already read)."""
    points = peer_points(doc) if points is None else points
    return peer_rows(points, op, peer_attempts(doc, op), peer_unsupported(doc, op), mine)


def _copy_pct_floor(p: Point) -> float | None:
    """A copy of this call's bytes timed at its size (the faster way, worker.copy_at_size), as a
    share of the floor (the 1 GiB copy's rate), where the recording timed it (harness
    ``copy_at_size_us``); else None."""
    copy_us = _num(p.raw.get("copy_at_size_us"))
    if copy_us is None or copy_us <= 0 or not p.floor_us:
        return None
    return 100 * p.floor_us / copy_us


def _with_spread(p: Point) -> str:
    return page.median_with_spread({**p.raw, "median_us": p.median_us})


def _count_missing(rows: list[dict]) -> dict:
    """{peer: number of ``rows`` it is missing at}."""
    out: dict = {}
    for r in rows:
        for name in r.get("missing", []):
            out[name] = out.get(name, 0) + 1
    return out


def peer_summary(rows: list[dict], large_MB: float = 64.0) -> dict:
    """Counts and extremes of :func:`peer_rows`: shapes compared, shapes where the capstone is at
    least as fast as every peer timed there (``not_slower_timed``), shapes where every peer was
    timed (``complete``) and the capstone at least as fast there (``not_slower``), how many shapes
    each peer is missing at, the worst and best ratio, and over the shapes moving ``large_MB`` or
    more the capstone's share of the copy floor (median, minimum) and the fastest timed peer's."""
    if not rows:
        return {"compared": 0}
    worst = max(rows, key=lambda r: r["ratio"])
    best = min(rows, key=lambda r: r["ratio"])
    big = [r for r in rows if r["MB"] >= large_MB]
    large = sorted(r["pct_floor"] for r in big if r["pct_floor"])
    large_peer = sorted(r["peer_pct_floor"] for r in big if r["peer_pct_floor"])
    complete = [r for r in rows if not r.get("missing")]
    missing = _count_missing(rows)
    return {"compared": len(rows), "complete": len(complete),
            "not_slower": sum(r["ratio"] <= 1.0 for r in complete),
            "not_slower_timed": sum(r["ratio"] <= 1.0 for r in rows), "missing": missing,
            "worst": worst, "best": best, "large": len(large),
            "large_pct_median": statistics.median(large) if large else None,
            "large_pct_min": large[0] if large else None,
            "large_peer_pct_median": statistics.median(large_peer) if large_peer else None,
            "large_peers": sorted({r["peer"] for r in big}),
            "large_shapes": len(big), "large_missing": _count_missing(big),
            "peers": sorted({k for r in rows for k in r["peers"]})}


def tie_counts(rows: list[dict], band: float | None) -> dict | None:
    """Shapes where every peer was timed, sorted by :func:`fusedrms.measure.compare.verdict`
    against the fastest peer with the recording's tie band: {"faster", "tie", "slower"}."""
    from ..measure import compare

    complete = [r for r in rows if not r.get("missing")]
    if band is None or not complete:
        return None
    out = {"faster": 0, "tie": 0, "slower": 0, "band": band, "shapes": len(complete)}
    for r in complete:
        out[compare.verdict(r["capstone_us"], r["peer_us"], band)] += 1
    return out


def eager_ratios(points: list[Point], large_MB: float = 64.0) -> list[float]:
    """Eager chain time / capstone time at the shapes moving ``large_MB`` or more (sorted)."""
    eager = {p.shape: p.median_us for p in points if p.impl == "torch.eager_chain"
             and p.mode == "cold"}
    return sorted(eager[p.shape] / p.median_us for p in points
                  if p.impl == CAPSTONE and p.mode == "cold" and p.shape in eager
                  and bytes_moved("add_rmsnorm", *p.shape) / MB >= large_MB)


def python_calls(doc: dict | None, op: str = "add_rmsnorm", spread: bool = False) -> dict:
    """{impl: µs per call} from the harness's ``python`` sweep (back-to-back calls from Python,
    no graph), for ``op``; empty when not recorded. ``spread``: {impl: (lowest, highest) process
    median} instead, how far a call from Python moved from process to process."""
    out = {}
    for rec in (doc or {}).get("records", []):
        if not isinstance(rec, dict) or rec.get("sweep") != "python" or rec.get("op") != op:
            continue
        if rec.get("status", "ok") != "ok":
            continue
        if spread:
            lo, hi = _num(rec.get("min_median_us")), _num(rec.get("max_median_us"))
            if lo and hi:
                out[str(rec["impl"])] = (lo, hi)
        elif _num(rec.get("median_us")):
            out[str(rec["impl"])] = _num(rec.get("median_us"))
    return out


def lever_summary(effects: list[dict] | None, op: str = "add_rmsnorm") -> list[dict]:
    """Per lever of the performance study (rows of ``ch07.lever_effects``: lever, tests, variant,
    op, rows, cols, before_us, after_us): the best variant's change in percent at each shape
    (``changes``: {(rows, cols): %} in order of size; negative is a shorter time), and their
    median, lowest and highest, in the study's order."""
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
        by_size = sorted(lever["shapes"].items(), key=lambda kv: (kv[0][0] * kv[0][1], kv[0]))
        out.append({"lever": name, "tests": lever["tests"], "shapes": len(changes),
                    "changes": dict(by_size), "median_pct": statistics.median(changes),
                    "best_pct": changes[0], "worst_pct": changes[-1]})
    return out


def beyond_band(change_pct: float, shape, gaps: dict, threshold_pct: float) -> bool:
    """Whether a lever's change at ``shape`` counts: more than ``threshold_pct`` plus
    ``gaps[shape]``, the launch in use's own change between two runs (:func:`launch_repeat`)."""
    return abs(change_pct) > threshold_pct + abs(gaps.get(shape, 0.0))


def levers_outside_band(levers: list[dict], gaps: dict, threshold_pct: float) -> list[dict]:
    """The levers (:func:`lever_summary`) with a change :func:`beyond_band` at some shape: the
    ones a table shows."""
    return [lv for lv in levers
            if any(beyond_band(c, shape, gaps, threshold_pct)
                   for shape, c in lv["changes"].items())]


# ---------------------------------------------------------------- the page's words for the data

# registry names -> what a reader calls each implementation (prose adds "the" where English does)
PEER_NAMES = {
    "torch.rms_norm_add": "F.rms_norm(x + r)", "torch.rms_norm": "F.rms_norm",
    "torch.eager_chain": "eager chain",
    "torch.compile_add": "torch.compile", "torch.compile_residual": "torch.compile",
    "torch.compile": "torch.compile",
    "liger.fused_add_rms_norm": "Liger-Kernel", "liger.rms_norm": "Liger-Kernel",
    "flashinfer.fused_add_rmsnorm": "FlashInfer", "flashinfer.rms_norm": "FlashInfer",
    "capstone.fused": "capstone", "capstone.fused_residual": "capstone",
    "capstone.fused_residual_in_place": "capstone, in place",
}
_ARTICLE = {"eager chain", "capstone", "capstone, in place"}
_ORDER = ("F.rms_norm(x + r)", "F.rms_norm", "eager chain", "torch.compile", "Liger-Kernel",
          "FlashInfer")


def display_name(impl: str, prose: bool = False) -> str:
    """The name a reader knows ``impl`` by: ``torch.compile_add`` -> ``torch.compile``,
    ``torch.eager_chain`` -> ``eager chain`` (``the eager chain`` in ``prose``). Unknown
    names pass through."""
    name = PEER_NAMES.get(impl, impl)
    return f"the {name}" if prose and name in _ARTICLE else name


def display_names(impls, prose: bool = False) -> list[str]:
    """The distinct display names of ``impls``, in the book's order of peers."""
    names = {display_name(i) for i in impls}
    ordered = sorted(names, key=lambda n: (_ORDER.index(n) if n in _ORDER else len(_ORDER), n))
    return [f"the {n}" if prose and n in _ARTICLE else n for n in ordered]


def shape_text(rows, cols, dtype: str | None = None) -> str:
    return f"{rows}x{cols}" + (f" {dtype}" if dtype else "")


def ratio_text(ratio: float) -> str:
    """``1.09x``; three decimals where two would hide which side of 1 the ratio is on."""
    text = f"{ratio:.2f}"
    if text == "1.00" and ratio != 1.0:
        text = f"{ratio:.3f}"
    return f"{text}x"


def peers_of(rows: list[dict], attempted: dict | None = None) -> set:
    """Every peer :func:`peer_rows` compared with, or that the recording meant to time
    (``attempted``, from :func:`peer_attempts`) although it was never timed."""
    return ({k for r in rows for k in r["peers"]} | {k for r in rows for k in r["missing"]}
            | {k for got in (attempted or {}).values() for k in got})


def _study_times(levers_doc: dict, impl: str, op: str, dtype: str) -> dict:
    """{(rows, cols): median µs} of ``impl`` in the performance study's records."""
    from . import ch07

    return {(r["rows"], r["cols"]): r["median_us"] for r in ch07.normalized(levers_doc)
            if r["op"] == op and r["impl"] == impl and r["dtype"] == dtype}


def _changes(before: dict, after: dict) -> dict:
    """{shape: %} from ``before`` to ``after`` at the shapes both have."""
    return {shape: 100.0 * (after[shape] - us) / us for shape, us in before.items() if shape in after}


def one_recording(levers_doc: dict | None, peers_doc: dict | None) -> bool:
    """Whether the performance study and the peers were timed at one commit: only then is the
    launch in use's change between them (:func:`launch_repeat`) a gap between two runs and not
    a change of the kernel or the timer."""
    commit = lambda doc: ((doc or {}).get("provenance") or {}).get("commit")  # noqa: E731
    return commit(levers_doc) is not None and commit(levers_doc) == commit(peers_doc)


def launch_repeat(levers_doc: dict | None, points: list[Point], op: str = "add_rmsnorm",
                  dtype: str = "bf16") -> dict:
    """{(rows, cols): %} the launch in use changed between the performance study's run and the
    peers run (:func:`peer_points`), in the levers' sign convention: the same kernel timed twice,
    so what a lever must beat to count."""
    if not levers_doc:
        return {}
    mine = _capstone_for(op)
    peers = {(p.rows, p.cols): p.median_us for p in points
             if p.impl == mine and p.mode == "cold" and p.dtype == dtype and (not p.op or p.op == op)}
    return _changes(_study_times(levers_doc, mine, op, dtype), peers)


REPEAT_IMPL = "capstone[current_again]"  # study_timing.REPEAT as :func:`ch07.normalized` names it


def in_run_repeat(levers_doc: dict | None, op: str = "add_rmsnorm", dtype: str = "bf16") -> dict:
    """{(rows, cols): %} the launch in use changed when the performance study timed it again after
    every other launch of the shape, in the same process: the in-run noise of one median."""
    if not levers_doc:
        return {}
    return _changes(_study_times(levers_doc, _capstone_for(op), op, dtype),
                    _study_times(levers_doc, REPEAT_IMPL, op, dtype))


def change_text(pct: float) -> str:
    """``+10.7%``, ``-8.2%``; ``0.0%`` for a change that rounds to zero (never ``-0.0%``)."""
    text = f"{pct:+.1f}%"
    return "0.0%" if text in ("+0.0%", "-0.0%") else text


# ---------------------------------------------------------------- where the capstone loses

def in_place_over_out_of_place(points: list[Point]) -> dict[tuple, float]:
    """{(rows, cols, dtype): in-place time / out-of-place time} of the residual-writing capstone
    at every shape both variants were timed (the rows of :func:`peer_rows`, once for each)."""
    op = "add_rmsnorm_residual"
    out_of_place = {(r["rows"], r["cols"], r["dtype"]): r["capstone_us"] for r in peer_rows(points, op)}
    in_place = {(r["rows"], r["cols"], r["dtype"]): r["capstone_us"]
                for r in peer_rows(points, op, mine=CAPSTONE_IN_PLACE)}
    return {shape: us / out_of_place[shape] for shape, us in in_place.items() if shape in out_of_place}


def in_place_ratios(points: list[Point], max_rows: int | None = None,
                    min_rows: int | None = None) -> list[float]:
    """:func:`in_place_over_out_of_place`'s ratios, sorted, for shapes with at most ``max_rows``
    / at least ``min_rows`` rows."""
    return sorted(ratio for (rows, _, _), ratio in in_place_over_out_of_place(points).items()
                  if not (max_rows and rows > max_rows) and not (min_rows and rows < min_rows))
