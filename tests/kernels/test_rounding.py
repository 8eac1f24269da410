"""fusedrms.kernels.rounding: bf16 conversions inside a Triton kernel are exact on the bits on every
route, bf16 subnormals (below 1.18e-38) included (issue 26: the interpreter misread them by up to 8x)."""
import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from fusedrms import env
from fusedrms.kernels import rounding

ENV = env.current()
DEV = ENV.device
EVERY_BF16 = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)


@triton.jit
def _widen_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    v = tl.load(src_ptr + offsets, mask=mask)
    tl.store(dst_ptr + offsets, v.to(dst_ptr.dtype.element_ty), mask=mask)


def _convert(src: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    dst = torch.empty(src.shape, dtype=dtype, device=src.device)
    block = 4096
    _widen_kernel[(triton.cdiv(src.numel(), block),)](src, dst, src.numel(), BLOCK=block)
    return dst


def test_every_bf16_value_widens_exactly_in_a_kernel():
    got = _convert(EVERY_BF16.to(DEV), torch.float32).cpu()
    expected = EVERY_BF16.float()  # torch widens on the bits
    assert torch.equal(got.isnan(), expected.isnan())
    finite = ~expected.isnan()
    assert torch.equal(got[finite].view(torch.int32), expected[finite].view(torch.int32))
    subnormal = (expected.abs() < torch.finfo(torch.float32).tiny) & (expected != 0)
    assert int(subnormal.sum()) == 254  # the case the interpreter used to misread


def test_every_bf16_value_round_trips_through_fp32_in_a_kernel():
    wide = EVERY_BF16.float()
    back = _convert(wide.to(DEV), torch.bfloat16).cpu()
    finite = ~wide.isnan()
    assert torch.equal(back.view(torch.int16)[finite], EVERY_BF16.view(torch.int16)[finite])
    assert back[~finite].isnan().all()


@pytest.mark.skipif(ENV.on_gpu, reason="the interpreter's casts truncate; a GPU's round")
def test_the_interpreter_truncates_fp32_subnormals_to_bf16_on_the_bits():
    bits = np.random.default_rng(0).integers(1, 0x00800000, 4096, dtype=np.uint32)  # subnormals
    values = torch.from_numpy(np.concatenate([bits, bits | 0x80000000]).view(np.float32))
    got = _convert(values, torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(got, (values.numpy().view(np.uint32) >> 16).astype(np.uint16))


def test_bf16_with_float64_converts_through_fp32():
    values = EVERY_BF16[~EVERY_BF16.isnan()]
    assert torch.equal(_convert(values.to(DEV), torch.float64).cpu(), values.double())
    if not ENV.on_gpu:  # the interpreter used to convert these as integers
        wide = values.double()
        assert torch.equal(_convert(wide, torch.bfloat16).view(torch.int16),
                           values.view(torch.int16))


def test_the_bit_helpers_and_installing_twice():
    assert np.array_equal(rounding.widen_bf16_bits(np.array([0x0001, 0x8001], np.uint16)),
                          np.array([2.0 ** -133, -(2.0 ** -133)], np.float32))
    nan = np.array([np.float32("nan")]).view(np.uint32) | 1  # a payload in the dropped bits
    assert np.isnan(rounding.widen_bf16_bits(rounding.truncate_to_bf16_bits(nan.view(np.float32))))
    assert rounding.exact_bf16_in_interpreter() is (not ENV.on_gpu)
    assert rounding.exact_bf16_in_interpreter() is (not ENV.on_gpu)  # idempotent
