"""Rounding on the bit pattern, shared by the capstone (chapter 7) and FP8 quantization (chapter 8).

The GPU's own casts round to nearest even; the Triton interpreter's casts truncate. Kernels that
must give the same bits on both paths round here, with integer arithmetic on the fp32 bits.
"""
from .. import env  # noqa: F401  (first: decides GPU or interpreter before any @triton.jit below)

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
