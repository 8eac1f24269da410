"""Chapter 6's sentences: what the readers of :mod:`fusedrms.book.ch06` return, said in
sentences that read well in every state of the data (one case or many, none missing or some);
each returns None when there is nothing to say, and the page says "not recorded yet"."""
from __future__ import annotations

import re

from .. import dtypes, records, traffic
from .ch06 import NCU_SHAPE, readable_us, times_in_words
from . import page


_SMALL = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}




def _pct(x: float) -> str:
    """A percentage with the precision it deserves, never "-0"."""
    x = 0.0 if abs(x) < 0.05 else x
    return f"{x:.0f}%" if abs(x) >= 10 else f"{x:.1f}%"


def _change(new: float, old: float) -> str:
    """How a time ``new`` compares with ``old``: "4.0% less time", "10% longer", "the same
    time"."""
    d = 100 * (new - old) / old
    if abs(d) < 0.5:
        return "the same time"
    return f"{_pct(abs(d))} {'longer' if d > 0 else 'less time'}"


def sync_sentence(sync: list[dict] | None, floor: records.CopyFloor | None = None) -> str | None:
    """What the three clocks of the synchronize rule say across its sizes, and (with the copy
    ``floor``) how often the clock read without a synchronize fell below it."""
    if not sync:
        return None
    us = readable_us
    lo, hi = sync[0], sync[-1]
    if len(sync) == 1:
        return (f"At {lo['rows']:,} rows the kernel took {us(lo['events_us'])} on the device, the "
                f"clock read without a synchronize {us(lo['no_sync_us'])}, and the synchronized "
                f"clock {us(lo['sync_us'])}")
    work = hi["events_us"] / lo["events_us"]
    clock = hi["no_sync_us"] / lo["no_sync_us"]
    text = (f"From {lo['rows']:,} to {hi['rows']:,} rows the kernel's time on the device grew "
            f"from {us(lo['events_us'])} to {us(hi['events_us'])} "
            f"({times_in_words(work)} as long), while the clock read without a synchronize went "
            f"from {us(lo['no_sync_us'])} to {us(hi['no_sync_us'])} "
            f"({times_in_words(clock)})")
    if floor:
        shares = [r["no_sync_us"] / floor.us(r["bytes"]) for r in sync if r["bytes"]]
        below = sum(s < 1 for s in shares)
        if below:
            text += (f" and read below the copy floor at {below} of "
                     f"{page.counted(len(sync), 'size')}"
                     + (f", down to {_pct(100 * min(shares))} of it" if below > 1 else ""))
    if clock < work / 2:
        text += ": it times the launch, not the work"
    return (text + f". The synchronized clock read {us(hi['sync_us'])} at the largest size, the "
                   f"kernel plus its launch and the round trip")


def warmup_sentence(warm: dict | None) -> str | None:
    """The first call against the warmed median (and torch.compile's, when it was timed)."""
    if not warm:
        return None
    us = readable_us
    text = (f"At {warm['shape']} the fused kernel's first call took {us(warm['first_us'])}, "
            f"{times_in_words(warm['ratio'])} its warmed median of {us(warm['warm_us'])}")
    if "compile_ratio" in warm:
        text += (f"; torch.compile's first call took {us(warm['compile_first_us'])}, "
                 f"{times_in_words(warm['compile_ratio'])} its warmed median of "
                 f"{us(warm['compile_warm_us'])}")
    return text


def process_counts_sentence(grid: dict | None) -> str | None:
    """How many processes the recorded grid's cold cases ran in, and why some ran in fewer."""
    if not grid:
        return None
    cold = [r for r in grid.get("records", []) if r.get("status") == "ok"
            and r.get("mode") == "cold"]
    if not cold:
        return None
    settings = grid.get("provenance", {}).get("settings", {})
    planned = settings.get("processes")
    per = {}
    for r in cold:
        k = len(r.get("process_medians_us") or []) or r.get("processes") or 1
        per[k] = per.get(k, 0) + 1
    counts = sorted(per.items(), reverse=True)
    parts = [f"{page.counted(n, 'cold case')} ran in {_SMALL.get(k, f'{k:,}')} "
             f"{'process' if k == 1 else 'processes'}" if i == 0 else
             f"{n:,} in {_SMALL.get(k, f'{k:,}')}" for i, (k, n) in enumerate(counts)]
    text = "In the recorded benchmark, " + page.listed(parts)
    if len(counts) == 1:
        return text
    why = []
    compiled = [r for r in cold if r["impl"].startswith("torch.compile")]
    if compiled and settings.get("compile_processes") == 1:
        why.append(f"torch.compile's {len(compiled):,} ran in one by design (compiling every "
                   f"shape anew is slow)")
    short = [r for r in cold if not r["impl"].startswith("torch.compile") and planned
             and len(r.get("process_medians_us") or []) < planned]
    if short:
        why.append(f"{'the other' if compiled else 'the'} {len(short):,} in fewer because the "
                   f"recording ran out of time for the later processes")
    return text + (": " + ", and ".join(why) if why else "")


def process_sentence(proc: dict | None) -> str | None:
    """How far apart process medians were, and the worst case (from :func:`process_view`)."""
    if not proc:
        return None
    w, over = proc["worst"], proc["cases_over_5pct"]
    off = 100 * abs(w["outlier_ratio"] - 1)
    text = (f"Over the {page.counted(proc['cases'], 'case')} measured in two or more processes, the process "
            f"medians spread by a median of {_pct(proc['median_across_process_spread_pct'])} of "
            f"the result (from p10 to p90 inside one process: "
            f"{_pct(proc['median_within_process_p10_p90_pct'])}), ")
    text += (f"but in {page.counted(over, 'case')} one process was more than 5% off" if over else
             "and no process was more than 5% off")
    return text + (f". The worst, {w['impl']} at {w['rows']:,} x {w['cols']:,} {w['dtype']}, "
                   f"measured {readable_us(w['outlier_us'])} in one process against a median of "
                   f"{readable_us(w['median_us'])}, {_pct(off)} "
                   f"{'above' if w['outlier_ratio'] > 1 else 'below'} it")


def l2_sentence(l2: tuple[list[dict], dict] | None) -> str | None:
    """Warm against flushed at the headline shape (inside the L2) and at the largest size."""
    if not l2:
        return None
    shapes, rule = l2
    head, big = rule["headline"], shapes[-1]
    inside = (" inside the L2" if rule.get("l2_bytes") and head["bytes"]
              and head["bytes"] < rule["l2_bytes"] else "")
    ratio = head["cold_over_warm"]
    text = (f"At {head['rows']:,} x {head['cols']:,} ({head['bytes'] / 1e6:,.0f} MB moved"
            f"{',' if inside else ''}{inside}) the warm call took {readable_us(head['warm_us'])} and the flushed one "
            f"{readable_us(head['cold_us'])}: ")
    text += (f"the cache made the time look {ratio:.2f} times better" if ratio >= 1.05 else
             "here the cache made little difference")
    if big is not head:
        diff = 100 * abs(big["cold_over_warm"] - 1)
        text += (f". At {big['bytes'] / 1e6:,.0f} MB the two differ by {_pct(diff)}"
                 if diff >= 0.5 else f". At {big['bytes'] / 1e6:,.0f} MB they are the same")
    return text


def dirty_sentence(view: dict | None) -> str | None:
    """The bytes Nsight Compute counted written against the bytes the kernel writes (writes
    still dirty in L2 when a kernel ends are not charged to it), or in total."""
    if not view or view.get("status") != "ok" or not view.get("model_bytes"):
        return None
    shape = f"{view['rows']:,} x {view['cols']:,}"
    head = "Nsight Compute, which flushes the caches before it replays a kernel, counted "
    op = view.get("op") or NCU_SHAPE[0]
    written = view.get("bytes_write")
    if written is not None and op in traffic.OP_STEP:
        model = traffic.price(traffic.OP_STEP[op], view["rows"], view["cols"],
                              view["dtype"]).bytes_written
        short = model - written
        text = (f"{head}{written / 1e6:,.1f} MB written by the fused kernel at {shape}, where it "
                f"writes {model / 1e6:,.1f} MB")
        if short > 0.005 * model:
            return text + (f": {short / 1e6:,.1f} MB fewer, output still in L2 when the "
                           f"kernel ended")
        return text + ": here nothing was left in L2 to write back later"
    counted = view.get("dram_bytes") or view.get("implied_bytes")
    if not counted:
        return None
    short = view["model_bytes"] - counted
    return (f"{head}{counted / 1e6:,.1f} MB of DRAM traffic for the fused kernel at {shape}, "
            f"against the {view['model_bytes'] / 1e6:,.1f} MB the traffic model prices: "
            f"{abs(short) / 1e6:,.1f} MB {'fewer' if short > 0 else 'more'}")


def implementations(rows: list[dict] | None) -> str:
    """How many implementations a rule timed, in words: "the fused kernel alone", "two
    implementations" (the fused kernel and its peers before anything is recorded)."""
    names = {r["impl"] for r in rows or []}
    if not names:
        return "the fused kernel and a peer"
    if len(names) == 1:
        return "the fused kernel alone"
    return f"{_SMALL.get(len(names), f'{len(names):,}')} implementations"


def graph_sentences(rows: list[dict] | None) -> tuple[str, str] | None:
    """What a graph changed for the first implementation at its first one-row shape: a lone call
    (flushed and warm) and calls back to back; and the lesson the numbers support."""
    if not rows:
        return None
    us = readable_us
    target = rows[0]["impl"]
    mine = [r for r in rows if r["impl"] == target]
    r = next((q for q in mine if q["rows"] == 1), mine[0])
    launched = r["back_to_back_us"] / r["graph_back_to_back_us"]
    answer = (f"At {r['rows']:,} x {r['cols']:,} one flushed call of {target} took "
              f"{us(r['cold_us'])} launched and {us(r['cold_graph_us'])} replayed; warm, "
              f"{us(r['held_us'])} and {us(r['held_graph_us'])}. Back to back it took "
              f"{us(r['back_to_back_us'])} per call launched one by one and "
              f"{us(r['graph_back_to_back_us'])} inside a graph")
    answer += (f": launched, a call took {times_in_words(launched)} as long" if launched >= 1.05
               else ": about the same")
    alone = [(r["cold_graph_us"] - r["cold_us"]) / r["cold_us"],
             (r["held_graph_us"] - r["held_us"]) / r["held_us"]]
    change = (f"replayed, a flushed call took {_change(r['cold_graph_us'], r['cold_us'])} and a "
              f"warm one took {_change(r['held_graph_us'], r['held_us'])}")
    if all(a > -0.25 for a in alone):
        lesson = f"So a graph does not make a lone call much faster: {change}"
    else:
        lesson = f"Replaying made even a lone call faster: {change}"
    return answer, lesson


def floor_sentence(fs: dict | None) -> str | None:
    """The chapter's answer: how close the target comes to the copy floor on large shapes
    (from :func:`floor_summary`)."""
    if not fs:
        return None
    n, mb = fs["cases"], f"{fs['min_bytes'] / 1e6:,.0f} MB"
    if n == 1:
        return (f"On the one grid shape that moves at least {mb} the fused kernel ran at "
                f"{fs['min_pct']:.1f}% of the copy floor")
    share = f"{fs['share']:.0f}%"
    often = (f"at {share} or more on all {n}" if fs["at_least"] == n else
             f"below {share} on all {n}" if fs["at_least"] == 0 else
             f"at {share} or more on {fs['at_least']} of them")
    return (f"On the {n} grid shapes that move at least {mb} (in any dtype), the fused kernel ran "
            f"at {fs['min_pct']:.1f}% to {fs['max_pct']:.1f}% of the copy floor, median "
            f"{fs['median_pct']:.1f}%, and {often}")


def health_sentence(health: dict | None, target: str | None = None) -> str | None:
    """The checks beside the speed table (from :func:`grid_health`): measured, outside the
    tolerance, unsupported widths, cases not timed (missing, never a result) and errors."""
    if not health:
        return None
    were = lambda k: "was" if k == 1 else "were"  # noqa: E731
    text = f"{health['measured']:,} of {page.counted(health['cases'], 'case')} were measured"
    if health["wrong"]:
        text += (f", {health['wrong']:,} of them outside the tolerance "
                 f"({page.listed(health['wrong_impls'])})")
    else:
        text += ", every output within the tolerance"
    rest = []
    if health["unsupported"]:
        k = health["unsupported"]
        rest.append(f"{page.counted(k, 'case')} {were(k)} a width an implementation declares it cannot "
                    f"handle ({page.listed(health.get('unsupported_impls', []))})")
    if health.get("skipped"):
        k = health["skipped"]
        rest.append(f"{page.counted(k, 'case')} of {page.listed(health['skipped_impls'])} {were(k)} not timed, "
                    f"because the recording ran out of time before their turn: those results "
                    f"are missing, not slow and not fast")
    if health["errors"]:
        k = health["errors"]
        rest.append(f"{page.counted(k, 'case')} failed with an error ({page.listed(health['error_impls'])})")
    if rest:
        text += "; " + "; ".join(rest)
    if health["wrong"] and target not in health["wrong_impls"]:
        text += (". A peer outside the tolerance is not broken: it rounds its intermediates, a "
                 "different definition, which chapter 7 takes up")
    return text


def config_words(cfg: dict | None) -> str | None:
    """The launch configuration ncu profiled, with where it came from in words: "rows/prog 1,
    warps 16, from the tuning table for NVIDIA H200 at 8,192 bf16 columns"."""
    if not cfg or not cfg.get("label"):
        return None
    source = str(cfg.get("source") or "")
    tuned = re.match(r"tuned on (.+?) for \((\d+), (\w+)\)$", source)
    if tuned:
        try:
            dt = dtypes.short(tuned[3])
        except dtypes.DtypeError:
            dt = tuned[3]
        source = f"from the tuning table for the {tuned[1]} at {int(tuned[2]):,} {dt} columns"
    return f"{cfg['label']}; {source}" if source else cfg["label"]


def ncu_sentence(view: dict | None) -> str | None:
    """ncu's duration and DRAM throughput, and the configuration profiled."""
    if not view or view.get("status") != "ok":
        return None
    dram = view.get("dram_throughput_pct")
    text = f"ncu timed the kernel at {readable_us(view.get('duration_us'))}"
    if dram is not None:
        text += f", with DRAM at {float(dram):.1f}% of the peak it assumes"
    cfg = config_words(view.get("config"))
    return text + (f", at the configuration in use ({cfg})" if cfg else
                   "; this profile does not record its launch configuration")


def cooperation_sentence(timed: list[dict], historical_ratio: float | None = None,
                         missing: list[str] | None = None) -> str | None:
    """The historical headline (one thread per row against a block per row) on the recorded GPU:
    hip.serial against hip.block from the rows of one case, and who was not timed there."""
    by = {r["impl"]: r["median_us"] for r in timed or [] if r.get("median_us")}
    text = None
    if "hip.serial" in by and "hip.block" in by:
        ratio = by["hip.serial"] / by["hip.block"]
        text = (f"On the H200 the same two kernels took {readable_us(by['hip.serial'])} "
                f"(hip.serial) and {readable_us(by['hip.block'])} (hip.block), a factor of "
                f"{ratio:,.1f}")
        if historical_ratio:
            then = f"the RX 9070 XT ({historical_ratio:,.1f})"
            text += (f": the same lesson, about as strong as on {then}"
                     if abs(ratio / historical_ratio - 1) < 0.05 else
                     f": the same lesson, {'stronger' if ratio > historical_ratio else 'weaker'} "
                     f"than on {then}")
    if missing:
        it = "it is" if len(missing) == 1 else "they are"
        note = (f"The recording did not time {page.listed(missing)} at this shape: {it} missing "
                f"from the table, not slow")
        text = f"{text}. {note}" if text else note
    return text
