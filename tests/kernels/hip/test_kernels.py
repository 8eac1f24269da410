"""Every HIP kernel against the float64 reference: on the CPU runtime here, on the GPU when present."""
import re

import pytest
import torch

from fusedrms import checks, reference, registry, validation
from fusedrms.kernels.hip import build, kernels

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
BOUNDARY = [(3, 13), (33, 257), (1, 1), (2, 4)]


def _inputs(rows, cols, dtype, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed + rows * 1000 + cols)
    x = (torch.randn(rows, cols, generator=g) * 3).to(dtype).to(device)
    w = torch.randn(cols, generator=g).to(dtype).to(device)
    return x, w


def _check(y, x, w, eps=1e-5):
    report = checks.allclose(y, reference.rmsnorm(x, w, eps, accum=torch.float64))
    assert report.ok, str(report)


@pytest.mark.parametrize("variant", kernels.VARIANTS)
@pytest.mark.parametrize("shape", BOUNDARY, ids=lambda s: f"{s[0]}x{s[1]}")
def test_fp32_boundary_shapes_default_block(variant, shape):
    x, w = _inputs(*shape, torch.float32)
    _check(kernels.rmsnorm(x, w, 1e-5, variant=variant), x, w)


@pytest.mark.parametrize("variant", kernels.VARIANTS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_16_bit_formats(variant, dtype):
    x, w = _inputs(33, 257, dtype)
    _check(kernels.rmsnorm(x, w, 1e-5, variant=variant, block_size=32), x, w)


@pytest.mark.parametrize("block_size", [1, 2, 32, 512])
def test_block_sizes_smaller_and_larger_than_the_row(block_size):
    x, w = _inputs(3, 13, torch.float32)
    for variant in ("block", "shuffle"):
        _check(kernels.rmsnorm(x, w, variant=variant, block_size=block_size), x, w)


SHUFFLE_VARIANTS = ["shuffle", "vectorized", "unfused", "vectorized_unfused"]  # block_sum_shuffle


@pytest.mark.parametrize("lanes", [32, 64], ids=lambda n: f"{n}-lane")
@pytest.mark.parametrize("variant", SHUFFLE_VARIANTS)
def test_shuffle_kernels_on_32_and_64_lane_warps(variant, lanes):
    """NVIDIA warps and RDNA wavefronts have 32 lanes, CDNA wavefronts 64: the shuffle finish must
    be right for both, with blocks smaller than, equal to and larger than a warp."""
    defines = {"FUSEDRMS_CPU_WARP": lanes}
    assert kernels.warp_lanes("cpu", defines) == lanes
    x, w = _inputs(5, 264, torch.float32)
    for block in (16, 32, 64, 128, 256):
        y = kernels.rmsnorm(x, w, variant=variant, block_size=block, defines=defines)
        _check(y, x, w)


def test_warp_size_is_what_the_kernels_read_on_the_cpu_runtime():
    """Device code takes its lane count from warpSize, as on HIP and CUDA; a kernel that reads it
    builds on the CPU runtime and sees the runtime's lanes."""
    text = build.source_text()
    assert "? (int)blockDim.x : warpSize;" in text
    # y = warpSize in every element: the shuffle kernel's row scale replaced by the lane count
    probe, found = re.subn(r"const float r = [^;\n]*block_sum_shuffle\(sum_sq\)[^;\n]*;",
                           "const float r = (float)warpSize + 0.0f * block_sum_shuffle(sum_sq);", text, count=1)
    assert found == 1
    x = torch.ones(1, 8)
    for lanes in (32, 64):
        y = kernels.rmsnorm(x, torch.ones(8), variant="shuffle", block_size=8, text=probe,
                            defines={"FUSEDRMS_CPU_WARP": lanes})
        assert torch.equal(y, torch.full((1, 8), float(lanes)))


def test_vectorized_uses_16_byte_packs_and_falls_back_when_it_cannot():
    x, w = _inputs(4, 64, torch.float32)
    assert kernels.vector_width(x, w) == 4
    xh, wh = _inputs(4, 64, torch.bfloat16)
    assert kernels.vector_width(xh, wh) == 8
    odd_x, odd_w = _inputs(4, 13, torch.float32)  # 13 columns: not a multiple of 4
    assert kernels.vector_width(odd_x, odd_w) == 1
    _check(kernels.rmsnorm(odd_x, odd_w, variant="vectorized", block_size=16), odd_x, odd_w)
    big, w65 = _inputs(4, 65, torch.float32)
    shifted = big[:, 1:]  # rows start 4 bytes past a 16-byte boundary and the stride is 65 floats
    assert shifted.stride(0) == 65 and kernels.vector_width(shifted, w65[1:].contiguous()) == 1
    _check(kernels.rmsnorm(shifted, w65[1:].contiguous(), variant="vectorized", block_size=16),
           shifted, w65[1:])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_vectorized_unfused_packs_16_bytes_and_falls_back_when_it_cannot(dtype):
    x, w = _inputs(6, 64, dtype)
    assert kernels.vector_width(x, w) == 16 // x.element_size()
    _check(kernels.rmsnorm(x, w, variant="vectorized_unfused", block_size=32), x, w)
    for cols in (13, 68):  # not a multiple of the pack (68 is one for fp32 only), then unaligned rows
        xo, wo = _inputs(3, cols, dtype)
        _check(kernels.rmsnorm(xo, wo, variant="vectorized_unfused", block_size=16), xo, wo)
    base, w65 = _inputs(4, 65, dtype)
    shifted, ws = base[:, 1:], w65[1:].contiguous()
    assert kernels.vector_width(shifted, ws) == 1
    _check(kernels.rmsnorm(shifted, ws, variant="vectorized_unfused", block_size=16), shifted, ws)


def test_row_stride_and_leading_dimensions():
    base, w = _inputs(6, 40, torch.float32)
    x = base[:, :32].reshape(2, 3, 32)  # strided rows, three dimensions
    w = w[:32].contiguous()
    for variant in kernels.VARIANTS:
        y = kernels.rmsnorm(x, w, variant=variant, block_size=16)
        assert y.shape == x.shape
        _check(y, x, w)


def test_special_values():
    x = torch.zeros(2, 8)
    w = torch.ones(8)
    for variant in kernels.VARIANTS:
        assert torch.equal(kernels.rmsnorm(x, w, variant=variant, block_size=8), torch.zeros(2, 8))
    x = torch.full((1, 8), float("nan"))
    assert torch.isnan(kernels.rmsnorm(x, w, variant="block", block_size=8)).all()


def test_inputs_are_validated_with_clear_messages():
    x, w = _inputs(3, 13, torch.float32)
    with pytest.raises(validation.InputError, match="power of two"):
        kernels.rmsnorm(x, w, variant="block", block_size=96)
    with pytest.raises(validation.InputError, match="variant"):
        kernels.rmsnorm(x, w, variant="warp")
    with pytest.raises(validation.InputError, match="dtype"):
        kernels.rmsnorm(x.double(), w.double())
    with pytest.raises(validation.InputError, match="w is"):
        kernels.rmsnorm(x, w.half())
    with pytest.raises(validation.InputError, match="shape"):
        kernels.rmsnorm(x, w[:5])
    with pytest.raises(validation.InputError, match="block_size >="):
        kernels.rmsnorm(torch.zeros(1, 100), torch.ones(100), variant="vectorized", block_size=2)
    with pytest.raises(validation.InputError, match="at most 32768"):
        kernels.rmsnorm(torch.zeros(1, 32769), torch.ones(32769), variant="vectorized")


@pytest.mark.parametrize("defines,match", [
    ([1], "defines must be a dict"), ({1: 2}, "not a macro name"),
    ({"A B": 1}, "not a macro name"), ({"FUSEDRMS_CPU_WARP": [64]}, "must be a number"),
    ({"FUSEDRMS_CPU_WARP": True}, "write 1 or 0"), ({"X": "1\n#include"}, "one line"),
])
def test_build_options_are_validated_naming_the_argument(defines, match):
    """Issue 26: defines=[1] ended in an AttributeError deep in the build."""
    x, w = _inputs(3, 13, torch.float32)
    with pytest.raises(validation.InputError, match=match):
        kernels.rmsnorm(x, w, defines=defines)
    with pytest.raises(validation.InputError, match=match):
        kernels.warp_lanes("cpu", defines=defines)
    with pytest.raises(validation.InputError, match="text must be the kernel source"):
        kernels.rmsnorm(x, w, text=b"__global__")


def test_forward_only_kernels_refuse_inputs_that_require_grad():
    x, w = _inputs(3, 13, torch.float32)
    with pytest.raises(validation.InputError, match="x requires grad, but hip.block is forward "
                                                    "only.*rmsnorm_backward"):
        kernels.rmsnorm(x.clone().requires_grad_(), w)
    with pytest.raises(validation.InputError, match="w requires grad"):
        kernels.rmsnorm_shuffle(x, torch.nn.Parameter(w.clone()))
    with torch.no_grad():
        _check(kernels.rmsnorm(x.clone().requires_grad_(), w), x, w)


def test_registered_for_verify_and_bench():
    names = {i.name for i in registry.impls("rmsnorm") if i.route == "hip"}
    assert names == {f"hip.{v}" for v in kernels.VARIANTS}
    impl = registry.get("hip.block")
    x, w = _inputs(3, 13, torch.bfloat16)
    assert impl.supports("cpu", torch.bfloat16, 13)
    _check(impl.fn(x, w, 1e-5), x, w)


BARRIER_AFTER_WRITE = "    __syncthreads();  // every partial sum is written before anyone reads one\n"
TREE_STEP = ("        if (tid < stride) partial[tid] += partial[tid + stride];\n"
             "        __syncthreads();  // all threads, also those that added nothing\n")


def test_the_cpu_runtime_reports_a_missing_barrier_as_a_race():
    text = build.source_text()
    assert BARRIER_AFTER_WRITE in text
    x, w = _inputs(1, 4, torch.float32)
    for _ in range(5):  # the same words however the OS schedules the threads
        with pytest.raises(kernels.KernelError, match="race") as err:
            kernels.rmsnorm(x, w, variant="block", block_size=4,
                            text=text.replace(BARRIER_AFTER_WRITE, ""))
        # thread 2 writes its partial sum while thread 0 reads it for the tree's first step
        assert ("shared-memory race in block 0 on word 2: thread 2 writes it and thread 0 reads "
                "it with no __syncthreads() between them (after barrier #0).") in str(err.value)


def test_a_race_report_names_a_second_thread_when_the_writer_also_read():
    """Thread 0 reads a word after thread 1 did, then writes it: the race is with thread 1."""
    text = build.source_text()
    race = text.replace(TREE_STEP, "        if (tid < stride) partial[tid] += partial[tid + stride];\n", 1)
    x, w = _inputs(1, 8, torch.float32)
    for block in (4, 8):
        with pytest.raises(kernels.KernelError, match="race") as err:
            kernels.rmsnorm(x, w, variant="block", block_size=block, text=race)
        pair = re.search(r"thread (\d+) writes it and thread (\d+) reads it|threads (\d+) and "
                         r"(\d+) both write it", str(err.value))
        assert pair and len({g for g in pair.groups() if g}) == 2, str(err.value)


def test_the_cpu_runtime_turns_a_divergent_barrier_into_an_error():
    text = build.source_text()
    assert TREE_STEP in text
    divergent = text.replace(TREE_STEP, "        if (tid >= stride) return;\n"
                                        "        partial[tid] += partial[tid + stride];\n"
                                        "        __syncthreads();\n")
    x, w = _inputs(1, 4, torch.float32)
    # reported once no thread runs: the same words whichever thread the OS scheduled first
    for _ in range(5):
        with pytest.raises(kernels.KernelError, match="divergent") as err:
            kernels.rmsnorm(x, w, variant="block", block_size=4, text=divergent)
        assert ("divergent __syncthreads(): threads 2-3 of block 0 returned while threads 0-1 "
                "wait at __syncthreads() #2.") in str(err.value)


def test_the_cpu_runtime_names_the_lanes_that_left_a_shuffle():
    text = build.source_text()
    call = "    const float r = row_scale(block_sum_shuffle(sum_sq), cols, eps);\n"
    assert call in text
    divergent = text.replace(call, "    if (threadIdx.x % warpSize >= 16) return;\n" + call, 1)
    x, w = _inputs(1, 64, torch.float32)
    for _ in range(3):
        with pytest.raises(kernels.KernelError) as err:
            kernels.rmsnorm(x, w, variant="shuffle", block_size=64, text=divergent)
        assert ("divergent warp shuffle: threads 16-31, 48-63 of block 0 returned while threads "
                "0-15, 32-47 of the same warp(s) wait in a shuffle.") in str(err.value)


# ---- on the GPU ----

@pytest.mark.gpu
@pytest.mark.parametrize("variant", kernels.VARIANTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(3, 13), (33, 257), (1024, 4096), (7, 8192)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
def test_gpu_matches_the_reference(variant, dtype, shape):
    x, w = _inputs(*shape, dtype, device="cuda")
    _check(kernels.rmsnorm(x, w, 1e-5, variant=variant), x, w)


@pytest.mark.gpu
def test_gpu_runs_on_the_current_torch_stream():
    x, w = _inputs(512, 4096, torch.float32, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for variant in kernels.VARIANTS:
            x2 = x * 2  # produced on the side stream: the kernel must run after it, on that stream
            y = kernels.rmsnorm(x2, w, variant=variant)
            side.synchronize()
            _check(y, x2, w)


@pytest.mark.gpu
def test_gpu_and_cpu_runtime_agree():
    x, w = _inputs(33, 257, torch.float32)
    for variant in kernels.VARIANTS:
        cpu = kernels.rmsnorm(x, w, variant=variant)
        gpu = kernels.rmsnorm(x.cuda(), w.cuda(), variant=variant).cpu()
        assert checks.allclose(gpu, cpu.double()).ok


def test_the_fp32_allowance_is_an_estimate_that_a_serial_sum_exceeds():
    """Chapter 1: (sqrt(n) + 8) u_32 is a statistical estimate, not a bound. Two outlier columns
    make every later square round against a large sum, and those errors do not cancel: the
    correct one-thread-per-row kernel fails the fp32 check by more than a hundred ulps, while
    the block kernel (a short run per thread, then a tree) passes."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(8, 4096, generator=g)
    x[:, 0], x[:, 1] = 3000.0, -2000.0
    w = torch.ones(4096)
    expected = reference.rmsnorm(x, w, 1e-5, accum=torch.float64)
    serial = checks.allclose(kernels.rmsnorm(x, w, 1e-5, variant="serial"), expected)
    block = checks.allclose(kernels.rmsnorm(x, w, 1e-5, variant="block", block_size=64), expected)
    assert not serial.ok and serial.max_ulp > 100, str(serial)
    assert block.ok and block.max_ulp < 10, str(block)
