"""What our kernels are measured against: PyTorch's own routes, registered like any kernel.

For ``rmsnorm``:

- ``torch.rms_norm``: ``F.rms_norm(x, (cols,), w, eps)``, PyTorch's library operator.
- ``torch.compile``: ``torch.compile(reference.rmsnorm, dynamic=False)``, a generated kernel.

For ``add_rmsnorm``:

- ``torch.eager_chain``: the three steps a model writes without fusion, ``t = x + r`` (rounded to
  x's dtype), ``n = F.rms_norm(t)``, ``y = n * w``: each step is its own kernel and its own trip
  through memory.
- ``torch.rms_norm_add``: ``F.rms_norm(x + r, (cols,), w, eps)``: the add, then the library norm.
- ``torch.compile_add``: ``torch.compile(reference.add_rmsnorm, dynamic=False)``.

The compiled peers compile once per (shape, dtype, device): each gets its own compiled function
built from a fresh copy of the reference's code object, so Dynamo never hits its recompile limit
and never falls back to dynamic shapes or to eager. The first call of a new shape compiles; the
benchmark times it separately (``first_call_ms``) and excludes it from the timings. Compilation on
a CPU takes tens of seconds per shape, so the compiled peers are registered for GPUs only.

Outside PyTorch (registered always, GPU only; where the package is absent a call raises
:class:`PeerMissing`, which the benchmark records as "missing", never as a number):

- Liger-Kernel: ``liger.rms_norm`` (``rmsnorm``) and ``liger.fused_add_rms_norm``
  (``add_rmsnorm_residual``, Liger's ``fused_add_rms_norm_forward``); :func:`liger_status`.
- FlashInfer's own CUDA kernels (:mod:`fusedrms.kernels.peers_flashinfer`): ``flashinfer.rms_norm``
  and ``flashinfer.fused_add_rmsnorm`` (in place, ``mutates``).
- ``torch.compile_residual``: ``torch.compile(reference.add_rmsnorm_residual, dynamic=False)``.
"""
from __future__ import annotations

import types

import torch
import torch.nn.functional as F

from .. import env, reference, registry, validation  # env first: decides the Triton mode
from . import peers_flashinfer  # its loader builds nothing until a peer is called

class PeerMissing(RuntimeError):
    """A peer library that is not installed (or cannot be built) here."""


COMPILE_REASON = ("torch.compile generates a kernel per shape; on a CPU that takes tens of "
                  "seconds per shape, so the book runs it on the GPU only")


def _rows(x: torch.Tensor) -> torch.Tensor:
    return validation.as_rows(x, "x")


def _check(x, w, eps, residual=None) -> float:
    """The kernels' validation, so a peer fails as clearly as they do (not deep inside ATen)."""
    _rows(x)  # a tensor of a supported dtype, not a scalar, at least one column
    if residual is not None:
        validation.check_same(x, residual, "x", "residual")
    validation.check_weight(w, x.shape[-1], x.device)
    return validation.check_eps(eps)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """PyTorch's ``F.rms_norm`` with the weight passed in (PyTorch picks the kernel)."""
    eps = _check(x, w, eps)
    return F.rms_norm(x, (x.shape[-1],), w, eps)


def eager_chain(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor,
                eps: float = 1e-5) -> torch.Tensor:
    """The unfused chain: add, normalize, scale; every intermediate is rounded to x's dtype
    (a weight of another dtype is applied in its dtype and the product cast back to x's)."""
    eps = _check(x, w, eps, residual)
    t = x + residual
    n = F.rms_norm(t, (t.shape[-1],), None, eps)
    y = n * w
    return y if y.dtype == x.dtype else y.to(x.dtype)


def rms_norm_add(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor,
                 eps: float = 1e-5) -> torch.Tensor:
    """``F.rms_norm(x + residual, w)``: the add, then PyTorch's norm with the weight inside."""
    eps = _check(x, w, eps, residual)
    return F.rms_norm(x + residual, (x.shape[-1],), w, eps)


def _raise_recompile_limits() -> None:
    import torch._dynamo.config as dynamo_config

    for name in ("cache_size_limit", "recompile_limit"):
        if hasattr(dynamo_config, name):
            setattr(dynamo_config, name, max(getattr(dynamo_config, name), 64))
    for name in ("accumulated_cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(dynamo_config, name):
            setattr(dynamo_config, name, max(getattr(dynamo_config, name), 4096))


def _fresh_copy(fn):
    """The same function with a new code object: Dynamo keeps one cache per code object."""
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__,
                              fn.__defaults__, fn.__closure__)


class StaticCompiled:
    """``torch.compile(fn, dynamic=False)``, one compiled function per (shape, dtype, device)."""

    def __init__(self, fn, name: str):
        self.fn, self.name = fn, name
        self.compiled: dict = {}

    def key(self, *tensors: torch.Tensor, eps: float) -> tuple:
        return tuple((tuple(t.shape), t.dtype, str(t.device)) for t in tensors) + (eps,)

    def get(self, *tensors: torch.Tensor, eps: float):
        key = self.key(*tensors, eps=eps)
        if key not in self.compiled:
            _raise_recompile_limits()
            self.compiled[key] = torch.compile(_fresh_copy(self.fn), dynamic=False)
        return self.compiled[key]

    def reset(self) -> None:
        self.compiled.clear()


COMPILED_RMSNORM = StaticCompiled(reference.rmsnorm, "torch.compile")
COMPILED_ADD_RMSNORM = StaticCompiled(reference.add_rmsnorm, "torch.compile_add")
COMPILED_ADD_RMSNORM_RESIDUAL = StaticCompiled(reference.add_rmsnorm_residual,
                                               "torch.compile_residual")
COMPILED = (COMPILED_RMSNORM, COMPILED_ADD_RMSNORM, COMPILED_ADD_RMSNORM_RESIDUAL)


def compiled_rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    eps = _check(x, w, eps)
    x2 = _rows(x)
    w = validation.check_weight(w, x2.shape[1], x2.device)
    return COMPILED_RMSNORM.get(x2, w, eps=eps)(x2, w, eps).reshape(x.shape)


def compiled_add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor,
                         eps: float = 1e-5) -> torch.Tensor:
    eps = _check(x, w, eps, residual)
    x2, r2 = _rows(x), _rows(residual)
    w = validation.check_weight(w, x2.shape[1], x2.device)
    return COMPILED_ADD_RMSNORM.get(x2, r2, w, eps=eps)(x2, r2, w, eps).reshape(x.shape)


def compiled_add_rmsnorm_residual(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor,
                                  eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor]:
    validation.check_same(x, residual, "x", "residual")
    x2, r2 = _rows(x), _rows(residual)
    w = validation.check_weight(w, x2.shape[1], x2.device)
    y, s = COMPILED_ADD_RMSNORM_RESIDUAL.get(x2, r2, w, eps=eps)(x2, r2, w, eps)
    return y.reshape(x.shape), s.reshape(x.shape)


# ---- Liger-Kernel (optional) ----

_LIGER: dict = {}


def _load_liger():
    if "fn" in _LIGER or "error" in _LIGER:
        return _LIGER.get("fn")
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
    except Exception as e:  # not installed, or an incompatible version
        _LIGER["error"] = f"{type(e).__name__}: {e}"
        return None
    _LIGER["fn"] = LigerRMSNormFunction
    return LigerRMSNormFunction


def liger_status() -> str:
    """Whether Liger-Kernel's RMSNorm is registered, and why not if it is not."""
    if _load_liger() is not None:
        import liger_kernel

        version = getattr(liger_kernel, "__version__", "unknown version")
        return f"Liger-Kernel {version} imported: registered as liger.rms_norm"
    return (f"Liger-Kernel is not importable here ({_LIGER['error']}); its RMSNorm is not "
            f"measured. Install it with `pip install liger-kernel` to add it.")


def liger_rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Liger's Triton RMSNorm, casting mode "llama" (x·rstd rounded to x's dtype, then ·w)."""
    fn = _load_liger()
    if fn is None:
        raise PeerMissing(liger_status())
    eps = _check(x, w, eps)
    x2 = _rows(x)
    w = validation.check_weight(w, x2.shape[1], x2.device)
    return fn.apply(x2, w, eps).reshape(x.shape)


def liger_fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor,
                             eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor]:
    """Liger's fused add + RMSNorm forward (casting mode "llama"): ``(y, x + residual)``."""
    if _load_liger() is None:
        raise PeerMissing(liger_status())
    from liger_kernel.ops.fused_add_rms_norm import fused_add_rms_norm_forward

    validation.check_forward_only({"x": x, "residual": residual, "w": w},
                                  "liger.fused_add_rms_norm (its forward alone)")
    eps = _check(x, w, eps, residual)
    out = fused_add_rms_norm_forward(x, residual, w, eps, 0.0, "llama")
    return out[0], out[1]


def flashinfer_fused_add_rmsnorm(x, residual, w, eps: float = 1e-5):
    """FlashInfer's FusedAddRMSNorm, in place: ``residual <- x + residual``, ``x <- y``."""
    eps = _check(x, w, eps, residual)
    try:
        peers_flashinfer.load()
    except RuntimeError as e:
        raise PeerMissing(str(e)) from None
    return peers_flashinfer.fused_add_rmsnorm(_rows(x), _rows(residual), w, eps)


def flashinfer_rms_norm(x, w, eps: float = 1e-5):
    eps = _check(x, w, eps)
    try:
        peers_flashinfer.load()
    except RuntimeError as e:
        raise PeerMissing(str(e)) from None
    return peers_flashinfer.rmsnorm(_rows(x), w, eps).reshape(x.shape)


def register() -> None:
    """Register the peers (called at import)."""
    R = registry
    R.register(R.Impl("torch.rms_norm", "rmsnorm", rms_norm, "torch", kernel=False,
                      description="F.rms_norm(x, (cols,), w, eps)"))
    R.register(R.Impl("torch.compile", "rmsnorm", compiled_rmsnorm, "torch", kernel=False,
                      devices=("cuda",), gpu_only_reason=COMPILE_REASON,
                      description="torch.compile(reference.rmsnorm, dynamic=False), "
                                  "one compile per shape"))
    R.register(R.Impl("torch.eager_chain", "add_rmsnorm", eager_chain, "torch", kernel=False,
                      description="t = x + r; n = F.rms_norm(t); y = n * w (three steps)"))
    R.register(R.Impl("torch.rms_norm_add", "add_rmsnorm", rms_norm_add, "torch", kernel=False,
                      description="F.rms_norm(x + r, (cols,), w, eps)"))
    R.register(R.Impl("torch.compile_add", "add_rmsnorm", compiled_add_rmsnorm, "torch",
                      kernel=False, devices=("cuda",), gpu_only_reason=COMPILE_REASON,
                      description="torch.compile(reference.add_rmsnorm, dynamic=False), "
                                  "one compile per shape"))
    R.register(R.Impl("torch.compile_residual", "add_rmsnorm_residual",
                      compiled_add_rmsnorm_residual, "torch", kernel=False, devices=("cuda",),
                      gpu_only_reason=COMPILE_REASON,
                      description="torch.compile(reference.add_rmsnorm_residual, dynamic=False)"))
    liger_reason = "Liger-Kernel runs on GPUs only"
    R.register(R.Impl("liger.rms_norm", "rmsnorm", liger_rms_norm, "triton", kernel=False,
                      devices=("cuda",), gpu_only_reason=liger_reason,
                      description="Liger-Kernel LigerRMSNormFunction (casting mode llama)"))
    R.register(R.Impl("liger.fused_add_rms_norm", "add_rmsnorm_residual",
                      liger_fused_add_rms_norm, "triton", kernel=False, devices=("cuda",),
                      gpu_only_reason=liger_reason,
                      description="Liger-Kernel fused_add_rms_norm_forward (casting mode llama)"))
    fi_reason = "FlashInfer's kernels are CUDA"
    R.register(R.Impl("flashinfer.rms_norm", "rmsnorm", flashinfer_rms_norm, "cuda",
                      kernel=False, devices=("cuda",), gpu_only_reason=fi_reason,
                      description="FlashInfer norm::RMSNorm (norm.cuh)"))
    R.register(R.Impl("flashinfer.fused_add_rmsnorm", "add_rmsnorm_residual",
                      flashinfer_fused_add_rmsnorm, "cuda", kernel=False, devices=("cuda",),
                      gpu_only_reason=fi_reason, mutates=True,
                      width_limit=peers_flashinfer.fused_add_max_cols,
                      width_reason=peers_flashinfer.FUSED_ADD_WIDTH_REASON,
                      description="FlashInfer norm::FusedAddRMSNorm (norm.cuh), in place"))


register()
