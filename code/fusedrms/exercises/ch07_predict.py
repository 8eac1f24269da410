"""Chapter 7's predict-then-check: PyTorch's ``F.rms_norm(x + r)`` (two kernels) against the
capstone, at a small shape and a large one, before the chapter's figure shows both.

The byte model says 5/3 at every size (5 row-trips against 3). The committed H200 recording says
otherwise at a small shape, where each kernel's fixed cost sets the time and PyTorch pays it in
two kernels; at a large one the ratio is the byte ratio times the ratio of the two designs' rates.
Values come from the recording the chapter's figure draws (:mod:`fusedrms.book.ch07_results`).
"""
from __future__ import annotations

import functools

from .. import records, traffic
from . import answers, predictions
from .core import Exercise, correct, wrong

PEER = "torch.rms_norm_add"  # F.rms_norm(x + r, (cols,), w, eps): the add, then the library norm
SMALL, LARGE = (16, 4096), (16384, 4096)  # bf16; well inside and far beyond any launch's cost
DTYPE = "bf16"
BYTE_RATIO = float(traffic.speedup_bound("torch_add_rmsnorm", "fused_add_rmsnorm"))  # 5/3
SMALL_CLOSE, LARGE_CLOSE = 0.20, 0.05  # the byte ratio lies outside both


def _mb(shape) -> float:
    return traffic.price("fused_add_rmsnorm", *shape, DTYPE).bytes_total / 1e6


@functools.lru_cache(maxsize=1)
def recorded_ratios() -> dict | None:
    """PyTorch's time and the capstone's at ``SMALL`` and ``LARGE`` in the committed recording,
    with each design's share of the copy rate, the copy floor's time of the fused bytes, and
    the GPU; None when any of it is missing."""
    from ..book import ch07_results as CR

    doc, _ = CR.peers_doc(machine=records.COMMITTED)
    if doc is None:
        return None
    rows = CR.peer_rows(CR.peer_points(doc), "add_rmsnorm")
    floor = records.copy_floor_beside(doc)
    found = {"gpu": predictions.recorded_gpu(doc)}
    for label, shape in (("small", SMALL), ("large", LARGE)):
        row = next((r for r in rows if (r["rows"], r["cols"], r["dtype"]) == (*shape, DTYPE)
                    and PEER in r["peers"]), None)
        if row is None or floor is None:
            return None
        torch_us, fused_us = row["peers"][PEER], row["capstone_us"]
        torch_bytes, fused_bytes = (traffic.price(s, *shape, DTYPE).bytes_total
                                    for s in ("torch_add_rmsnorm", "fused_add_rmsnorm"))
        found[label] = {"torch_us": torch_us, "fused_us": fused_us, "ratio": torch_us / fused_us,
                        "floor_us": floor.us(fused_bytes),
                        "torch_pct": floor.pct(torch_bytes, torch_us),
                        "fused_pct": floor.pct(fused_bytes, fused_us)}
    return found


def _said(found: dict, small_guess: float, large_guess: float) -> str:
    s, l_ = found["small"], found["large"]
    return (f"You predicted {small_guess:.2f} and {large_guess:.2f}. The {found['gpu']} measured "
            f"F.rms_norm(x + r) at {s['torch_us']:.1f} µs against the capstone's "
            f"{s['fused_us']:.1f} µs at {SMALL[0]:,} x {SMALL[1]:,} ({s['ratio']:.2f}), and "
            f"{l_['torch_us']:.0f} µs against {l_['fused_us']:.0f} µs at {LARGE[0]:,} x "
            f"{LARGE[1]:,} ({l_['ratio']:.2f}).")


def _rates(large: dict) -> str:
    return (f"the capstone moves its bytes at {large['fused_pct']:.0f}% of the copy rate, "
            f"PyTorch's two kernels together at {large['torch_pct']:.0f}%")


def _grade(answer):
    small_guess, large_guess = predictions.read_ratios(
        answer, 2, f"ratios (PyTorch's time / the capstone's), at {SMALL[0]} rows and at "
                   f"{LARGE[0]} rows")
    found = recorded_ratios()
    if found is None:
        return predictions.recording_missing()
    small, large = found["small"], found["large"]
    said = _said(found, small_guess, large_guess)
    if small_guess < 1 and large_guess < 1:
        return wrong(said, "Those are the capstone's time over PyTorch's: the question asks "
                           "PyTorch's time over the capstone's, above 1 where the capstone is "
                           "faster.")
    if small_guess < small["ratio"] * (1 - SMALL_CLOSE):
        return wrong(said,
                     f"At {_mb(SMALL):.1f} MB the bytes take {small['floor_us']:.2f} µs at the "
                     f"copy rate, a sliver of either time: what a call costs here is each "
                     f"kernel's fixed cost (its start, a row's reduction, its end), not its "
                     f"bytes. PyTorch pays that cost in two kernels, "
                     f"{small['torch_us']:.1f} µs together, more than twice the capstone's one.")
    if small_guess > small["ratio"] * (1 + SMALL_CLOSE):
        return wrong(said,
                     f"At {_mb(SMALL):.1f} MB the time is each kernel's fixed cost, and PyTorch "
                     f"runs two kernels against the capstone's one: its "
                     f"{small['torch_us']:.1f} µs is a few fixed costs, not a ratio of bytes or "
                     f"of bandwidths.")
    if answers.close(large_guess, BYTE_RATIO, 0.01):
        return wrong(said, f"5/3 ({BYTE_RATIO:.2f}) is the bound if both designs moved their "
                           f"bytes at the same rate. They do not: {_rates(large)}. The measured "
                           f"ratio is the byte ratio times the ratio of the rates.")
    if not answers.close(large_guess, large["ratio"], LARGE_CLOSE):
        side = ("Two launches become one, but at this size the bytes set the time, not the "
                "launches: " if large_guess > large["ratio"] else "Start from the bytes: ")
        return wrong(said, f"{side}PyTorch's two kernels move 5 row-trips and the capstone 3, "
                           f"so at equal rates the ratio is 5/3 ({BYTE_RATIO:.2f}); then ask "
                           f"which design moves its bytes faster ({_rates(large)}).")
    return correct(f"{said} The byte model prices the large shape, {BYTE_RATIO:.2f} times the "
                   f"ratio of the rates ({_rates(large)}), and not the small one, where the "
                   f"bytes take {small['floor_us']:.2f} µs and the kernels' fixed costs set the "
                   f"time: there, one kernel instead of two is the gain.")


def _solution() -> list | None:
    found = recorded_ratios()
    return None if found is None else [round(found["small"]["ratio"], 2),
                                       round(found["large"]["ratio"], 2)]


def _mistakes() -> dict:
    found = recorded_ratios()
    if found is None:
        return {}
    small, large = found["small"]["ratio"], found["large"]["ratio"]
    return {"the byte ratio at both sizes": [round(BYTE_RATIO, 3)] * 2,
            "two launches become one": [2.0, 2.0], "no gain": [1.0, 1.0],
            "the same ratio at every size": [round(small, 2)] * 2,
            "the launches at the large size too": [round(small, 2), round(2 * BYTE_RATIO, 2)],
            "the ratio inverted": [round(1 / small, 3), round(1 / large, 3)]}


predict_torch_ratio = Exercise(
    "predict_torch_ratio",
    f"Predict the time of PyTorch's F.rms_norm(x + r) (two kernels) over the capstone's on the "
    f"H200, at {SMALL[0]:,} x {SMALL[1]:,} bf16 ({_mb(SMALL):.1f} MB moved by the capstone) and "
    f"at {LARGE[0]:,} x {LARGE[1]:,} bf16 ({_mb(LARGE):.0f} MB): two ratios, e.g. [1.5, 1.2].",
    _grade, solution=_solution(), mistakes=_mistakes())
