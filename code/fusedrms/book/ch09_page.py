"""Chapter 9's page: the readers that turn the recorded ``ch09_backward.json`` (written by
:func:`fusedrms.book.ch09.record`) into the chapter's tables, plot and sentences: :func:`load`,
:func:`training_table`, :func:`backward_table`, :func:`verdict`, :func:`figure`, :func:`answer` and
the other ``*_sentence`` functions. Without a recording each returns None or says so in words;
none invents a number. No measurement happens here.
"""
from __future__ import annotations

import re
import statistics

from .. import records
from . import page
from .ch09 import OPS, OURS, RECORD_NAME, SHAPES, TRAIN_IMPLS

LARGE_BYTES = 64 << 20  # the chapter's comparison counts shapes moving at least this much


def load(machine: str | None = None) -> dict | None:
    """The recorded file (the reader's own recording for their GPU when there is one, else the
    committed one: :func:`fusedrms.records.load`) with every floor at the book's copy floor
    (:func:`fusedrms.records.at_copy_floor`), not at the copies its processes measured; None when
    there is none (the page says so)."""
    try:
        doc = records.load(RECORD_NAME, machine)
    except FileNotFoundError:
        return None
    return records.at_copy_floor(doc, time="us", share="pct_floor")


# what a reader calls each implementation and design (the registry's names stay in the records)
PLAIN_NAMES = {"triton.two_stage": "ours", "triton.atomic": "ours with atomic dw",
               "torch.eager": "eager PyTorch", "torch.rms_norm": "F.rms_norm",
               "torch.compile": "torch.compile", "liger": "Liger"}
DESIGN_NAMES = {"two_stage": "two-stage dw", "atomic": "atomic dw",
                "recompute_r": "two-stage dw, r recomputed"}
OP_NAMES = {"rmsnorm": "RMSNorm", "add_rmsnorm": "fused add + RMSNorm"}


def plain_name(impl: str) -> str:
    return PLAIN_NAMES.get(impl, impl)


def _shape(rows: int, cols: int, dt: str) -> str:
    return f"{rows}x{cols} {dt}"


def _select(doc, **where) -> list[dict]:
    return [r for r in (doc or {}).get("records", [])
            if all(r.get(k) == v for k, v in where.items())]


def peers_of(doc) -> list[str]:
    return [i for i in TRAIN_IMPLS if i not in OURS and _select(doc, kind="train", impl=i)]


def _with_spread(rec: dict) -> str | None:
    """A record's µs with the p10-p90 of its process times, as chapters 6 and 7 show them."""
    from ..measure import harness

    if "us" not in rec:
        return None
    lo, hi = harness.process_quantiles(rec.get("process_us") or [rec["us"]])
    return page.median_with_spread({"median_us": rec["us"], "process_p10_us": lo,
                                    "process_p90_us": hi})


def training_table(doc, op: str) -> list[dict] | None:
    """One row per shape: µs of each implementation (forward + backward), ours as % of floor, and
    ours against the fastest peer that passed its gradient check."""
    if doc is None:
        return None
    rows = []
    shapes = sorted({(r["rows"], r["cols"], r["dtype"]) for r in _select(doc, kind="train", op=op)},
                    key=lambda s: (s[2] != "bf16", s[0], s[1]))
    for rows_, cols, dt in shapes:
        recs = {r["impl"]: r for r in _select(doc, kind="train", op=op, rows=rows_, cols=cols,
                                              dtype=dt)}
        ours = recs.get("triton.two_stage", {})
        peers = [r for i, r in recs.items() if i not in OURS and "us" in r and r.get("check_ok")]
        fastest = min(peers, key=lambda r: r["us"], default=None)
        row = {"shape": f"{rows_}x{cols} {dt}", "rows": rows_, "cols": cols, "dtype": dt,
               "MB": ours.get("bytes", 0) / 1e6, "pct_floor": ours.get("pct_floor")}
        for impl in TRAIN_IMPLS:
            row[impl] = recs.get(impl, {}).get("us")
            row[f"{impl} checked"] = recs.get(impl, {}).get("check_ok")
        row["ours_spread"] = _with_spread(ours)
        row["fastest_peer"] = fastest["impl"] if fastest else None
        row["vs_fastest"] = (ours["us"] / fastest["us"]) if fastest and "us" in ours else None
        rows.append(row)
    return rows


def backward_table(doc, kind: str = "backward") -> list[dict] | None:
    """The backward alone: µs and % of its floor per design and shape (``kind="programs"``: the
    two-stage design per number of programs per SM)."""
    if doc is None:
        return None
    out = []
    for r in _select(doc, kind=kind):
        if "us" in r:  # the atomic design stores no partials: 0% of its bytes, not a blank
            partials = 0 if r["impl"] == "atomic" else 2 * r["programs"] * r["cols"] * 4
            design = (r["impl"].split("/")[0] if kind == "programs"
                      else DESIGN_NAMES.get(r["impl"], r["impl"]))
            out.append({"op": OP_NAMES.get(r["op"], r["op"]), "design": design,
                        "shape": _shape(r["rows"], r["cols"], r["dtype"]),
                        "programs": r["programs"], "MB": r["bytes"] / 1e6,
                        "us": r["us"], "pct_floor": r["pct_floor"],
                        "partials_pct": 100.0 * partials / r["bytes"]})
    return out


def tie_band(doc) -> float | None:
    """The recording's tie band (:func:`fusedrms.measure.compare.tie_band` over every timed case's
    process times); None when no case has two processes."""
    from ..measure import compare

    return compare.tie_band([{"status": "ok", "median_us": r["us"],
                              "process_medians_us": r.get("process_us") or [r["us"]]}
                             for r in _select(doc) if "us" in r and r.get("us")])


def verdict(doc, op: str, large_only: bool = False) -> dict | None:
    """Ours against the fastest checked peer over the compared shapes (``large_only``: only those
    moving at least :data:`LARGE_BYTES`): how many, how many at or below 1.00x, the median and
    the worst ratio, the median % of the floor, how many are faster, ties and slower outside
    the recording's :func:`tie_band` (``band``, 0 without one), and which peers lack a checked
    time at how many of these shapes (missing, never counted as beaten). None when no shape
    qualifies."""
    from ..measure import compare

    table = [r for r in training_table(doc, op) or []
             if not large_only or r["MB"] * 1e6 >= LARGE_BYTES]
    rows = [r for r in table if r["vs_fastest"] is not None]
    alone = [r["shape"] for r in table if r["vs_fastest"] is None
             and r["triton.two_stage"] is not None]
    if not rows:
        return None
    ratios = [r["vs_fastest"] for r in rows]
    worst = max(rows, key=lambda r: r["vs_fastest"])
    peers = [i for i in TRAIN_IMPLS if i not in OURS]
    missing = {i: sum(not (r[i] is not None and r[f"{i} checked"]) for r in rows) for i in peers}
    floors = [r["pct_floor"] for r in rows if r["pct_floor"] is not None]
    band = tie_band(doc)
    counts = {"faster": 0, "tie": 0, "slower": 0}
    for x in ratios:
        counts[compare.verdict(x, 1.0, band or 0.0)] += 1
    return {"op": op, "shapes": len(rows), "at_or_below_1": sum(x <= 1.0 for x in ratios),
            "band": band, **counts,
            "median_ratio": statistics.median(ratios), "worst_ratio": worst["vs_fastest"],
            "worst_shape": worst["shape"], "worst_peer": worst["fastest_peer"],
            "median_pct_floor": statistics.median(floors) if floors else None,
            "rows": rows, "missing": {i: n for i, n in missing.items() if n},
            "no_peer_shapes": alone}


def coverage(doc) -> dict:
    """Which of the chapter's :data:`SHAPES` the recording timed (ours, forward + backward, in
    either op) and, for the ones it did not, the row counts, widths and dtypes never timed."""
    timed = {(r["rows"], r["cols"], r["dtype"]) for r in _select(doc, kind="train")
             if r["impl"] in OURS and "us" in r}
    timed_list = [s for s in SHAPES if s in timed] + sorted(timed - set(SHAPES))
    absent = [s for s in SHAPES if s not in timed]
    never = {"rows": sorted({s[0] for s in absent} - {s[0] for s in timed}),
             "cols": sorted({s[1] for s in absent} - {s[1] for s in timed}),
             "dtypes": [d for d in dict.fromkeys(s[2] for s in absent)
                        if d not in {s[2] for s in timed}]}
    return {"timed": timed_list, "absent": absent, "never": never}


def coverage_sentence(doc) -> str:
    """What the recording timed, plainly, so no sentence below reads as a verdict on shapes it
    does not have."""
    if doc is None:
        return "No recording of this comparison exists yet."
    c = coverage(doc)
    if not c["timed"]:
        return "The recording holds no timing of forward + backward."
    if not c["absent"]:
        return f"The recording timed forward + backward at all {len(c['timed'])} shapes."
    names = page.listed(_shape(*s) for s in c["timed"])
    text = (f"The recording timed forward + backward at only {page.counted(len(c['timed']), 'shape')} "
            f"of the {len(SHAPES)} this experiment covers: {names}.")
    never = c["never"]
    parts = ([f"{page.listed(map(str, never['rows']), 'or')} rows"] if never["rows"] else []) + (
        [f"{page.listed(map(str, never['cols']), 'or')} columns"] if never["cols"] else []) + (
        [page.listed(never["dtypes"], "or")] if never["dtypes"] else [])
    if parts:
        text += (f" No step with {page.listed(parts, 'or')} was timed, so no time on this page "
                 f"speaks for those shapes.")
    else:
        text += (f" The other {page.counted(len(c['absent']), 'shape')} were not timed, so no "
                 f"time on this page speaks for them.")
    return text


def _op_sentence(doc, op: str) -> str:
    name = OP_NAMES[op]
    v = verdict(doc, op)
    if v is None:
        return f"For {name}, no shape has both our time and a checked peer's."
    if v["shapes"] <= 3:  # few shapes: each one, plainly
        each = [f"{r['vs_fastest']:.2f}x "
                + (f"the time of the fastest checked peer, {plain_name(r['fastest_peer'])}, "
                   if k == 0 else f"that of {plain_name(r['fastest_peer'])} ")
                + f"at {r['shape']}" for k, r in enumerate(v["rows"])]
        floors = page.listed(f"{r['pct_floor']:.0f}%" for r in v["rows"] if r["pct_floor"] is not None)
        text = (f"For {name}, forward + backward, ours took {page.listed(each)}"
                + (f", running at {floors} of its copy floor." if floors else "."))
        if v["band"]:
            text += (f" The run-to-run spread gives a tie band of ±{100 * v['band']:.1f}%: "
                     + ("none of these is a tie." if not v["tie"] else
                        f"{v['tie']} of these {'is a tie' if v['tie'] == 1 else 'are ties'}."))
    else:
        counts = (f"faster than the fastest checked peer at {v['faster']} of {v['shapes']} "
                  f"shapes, a tie at {v['tie']} (within ±{100 * v['band']:.1f}%, the band the "
                  f"run-to-run spread gives) and slower at {v['slower']}" if v["band"] else
                  f"faster than the fastest checked peer at {v['faster']} of {v['shapes']} "
                  f"shapes and slower at {v['slower']}, each time from one process, so no tie "
                  f"band tells noise from a difference")
        text = (f"For {name}, forward + backward, ours is {counts}: median "
                f"{v['median_ratio']:.2f}x its time, worst {v['worst_ratio']:.2f}x against "
                f"{plain_name(v['worst_peer'])} at {v['worst_shape']}"
                + (f"; its median share of the copy floor is {v['median_pct_floor']:.0f}%."
                   if v["median_pct_floor"] is not None else "."))
        large = verdict(doc, op, large_only=True)
        if large and 2 <= large["shapes"] < v["shapes"]:
            text += (f" At the {large['shapes']} shapes moving 64 MB or more, where fixed costs "
                     f"matter least, the median is {large['median_ratio']:.2f}x.")
    if v["missing"]:
        gaps = page.listed(f"{plain_name(i)} at " + ("any of them" if n == v["shapes"] else
                                             f"{n} of them") for i, n in v["missing"].items())
        text += f" Without a checked time, so not in these comparisons: {gaps}."
    if v["no_peer_shapes"]:
        text += (f" At {page.listed(v['no_peer_shapes'])} no peer has a checked time, so ours is "
                 f"compared with nothing there.")
    return text


def answer(doc) -> str:
    """The chapter's answer: ours against the fastest checked peer per op, naming the shapes
    (:func:`coverage_sentence` says which were not timed), every number from the recording (or
    the no-recording state)."""
    if doc is None:
        return ("This chapter's comparison has not been recorded on a GPU yet, so there is no "
                "measured answer here; `python -m fusedrms.record --chapters 9` on a GPU records "
                "it, and the chapter then shows that recording.")
    return " ".join(_op_sentence(doc, op) for op in OPS)


def processes_sentence(doc) -> str:
    """How many measuring processes timed the cases (each time is their median)."""
    counts = [r["processes"] for r in _select(doc) if r.get("kind") in ("train", "backward",
                                                                        "programs")
              and "processes" in r]
    if not counts:
        return "no case has been timed yet"
    lo, hi = min(counts), max(counts)
    if lo == hi:
        return f"every case was timed in {page.counted(lo, 'process')}"
    return f"{lo} to {hi} processes per case"


def measured_intro(doc) -> str:
    """What stands before the tables: how the times were aggregated and which shapes exist."""
    if doc is None:
        return ("No recording of this comparison exists yet, so the tables, the plot and the "
                "answer below are empty; `python -m fusedrms.record --chapters 9` on a GPU "
                "records them.")
    n = doc.get("provenance", {}).get("processes")
    how = (f"The measurement ran in {n} separate processes one after another, and each time "
           f"below is the median of the processes that reached the case ("
           f"{processes_sentence(doc)} in this recording)." if n and n > 1 else
           "The measurement ran in one process.")
    return f"{how} {coverage_sentence(doc)}"


def sweep_sentence(doc) -> str:
    """The programs-per-SM lever as measured, or plainly that it was not."""
    rows = backward_table(doc, kind="programs") or []
    if not rows:
        return ("The recording has no timing of this lever, so which side of the trade wins is "
                "not measured here.")
    best = {}
    for r in rows:
        if r["shape"] not in best or r["us"] < best[r["shape"]]["us"]:
            best[r["shape"]] = r
    each = page.listed(f"{r['design']} per SM at {shape}, {r['us']:.1f} µs with partials "
                f"{r['partials_pct']:.0f}% of the bytes" for shape, r in best.items())
    return f"The fastest grid measured: {each}."


def calls_per_replay(doc) -> str:
    """How many calls one timed graph replay held, from the recorded methods ("20", "20 to 28"),
    or "many" when the recording does not say."""
    calls = sorted({int(m[1]) for r in _select(doc) if r.get("kind") in ("train", "backward",
                                                                         "programs")
                    for m in [re.match(r"(\d+) calls", str(r.get("method", "")))] if m})
    if not calls:
        return "many"
    return f"{calls[0]:,}" if len(calls) == 1 else f"{calls[0]:,} to {calls[-1]:,}"


def determinism_sentence(doc) -> str:
    """dw's bit patterns over repeated runs, per design, as measured on the recording's GPU."""
    rows = determinism_rows(doc)
    if not rows:
        return "The recording has no repeated runs of the dw reductions."
    r0 = rows[0]
    each = []
    for r in rows:
        what = ("the same bits every time" if r["distinct"] == 1 else
                f"{r['distinct']} different dw bit patterns, at most "
                f"{page.counted(r['max_ulp_apart'], 'ulp')} apart")
        each.append(f"{DESIGN_NAMES.get(r['impl'], r['impl'])} gave {what}")
    return (f"On the recording's GPU, {r0['runs']} runs of each design at "
            f"{_shape(r0['rows'], r0['cols'], r0['dtype'])} on the same inputs: "
            f"{'; '.join(each)}.")


def missing_sentence(doc) -> str | None:
    """The peers the recording could not run at all, with the reason, or None."""
    gone = missing_peers(doc)
    if not gone:
        return None
    return "Not in the recording: " + "; ".join(
        f"{plain_name(m['impl'])} ({m['reason']})" for m in gone) + "."


def determinism_rows(doc) -> list[dict]:
    return [r for r in _select(doc, kind="determinism") if "distinct" in r]


def missing_peers(doc) -> list[dict]:
    return _select(doc, kind="peer_missing")


def figure(doc, op: str):
    """Bar chart: time of each implementation relative to ours (two-stage), per shape."""
    table = training_table(doc, op)
    if not table:
        return None
    from . import page

    impls = [i for i in TRAIN_IMPLS if i != "triton.two_stage" and any(r[i] for r in table)]
    fig, ax = page.figure(height=3.6)
    width = 0.8 / max(len(impls), 1)
    for k, impl in enumerate(impls):
        vals = [(r[impl] / r["triton.two_stage"]) if r[impl] and r["triton.two_stage"]
                else float("nan") for r in table]  # nan: not timed, no bar
        failed = any(r[f"{impl} checked"] is False for r in table)
        # bars grow from 1 (ours) up or down, on a log axis: 2x slower and 2x faster look alike
        ax.bar([i + k * width for i in range(len(table))], [v - 1 for v in vals], width,
               bottom=1, label=plain_name(impl) + (" (gradients off)" if failed else ""))
    ax.axhline(1.0, color="#374151", linewidth=0.8, label="ours (two-stage dw) = 1")
    ax.set_yscale("log")  # eager is several times slower; the peers near 1 stay readable
    shown = [b.get_y() + b.get_height() for b in ax.patches if b.get_height() == b.get_height()]
    low, high = min(shown + [1.0]), max(shown + [1.0])
    ticks = [t for t in (0.2, 0.5, 1, 2, 5, 10, 20, 50) if low / 2.5 <= t <= high * 2.5]
    ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.set_ylim(low / 1.3, high * 4)  # room for the legend above the bars
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(table))])
    ax.set_xticklabels([r["shape"].replace(" ", "\n") for r in table], fontsize=9)
    ax.set_ylabel("time / ours (two-stage dw)")
    ax.set_title(f"{OP_NAMES.get(op, op)}: forward + backward, lower is faster", fontsize=10)
    ax.legend(fontsize=8, ncol=3, loc="upper left")
    return fig


# Times in µs per call (the table's caption says so: ten columns fit the text column unrepeated).
TRAIN_COLUMNS = {"shape": ("shape", ""), "MB": ("MB", ".0f"),
                 "ours_spread": ("ours (p10-p90)", ""),
                 "triton.atomic": ("ours, atomic", ".1f"),
                 "torch.eager": ("eager", ".1f"), "torch.rms_norm": ("F.rms_norm", ".1f"),
                 "torch.compile": ("compile", ".1f"), "liger": ("Liger", ".1f"),
                 "vs_fastest": ("ours / fastest peer", ".2f"), "pct_floor": ("ours % floor", ".0f")}
BACKWARD_COLUMNS = {"op": ("op", ""), "design": ("design", ""), "shape": ("shape", ""),
                    "programs": ("programs", ""), "MB": ("MB", ".0f"), "us": ("µs", ".1f"),
                    "pct_floor": ("% floor", ".0f"),
                    "partials_pct": ("partials, % of bytes", ".0f")}
PROGRAM_COLUMNS = {"shape": ("shape", ""), "design": ("programs per SM", ""),
                   "programs": ("programs", ""), "us": ("µs", ".1f"), "pct_floor": ("% floor", ".0f"),
                   "partials_pct": ("partials, % of bytes", ".1f")}


def for_page(rows: list[dict], columns: dict) -> tuple[list[dict], dict]:
    """(rows keyed by header, formats by header) for :func:`fusedrms.book.page.table`; columns
    no row has a value for are left out (a peer missing from the recording)."""
    keep = {k: v for k, v in columns.items() if any(r.get(k) is not None for r in rows)}
    out = [{header: r.get(k) for k, (header, _) in keep.items()} for r in rows]
    return out, {header: fmt for header, fmt in keep.values() if fmt}
