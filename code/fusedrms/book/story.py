"""What the chapters' story modules (``book/chNN_story.py``) share.

A chapter's prose is written in its Markdown about the committed H200 recording. Its story module
reads that recording into ``story_facts`` (the comparisons the prose states in words, which a test
holds against the recording, so a re-recording that contradicts a sentence fails it) and
``story_values`` (the formatted numbers the prose shows inline with ``{eval}`` roles). A reader
who has recorded the chapter on their own GPU gets a short table beside the H200's.
"""
from __future__ import annotations

from typing import Callable

from .. import records

MISSING = "not recorded"


def recorded(name: str, machine: str | None = records.COMMITTED) -> dict | None:
    """A recorded file of ``machine``'s recording (the committed one by default; None: the one
    this reader's page would show), or None where it was not recorded."""
    try:
        return records.load(name, machine)
    except FileNotFoundError:
        return None


def rotating_warm_up(doc: dict | None) -> str | None:
    """The rotating timer's warm-up as a recording states it ("25 ms"; None where it was not
    recorded)."""
    for r in (doc or {}).get("records", []):
        if r.get("mode") == "rotating" and isinstance(r.get("warm_ms"), (int, float)):
            return f"{r['warm_ms']:g} ms"
    return None


def value(values: dict[str, str], name: str) -> str:
    """One story value, or "not recorded" (a page without the recording still renders)."""
    return values.get(name, MISSING)


def beside(rows: list[tuple[str, Callable[[dict], str]]], mine: dict, theirs: dict,
           theirs_label: str = "H200 (the book)") -> list[dict]:
    """The "your GPU" panel: one row per ``(label, fact)``, the fact read from both recordings'
    facts ("-" where a recording lacks it)."""
    def pick(facts, fact):
        try:
            return fact(facts)
        except (KeyError, TypeError, ZeroDivisionError, IndexError):
            return None

    return [{"": label, theirs_label: pick(theirs, fact) or "-", "your GPU": pick(mine, fact) or "-"}
            for label, fact in rows]
