"""Chapter 8's price list: ``fp8.fused``'s unpadded kernel with the exact contract's
features switched off one at a time (:func:`rmsnorm_fp8_departing`). The switches are constexpr
arguments of :func:`fusedrms.kernels.rmsnorm_fp8.rmsnorm_fp8_fused_split_kernel` (one kernel
source), whose defaults are the specification."""
from __future__ import annotations

from .. import validation
from .rmsnorm_fp8 import (BLOCK_COLS, FP8_MAX, FusedConfig, _interpreter_quiet, _launch_setup,
                          _shaped, rmsnorm_fp8_fused_split_kernel)
from .rmsnorm_fp8_spec import ABSMAX_FLOOR, RMS_NORM_EPS

SUM_ORDERS = ("float64", "pairwise", "compiler")  # sum_of_squares' SUM_ORDER 0, 1, 2
DEPARTING_DIVISIONS = ("exact", "reciprocal")


def rmsnorm_fp8_departing(x, w, sum_order: str = "float64", exact_r: bool = True,
                          division: str = "exact", num_warps: int = 4,
                          eps: float = RMS_NORM_EPS, absmax_floor: float = ABSMAX_FLOOR):
    """``fp8.fused``'s unpadded kernel with the exact contract's features switched off one at a
    time, so chapter 8 can price each: ``sum_order`` ``"pairwise"`` (fp32, the stated
    tree of :func:`pairwise_sum`) or ``"compiler"`` (fp32, any order); ``exact_r=False`` (the
    hardware ``rsqrt``); ``division="reciprocal"`` (``q = y * RN(448 / absmax)``). The defaults
    are ``fp8.fused(contract="exact")`` at ``FusedConfig(num_warps, None, "block_reciprocal", 1,
    "split")``; ``sum_order="pairwise", division="reciprocal"`` is the served contract.
    Returns ``(codes, scales)``; :func:`rmsnorm_fp8_spec.reference` states the pairwise sum and
    the reciprocal division too, so those departures are checked bit for bit against it."""
    validation.check_forward_only({"x": x, "w": w}, "fp8.departing")
    for name, value, allowed in (("sum_order", sum_order, SUM_ORDERS),
                                 ("division", division, DEPARTING_DIVISIONS)):
        if value not in allowed:
            raise validation.InputError(f"{name} must be one of {', '.join(map(repr, allowed))}, "
                                        f"got {value!r}.")
    validation.check_flag(exact_r, "exact_r")
    config = FusedConfig(num_warps, None, "block_reciprocal", 1, "split")
    x2, w2, eps, floor, shape, codes, codes_out, scales, meta = _launch_setup(
        x, w, eps, absmax_floor, "auto", None, True, None, config, "exact")
    if "PIECES" not in meta:
        raise validation.InputError(f"{x2.shape[1]} columns are not three powers of two of "
                                    f"{BLOCK_COLS}-column blocks (as 7168 = (32 + 16 + 8) x 128); "
                                    f"the departures run on the unpadded kernel only.")
    if x2.shape[0]:
        b0, b1, b2 = meta.pop("PIECES")
        for set_below in ("BLOCKS", "SUM_ORDER", "MULTIPLY"):
            del meta[set_below]
        with _interpreter_quiet():
            rmsnorm_fp8_fused_split_kernel[(x2.shape[0],)](
                x2, w2, codes_out, scales, x2.shape[1], float(x2.shape[1]), x2.stride(0), eps,
                floor, FP8_MAX=FP8_MAX, B0=b0, B1=b1, B2=b2, SUM_ORDER=SUM_ORDERS.index(sum_order),
                EXACT_R=exact_r, MULTIPLY=division == "reciprocal", **meta)
    return _shaped(codes, scales, shape)
