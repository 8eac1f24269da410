"""What the predict-then-check exercises share.

A prediction exercise asks for a number before the page shows it, and grades it against the
committed H200 recording (never the reader's own: every reader checks against the numbers the
page then shows). Its feedback names the recorded GPU (:func:`recorded_gpu`), says so when the
recording is missing (:func:`recording_missing`), and reads ratios of two times, which are
positive (:func:`read_ratio`, :func:`read_ratios`).
"""
from __future__ import annotations

from . import answers
from .core import Feedback, Malformed, wrong


def short_gpu(name: str | None) -> str:
    """A GPU's name as the feedback says it: "H200" for "NVIDIA H200"; "GPU" when unknown."""
    return (name or "GPU").removeprefix("NVIDIA ")


def recorded_gpu(doc: dict | None) -> str:
    """The GPU a recording's provenance names, as :func:`short_gpu` says it."""
    return short_gpu(((doc or {}).get("provenance") or {}).get("gpu"))


def recording_missing() -> Feedback:
    """The verdict when the recording a prediction is checked against is absent."""
    return wrong("The recording this prediction is checked against is missing here.",
                 "Run the chapter's measurement on a GPU to record it.")


def _positive(value: float) -> float:
    if value <= 0:
        raise Malformed(f"a ratio of two times is positive, got {value:g}.")
    return value


def read_ratio(answer, what: str) -> float:
    """A positive ratio: 1.2, "1.2x", "1.2×", "26/20" (``what`` names it in messages)."""
    return _positive(answers.read(answer, what, answers.RATIO).value)


def read_ratios(answer, count: int, what: str) -> list[float]:
    """``count`` positive ratios, from a list or from text such as "[1.2, 1.0]"."""
    return [_positive(r.value) for r in answers.read_list(answer, count, what, answers.RATIO)]
