"""The recording's evidence for the capstone's goals, shape by shape.

    python3 code/scripts/scoreboard.py                  # the committed recording
    python3 code/scripts/scoreboard.py DIR              # a recording's folder (run.sh record)
    python3 code/scripts/scoreboard.py DIR --misses     # only the shapes that miss a bar

Forward (chapter 7's peers, with its fp16 and fp32 grid where the same run timed it): for the fused
op, the residual-writing op and that op in place, at every shape the recording timed: the fastest
peer and its time, the capstone's time over it with its verdict inside the recording's tie band
(chapter 6), the peers meant to be timed there and not timed, the capstone's share of the copy
floor and of a copy of its own bytes (where the recording timed one), and in place its time over
its own out-of-place time. A shape misses when the capstone is slower than the fastest peer beyond
the band, when a peer is missing (never a win), when a call moving 64 MB or more runs below 90%
of the floor, or when its time or the fastest peer's was taken while a process's probe found the
memory system busy (measure.timer.QuietProbe); in place misses too where it is slower than out of
place beyond the band (goal 2, in a graph); a shape of goal 1's grid (chapter 7's row and column
counts in bf16, fp16 and fp32) that the recording did not time is a miss. From Python (chapter 7's
one shape): the capstone's call over F.rms_norm(x + r)'s, a miss when slower, and in place over
out of place, a miss when every process of in place took longer than every process out of place.

FP8 (chapter 8): ``fp8.fused`` at each timed row count, its share of its copy floor (a miss below
80% from 64 MiB), its codes and scales against its contract, and its Python call over
``F.rms_norm``'s (a miss above 1.5x).

Backward (chapter 9): for both ops at every shape of chapter 9's grid, the training step and the
backward alone over the fastest checked peer (verdict inside chapter 9's tie band), the peers not
timed, and the backward's share of its floor (a miss below 80% from 64 MiB); a grid shape the
recording did not time is a miss.

Goal 5, for a recording's folder against a baseline (``--baseline``; the committed recording by
default) on the same GPU: triton.row and each rung of the HIP ladder (chapter 6's RMSNorm sweep)
at every shape the baseline timed, a miss when slower beyond the larger of the two recordings'
tie bands or not timed; the capstone's call from Python, a miss when every process took longer
than every process of the baseline.

The last line counts the misses. The exit status is 0 either way; 1 when the folder holds none of
the three files, or one of them cannot be read.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # code/, whatever the working folder
from fusedrms import records  # noqa: E402
from fusedrms.book import ch07_results as CR  # noqa: E402
from fusedrms.book import ch07, ch08, ch08_page, ch09, ch09_page  # noqa: E402
from fusedrms.book.ch07_story import BIG_MB  # noqa: E402  "a call moves 64 MB or more"
from fusedrms.measure import compare  # noqa: E402

FLOOR_SHARE = 90.0  # goal 1: "at least 90% of the copy floor" from BIG_MB
GOAL_DTYPES = ("bf16", "fp16", "fp32")  # goal 1's grid: ch07.GOAL_ROWS x ch07.GOAL_COLS x these
FP8_SHARE = 80.0  # goal 3: fp8.fused "at least 80% of its copy floor at 64 MB and more"
FP8_CALL_RATIO = 1.5  # goal 3: "a Python call at most 1.5x F.rms_norm's"
BACKWARD_SHARE = 80.0  # goal 4: "at least 80% of its floor at 64 MB and more"
VARIANTS = (("fused", "add_rmsnorm", CR.CAPSTONE),
            ("residual", "add_rmsnorm_residual", CR.CAPSTONE_RESIDUAL),
            ("in place", "add_rmsnorm_residual", CR.CAPSTONE_IN_PLACE))
HEADER = (f"{'variant':<9} {'shape':<20} {'MB':>7} {'ours us':>9} {'fastest peer':<24} "
          f"{'peer us':>9} {'ratio':>6} {'verdict':<7} {'floor':>6} {'copy':>6} {'in/out':>6}  misses")
FP8_HEADER = f"{'fp8':<9} {'shape':<20} {'MB':>7} {'ours us':>9} {'floor':>6}  misses"
BACKWARD_HEADER = (f"{'op':<11} {'shape':<18} {'MB':>7} {'train':>6} {'verdict':<7} "
                   f"{'backward':>8} {'verdict':<7} {'floor':>6}  misses")


class Unreadable(Exception):
    """A recorded file that is there and is not a recording's file (the message says which)."""


def read(folder: Path | None, name: str) -> dict | None:
    """``name``.json of ``folder`` (None: the committed recording) with its ``source``, as a
    loaded record file has it; None where it is not there. Raises :class:`Unreadable`."""
    if folder is None:
        try:
            return records.load(name, records.COMMITTED)
        except FileNotFoundError:
            return None
    path = folder / f"{name}.json"
    if not path.exists():
        return None
    try:  # with its "source" (the folder), as records.load gives it: the floor beside it is there
        doc = records._read(path)
    except (OSError, ValueError) as e:  # the file, or the manifest beside it
        raise Unreadable(f"{path} could not be read ({e}); record it again or pass another "
                         f"folder") from None
    except TypeError:  # not an object: _read cannot add its source
        doc = None
    if not isinstance(doc, dict) or not isinstance(doc.get("records"), list):
        raise Unreadable(f"{path} holds no harness records; pass a recording's folder")
    return doc


def floor_words(doc: dict) -> str:
    return ("floor at the chapter 2 copy" if records.copy_floor_beside(doc) is not None
            else "floor at the copy each process measured (no chapter 2 here)")


def load_peers(folder: Path | None) -> tuple[dict | None, str]:
    """(the forward peers document, a line saying what it is and where its floor comes from):
    chapter 7's ``capstone_peers`` with its fp16 and fp32 grid (``capstone_peers_grid``, where the
    same run timed it: :func:`ch07_results.with_grid`), the grid alone (timed ahead of chapter 7),
    or else chapter 6's ``bench_grid``, each floor at the copy floor of the same recording (chapter
    2's); without one, at the copy each process measured."""
    for name in ("capstone_peers", CR.PEERS_GRID, "bench_grid"):
        doc = read(folder, name)
        if doc is None:
            continue
        if records.copy_floor_beside(doc) is not None:
            doc = records.at_copy_floor(doc)
        grid = read(folder, CR.PEERS_GRID) if name == "capstone_peers" else None
        if grid is not None:
            if records.copy_floor_beside(grid) is not None:
                grid = records.at_copy_floor(grid)
            doc, merged = CR.with_grid(doc, grid)
            name += (f" and {CR.PEERS_GRID}" if merged
                     else f" ({CR.PEERS_GRID}.json, from another run, left out)")
        return doc, f"{name}, {floor_words(doc)}"
    return None, (f"no capstone_peers.json, {CR.PEERS_GRID}.json or bench_grid.json in "
                  f"{folder or 'the recording'}")


def _verdict(ratio: float | None, band: float | None) -> str:
    if ratio is None:
        return "-"
    return compare.verdict(ratio, 1.0, band) if band is not None else "?"


def rows_of(doc: dict, band: float | None) -> list[dict]:
    """One row per variant and shape: :func:`ch07_results.peer_rows` with the verdict, the in-place
    ratio and the misses."""
    points = CR.peer_points(doc)
    in_place = CR.in_place_over_out_of_place(points)
    busy = {(p.impl, p.op, p.rows, p.cols, p.dtype) for p in points if p.raw.get("quiet") is False}
    out = []
    for variant, op, impl in VARIANTS:
        for r in CR.peer_table(doc, op, points, mine=impl):
            shape = (r["rows"], r["cols"], r["dtype"])
            verdict = _verdict(r["ratio"], band)
            misses = []
            if verdict == "slower":
                misses.append("slower than a peer")
            # a timing a process began while the memory system was busy (timer.QuietProbe)
            found_busy = [n for n in (impl, r["peer"]) if n and (n, op, *shape) in busy]
            if found_busy:
                misses.append("timed while the memory system was busy: "
                              + ", ".join(CR.display_name(n) for n in found_busy))
            if r["missing"]:
                misses.append("missing " + ", ".join(r["missing"]))
            if r["MB"] >= BIG_MB and (r["pct_floor"] or 0) < FLOOR_SHARE:
                misses.append(f"below {FLOOR_SHARE:.0f}% of the floor")
            in_out = in_place.get(shape) if impl == CR.CAPSTONE_IN_PLACE else None
            if _verdict(in_out, band) == "slower":
                misses.append("slower than out of place")  # goal 2, in a graph
            out.append({**r, "variant": variant, "verdict": verdict, "misses": misses,
                        "copy_share": (100 * r["pct_floor"] / r["copy_pct_floor"]
                                       if r["pct_floor"] and r["copy_pct_floor"] else None),
                        "in_out": in_out})
    return out


def untimed_goal_lines(rows: list[dict]) -> list[tuple[str, int]]:
    """Goal 1's grid (every row count x column count x dtype it names, for each variant): a line per
    variant and dtype with shapes the recording did not time, and how many (each one a miss)."""
    grid = [(n, c) for n in ch07.GOAL_ROWS for c in ch07.GOAL_COLS]
    out = []
    for variant, _, _ in VARIANTS:
        timed = {(r["rows"], r["cols"], r["dtype"]) for r in rows if r["variant"] == variant}
        for dtype in GOAL_DTYPES:
            untimed = [CR.shape_text(n, c) for n, c in grid if (n, c, dtype) not in timed]
            done = [CR.shape_text(n, c) for n, c in grid if (n, c, dtype) in timed]
            if untimed:  # the shorter list of the two names the shapes
                named = (f"not timed: {', '.join(untimed)}" if len(untimed) <= len(done) else
                         f"timed: {', '.join(done) or 'none'}; the other {len(untimed)} not timed")
                out.append((f"{variant} {dtype}: {len(done)} of {len(grid)} shapes of goal 1's grid "
                            f"timed; {named}  miss", len(untimed)))
    return out


def python_lines(doc: dict) -> list[tuple[str, bool]]:
    """Goals 5 and 2 from Python (the harness's back-to-back calls, no graph): the capstone's call
    over ``F.rms_norm(x + r)``'s (a miss when slower), and in place over out of place (a miss when
    every process of in place took longer than every process out of place)."""
    recs = [r for r in doc.get("records", []) if r.get("sweep") == "python"]
    if not recs:
        return [("Python calls: not timed in this recording  miss", True)]
    shape = CR.shape_text(recs[0]["rows"], recs[0]["cols"], recs[0]["dtype"])
    fused, plain = CR.python_calls(doc), CR.python_calls(doc, "add_rmsnorm_residual")
    spread = CR.python_calls(doc, "add_rmsnorm_residual", spread=True)
    out = []
    ours, baseline = fused.get(CR.CAPSTONE), fused.get("torch.rms_norm_add")
    if ours and baseline:
        out.append((f"Python call {shape}: {CR.CAPSTONE} {ours:.1f} us, F.rms_norm(x + r) "
                    f"{baseline:.1f} us ({ours / baseline:.2f}x)", ours > baseline))
    else:
        out.append((f"Python call {shape}: {CR.CAPSTONE} or F.rms_norm(x + r) not timed", True))
    out_us, in_us = plain.get(CR.CAPSTONE_RESIDUAL), plain.get(CR.CAPSTONE_IN_PLACE)
    if out_us and in_us:
        lo_in, hi_out = (spread.get(CR.CAPSTONE_IN_PLACE) or (in_us,))[0], \
            (spread.get(CR.CAPSTONE_RESIDUAL) or (0, out_us))[-1]
        out.append((f"Python call {shape}: in place {in_us:.1f} us, out of place {out_us:.1f} us "
                    f"({in_us / out_us:.3f}x)", lo_in > hi_out))
    else:
        out.append((f"Python call {shape}: the residual op in place or out of place not timed", True))
    return [(text + ("  miss" if missed else ""), missed) for text, missed in out]


def _rmsnorm_times(doc: dict) -> dict:
    """{(impl, rows, cols, dtype): record} of chapter 6's RMSNorm sweep: triton.row and the HIP
    ladder (every ``hip.*`` implementation)."""
    return {(r["impl"], r["rows"], r["cols"], r["dtype"]): r for r in doc.get("records", [])
            if r.get("sweep") == "rmsnorm" and r.get("status", "ok") == "ok" and r.get("median_us")
            and (r.get("impl") == "triton.row" or str(r.get("impl")).startswith("hip."))}


def _ladder_lines(new: dict, old: dict) -> list[tuple[str, bool]]:
    """One line per implementation the baseline timed: shapes timed, the slowest ratio, and how
    many are slower beyond the larger of the two recordings' tie bands."""
    bands = [b for b in (compare.tie_band(list(new.values())), compare.tie_band(list(old.values())))
             if b is not None]
    band = max(bands, default=0.0)
    out = []
    for impl in sorted({k[0] for k in old}):
        keys = [k for k in old if k[0] == impl]
        ratio = {k: new[k]["median_us"] / old[k]["median_us"] for k in keys if k in new}
        slower = [k for k in ratio if ratio[k] > 1 + band]
        text = f"{impl}: {len(ratio)} of {len(keys)} shapes timed"
        if ratio:
            worst = max(ratio, key=ratio.get)
            text += (f", the slowest against the baseline {ratio[worst]:.3f}x at "
                     f"{CR.shape_text(*worst[1:])}; {len(slower)} slower beyond "
                     f"{_pct(100 * band)}")
        out.append((text, bool(slower) or len(ratio) < len(keys)))
    return out


def regression_lines(grid: dict | None, base_grid: dict | None, peers: dict | None,
                     base_peers: dict | None) -> list[tuple[str, bool]]:
    """Goal 5, this recording against a baseline recording on the same GPU: triton.row and each
    rung of the HIP ladder at every shape the baseline timed (a miss when slower beyond the larger
    of the two recordings' tie bands, or not timed), and the capstone's call from Python (a miss
    when every process took longer than every process of the baseline)."""
    gpus = {str((d or {}).get("provenance", {}).get("gpu")) for d in (grid, base_grid) if d}
    out = []
    if grid is None or base_grid is None:
        out.append(("triton.row and the HIP ladder: chapter 6's grid is missing here or in the "
                    "baseline", True))
    elif len(gpus) > 1:
        out.append((f"triton.row and the HIP ladder: the baseline ran on another GPU "
                    f"({' and '.join(sorted(gpus))}); compare recordings of one GPU", True))
    else:
        out += _ladder_lines(_rmsnorm_times(grid), _rmsnorm_times(base_grid))
    now = CR.python_calls(peers, spread=True).get(CR.CAPSTONE) if peers else None
    before = CR.python_calls(base_peers, spread=True).get(CR.CAPSTONE) if base_peers else None
    if now and before:
        out.append((f"Python call of {CR.CAPSTONE}: {now[0]:.1f}-{now[1]:.1f} us over its processes, "
                    f"the baseline {before[0]:.1f}-{before[1]:.1f}", now[0] > before[1]))
    else:
        out.append((f"Python call of {CR.CAPSTONE}: not timed here or in the baseline", True))
    return [(text + ("  miss" if missed else ""), missed) for text, missed in out]


def fp8_rows(doc: dict) -> list[dict]:
    """``fp8.fused`` (the served contract) at each timed row count: µs, share of its floor, misses."""
    out = []
    for r in ch08.timing_rows(doc):
        pct, big = r["served_pct_floor"], r["fused_MB"] * 1e6 >= ch08.MIN_BYTES
        misses = []
        if big and pct is None:
            misses.append("no floor measured")
        elif big and pct < FP8_SHARE:
            misses.append(f"below {FP8_SHARE:.0f}% of the floor")
        out.append({"shape": f"{r['rows']}x{r['cols']}", "MB": r["fused_MB"], "us": r["served_us"],
                    "pct_floor": pct, "misses": misses})
    return out


def fp8_lines(doc: dict) -> list[tuple[str, bool]]:
    """The FP8 section's lines after its header, each with whether it misses: a row per row count
    (its misses in its last column), then its codes and its Python call (" miss" at the end)."""
    out = [(f"{'fp8.fused':<9} {r['shape']:<20} {r['MB']:>7.1f} {r['us']:>9.2f} "
            f"{_pct(r['pct_floor']):>6}  {'; '.join(r['misses'])}", bool(r["misses"]))
           for r in fp8_rows(doc)]
    exact = next((r for r in ch08_page.exactness_rows(doc) if r["version"] == "fp8.fused"), None)
    if exact is None:
        summary = [("fp8.fused codes: not checked in this recording", True)]
    else:  # a check not bit for bit: a code or a scale differs
        summary = [(f"fp8.fused codes: {exact['bit-exact']} of {exact['checks']} checks bit for "
                    f"bit, {exact['differing codes']:,} of {exact['codes compared']:,} codes differ",
                    exact["bit-exact"] < exact["checks"])]
    call = ch08.python_call(doc)
    if call is None:
        summary.append(("fp8.fused Python call: not timed in this recording", True))
    else:
        slow = call["ratio"] > FP8_CALL_RATIO
        summary.append((f"fp8.fused Python call: {call['fused_call_us']:.1f} us, "
                        f"{call['ratio']:.2f}x F.rms_norm's {call['rms_norm_call_us']:.1f}"
                        + (f"; above {FP8_CALL_RATIO}x" if slow else ""), slow))
    return out + [(text + ("  miss" if missed else ""), missed) for text, missed in summary]


def backward_rows(doc: dict) -> list[dict]:
    """Both ops at every shape of chapter 9's grid (and every other shape the recording timed):
    the training step and the backward alone over the fastest checked peer, the peers not timed,
    the backward's share of its floor, and the misses."""
    band = ch09_page.tie_band(doc)
    two_stage = ch09_page.DESIGN_NAMES["two_stage"]
    train_peers = [i for i in ch09.TRAIN_IMPLS if i not in ch09.OURS]
    checked = {(r["kind"], r["op"], r["impl"], r["rows"], r["cols"], r["dtype"])
               for r in doc.get("records", []) if r.get("us") and r.get("check_ok")}
    out = []
    for op in ch09.OPS:
        train = {(r["rows"], r["cols"], r["dtype"]): r for r in ch09_page.training_table(doc, op) or []}
        alone = {(r["rows"], r["cols"], r["dtype"]): r
                 for r in ch09_page.backward_peers_table(doc, op) or []}
        mine = {(r["rows"], r["cols"], r["dtype"]): r for r in ch09_page.backward_table(doc) or []
                if r["op"] == ch09_page.OP_NAMES[op] and r["design"] == two_stage}
        grid = {s: ("train", "backward") for s in ch09.SHAPES}
        grid.update({s: ("backward",) for s in ch09.WIDE_SHAPES})
        for shape in sorted(set(grid) | set(train) | set(alone) | set(mine),
                            key=lambda s: (s[2] != "bf16", s[0], s[1])):
            t, a, m = train.get(shape), alone.get(shape), mine.get(shape)
            misses = []
            for kind, row, peers in (("train", t, train_peers), ("backward", a, ch09.BACKWARD_PEERS)):
                if kind not in grid.get(shape, ()) and row is None:
                    continue
                ours = row and (row["triton.two_stage"] if kind == "train" else row["ours"])
                if ours is None:
                    misses.append(f"{kind} not timed")
                    continue
                # a peer timed without passing its gradient check is not compared: missing too
                missing = [i for i in peers if (kind, op, i, *shape) not in checked]
                if missing:
                    misses.append(f"{kind}: missing " + ", ".join(missing))
                if _verdict(row["vs_fastest"], band) == "slower":
                    misses.append(f"{kind} slower than {ch09_page.plain_name(row['fastest_peer'])}")
            large = m and m["MB"] * 1e6 >= ch09_page.LARGE_BYTES
            if large and m["pct_floor"] is None:
                misses.append("no floor measured")
            elif large and m["pct_floor"] < BACKWARD_SHARE:
                misses.append(f"below {BACKWARD_SHARE:.0f}% of the floor")
            out.append({"op": op, "shape": ch09_page.shape_text(*shape), "MB": m["MB"] if m else None,
                        "train": t and t["vs_fastest"], "train_verdict": _verdict(t and t["vs_fastest"], band),
                        "backward": a and a["vs_fastest"],
                        "backward_verdict": _verdict(a and a["vs_fastest"], band),
                        "pct_floor": m and m["pct_floor"], "misses": misses})
    return out


def _pct(value) -> str:
    return f"{value:.1f}%" if value is not None else "-"


def _ratio(value) -> str:
    return f"{value:.3f}" if value is not None else "-"


def line(r: dict) -> str:
    shape = CR.shape_text(r["rows"], r["cols"], r["dtype"])
    in_out = f"{r['in_out']:.3f}" if r["in_out"] else "-"
    return (f"{r['variant']:<9} {shape:<20} {r['MB']:>7.1f} {r['capstone_us']:>9.2f} "
            f"{CR.display_name(r['peer']):<24} {r['peer_us']:>9.2f} {r['ratio']:>6.3f} "
            f"{r['verdict']:<7} {_pct(r['pct_floor']):>6} {_pct(r['copy_share']):>6} "
            f"{in_out:>6}  {'; '.join(r['misses'])}")


def backward_line(r: dict) -> str:
    mb = f"{r['MB']:.1f}" if r["MB"] is not None else "-"
    return (f"{r['op']:<11} {r['shape']:<18} {mb:>7} {_ratio(r['train']):>6} "
            f"{r['train_verdict']:<7} {_ratio(r['backward']):>8} {r['backward_verdict']:<7} "
            f"{_pct(r['pct_floor']):>6}  {'; '.join(r['misses'])}")


def _title(doc: dict, what: str) -> str:
    prov = doc.get("provenance", {})
    return f"{prov.get('gpu')}, commit {str(prov.get('commit'))[:10]}, {str(prov.get('date', ''))[:10]}: {what}"


def forward_section(doc: dict, what: str, only_misses: bool) -> tuple[list[str], int, int]:
    """(lines, rows, rows that miss) of goals 1 and 2."""
    band = compare.tie_band([r for r in doc.get("records", []) if r.get("mode") == "rotating"])
    out = [f"{_title(doc, what)}; tie band {_pct(100 * band if band is not None else None)}",
           "floor: the capstone's share of the copy floor; copy: its share of a copy of its own "
           "bytes timed at their size; in/out: in place over out of place", HEADER]
    rows = rows_of(doc, band)
    out += [line(r) for r in rows if r["misses"] or not only_misses]
    untimed = untimed_goal_lines(rows)
    out += [text for text, _ in untimed]
    calls = python_lines(doc)
    out += [text for text, missed in calls if missed or not only_misses]
    for variant, _, _ in VARIANTS:
        mine = [r for r in rows if r["variant"] == variant]
        # verdicts over the shapes where every peer was timed: a missing peer is never a win
        counts = CR.tie_counts(mine, band) or {"faster": 0, "tie": 0, "slower": 0}
        own = sum("slower than out of place" in r["misses"] for r in mine)
        own_text = f"{own} slower than out of place beyond the band; " if variant == "in place" else ""
        out.append(f"{variant}: {len(mine)} shapes, {counts['faster']} faster, {counts['tie']} ties, "
                   f"{counts['slower']} slower among those with every peer timed; "
                   f"{sum(bool(r['missing']) for r in mine)} missing a peer; {own_text}"
                   f"{sum(any('floor' in m for m in r['misses']) for r in mine)} of "
                   f"{sum(r['MB'] >= BIG_MB for r in mine)} calls of {BIG_MB:.0f} MB or more below "
                   f"{FLOOR_SHARE:.0f}% of the floor")
    not_timed = sum(n for _, n in untimed)  # each untimed shape of the grid: a row that misses
    return (out, len(rows) + not_timed + len(calls),
            sum(bool(r["misses"]) for r in rows) + not_timed + sum(m for _, m in calls))


def backward_section(doc: dict, only_misses: bool) -> tuple[list[str], int, int]:
    """(lines, rows, rows that miss) of goal 4."""
    band = ch09_page.tie_band(doc)
    out = [f"{_title(doc, 'ch09_backward, ' + floor_words(doc))}; tie band "
           f"{_pct(100 * band if band is not None else None)}",
           "train: the training step over the fastest checked peer's; backward: the backward alone "
           "over the fastest peer's; floor: the backward's share of its copy floor", BACKWARD_HEADER]
    rows = backward_rows(doc)
    out += [backward_line(r) for r in rows if r["misses"] or not only_misses]
    for op in ch09.OPS:
        mine = [r for r in rows if r["op"] == op]
        large = [r for r in mine if r["MB"] is not None and r["MB"] * 1e6 >= ch09_page.LARGE_BYTES]
        out.append(f"{op}: {len(mine)} shapes, {sum(bool(r['misses']) for r in mine)} miss; "
                   f"{sum(any('floor' in m for m in r['misses']) for r in large)} of {len(large)} "
                   f"backward calls of 64 MiB or more below {BACKWARD_SHARE:.0f}% of the floor")
    return out, len(rows), sum(bool(r["misses"]) for r in rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", nargs="?", type=Path, default=None,
                   help="a recording's folder (default: the committed recording)")
    p.add_argument("--misses", action="store_true", help="print only the shapes that miss a bar")
    p.add_argument("--baseline", type=Path, default=None,
                   help="goal 5's baseline recording (default: the committed one, when FOLDER is given)")
    args = p.parse_args(argv)
    if args.folder is not None and not args.folder.is_dir():
        p.error(f"folder: {args.folder} is not a folder; pass a recording's folder "
                f"(the --out of python -m fusedrms.record, or a recording tarball unpacked)")
    if args.baseline is not None and not args.baseline.is_dir():
        p.error(f"--baseline: {args.baseline} is not a folder; pass a recording's folder")
    try:
        peers, what = load_peers(args.folder)
        quant, backward = read(args.folder, "fp8_quant"), read(args.folder, ch09.RECORD_NAME)
        if backward is not None and records.copy_floor_beside(backward) is not None:
            backward = records.at_copy_floor(backward, time="us", share="pct_floor")
    except Unreadable as e:
        print(e)
        return 1
    if peers is None and quant is None and backward is None:
        print(f"{what}, and no fp8_quant.json or {ch09.RECORD_NAME}.json: nothing to score")
        return 1
    total = misses = 0
    if peers is None:
        print(f"Goals 1 and 2: {what}")
    else:
        lines, n, m = forward_section(peers, what, args.misses)
        print("\n".join(lines))
        total, misses = total + n, misses + m
    print()
    if quant is None:
        print("Goal 3: no fp8_quant.json in this recording")
    else:
        lines = fp8_lines(quant)
        print(_title(quant, "fp8_quant, " + floor_words(quant)))
        print(FP8_HEADER)
        for text, missed in lines:
            if missed or not args.misses:
                print(text)
        total, misses = total + len(lines), misses + sum(m for _, m in lines)
    print()
    if backward is None:
        print(f"Goal 4: no {ch09.RECORD_NAME}.json in this recording")
    else:
        lines, n, m = backward_section(backward, args.misses)
        print("\n".join(lines))
        total, misses = total + n, misses + m
    print()
    if args.folder is None:
        print("Goal 5: pass a recording's folder to compare it with the committed recording")
    else:
        try:
            grid, base = read(args.folder, "bench_grid"), read(args.baseline, "bench_grid")
            base_peers = read(args.baseline, "capstone_peers")
        except Unreadable as e:
            print(e)
            return 1
        print(f"Goal 5, against {_title(base, 'bench_grid') if base else 'a baseline without chapter 6'}")
        lines = regression_lines(grid, base, peers, base_peers)
        for text, missed in lines:
            if missed or not args.misses:
                print(text)
        total, misses = total + len(lines), misses + sum(m for _, m in lines)
    print(f"{misses} of {total} rows miss a bar")
    return 0


if __name__ == "__main__":
    sys.exit(main())
