"""One vocabulary for dtypes: short names (``"bf16"``), torch dtypes, torch's names, byte sizes.

Every module that turns a dtype into a name, a name into a dtype, or either into bytes asks here::

    dtypes.short(torch.bfloat16) == "bf16"        dtypes.short("bfloat16") == "bf16"
    dtypes.torch_dtype("bf16") is torch.bfloat16  dtypes.long_name("bf16") == "bfloat16"
    dtypes.nbytes("fp8") == 1
"""
from __future__ import annotations

from typing import Any

BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
ACTIVATIONS = ("bf16", "fp16", "fp32")  # what a kernel reads; fp8 is an output format only
LONG = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "fp8": "float8_e4m3fn"}
_ALIASES = {
    "fp32": "fp32", "float32": "fp32", "float": "fp32", "f32": "fp32",
    "bf16": "bf16", "bfloat16": "bf16",
    "fp16": "fp16", "float16": "fp16", "half": "fp16", "f16": "fp16",
    "fp8": "fp8", "float8_e4m3fn": "fp8", "fp8e4m3": "fp8", "e4m3": "fp8", "float8_e4m3fnuz": "fp8",
}


class DtypeError(ValueError):
    """An unknown dtype name, explained."""


def short(dtype: Any) -> str:
    """Canonical short name (``"bf16"``, ``"fp16"``, ``"fp32"``, ``"fp8"``) of a name or torch dtype."""
    key = str(dtype).replace("torch.", "").strip().lower() if not isinstance(dtype, bool) else ""
    if key not in _ALIASES:
        raise DtypeError(f"unknown dtype {dtype!r}; use one of {', '.join(ACTIVATIONS)} "
                         f"(or torch.bfloat16 / torch.float16 / torch.float32)")
    return _ALIASES[key]


def long_name(dtype: Any) -> str:
    """torch's own name (``"bfloat16"``), as recorded files and tuning tables spell it."""
    return LONG[short(dtype)]


def torch_dtype(dtype: Any):
    """The ``torch.dtype`` for a name (or a torch dtype, returned as is)."""
    import torch

    return getattr(torch, long_name(dtype))


def nbytes(dtype: Any) -> int:
    """Bytes per element."""
    return BYTES[short(dtype)]
