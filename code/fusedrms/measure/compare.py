"""Deciding "faster", "slower" or "a tie" from a recording's own run-to-run spread.

A median alone cannot say whether 1.02x is a win: the same launch timed in another process moves
by a few percent. Every harness record carries its process medians; their p10-p90 width, relative
to the median, is that case's run-to-run spread. :func:`tie_band` takes a high quantile of those
widths over a recording, so the band is derived from the run, never asserted, and
:func:`verdict` calls a ratio outside ``1 +- band`` a difference and anything inside a tie.
"""
from __future__ import annotations

TIE_QUANTILE = 0.9  # the band covers the run-to-run spread of nine cases in ten


def quantile_of(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values``, linear between order statistics (one value: itself)."""
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def relative_spread(rec: dict) -> float | None:
    """A timed record's p10-p90 width across processes over its median (None with one process)."""
    meds = rec.get("process_medians_us") or []
    median = rec.get("median_us")
    if len(meds) < 2 or not median:
        return None
    return (quantile_of(meds, 0.9) - quantile_of(meds, 0.1)) / median


def tie_band(recs: list[dict], quantile: float = TIE_QUANTILE) -> float | None:
    """The ``quantile`` of the relative spreads of ``recs`` (None when no record has two processes).

    Raises ValueError for a quantile outside [0, 1]."""
    if not 0.0 <= quantile <= 1.0:
        raise ValueError(f"quantile must be within [0, 1], got {quantile!r}")
    spreads = [s for s in (relative_spread(r) for r in recs if r.get("status") == "ok")
               if s is not None]
    return quantile_of(spreads, quantile) if spreads else None


def verdict(ours_us: float, peer_us: float, band: float) -> str:
    """``"faster"``, ``"slower"`` or ``"tie"`` for ours against a peer, with the tie band."""
    if not (ours_us > 0 and peer_us > 0) or band < 0:
        raise ValueError(f"times must be positive and the band non-negative "
                         f"(ours {ours_us!r}, peer {peer_us!r}, band {band!r})")
    ratio = ours_us / peer_us
    if ratio < 1.0 - band:
        return "faster"
    if ratio > 1.0 + band:
        return "slower"
    return "tie"
