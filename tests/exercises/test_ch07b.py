"""Chapter 7b's exercise: a kernel that matches the llama contract bit for bit, graded by identify.
Right answers in several forms pass; the typical mistakes get a hint; malformed answers a message."""
import math

import pytest
import torch
import triton
import triton.language as tl

from fusedrms.exercises import ch07b

EX = ch07b.llama_kernel
MALFORMED = [None, "abc", float("nan"), [1, 2, 3], {"a": 1}, math.inf, True, -5, "1/0"]


def test_the_solution_passes():
    fb = EX.check(EX.solution)
    assert fb.ok and "llama bit for bit" in fb.message and "fp32_once" in fb.message


@triton.jit
def _fp32_product_kernel(x_ptr, w_ptr, y_ptr, cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    col = tl.arange(0, BLOCK)
    mask = col < cols
    x = tl.load(x_ptr + row * cols + col, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / cols + eps)  # not rsqrt: the same contract
    normed = (x * rstd).to(y_ptr.dtype.element_ty).to(tl.float32)
    w = tl.load(w_ptr + col, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * cols + col, (normed * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _looped_kernel(x_ptr, w_ptr, y_ptr, cols, eps, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros((CHUNK,), dtype=tl.float32)
    for start in range(0, cols, CHUNK):
        col = start + tl.arange(0, CHUNK)
        x = tl.load(x_ptr + row * cols + col, mask=col < cols, other=0.0).to(tl.float32)
        acc += x * x
    rstd = tl.rsqrt(tl.sum(acc, axis=0) / cols + eps)
    for start in range(0, cols, CHUNK):
        col = start + tl.arange(0, CHUNK)
        mask = col < cols
        x = tl.load(x_ptr + row * cols + col, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + col, mask=mask, other=0.0)
        tl.store(y_ptr + row * cols + col, (x * rstd).to(y_ptr.dtype.element_ty) * w, mask=mask)


def _fp32_product(x, w, eps=1e-6):
    y = torch.empty_like(x)
    cols = x.shape[-1]
    _fp32_product_kernel[(x.shape[0],)](x, w, y, cols, eps, BLOCK=triton.next_power_of_2(cols))
    return y


def _looped(x, w, eps=1e-6):
    y = torch.empty_like(x)
    _looped_kernel[(x.shape[0],)](x, w, y, x.shape[-1], eps, CHUNK=16)
    return y


@triton.jit
def _upcast_input_kernel(x_ptr, w_ptr, y_ptr, cols, eps, BLOCK: tl.constexpr):
    col = tl.arange(0, BLOCK)
    mask = col < cols
    x = tl.load(x_ptr + col, mask=mask, other=0.0)  # fp32 already: the launcher upcast it
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / cols + eps)
    w = tl.load(w_ptr + col, mask=mask, other=0.0)
    tl.store(y_ptr + col, (x * rstd).to(y_ptr.dtype.element_ty) * w, mask=mask)


def _upcast_then_a_launch_per_row(x, w, eps=1e-6):
    """x.float() in PyTorch, then one launch per row on views: x is read through a copy."""
    x32 = x.float()
    y = torch.empty_like(x)
    block = triton.next_power_of_2(x.shape[-1])
    for row in range(x.shape[0]):
        _upcast_input_kernel[(1,)](x32[row], w, y[row], x.shape[-1], eps, BLOCK=block)
    return y


@pytest.mark.parametrize("answer", [_fp32_product, _looped, _upcast_then_a_launch_per_row],
                         ids=["fp32 product", "two passes", "upcast, a launch per row"])
def test_other_right_forms_pass(answer):
    assert EX.check(answer).ok


@pytest.mark.parametrize("label", list(EX.mistakes))
def test_typical_mistakes_get_a_hint(label):
    fb = EX.check(EX.mistakes[label])
    assert not fb.ok, label
    assert fb.hint or len(fb.message) > 20, label


def test_the_hints_name_the_mistake():
    text = {k: str(EX.check(v)) for k, v in EX.mistakes.items()}
    assert "fp32_once" in text["one rounding (the book's convention)"]
    assert "(1 + w)" in text["(1 + w), Gemma's weight"]
    assert "eps = 1e-06" in text["a constant eps"]
    assert "ulp" in text["rounds r, then x * r in fp16"]
    assert "float32" in text["y in fp32"]
    assert "no Triton kernel" in text["the contract's own function"]
    assert "launcher" in text["the kernel instead of the launcher"] or "launches" in \
        text["the kernel instead of the launcher"]


def test_a_kernel_that_raises_gets_a_message():
    def broken(x, w, eps):
        raise IndexError("offsets out of range")

    fb = EX.check(broken)
    assert not fb.ok and "IndexError" in fb.message and not fb.error


@pytest.mark.parametrize("bad", MALFORMED, ids=repr)
def test_malformed_answers_get_a_message_not_a_traceback(bad):
    fb = EX.check(bad)
    assert not fb.ok and fb.message and not fb.error


def test_a_function_of_the_wrong_arity_is_named():
    fb = EX.check(lambda x, w: x)
    assert not fb.ok and "three arguments" in fb.message


def test_generated_answers_get_a_message_not_a_traceback():
    """The property test over every chapter's checkers, for this one (its module name is not
    chNN)."""
    from hypothesis import HealthCheck, given, settings

    from test_properties import ANSWERS

    @settings(derandomize=True, deadline=None, database=None, max_examples=40,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(answer=ANSWERS)
    def check(answer):
        fb = EX.check(answer)
        assert not fb.ok and fb.message and not fb.error, (answer, fb)

    check()


def test_page_solution_is_the_checked_solution():
    """The dropdown on the page shows exactly the code the tests accept (no drifting copy)."""
    from pathlib import Path

    import nbformat

    from fusedrms.viz import file_section

    nb = nbformat.read(Path(__file__).resolve().parents[2] / "chapters" / "07b_contracts.ipynb", 4)
    section = file_section(ch07b.__file__, "solution")
    assert any(c.cell_type == "markdown" and section in c.source for c in nb.cells)
    assert "ch07b.llama_kernel.check(answer)" in "".join(c.source for c in nb.cells)


# ---- the answer runs in the grader's child, audited, on rows narrower than their block ----

@triton.jit
def _unmasked_kernel(x_ptr, w_ptr, y_ptr, cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    col = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * cols + col).to(tl.float32)  # no mask: fine only when cols == BLOCK
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / cols + eps)
    normed = (x * rstd).to(y_ptr.dtype.element_ty)
    tl.store(y_ptr + row * cols + col, normed * tl.load(w_ptr + col))


@triton.jit
def _off_by_one_kernel(x_ptr, w_ptr, y_ptr, cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    col = tl.arange(0, BLOCK)
    mask = col <= cols  # one column too many
    x = tl.load(x_ptr + row * cols + col, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / cols + eps)
    normed = (x * rstd).to(y_ptr.dtype.element_ty)
    w = tl.load(w_ptr + col, mask=mask, other=0.0)
    tl.store(y_ptr + row * cols + col, normed * w, mask=mask)


@triton.jit
def _idle_kernel(x_ptr, BLOCK: tl.constexpr):
    pass


def _unmasked(x, w, eps=1e-6):
    y = torch.empty_like(x)
    cols = x.shape[-1]
    _unmasked_kernel[(x.shape[0],)](x, w, y, cols, eps, BLOCK=triton.next_power_of_2(cols))
    return y


def _off_by_one(x, w, eps=1e-6):
    y = torch.empty_like(x)
    cols = x.shape[-1]
    _off_by_one_kernel[(x.shape[0],)](x, w, y, cols, eps, BLOCK=triton.next_power_of_2(cols))
    return y


def _shape_of_identify(x, w, eps=1e-6):
    y = torch.empty_like(x)
    _unmasked_kernel[(18,)](x, w, y, 64, eps, BLOCK=64)  # identify's 18 x 64, written in
    return y


def _idle_launch_then_the_contract(x, w, eps=1e-6):
    from fusedrms import contracts

    _idle_kernel[(1,)](x, BLOCK=1)  # a kernel launched, the values from PyTorch
    return contracts.get("llama").fn(x, w, eps)


@triton.jit
def _copy_kernel(a_ptr, y_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + i, tl.load(a_ptr + i, mask=i < n, other=0.0), mask=i < n)


def _the_contract_copied_by_a_kernel(x, w, eps=1e-6):
    from fusedrms import contracts

    y0 = contracts.get("llama").fn(x, w, eps).contiguous()
    y = torch.empty_like(y0)
    _copy_kernel[(triton.cdiv(y.numel(), 256),)](y0, y, y.numel(), BLOCK=256)
    return y


@pytest.mark.parametrize("answer,needle", [
    (_unmasked, "outside the tensors"), (_off_by_one, "outside the tensors"),
    (_shape_of_identify, "outside the tensors"),
    (_idle_launch_then_the_contract, "from PyTorch"),
    (_the_contract_copied_by_a_kernel, "loaded 0 of the 39 values of x")],
    ids=["no mask", "off by one", "identify's shape", "idle kernel", "a copy kernel"])
def test_answers_right_only_on_identifys_rows_are_refused(answer, needle):
    fb = EX.check(answer)
    assert not fb.ok and needle in fb.message and fb.hint, str(fb)


def _segfaults(x, w, eps):
    import ctypes

    ctypes.string_at(0)


def _loops_forever(x, w, eps):
    while True:
        pass


@pytest.mark.skipif(ch07b.env.current().on_gpu,
                    reason="the CPU child's verdict")
@pytest.mark.parametrize("answer,needle", [(_segfaults, "SIGSEGV"),
                                           (_loops_forever, "did not finish")],
                         ids=["segfault", "endless"])
def test_a_crash_or_an_endless_loop_is_a_verdict_and_the_notebook_survives(answer, needle,
                                                                          monkeypatch):
    from fusedrms.exercises import grader

    monkeypatch.setattr(grader, "LIMIT_S", 4.0)
    fb = EX.check(answer)
    assert not fb.ok and needle in fb.message and "not affected" in fb.message, str(fb)


# ---- the verdict is the parent's: an answer that patches the contract it is judged by, in its
# own process, changes nothing ----

@triton.jit
def _cols_plus_one_kernel(x_ptr, w_ptr, y_ptr, cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    col = tl.arange(0, BLOCK)
    mask = col < cols
    x = tl.load(x_ptr + row * cols + col, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / (cols + 1) + eps)  # wrong denominator
    normed = (x * rstd).to(y_ptr.dtype.element_ty)
    w = tl.load(w_ptr + col, mask=mask, other=0.0)
    tl.store(y_ptr + row * cols + col, normed * w, mask=mask)


def _wrong_llama(x, w, eps):
    x = x.contiguous()
    y = torch.empty_like(x)
    cols = x.shape[-1]
    _cols_plus_one_kernel[(x.numel() // cols,)](x, w, y, cols, eps,
                                             BLOCK=triton.next_power_of_2(cols))
    return y


def _patches_the_contract(x, w, eps):
    import dataclasses

    from fusedrms.contracts import catalog

    catalog.CONTRACTS["llama"] = dataclasses.replace(catalog.CONTRACTS["llama"], fn=_wrong_llama)
    return _wrong_llama(x, w, eps)


def test_an_answer_that_patches_its_contract_gets_the_honest_verdict():
    honest = ch07b.llama_kernel.check(_wrong_llama)
    assert not honest.ok and "differs from llama" in honest.message
    fb = ch07b.llama_kernel.check(_patches_the_contract)
    assert not fb.ok and (fb.message, fb.hint) == (honest.message, honest.hint), str(fb)


@pytest.mark.gpu
def test_on_the_gpu_the_llama_answers_pass_compiled_and_the_copy_is_refused():
    for answer in (EX.solution, _upcast_then_a_launch_per_row):
        fb = EX.check(answer)
        assert fb.ok and "compiled for the GPU" in fb.message, str(fb)
    fb = EX.check(_the_contract_copied_by_a_kernel)
    assert not fb.ok and "loaded 0 of the" in fb.message, str(fb)
