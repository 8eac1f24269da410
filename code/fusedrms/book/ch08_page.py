"""Chapter 8's page in words: the sentences and tables the notebook shows, made from the readers
in :mod:`fusedrms.book.ch08` (the recorded files) so that every state reads as English: all
recorded, some parts missing, nothing recorded. No measurement happens here.
"""
from __future__ import annotations

import re
from pathlib import Path

from ..kernels.rmsnorm_fp8_spec import HIDDEN_SIZE, n_blocks
from .ch08 import exactness_cost_rows, exactness_summary, instructions_per_element


def _holds_width(r: dict, cols: int = HIDDEN_SIZE) -> bool:
    """Whether a compiled variant (a row of :func:`instructions_per_element`) is the one for
    rows of ``cols``: the split tile holds the row's blocks, a padded one the next power of two."""
    nb = n_blocks(cols)
    return r["row_blocks"] == (nb if "split" in r["kernel"] else 1 << (nb - 1).bit_length())


def instruction_comparison(cost_doc: dict | None, fused_label: str | None) -> dict | None:
    """SASS instructions per element a thread handles, at the chapter's width: the exact kernel
    as ``fp8.fused`` ran (``fused_label``, the recording's configuration label, e.g. "warps 4,
    unpadded (split) tile, ...") beside the diagnostic kernel at the same number of warps. None
    when either variant is not in the recording."""
    if not cost_doc or not fused_label:
        return None
    words = fused_label.replace(",", " ").split()
    warps = next((int(n) for w, n in zip(words, words[1:]) if w == "warps" and n.isdigit()),
                 None)
    split = "split" in fused_label
    rows = [r for r in instructions_per_element(cost_doc) if r["per_element"]
            and r["num_warps"] == warps and _holds_width(r)]
    exact = next((r for r in rows if "approx" not in r["kernel"]
                  and ("split" in r["kernel"]) == split), None)
    approx = next((r for r in rows if "approx" in r["kernel"]), None)
    if not (exact and approx):
        return None
    return {"warps": warps, "exact": exact["per_element"], "approx": approx["per_element"],
            "exact_kernel": exact["kernel"], "approx_kernel": approx["kernel"]}


NCU_COLS = HIDDEN_SIZE  # the study profiles fp8 at 16384 rows of the chapter's width


def ncu_numbers(folder, name: str = "fp8_fused") -> dict | None:
    """What Nsight Compute measured on one kernel (``ncu_<name>.txt`` beside the recording):
    duration (µs), issue slots busy, SM (compute) and DRAM throughput (% of peak), achieved
    occupancy (%), the busiest pipe and its share, and instructions executed per element (warp
    instructions x 32 threads over rows x :data:`NCU_COLS`; rows from the launch grid, one
    program per row). None when there is no report."""
    from .study import parse_ncu_text

    path = Path(folder) / f"ncu_{name}.txt"
    if not path.exists():
        return None
    text = path.read_text()
    got = parse_ncu_text(text)
    out = {"duration_us": got.get("Duration"), "issue_busy_pct": got.get("Issue Slots Busy"),
           "sm_pct": got.get("Compute (SM) Throughput"), "dram_pct": got.get("DRAM Throughput"),
           "occupancy_pct": got.get("Achieved Occupancy"),
           "busiest_pipe": (got.get("busiest_pipe") or "").split()[-1] or None,
           "busiest_pipe_pct": got.get("busiest_pipe_pct")}
    grid = re.search(r"^\s+\S+ \((\d+), 1, 1\)x\((\d+), 1, 1\)", text, re.M)
    executed = re.search(r"^\s+Executed Instructions\s+inst\s+([\d,]+)\s*$", text, re.M)
    out["rows"] = int(grid.group(1)) if grid else None
    out["per_element"] = (int(executed.group(1).replace(",", "")) * 32 / (out["rows"] * NCU_COLS)
                          if grid and executed else None)
    return out


CONFIG_WORDS = (("unpadded (split) tile", "the unpadded tile"),
                ("block reciprocal division", "one reciprocal per block"),
                ("per element division", "an exact division per element"),
                ("rows/program", "rows per program"))


def config_words(label: str | None) -> str:
    """A recorded configuration label in words: "warps 4, unpadded (split) tile, block
    reciprocal division" -> "4 warps, the unpadded tile and one reciprocal per block"."""
    if not label:
        return "a configuration the recording does not name"
    parts = []
    for part in (p.strip() for p in label.split(",")):
        for old, new in CONFIG_WORDS:
            part = part.replace(old, new)
        words = part.split()
        if len(words) == 2 and words[0] in ("warps", "maxnreg") and words[1].isdigit():
            part = (f"{words[1]} warps" if words[0] == "warps"
                    else f"at most {words[1]} registers per thread")
        parts.append(part)
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


EXACTNESS_VERSIONS = {"fused": "fp8.fused", "fused_baseline": "fp8.fused, untuned baseline",
                      "naive": "naive pair", "fused_software": "fp8.fused, software rounding",
                      "reordered_reference": "reordered reference (another specification)"}


def exactness_rows(doc: dict | None) -> list[dict]:
    """The exactness table for the page: one row per version with checks, plain names."""
    summary = exactness_summary(doc) if doc else {}
    return [{"version": EXACTNESS_VERSIONS.get(k, k), "checks": v["checks"],
             "bit-exact": v["exact"], "differing codes": v["differing_codes"],
             "codes compared": v["codes"]} for k, v in summary.items() if v["checks"]]


def cost_table(cost_rows: list[dict]) -> list[dict]:
    """One row per shape: the exact kernel as tuned, its untuned baseline, and the fastest
    diagnostic (which drops exactness), with µs, % of the copy floor and differing codes."""
    out = []
    for shape in dict.fromkeys((r["rows"], r["cols"]) for r in cost_rows):
        same = [r for r in cost_rows if (r["rows"], r["cols"]) == shape]
        exact = next((r for r in same if r["impl"] == "fp8.fused"), None)
        base = next((r for r in same if r["impl"] == "fp8.fused_baseline"), None)
        approx = min((r for r in same if not r["exact"]), key=lambda r: r["median_us"],
                     default=None)
        out.append({"shape": f"{shape[0]}x{shape[1]}",
                    "exact µs": exact["median_us"] if exact else None,
                    "exact % of floor": exact["pct_of_floor"] if exact else None,
                    "baseline µs": base["median_us"] if base else None,
                    "diagnostic µs": approx["median_us"] if approx else None,
                    "diagnostic % of floor": approx["pct_of_floor"] if approx else None,
                    "diagnostic warps": int(approx["impl"].rsplit("_w", 1)[-1])
                    if approx and approx["impl"].rsplit("_w", 1)[-1].isdigit() else None,
                    "codes differing": approx["differing_codes"] if approx else None})
    return out


def _longer_or_shorter(change_pct: float) -> str:
    return f"{abs(change_pct):.0f}% {'shorter' if change_pct < 0 else 'longer'}"


WORK_LEVERS = ("one reciprocal per block", "unpadded tile (32 + 16 + 8 blocks)")


WARP_LEVERS = ("16 -> 8 warps", "8 -> 4 warps")


def lever_words(levers: list[dict]) -> dict:
    """The page's words for :func:`fp8_levers`: ``work_kept`` ("2 of 2"), ``work_gain``
    ("21% and 9%"), ``warps`` ("12% shorter from 16 to 8 warps, ..."), ``rows2`` (the change
    and the registers), ``verdict`` (whether the pattern is the one the hypothesis predicts)."""
    by_name = {l["lever"]: l for l in levers}
    work = [by_name[n] for n in WORK_LEVERS if n in by_name]
    warps = [(n, by_name[n]) for n in WARP_LEVERS if n in by_name]
    rows2 = by_name.get("2 rows per program")
    predicted = bool(work) and all(l["kept"] for l in work) and not (rows2 and rows2["kept"])
    out = {
        "work_kept": f"{sum(l['kept'] for l in work)} of {len(work)}",
        "work_gain": " and ".join(f"{-l['change_pct']:.0f}%" for l in work) or "nothing",
        "warps": ", ".join(f"{_longer_or_shorter(l['change_pct'])} from "
                           f"{n.replace(' -> ', ' to ')}" for n, l in warps) or "not recorded",
        "rows2": (f"{rows2['change_pct']:+.0f}%, with registers per thread going from "
                  f"{rows2['registers_before']} to {rows2['registers_after']}"
                  if rows2 else "not recorded"),
        "verdict": ("That is what the hypothesis predicts" if predicted else
                    "That is not the pattern the hypothesis predicts" if levers else
                    "The levers are not recorded yet")}
    if not levers:
        out["paragraph"] = "The levers are not recorded yet."
        return out
    parts = []
    if work:
        kept = sum(l["kept"] for l in work)
        if kept == len(work) == 2:
            parts.append(f"Both levers that remove work per element without touching a byte "
                         f"shortened the time, by {out['work_gain']}.")
        else:
            parts.append("Of the levers that remove work per element without touching a byte, "
                         f"{kept} of {len(work)} shortened the time ("
                         + "; ".join(f"{l['lever']}: {l['change_pct']:+.0f}%" for l in work)
                         + ").")
    if rows2:
        fewer = ("; fewer warps then fit on an SM"
                 if (rows2["registers_after"] or 0) > (rows2["registers_before"] or 0) else "")
        parts.append(f"The lever meant only to put more loads in flight, two rows per program, "
                     f"changed it by {out['rows2']}{fewer}.")
    occupancy = bool(rows2) and (rows2["registers_after"] or 0) > (rows2["registers_before"] or 0)
    parts.append(out["verdict"] + (
        ", though the two-row lever is the weaker half of the evidence: it also cost "
        "occupancy, which lengthens the time whatever limits the kernel."
        if predicted and occupancy else "."))
    if warps:
        parts.append(f"Fewer warps per row changed the time as well ({out['warps']}), but that "
                     f"lever moves both explanations at once: it leaves more rows in flight and "
                     f"spreads each row's fixed work (its reductions, each block's scale and "
                     f"reciprocal) over more elements per thread, so it decides nothing between "
                     f"them.")
    out["paragraph"] = " ".join(parts)
    return out


def cost_words(cost_doc: dict | None, fused_label: str | None) -> dict:
    """The page's sentences on what exactness costs, from ``fp8_exactness_cost.json`` (and the
    Nsight Compute report beside it): ``cost`` (the diagnostic against the exact kernel at the
    largest shape), ``instructions`` (SASS per element, :func:`instruction_comparison`), ``ncu``
    (:func:`ncu_numbers`) and ``claim`` (the chapter's answer on what limits the exact kernel).
    Each says plainly when its part is not recorded."""
    rows = exactness_cost_rows(cost_doc) if cost_doc else []
    at = None
    if rows:
        big = max(rows, key=lambda r: r["bytes"])
        at = next(r for r in cost_table(rows) if r["shape"] == f"{big['rows']}x{big['cols']}")
        if not (at["exact µs"] and at["diagnostic µs"]) or at["exact % of floor"] is None:
            at = None  # not timed, or no copy measured to price it
    out = {"cost": "The diagnostic kernel is not recorded yet"}
    if at:
        n_rows, n_cols = map(int, at["shape"].split("x"))
        out["cost"] = (f"At {at['shape']} the diagnostic kernel takes {at['diagnostic µs']:.1f} "
                       f"µs, {at['diagnostic % of floor']:.0f}% of the floor, against the exact "
                       f"kernel's {at['exact µs']:.1f} µs ({at['exact % of floor']:.0f}%), and "
                       f"{at['codes differing']:,} of its {n_rows * n_cols:,} codes differ from "
                       f"the specification")
    ipe = instruction_comparison(cost_doc, fused_label)
    out["instructions"] = (
        f"In the compiled code (SASS) the exact kernel as it ran holds about {ipe['exact']:.0f} "
        f"instructions per element a thread handles, the diagnostic one at the same "
        f"{ipe['warps']} warps about {ipe['approx']:.0f}" if ipe else
        "The compiled instruction counts are not recorded yet")
    folder = (cost_doc or {}).get("source", {}).get("folder")
    ncu = ncu_numbers(folder) if folder else None
    out["ncu"] = (
        f"Nsight Compute, run on the exact kernel at {ncu['rows']:,} rows, agrees: it executed "
        f"about {ncu['per_element']:.0f} instructions per element, its issue slots were busy "
        f"{ncu['issue_busy_pct']:.0f}% of the time and DRAM moved data at "
        f"{ncu['dram_pct']:.0f}% of its peak"
        if ncu and ncu["per_element"] and ncu["issue_busy_pct"] and ncu["dram_pct"] else
        "Nsight Compute's report on the exact kernel is not recorded yet")
    if at and at["diagnostic % of floor"] - at["exact % of floor"] >= 10:
        out["claim"] = ("a kernel held bit for bit to its reference is limited, at these "
                        "shapes, by the arithmetic the specification demands more than by its "
                        "bytes")
    elif at:
        out["claim"] = ("dropping exactness buys little here: the specification's arithmetic "
                        "is not what limits the kernel")
    else:
        out["claim"] = ("what limits a kernel held bit for bit to its reference is not "
                        "measured yet")
    return out


def exactness_sentence(rows: list[dict], gpu: str | None, config: str) -> str:
    """What the recording compared on the GPU, in a sentence (no final period): ``fp8.fused``
    (its row of :func:`exactness_rows`, run with ``config``, words from :func:`config_words`)
    against the reference computed by PyTorch on the same GPU: checks, codes, scales."""
    r = next((r for r in rows if r["version"] == "fp8.fused"), None)
    if not r or not r["checks"]:
        return "The comparison on the GPU is not recorded yet"
    where = f"the {gpu}" if gpu else "the GPU"
    head = (f"On {where}, fp8.fused, with {config}, was compared with the reference, which "
            f"PyTorch computed on the same GPU from the same inputs: ")
    codes, checks, exact = r["codes compared"], r["checks"], r["bit-exact"]
    if exact == checks:
        return (head + f"all {checks} checks were bit-exact, {codes:,} codes equal bit for bit "
                f"and every scale within the comparison rule's relative 10⁻⁶")
    differing = r["differing codes"]
    return (head + f"{exact} of the {checks} checks were bit-exact; "
            + (f"{differing:,} of the {codes:,} codes differed" if differing else
               f"all {codes:,} codes were equal, but scales fell outside the comparison "
               f"rule's relative 10⁻⁶"))


def candidates_sentence(cand_doc: dict | None, check_shapes, seeds: int = 2) -> str:
    """How the recording checked the launch candidates before timing them (no final period):
    each on ``check_shapes`` x ``seeds`` random inputs against the reference and on the edge
    cases against the untuned baseline kernel, and how many passed."""
    cands = [r for r in (cand_doc or {}).get("records", [])
             if isinstance(r, dict) and r.get("kind") == "candidate"]
    if not cands:
        return "The candidates' checks are not recorded yet"
    per = sorted({r.get("exact_checks") for r in cands if r.get("exact_checks")})
    exact = sum(r.get("bit_exact") is True for r in cands)
    random_checks = len(check_shapes) * seeds
    codes = sum(rows * cols for rows, cols in check_shapes) * seeds
    gpu = (cand_doc.get("provenance") or {}).get("gpu") or "the GPU"
    if len(per) == 1 and per[0] > random_checks:
        how = (f"{per[0]} checks each: {random_checks} on random inputs ({codes:,} codes) "
               f"against the reference and {per[0] - random_checks} edge cases (signed zeros, "
               f"tiny, subnormal and infinite values) against the untuned baseline kernel")
    else:
        how = "checks on random inputs against the reference and on edge cases against the "\
              "untuned baseline kernel"
    return (f"the recording times every candidate configuration on the {gpu}, and first checks "
            f"it bit for bit in {how}; "
            + (f"all {exact} candidates passed" if exact == len(cands) > 1 else
               f"{exact} of the {len(cands)} candidates passed")
            + ", and only a candidate that passed may be used")


def spread_sentence(timing: list[dict], band: float | None) -> str:
    """How far the times moved between processes, and whether any speedup is within that band."""
    if not timing:
        return ""
    processes = min(r.get("processes", 1) for r in timing)
    if band is None or processes < 2:
        return ("Each time comes from one process, so the recording cannot tell a difference "
                "from run-to-run noise.")
    inside = ", ".join(f"{r['rows']:,}" for r in timing if abs(r["speedup"] - 1) <= band)
    verdict = f"at {inside} rows the two are a tie" if inside else "no speedup is inside it"
    return (f"Each time is the median of {processes} processes timed one after another; "
            f"their p10-p90 spread gives a tie band of ±{100 * band:.1f}%, and {verdict}.")


def timing_paragraph(timing: list[dict]) -> str:
    """The timing table (rows of :func:`fusedrms.book.ch08.timing_rows`) in two sentences:
    where the fused kernel beats the naive pair, by how much against what the bytes allow, and
    its share of the copy floor at the most rows, with what that share says."""
    if not timing:
        return "The timings are not recorded yet."
    last, small = timing[-1], timing[0]
    n, total = sum(r["speedup"] > 1 for r in timing), len(timing)
    where = (f"is faster than the naive pair at all {total} timed shapes" if n == total > 1 else
             "is faster than the naive pair at the one timed shape" if n == total == 1 else
             f"is faster than the naive pair at {n} of the {total} timed shapes" if n else
             "is not faster than the naive pair at the one timed shape" if total == 1 else
             f"is not faster than the naive pair at any of the {total} timed shapes")
    text = (f"The fused kernel {where}: at {last['rows']:,} rows "
            f"the naive pair takes {last['naive_us']:.1f} µs and the fused kernel "
            f"{last['fused_us']:.1f} µs, a speedup of {last['speedup']:.2f}x")
    if last.get("bytes_ratio"):
        text += f", where the bytes alone would allow {last['bytes_ratio']:.2f}x"
    if total > 1:
        text += (f", and at {small['rows']:,} rows, where both are a launch and a few loads, "
                 f"{small['speedup']:.2f}x")
    if last["pct_floor"] is None:  # no copy measured beside the timings: no floor to say
        return text + "."
    verdict = ("near the floor, so the bytes set its time" if last["pct_floor"] >= 85 else
               "if the bytes set its time it would sit near the floor, so something else does")
    return (text + f". At {last['rows']:,} rows the fused kernel runs at "
            f"{last['pct_floor']:.0f}% of its copy floor ({last['floor_us']:.1f} µs): {verdict}.")
