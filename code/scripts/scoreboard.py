"""The capstone against its peers in one recording, shape by shape.

    python3 code/scripts/scoreboard.py                  # the committed recording
    python3 code/scripts/scoreboard.py DIR              # a recording's folder (run.sh record)
    python3 code/scripts/scoreboard.py DIR --misses     # only the shapes that miss a bar

For the fused op, the residual-writing op and that op in place, at every shape the recording
timed: the fastest peer and its time, the capstone's time over it with its verdict inside the
recording's tie band (chapter 6), the peers meant to be timed there and not timed, the capstone's
share of the copy floor and of a copy of its own bytes (where the recording timed one), and in
place its time over its own out-of-place time. A shape misses when the capstone is slower than
the fastest peer beyond the band, when a peer is missing (never a win), or when a call moving
64 MB or more runs below 90% of the floor. The last line counts the misses; the exit status is 0
either way (1 for a folder without chapter 7's peers or chapter 6's grid).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # code/, whatever the working folder
from fusedrms import records  # noqa: E402
from fusedrms.book import ch07_results as CR  # noqa: E402
from fusedrms.book.ch07_story import BIG_MB  # noqa: E402  "a call moves 64 MB or more"
from fusedrms.measure import compare  # noqa: E402

FLOOR_SHARE = 90.0  # "at least 90% of the copy floor" there
VARIANTS = (("fused", "add_rmsnorm", CR.CAPSTONE),
            ("residual", "add_rmsnorm_residual", CR.CAPSTONE_RESIDUAL),
            ("in place", "add_rmsnorm_residual", CR.CAPSTONE_IN_PLACE))
HEADER = (f"{'variant':<9} {'shape':<20} {'MB':>7} {'ours us':>9} {'fastest peer':<24} "
          f"{'peer us':>9} {'ratio':>6} {'verdict':<7} {'floor':>6} {'copy':>6} {'in/out':>6}  misses")


def load_peers(folder: Path | None) -> tuple[dict | None, str]:
    """(the peers document, a line saying what it is and where its floor comes from):
    chapter 7's ``capstone_peers`` or else chapter 6's ``bench_grid``, each floor at the copy floor
    of the same recording (chapter 2's); without one, at the copy each process measured."""
    if folder is None:
        doc, name = CR.peers_doc(machine=records.COMMITTED)
        return doc, f"{name} of the committed recording, floor at its chapter 2 copy"
    for name in ("capstone_peers", "bench_grid"):
        path = folder / f"{name}.json"
        if not path.exists():
            continue
        try:
            doc = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            return None, f"{path} could not be read ({e}); record it again or pass another folder"
        if not isinstance(doc, dict) or not isinstance(doc.get("records"), list):
            return None, f"{path} holds no harness records; pass a recording's folder"
        # "source" names the folder, as a loaded record file's does: the floor beside it is there
        doc = {**doc, "source": {"folder": str(folder), "own": True}}
        floor = records.copy_floor_beside(doc)
        if floor is not None:
            return records.at_copy_floor(doc), f"{name}, floor at the folder's chapter 2 copy"
        return doc, f"{name}, floor at the copy each process measured (no chapter 2 here)"
    return None, f"no capstone_peers.json or bench_grid.json in {folder}"


def rows_of(doc: dict, band: float | None) -> list[dict]:
    """One row per variant and shape: :func:`ch07_results.peer_rows` with the verdict, the in-place
    ratio and the misses."""
    points = CR.peer_points(doc)
    in_place = CR.in_place_over_out_of_place(points)
    out = []
    for variant, op, impl in VARIANTS:
        for r in CR.peer_table(doc, op, points, mine=impl):
            shape = (r["rows"], r["cols"], r["dtype"])
            verdict = (compare.verdict(r["capstone_us"], r["peer_us"], band)
                       if band is not None else "?")
            misses = []
            if verdict == "slower":
                misses.append("slower than a peer")
            if r["missing"]:
                misses.append("missing " + ", ".join(r["missing"]))
            if r["MB"] >= BIG_MB and (r["pct_floor"] or 0) < FLOOR_SHARE:
                misses.append(f"below {FLOOR_SHARE:.0f}% of the floor")
            out.append({**r, "variant": variant, "verdict": verdict, "misses": misses,
                        "copy_share": (100 * r["pct_floor"] / r["copy_pct_floor"]
                                       if r["pct_floor"] and r["copy_pct_floor"] else None),
                        "in_out": in_place.get(shape) if impl == CR.CAPSTONE_IN_PLACE else None})
    return out


def _pct(value) -> str:
    return f"{value:.1f}%" if value is not None else "-"


def line(r: dict) -> str:
    shape = CR.shape_text(r["rows"], r["cols"], r["dtype"])
    in_out = f"{r['in_out']:.3f}" if r["in_out"] else "-"
    return (f"{r['variant']:<9} {shape:<20} {r['MB']:>7.1f} {r['capstone_us']:>9.2f} "
            f"{CR.display_name(r['peer']):<24} {r['peer_us']:>9.2f} {r['ratio']:>6.3f} "
            f"{r['verdict']:<7} {_pct(r['pct_floor']):>6} {_pct(r['copy_share']):>6} "
            f"{in_out:>6}  {'; '.join(r['misses'])}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", nargs="?", type=Path, default=None,
                   help="a recording's folder (default: the committed recording)")
    p.add_argument("--misses", action="store_true", help="print only the shapes that miss a bar")
    args = p.parse_args(argv)
    if args.folder is not None and not args.folder.is_dir():
        p.error(f"folder: {args.folder} is not a folder; pass a recording's folder "
                f"(the --out of python -m fusedrms.record, or a recording tarball unpacked)")
    doc, what = load_peers(args.folder)
    if doc is None:
        print(what)
        return 1
    band = compare.tie_band([r for r in doc.get("records", []) if r.get("mode") == "rotating"])
    prov = doc.get("provenance", {})
    print(f"{prov.get('gpu')}, commit {str(prov.get('commit'))[:10]}, {prov.get('date', '')[:10]}: "
          f"{what}; tie band {_pct(100 * band if band is not None else None)}")
    print("floor: the capstone's share of the copy floor; copy: its share of a copy of its own "
          "bytes timed at their size; in/out: in place over out of place")
    rows = rows_of(doc, band)
    print(HEADER)
    for r in rows:
        if r["misses"] or not args.misses:
            print(line(r))
    for variant, _, _ in VARIANTS:
        mine = [r for r in rows if r["variant"] == variant]
        # verdicts over the shapes where every peer was timed: a missing peer is never a win
        counts = CR.tie_counts(mine, band) or {"faster": 0, "tie": 0, "slower": 0}
        print(f"{variant}: {len(mine)} shapes, {counts['faster']} faster, {counts['tie']} ties, "
              f"{counts['slower']} slower among those with every peer timed; "
              f"{sum(bool(r['missing']) for r in mine)} missing a peer; "
              f"{sum(any('floor' in m for m in r['misses']) for r in mine)} of "
              f"{sum(r['MB'] >= BIG_MB for r in mine)} calls of {BIG_MB:.0f} MB or more below "
              f"{FLOOR_SHARE:.0f}% of the floor")
    print(f"{sum(bool(r['misses']) for r in rows)} of {len(rows)} rows miss a bar")
    return 0


if __name__ == "__main__":
    sys.exit(main())
