"""Rounding on the bit pattern, shared by the capstone (chapter 7) and FP8 quantization (chapter 8).

The GPU's own casts round to nearest even; the Triton interpreter's casts truncate. Kernels that
must give the same bits on both paths round here, with integer arithmetic on the fp32 bits.

The interpreter also converts bf16 subnormals (below 1.18e-38) wrongly, in both directions (off by
up to 8x, or to 0). :func:`exact_bf16_in_interpreter` replaces those two conversions with their
definitions on the bits, once for every kernel; the GPU path is left alone.
"""
from .. import env  # noqa: F401  (first: decides GPU or interpreter before any @triton.jit below)

import numpy as np
import triton
import triton.language as tl


# [book:round-bf16]
@triton.jit
def round_to_bf16(v):
    """fp32 -> bf16, round to nearest even, done on the bits. The GPU's own cast does this; the
    interpreter's truncates, and a residual stored truncated would differ from the reference."""
    bits = v.to(tl.uint32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    rounded = bits.to(tl.float32, bitcast=True)
    return tl.where(v != v, v, rounded).to(tl.bfloat16)  # NaN stays NaN
# [/book:round-bf16]


@triton.jit
def store_cast(v, dtype: tl.constexpr, SOFTWARE_BF16: tl.constexpr):
    """fp32 -> the stored dtype: the GPU's cast, or :func:`round_to_bf16` for bf16 under the
    interpreter (SOFTWARE_BF16), so that both paths store the same bits."""
    if SOFTWARE_BF16:
        return round_to_bf16(v)
    else:
        return v.to(dtype)


def widen_bf16_bits(bits: np.ndarray) -> np.ndarray:
    """bf16 bit patterns (uint16) -> their fp32 values: the 16 bits on top, exact for every value."""
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def truncate_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """fp32 (or fp64, through fp32) values -> bf16 bit patterns, truncated as the interpreter
    truncates a normal number, subnormals included; a NaN stays a (quiet) NaN."""
    v = np.asarray(values).astype(np.float32)
    kept = (v.view(np.uint32) >> 16).astype(np.uint16)
    return np.where(np.isnan(v), kept | np.uint16(0x0040), kept)


def exact_bf16_in_interpreter() -> bool:
    """Under the interpreter, make bf16 <-> fp32 (and fp64) conversions exact on the bits; returns
    whether they are installed. No-op on a GPU, and idempotent."""
    if env.HAS_GPU:
        return False
    from triton.runtime import interpreter

    builder = getattr(interpreter, "InterpreterBuilder", None)
    original = getattr(builder, "cast_impl", None)
    if original is None:  # a Triton whose interpreter is built differently: leave it alone
        return False
    if getattr(original, "exact_bf16", False):
        return True

    def cast_impl(self, src, dst_type):
        src_ty, dst_ty = src.dtype.scalar, dst_type.scalar
        wide = (tl.float32, tl.float64)
        if src_ty == tl.bfloat16 and dst_ty in wide:
            data = widen_bf16_bits(src.data).astype(interpreter._get_np_dtype(dst_ty))
            return interpreter.TensorHandle(data, dst_ty)
        if src_ty in wide and dst_ty == tl.bfloat16:
            return interpreter.TensorHandle(truncate_to_bf16_bits(src.data), dst_ty)
        return original(self, src, dst_type)

    cast_impl.exact_bf16 = True
    builder.cast_impl = cast_impl
    return True
