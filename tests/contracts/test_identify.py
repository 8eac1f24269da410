"""identify names each contract's own restatement, the book's kernels and the PyTorch peers; says
where anything else first differs; refuses what it cannot run with a message."""
import pytest
import torch
import torch.nn.functional as F

from fusedrms import contracts, env, registry
from fusedrms.contracts import KernelRaised, conventions as C
from fusedrms.validation import InputError

ON_GPU = env.current().on_gpu


@pytest.mark.parametrize("name", list(contracts.CONTRACTS))
def test_each_contract_is_identified_as_itself_only(name):
    contract = contracts.get(name)
    found = contracts.identify(contract.fn, op=contract.op, device="cpu")
    assert found.matches == [name], str(found)


@pytest.mark.parametrize("name", contracts.names("add_rmsnorm_residual"))
def test_a_y_only_fused_add_is_compared_by_its_y(name):
    fn = contracts.get(name).fn
    found = contracts.identify(lambda x, r, w, eps: fn(x, r, w, eps)[0], op="add_rmsnorm",
                               device="cpu")
    assert found.matches == [name]


def test_ligers_modes_and_f_rms_norm_without_eps():
    for mode, offset, expected in (("llama", 0.0, ["llama"]), ("gemma", 0.0, ["fp32_once"]),
                                   ("gemma", 1.0, ["gemma"]), ("none", 0.0, ["liger_none"])):
        found = contracts.identify(lambda x, w, eps: C.liger(x, w, eps, offset, mode),
                                   device="cpu")
        assert found.matches == expected, (mode, offset, str(found))
    found = contracts.identify(lambda x, w, eps: F.rms_norm(x, (x.shape[-1],), w), device="cpu")
    assert found.matches == ["torch_eps_none"]
    assert found.difference("fp32_once").family == "small"


@pytest.mark.parametrize("name,expected", [
    ("torch.rms_norm", "fp32_once"), ("torch.eager_chain", "vllm_fused_add"),
    ("torch.rms_norm_add", "stored_sum_once"), ("hip.vectorized", "fp32_once"),
    ("capstone.fused", "flashinfer_fused_add"), ("capstone.fused_residual", "stored_sum_once")])
def test_the_books_kernels_and_peers(name, expected):
    found = contracts.identify(name)
    assert found.matches == [expected], str(found)


def test_triton_kernels_in_fp16_and_the_interpreters_bf16():
    found = contracts.identify("triton.multirow")
    assert found.matches_in("fp16") == ["fp32_once"]
    if not ON_GPU:  # the interpreter truncates a cast to bf16 instead of rounding it
        diff = found.difference("fp32_once", "bf16")
        assert found.matches_in("bf16") == [] and diff.ulps == 1 and abs(diff.got) < abs(
            diff.expected)


def test_fp8_kernel_matches_chapter_8s_convention():
    found = contracts.identify("fp8.fused")  # the served contract, told apart from the others
    assert found.dtypes == ("bf16",) and found.matches == ["fp8_served"], str(found)
    assert found.difference("fp8_reciprocal").output == "codes"
    assert found.difference("fp8_divide").output == "codes"
    # TransformerEngine's codes are the served contract's (q = y * (448 / absmax)); its scales not
    assert found.difference("fp8_transformer_engine").output == "scales"
    assert "float8_e4m3fnuz" in found.difference("fp8_divide_fnuz").note


def test_a_difference_says_where_and_by_how_many_ulps():
    def one_off(x, w, eps):
        y = C.llama(x, w, eps)
        y.view(torch.int16)[13, 5] += 3  # three steps up the grid, in the second "small" row
        return y

    found = contracts.identify(one_off, dtypes="fp16", device="cpu")
    assert found.matches == []
    diff = found.difference("llama")
    assert (diff.family, diff.row, diff.col, diff.ulps, diff.count) == ("small", 1, 5, 3, 1)
    assert "small row 1, col 5" in str(diff) and "3 ulp" in str(diff)
    assert found.rows()[1]["fp16"].startswith("3 ulp") and "no contract" in found.verdict()
    assert "fp16" in str(found)


def test_wrong_forms_are_differences_with_a_note():
    found = contracts.identify(lambda x, w, eps: C.fp32_once(x, w, eps).float(), device="cpu")
    assert found.matches == [] and "float32" in found.difference("fp32_once").note
    found = contracts.identify(lambda x, r, w, eps: (C.stored_sum_once(x, r, w, eps)[0],
                                                     x[:, :3]),
                               op="add_rmsnorm_residual", device="cpu")
    diff = found.difference("stored_sum_once")
    assert diff.output == "s" and "(20, 3)" in diff.note


def test_refusals_name_the_argument():
    with pytest.raises(InputError, match="no implementation named"):
        contracts.identify("triton.nope")
    with pytest.raises(InputError, match="has no contracts"):
        contracts.identify("bwd.two_stage")
    with pytest.raises(InputError, match="fp32 is not among"):
        contracts.identify(C.llama, dtypes=["fp32"])
    with pytest.raises(InputError, match="dtypes"):
        contracts.identify(C.llama, dtypes=["fp64x"])
    with pytest.raises(InputError, match="eps"):
        contracts.identify(C.llama, eps=-1.0)
    with pytest.raises(InputError, match="a function"):
        contracts.identify(42)
    with pytest.raises(InputError, match="is for rmsnorm"):
        contracts.identify(C.vllm_fused_add, op="add_rmsnorm_residual", contracts=["llama"])
    with pytest.raises(InputError, match="not add_rmsnorm"):
        contracts.identify("triton.row", op="add_rmsnorm")
    if not ON_GPU:
        with pytest.raises(InputError, match="cannot run on cpu"):
            contracts.identify("liger.rms_norm")


def test_a_kernel_that_raises_is_reported():
    def broken(x, w, eps):
        raise IndexError("offsets out of range")

    with pytest.raises(KernelRaised, match="IndexError.*offsets out of range"):
        contracts.identify(broken, device="cpu")
    with pytest.raises(KernelRaised, match=r"must return \(y, s\)"):
        contracts.identify(lambda x, r, w, eps: x, op="add_rmsnorm_residual", device="cpu")


# ---------------------------------------------------------------- on a GPU

GPU_EXPECTED = {
    "triton.row": "fp32_once", "triton.looped": "fp32_once", "triton.multirow": "fp32_once",
    "hip.block": "fp32_once", "hip.vectorized": "fp32_once", "bwd.forward": "fp32_once",
    "torch.rms_norm": "fp32_once", "torch.compile": "fp32_once",
    "capstone.fused": "flashinfer_fused_add", "capstone.fused_residual": "stored_sum_once",
    "capstone.fused_residual_in_place": "stored_sum_once", "bwd.add_forward": "stored_sum_once",
    "torch.eager_chain": "vllm_fused_add", "torch.rms_norm_add": "stored_sum_once",
    "torch.compile_add": "flashinfer_fused_add",
    # Inductor may drop a cast to bf16 that is followed by one back to fp32
    # (emulate_precision_casts is off); its CPU code keeps it, and so matches the book's
    "torch.compile_residual": ("stored_sum_once", "flashinfer_fused_add"),
    "fp8.fused": "fp8_served", "fp8.naive": "fp8_served",
    "liger.rms_norm": "llama", "liger.fused_add_rms_norm": "vllm_fused_add",
    "flashinfer.rms_norm": "fp32_once", "flashinfer.fused_add_rmsnorm": "flashinfer_fused_add",
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(GPU_EXPECTED))
def test_gpu_kernels_and_peers_match_their_contract_in_every_dtype(name):
    try:
        found = contracts.identify(name, device="cuda")
    except KernelRaised as err:
        if "not importable" in str(err) or "PeerMissing" in str(err):
            pytest.skip(str(err))
        raise
    expected = GPU_EXPECTED[name]
    expected = (expected,) if isinstance(expected, str) else expected
    assert len(found.matches) == 1 and found.matches[0] in expected, str(found)


@pytest.mark.gpu
def test_gpu_a_readers_function_and_the_cpu_agree():
    on_gpu = contracts.identify(C.llama, device="cuda")
    on_cpu = contracts.identify(C.llama, device="cpu")
    assert on_gpu.matches == on_cpu.matches == ["llama"]
    assert str(on_gpu).replace("cuda", "cpu") == str(on_cpu)


def test_every_identifiable_kernel_has_a_gpu_expectation():
    names = {i.name for i in registry.impls() if i.op in contracts.CONTRACT_OP}
    assert names - {"hip.serial", "hip.shuffle", "hip.unfused", "hip.vectorized_unfused"} \
        <= set(GPU_EXPECTED)
