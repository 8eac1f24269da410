"""The restatements round where their originals round: checked against the book's references,
PyTorch's own F.rms_norm, the written-out originals and chapter 8's FP8 specification."""
import pytest
import torch
import torch.nn.functional as F

from fusedrms import reference
from fusedrms.contracts import conventions as C, fp8
from fusedrms.kernels import rmsnorm_fp8_spec as spec

DTYPES = [torch.bfloat16, torch.float16]


def bits(t):
    return t.contiguous().view(torch.int16 if t.element_size() == 2 else torch.uint8)


def same(a, b):
    return a.dtype == b.dtype and torch.equal(bits(a), bits(b))


def rows(dtype, seed=0, n=16, cols=96):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, cols, generator=g).to(dtype),
            torch.randn(n, cols, generator=g).to(dtype),
            (1 + 0.3 * torch.randn(cols, generator=g)).to(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_fp32_once_is_the_books_reference_and_torchs_rms_norm(dtype):
    x, _, w = rows(dtype)
    assert same(C.fp32_once(x, w, 1e-6), reference.rmsnorm(x, w, 1e-6))
    assert same(C.fp32_once(x, w, 1e-6), F.rms_norm(x, (x.shape[-1],), w, 1e-6))


@pytest.mark.parametrize("dtype", DTYPES)
def test_llama_is_the_hugging_face_forward_written_out(dtype):
    x, _, w = rows(dtype, 1)
    hidden = x.to(torch.float32)
    variance = hidden.pow(2).mean(-1, keepdim=True)
    hidden = hidden * torch.rsqrt(variance + 1e-6)
    assert same(C.llama(x, w, 1e-6), w * hidden.to(dtype))
    assert not same(C.llama(x, w, 1e-6), C.fp32_once(x, w, 1e-6))


@pytest.mark.parametrize("dtype", DTYPES)
def test_gemma_multiplies_by_one_plus_w_once(dtype):
    x, _, w = rows(dtype, 2)
    x32 = x.float()
    out = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)
    assert same(C.gemma(x, w, 1e-6), (out * (1.0 + w.float())).type_as(x))
    offset = (torch.arange(x.shape[-1]) % 64 / 64).to(dtype)  # 1 + offset exact in fp32
    assert same(C.gemma(x, offset, 1e-6), C.fp32_once(x, (1 + offset.float()).to(dtype), 1e-6))


@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_eps_none_is_f_rms_norm_without_eps(dtype):
    x, _, w = rows(dtype, 3)
    x = x * 1e-3  # a mean square near eps, where its value shows
    assert same(C.torch_eps_none(x, w, 1e-2), F.rms_norm(x, (x.shape[-1],), w))
    assert C.default_eps(dtype) == torch.finfo(torch.float32).eps != torch.finfo(dtype).eps


@pytest.mark.parametrize("dtype", DTYPES)
def test_ligers_modes_name_other_contracts(dtype):
    x, _, w = rows(dtype, 4)
    assert same(C.liger(x, w, 1e-6, casting_mode="llama"), C.llama(x, w, 1e-6))
    assert same(C.liger(x, w, 1e-6, casting_mode="gemma"), C.fp32_once(x, w, 1e-6))
    assert same(C.liger(x, w, 1e-6, offset=1.0, casting_mode="gemma"), C.gemma(x, w, 1e-6))
    none = C.liger(x, w, 1e-6, casting_mode="none")
    assert none.dtype == dtype and not same(none, C.llama(x, w, 1e-6))
    with pytest.raises(ValueError, match="casting_mode"):
        C.liger(x, w, 1e-6, casting_mode="fp32")


def test_the_none_mode_sums_in_the_input_dtype():
    x = torch.full((1, 512), 1.0 + 2 ** -7, dtype=torch.bfloat16)  # squares 1 + 2^-6 (rounded)
    w = torch.ones(512, dtype=torch.bfloat16)
    tree = C._tree_sum(x * x)
    assert tree.dtype == torch.bfloat16 and tree.shape == (1, 1)
    assert float(tree) == pytest.approx(512 * (1 + 2 ** -6), rel=2 ** -7)
    assert C.liger(x, w, 0.0, casting_mode="none").dtype == torch.bfloat16


@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_adds_against_the_books_references(dtype):
    x, r, w = rows(dtype, 5)
    y, s = C.stored_sum_once(x, r, w, 1e-6)
    ref_y, ref_s = reference.add_rmsnorm_residual(x, r, w, 1e-6)
    assert same(y, ref_y) and same(s, ref_s)
    y_fi, s_fi = C.flashinfer_fused_add(x, r, w, 1e-6)
    assert same(y_fi, reference.add_rmsnorm(x, r, w, 1e-6)) and same(s_fi, s)
    y_v, s_v = C.vllm_fused_add(x, r, w, 1e-6)
    assert same(s_v, s) and same(y_v, C.llama(s, w, 1e-6))
    assert not same(y_v, y) and not same(y_fi, y)


def test_fp8_divide_and_served_are_chapter_8s_two_contracts():
    x, w = spec.make_inputs(64, 7168, seed=3, device="cpu", zero_block=True)
    for restated, contract in ((fp8.divide, "exact"), (fp8.served, "served")):
        codes, scales = restated(x, w, 1e-6)
        ref_codes, ref_scales = spec.reference(x, w, 1e-6, contract=contract)
        assert spec.differing_codes(codes, ref_codes) == 0 and torch.equal(scales, ref_scales)
    assert spec.differing_codes(fp8.served(x, w, 1e-6)[0], fp8.divide(x, w, 1e-6)[0]) > 0


def test_fp8_conventions_differ_where_they_should():
    x, w = spec.make_inputs(4, 256, seed=4, device="cpu", zero_block=True)
    codes, scales = fp8.divide(x, w, 1e-6)
    te_codes, te_scales = fp8.transformer_engine(x, w, 1e-6)
    assert float(te_scales[0, 0]) == 1.0 and float(scales[0, 0]) == pytest.approx(1e-4 / 448)
    assert float(fp8.divide_floor_1e10(x, w, 1e-6)[1][0, 0]) == pytest.approx(1e-10 / 448)
    fnuz_codes, fnuz_scales = fp8.divide_fnuz(x, w, 1e-6)
    assert fnuz_codes.dtype == torch.float8_e4m3fnuz
    assert float(fnuz_codes.float().abs().max()) == 240.0  # each block's absmax maps to 240
    assert torch.allclose(fnuz_scales[:, 1:], scales[:, 1:] * 448 / 240, rtol=1e-6)
    with pytest.raises(ValueError, match="quantizer"):
        fp8.quantize(x.float(), "round")
