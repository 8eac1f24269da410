"""Chapter 6's sentences that must read well for any recording (the chapter's own story is written
in its Markdown, with values from :mod:`fusedrms.book.ch06_story`): how many implementations a
rule timed, and the appendix's comparison with the historical seed on the recorded GPU."""
from __future__ import annotations

from .ch06 import readable_us
from . import page

_SMALL = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}


def implementations(rows: list[dict] | None) -> str:
    """How many implementations a rule timed, in words: "the fused kernel alone", "two
    implementations" (the fused kernel and its peers before anything is recorded)."""
    names = {r["impl"] for r in rows or []}
    if not names:
        return "the fused kernel and a peer"
    if len(names) == 1:
        return "the fused kernel alone"
    return f"{_SMALL.get(len(names), f'{len(names):,}')} implementations"


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
