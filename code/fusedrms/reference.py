"""PyTorch references: the definitions every kernel in the book is checked against.

The book's casting convention (used by every kernel except the FP8 step of chapter 8, which has
its own, stated order): upcast to the accumulation dtype, compute ``x * r * w`` there, and cast to
the input's dtype once at the end. ``accum=torch.float64`` gives the float64 reference that the
verification suite uses.
"""
from __future__ import annotations

import torch

FP32 = torch.float32
FP64 = torch.float64


def loud(r: torch.Tensor, sum_sq: torch.Tensor, denominator: torch.Tensor,
         range_dtype: torch.dtype | None = None) -> torch.Tensor:
    """``r`` where the row's sum of squares and ``denominator = mean(x^2) + eps`` lie in the
    normal range of ``range_dtype`` (default: their own dtype), else NaN.

    The kernels' policy (``kernels.rmsnorm.loud_scale``): a row whose sum of squares overflowed,
    that holds a NaN or an Inf, or (eps = 0) whose mean square fell below the smallest normal
    number comes back as NaN, never as a finite wrong row (overflow alone would give zeros)."""
    info = torch.finfo(range_dtype or denominator.dtype)
    in_range = (sum_sq <= info.max) & (denominator >= info.tiny) & (denominator <= info.max)
    return torch.where(in_range, r, torch.full_like(r, float("nan")))


def row_scale(x: torch.Tensor, eps: float, accum: torch.dtype = FP32,
              range_dtype: torch.dtype | None = None) -> torch.Tensor:
    """r = 1 / sqrt(mean(x^2) + eps) for every row (last dimension), shape ``x.shape[:-1] + (1,)``.
    NaN for a row outside the range of ``range_dtype`` (default ``accum``; :func:`loud`): the
    verification suite accumulates in float64 with fp32's range, the kernels' exact answer."""
    xa = x.to(accum)
    sum_sq = (xa * xa).sum(dim=-1, keepdim=True)
    denominator = sum_sq / x.shape[-1] + eps
    return loud(torch.rsqrt(denominator), sum_sq, denominator, range_dtype)


def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-5,
            accum: torch.dtype = FP32, out_dtype: torch.dtype | None = None,
            range_dtype: torch.dtype | None = None) -> torch.Tensor:
    """y = x * r * w, r shared by the row, w per column. Returns ``out_dtype`` (default: x's)."""
    xa = x.to(accum)
    y = xa * row_scale(x, eps, accum, range_dtype) * w.to(accum)
    return y.to(out_dtype or x.dtype)


def add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, eps: float = 1e-5,
                accum: torch.dtype = FP32, out_dtype: torch.dtype | None = None,
                range_dtype: torch.dtype | None = None) -> torch.Tensor:
    """y = rmsnorm(x + residual) * w; the sum is formed in ``accum``, never rounded to x's dtype."""
    s = x.to(accum) + residual.to(accum)
    return rmsnorm(s, w, eps, accum, out_dtype or x.dtype, range_dtype)


def add_rmsnorm_residual(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor,
                         eps: float = 1e-5, accum: torch.dtype = FP32
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, s): also returns s = x + residual in x's dtype, the next layer's residual (vLLM layout).

    y is computed from s *as stored* (rounded to x's dtype), which is what the next layer sees and
    what vLLM does; FlashInfer normalizes the unrounded fp32 sum (:mod:`fusedrms.contracts`).
    """
    s = (x.to(accum) + residual.to(accum)).to(x.dtype)
    return rmsnorm(s, w, eps, accum, x.dtype), s


def rmsnorm_backward(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, eps: float = 1e-5,
                     accum: torch.dtype = FP32, d_sum: torch.Tensor | None = None,
                     rows_scale: torch.Tensor | None = None,
                     range_dtype: torch.dtype | None = None) -> dict:
    """Gradients of ``y = x * r * w`` (chapter 9), from the formula, in ``accum``.

    With ``xhat = x r`` and ``g = dy w``: ``dx = r (g - xhat mean(g xhat))`` (the same as
    ``r g - (r^3 / n) x sum(g x)``, in an order whose intermediates neither overflow nor underflow),
    ``dw = sum over rows of dy xhat``. ``d_sum`` is the gradient arriving at ``x`` from elsewhere
    (the fused add's residual output): it is added to ``dx``. ``rows_scale`` is a saved ``r`` to use
    instead of recomputing it; ``range_dtype`` as in :func:`row_scale` (a row outside its range has
    r = NaN, so its dx and every column of dw are NaN).

    Returns ``dx``, ``dw`` (in ``accum``) and the magnitudes their rounding errors are proportional
    to, for :func:`fusedrms.checks.allclose`'s ``scale``: ``dx_scale = r (|g| + |xhat| mean|g xhat|)
    (+ |d_sum|)`` and ``dw_scale = sum over rows of |dy xhat|``.
    """
    cols = x.shape[-1]
    xa, wa, ga = x.to(accum), w.to(accum), dy.to(accum)
    r = row_scale(x, eps, accum, range_dtype) if rows_scale is None else rows_scale.to(accum).reshape(
        *x.shape[:-1], 1)
    xhat = xa * r
    g = ga * wa
    dx = r * (g - xhat * ((g * xhat).sum(dim=-1, keepdim=True) / cols))
    dx_scale = r * (g.abs() + xhat.abs() * ((g * xhat).abs().sum(dim=-1, keepdim=True) / cols))
    if d_sum is not None:
        dx = dx + d_sum.to(accum)
        dx_scale = dx_scale + d_sum.to(accum).abs()
    flat = (ga * xhat).reshape(-1, cols)
    return {"dx": dx, "dw": flat.sum(dim=0), "dx_scale": dx_scale,
            "dw_scale": flat.abs().sum(dim=0)}
