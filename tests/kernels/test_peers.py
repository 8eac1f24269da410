"""fusedrms.kernels.peers: the PyTorch routes the kernels are measured against."""
import pytest
import torch

from fusedrms import checks, env, reference, registry, validation
from fusedrms.kernels import peers
from fusedrms.validation import InputError

ENV = env.current()


def inputs(rows=5, cols=96, dtype=torch.float32, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g).to(dtype).to(device)
    r = torch.randn(rows, cols, generator=g).to(dtype).to(device)
    w = (1 + 0.1 * torch.randn(cols, generator=g)).to(dtype).to(device)
    return x, r, w


def test_peers_are_registered_as_library_routes():
    names = {i.name: i for i in registry.impls()}
    for name, op in [("torch.rms_norm", "rmsnorm"), ("torch.compile", "rmsnorm"),
                     ("torch.eager_chain", "add_rmsnorm"), ("torch.rms_norm_add", "add_rmsnorm"),
                     ("torch.compile_add", "add_rmsnorm")]:
        assert names[name].op == op and names[name].kernel is False
    for name in ("torch.compile", "torch.compile_add"):
        assert names[name].devices == ("cuda",) and names[name].gpu_only_reason


def test_rms_norm_peer_matches_the_float64_reference():
    x, _, w = inputs()
    expected = reference.rmsnorm(x, w, 1e-5, accum=torch.float64, out_dtype=torch.float64)
    assert checks.allclose(peers.rms_norm(x, w, 1e-5), expected)


@pytest.mark.parametrize("fn", [peers.eager_chain, peers.rms_norm_add])
def test_add_peers_match_the_float64_reference(fn):
    x, r, w = inputs()
    expected = reference.add_rmsnorm(x, r, w, 1e-5, accum=torch.float64, out_dtype=torch.float64)
    assert checks.allclose(fn(x, r, w, 1e-5), expected)


def test_eager_chain_rounds_its_intermediates():
    """In bf16 the chain rounds t = x + r and n before scaling: close, but not the fused result."""
    x, r, w = inputs(rows=64, cols=512, dtype=torch.bfloat16)
    exact = reference.add_rmsnorm(x, r, w, 1e-5, accum=torch.float64, out_dtype=torch.float64)
    chain = peers.eager_chain(x, r, w, 1e-5)
    assert checks.relative_l2(chain, exact) < 1e-2
    fused = reference.add_rmsnorm(x, r, w, 1e-5)
    assert not torch.equal(chain, fused)


def test_peers_validate_their_inputs():
    x, r, w = inputs()
    with pytest.raises(InputError, match="residual has shape"):
        peers.eager_chain(x, r[:, :10], w)
    with pytest.raises(InputError, match="one weight per column"):
        peers.rms_norm_add(x, r, w[:5])
    with pytest.raises(InputError, match="dtype"):
        peers.rms_norm(x.to(torch.int32), w)


def test_static_compile_keeps_one_compiled_function_per_shape():
    sc = peers.StaticCompiled(reference.rmsnorm, "test")
    a = torch.zeros(4, 8)
    b = torch.zeros(4, 16)
    w8, w16 = torch.ones(8), torch.ones(16)
    fa = sc.get(a, w8, eps=1e-5)  # torch.compile is lazy: nothing compiles until called
    assert sc.get(a, w8, eps=1e-5) is fa
    assert sc.get(b, w16, eps=1e-5) is not fa
    assert sc.get(a.half(), w8.half(), eps=1e-5) is not fa
    assert len(sc.compiled) == 3
    sc.reset()
    assert not sc.compiled


def test_fresh_copy_has_its_own_code_object_and_same_result():
    copy = peers._fresh_copy(reference.rmsnorm)
    assert copy.__code__ is not reference.rmsnorm.__code__
    x, _, w = inputs()
    assert torch.equal(copy(x, w, 1e-5), reference.rmsnorm(x, w, 1e-5))


def test_liger_status_says_what_happened():
    status = peers.liger_status()
    try:
        import liger_kernel  # noqa: F401
        assert "registered as liger.rms_norm" in status
    except ImportError:
        assert "not importable" in status and "pip install liger-kernel" in status
        # registered anyway (GPU only), so a benchmark lists it as missing rather than omitting it
        assert registry.get("liger.rms_norm").devices == ("cuda",)
        with pytest.raises(peers.PeerMissing, match="not importable"):
            peers.liger_rms_norm(*inputs()[::2])
        x, r, w = inputs()
        with pytest.raises(peers.PeerMissing, match="not importable"):
            peers.liger_fused_add_rms_norm(x, r, w)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiled_peers_on_gpu(dtype):
    x, r, w = inputs(rows=33, cols=257, dtype=dtype, device="cuda")
    exp = reference.rmsnorm(x, w, 1e-5, accum=torch.float64, out_dtype=torch.float64)
    assert checks.allclose(peers.compiled_rmsnorm(x, w, 1e-5), exp)
    exp = reference.add_rmsnorm(x, r, w, 1e-5, accum=torch.float64, out_dtype=torch.float64)
    assert checks.allclose(peers.compiled_add_rmsnorm(x, r, w, 1e-5), exp)


# ---------------------------------------------------------------- issue 17: peers validate too

@pytest.mark.parametrize("eps", ["1e-5", None, -1.0, float("nan"), float("inf"), 10 ** 400, True])
@pytest.mark.parametrize("name", ["rms_norm", "compiled_rmsnorm", "eager_chain", "rms_norm_add",
                                  "compiled_add_rmsnorm"])
def test_peers_refuse_a_bad_eps_before_torch_sees_it(name, eps):
    x, w = torch.randn(3, 8), torch.ones(8)
    args = (x, w) if name in ("rms_norm", "compiled_rmsnorm") else (x, x.clone(), w)
    with pytest.raises(validation.InputError, match="eps"):
        getattr(peers, name)(*args, eps)


@pytest.mark.parametrize("name", ["rms_norm", "eager_chain", "rms_norm_add"])
def test_peers_refuse_a_scalar_x(name):
    x = torch.tensor(1.0)
    args = (x, torch.ones(1)) if name == "rms_norm" else (x, x.clone(), torch.ones(1))
    with pytest.raises(validation.InputError, match="scalar"):
        getattr(peers, name)(*args)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_eager_chain_returns_x_dtype_whatever_the_weight_dtype(dtype):
    x, r, w = torch.randn(3, 8).to(dtype), torch.randn(3, 8).to(dtype), torch.randn(8)
    y = peers.eager_chain(x, r, w)
    assert y.dtype == dtype
    expected = (peers.F.rms_norm(x + r, (8,), None, 1e-5) * w).to(dtype)
    assert torch.equal(y, expected)


@pytest.mark.gpu
def test_gpu_flashinfer_and_liger_peers_compute_the_op_or_say_missing():
    x, r, w = inputs(rows=64, cols=4096, dtype=torch.bfloat16, device="cuda")
    y_ref, s_ref = reference.add_rmsnorm_residual(x, r, w, 1e-5, accum=torch.float64)
    for fn in (peers.flashinfer_fused_add_rmsnorm, peers.liger_fused_add_rms_norm):
        try:
            y, s = fn(x.clone(), r.clone(), w, 1e-5)
        except peers.PeerMissing as e:
            assert "not" in str(e)
            continue
        assert torch.equal(s, s_ref.to(s.dtype)) or checks.allclose(s, s_ref.double()).ok
        assert checks.allclose(y, y_ref).ok


def test_flashinfer_fused_add_width_follows_the_gpus_shared_memory(monkeypatch):
    """norm.cuh asks for (32 + cols) fp32 of shared memory per block: on an H200 (227 KiB opt-in)
    65,536 columns do not fit, and the harness lists that peer's case as unsupported, with why."""
    from fusedrms.kernels import peers_flashinfer as fi
    from fusedrms.measure import harness

    monkeypatch.setattr(fi, "_optin_shared_memory", lambda: 232448)
    assert fi.fused_add_max_cols() == 58080 and fi.fused_add_max_cols("cpu") is None
    impl = registry.get("flashinfer.fused_add_rmsnorm")
    assert impl.supports("cuda", torch.bfloat16, 32768)
    assert not impl.supports("cuda", torch.bfloat16, 65536)
    run, not_run = harness.expand([harness.Sweep(
        "t", "add_rmsnorm_residual", (16,), (32768, 65536), ("bf16",), modes=("rotating",),
        impls=("flashinfer.fused_add_rmsnorm",))])
    assert [c["cols"] for c in run] == [32768]
    assert [r["cols"] for r in not_run] == [65536]
    assert "over its limit of 58080 (it keeps the row in shared memory" in not_run[0]["status"]
    monkeypatch.setattr(fi, "_optin_shared_memory", lambda: None)
    assert impl.supports("cuda", torch.bfloat16, 65536)  # unknown: no limit is claimed


def test_flashinfer_launches_with_pdl_where_its_python_api_would(monkeypatch):
    """FlashInfer's Python API turns programmatic dependent launch on by default from compute
    capability 9 (device_support_pdl); the header build launches its kernels the same way, so the
    peer timed is the one a reader calls."""
    from fusedrms.kernels import peers_flashinfer as fi

    assert not fi.launches_with_pdl(torch.device("cpu"))
    for capability, pdl in (((9, 0), True), ((10, 0), True), ((8, 9), False), ((8, 0), False)):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None, c=capability: c)
        monkeypatch.setattr(env, "_CAPABILITY", {})  # a new GPU
        assert fi.launches_with_pdl(torch.device("cuda", 0)) is pdl, capability
    monkeypatch.setattr(torch.version, "hip", "6.4")  # ROCm's FlashInfer has no PDL
    assert not fi.launches_with_pdl(torch.device("cuda", 0))


@pytest.mark.gpu
def test_gpu_flashinfer_launches_as_its_python_api_and_computes_the_op():
    """With PDL on (H100, H200) FlashInfer's fused op, timed back to back in a CUDA graph, still
    computes what it did launched plainly: each call waits for the one before."""
    from fusedrms.kernels import peers_flashinfer as fi

    try:
        fi.load()
    except RuntimeError as e:
        pytest.skip(str(e))
    x, r = (torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    w = torch.rand(4096, device="cuda", dtype=torch.bfloat16) + 0.5
    xs, rs = x.clone(), r.clone()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fi.fused_add_rmsnorm(xs.clone(), rs.clone(), w)  # build and load outside the capture
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(3):  # each call adds onto the residual the call before wrote
                fi.fused_add_rmsnorm(xs, rs, w)
    torch.cuda.current_stream().wait_stream(stream)
    graph.replay()
    torch.cuda.synchronize()
    x_one, r_one = x.clone(), r.clone()
    for _ in range(3):  # one call at a time: nothing to overlap
        fi.fused_add_rmsnorm(x_one, r_one, w)
        torch.cuda.synchronize()
    assert torch.equal(rs, r_one) and torch.equal(xs, x_one)
    assert not torch.equal(r_one, (x.float() + r.float()).to(torch.bfloat16))  # three calls ran


@pytest.mark.gpu
def test_gpu_flashinfer_fused_add_refuses_a_row_wider_than_shared_memory_and_the_gpu_goes_on():
    from fusedrms.kernels import peers_flashinfer as fi

    widest = fi.fused_add_max_cols()
    if widest is None or not ENV.on_gpu:  # (ENV.device is a torch.device: never == "cuda")
        pytest.skip("the GPU's shared-memory limit is not known here")
    cols = (widest // 1024 + 1) * 1024
    x, r, w = inputs(rows=2, cols=cols, dtype=torch.bfloat16, device="cuda")
    try:
        fi.load()
    except RuntimeError as e:
        pytest.skip(str(e))
    with pytest.raises(InputError, match=f"x has {cols} columns; .* at most {widest} on this GPU"):
        fi.fused_add_rmsnorm(x, r, w)
    y, s = fi.fused_add_rmsnorm(x[:, :1024].contiguous(), r[:, :1024].contiguous(), w[:1024])
    torch.cuda.synchronize()
    assert torch.isfinite(y.float()).all()


def test_forward_only_peers_refuse_inputs_that_require_grad():
    """Issue 26: FlashInfer's kernels (and Liger's forward alone) return outputs with no grad_fn."""
    from fusedrms.kernels import peers_flashinfer as fi

    x, r, w = torch.randn(2, 256), torch.randn(2, 256), torch.ones(256)
    xg = x.clone().requires_grad_()
    for call, kernel in ((lambda: fi.rmsnorm(xg, w), "flashinfer.rms_norm"),
                         (lambda: fi.fused_add_rmsnorm(xg, r, w), "flashinfer.fused_add_rmsnorm"),
                         (lambda: fi.fused_add_rmsnorm_fp8_block(xg, r, w),
                          "flashinfer.fused_add_rmsnorm_fp8_block")):
        with pytest.raises(InputError, match=f"x requires grad, but {kernel} is forward only"):
            call()
    if peers._load_liger() is not None:
        with pytest.raises(InputError, match="x requires grad, but liger.fused_add_rms_norm"):
            peers.liger_fused_add_rms_norm(xg.to(ENV.device), r.to(ENV.device),
                                           w.to(ENV.device))
