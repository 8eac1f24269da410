"""The kernels: one module per route, each readable on its own like a Triton tutorial.

``rmsnorm`` (Triton RMSNorm, chapter 4), ``add_rmsnorm`` (the fused residual-add capstone,
chapter 7), ``rmsnorm_fp8`` (RMSNorm + FP8 block quantization, chapter 8; ``rmsnorm_fp8_spec`` is
its bit-exact specification in PyTorch and the comparison rule), ``rmsnorm_backward`` (the
backward of RMSNorm and of the fused add, with autograd wrappers, chapter 9), ``peers`` (the PyTorch
routes they are measured against) and ``hip/`` (the HIP source and its wrappers, chapter 3). Each
registers its wrappers in :mod:`fusedrms.registry` when imported. ``amd_targets`` compiles the
Triton kernels for AMD GPUs (RDNA4, CDNA3) without one and reads their register counts.
"""
from .. import env  # first: decides GPU or interpreter before any kernel module below
from .interpreter_index import scalar_index_in_interpreter
from .rounding import exact_bf16_in_interpreter

exact_bf16_in_interpreter()  # the interpreter's bf16 subnormals, read and written on the bits
scalar_index_in_interpreter()  # loops to a runtime bound on Triton <= 3.6 with NumPy >= 2.4
