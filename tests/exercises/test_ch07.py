"""Chapter 7 checkers beyond the shared contract in test_every_exercise.py."""

import inspect

import pytest
import torch
import triton
import triton.language as tl

from fusedrms import env
from fusedrms.exercises import ch07


def test_bytes_solution_agrees_with_the_traffic_model():
    assert ch07.residual_bytes_expected() == ch07.residual_bytes.solution == 532_480


def msg(m):
    return str(ch07.residual_variant.check(ch07.residual_variant.mistakes[m]))


def test_residual_messages_name_the_mistake():
    assert "swapped" in msg("(s, y) swapped")
    assert "changed its inputs" in msg("writes into the residual")
    assert "raised IndexError" in msg("raises")
    assert "pair (y, s)" in msg("returns y only")
    assert "x alone" in msg("normalizes x, not x + r")
    assert "weight" in msg("weight forgotten")
    assert "launches" in msg("the kernel instead of the wrapper")


def test_residual_rejects_answers_without_a_kernel_of_their_own():
    assert "no Triton kernel" in msg("the reference itself (no kernel)")
    assert "book's own kernel" in msg("the book's kernel")


def test_residual_rejects_the_other_convention():
    """Normalizing the fp32 sum (FlashInfer's convention) is within tolerance everywhere, so the
    checker tells it apart on rows whose sums are all ties."""
    text = msg("normalizes the fp32 sum (the other convention)")
    assert "fp32 sum" in text and "FlashInfer" in text


def test_residual_rejects_masked_loads_without_other():
    text = msg("masked loads without other=")
    assert "other=" in text and "undefined" in text


@triton.jit
def _bf16_add_kernel(x_ptr, r_ptr, w_ptr, y_ptr, s_ptr, cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    col = tl.arange(0, BLOCK)
    mask = col < cols
    x = tl.load(x_ptr + row * cols + col, mask=mask, other=0.0)
    r = tl.load(r_ptr + row * cols + col, mask=mask, other=0.0)
    s = x + r  # no upcast: the interpreter's bf16 addition is broken
    tl.store(s_ptr + row * cols + col, s, mask=mask)
    s = s.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(s * s, axis=0) / cols + eps)
    w = tl.load(w_ptr + col, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * cols + col, (s * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@pytest.mark.skipif(env.current().on_gpu, reason="the interpreter's bf16 addition")
def test_residual_warns_about_the_interpreters_bf16_addition():
    fb = ch07.residual_variant.check(ch07._launcher(_bf16_add_kernel))
    assert not fb.ok and "interpreter" in fb.hint and "float32" in fb.hint


def test_the_solution_passes_and_names_the_convention():
    fb = ch07.residual_variant.check(ch07.solution_residual)
    assert fb.ok and "stored s" in fb.message


def test_masked_load_scan():
    assert ch07.masked_loads_without_other(inspect.getsource(ch07.solution_kernel.fn)) == []
    assert len(ch07.masked_loads_without_other(inspect.getsource(ch07._no_other_kernel.fn))) == 2


def key(answer):
    return ch07.autotune_key.check(answer)


W = ch07.WIDTH  # the kernel's width argument (COLS or cols)


def test_key_is_argument_names_and_the_dtype_comes_free():
    assert key([W]).ok and key(W).ok and key((f" {W} ",)).ok
    assert "dtype" in key([W]).message
    assert key([W, "WRITE_SUM"]).ok  # tunes the two variants apart: harmless


def test_key_teaches_what_autotune_does_with_names():
    dtype = key([W, "dtype"])
    assert not dtype.ok and "no argument called dtype" in dtype.message
    assert "already" in dtype.message
    seed = key(["n_cols"])
    assert not seed.ok and "not an argument" in seed.message and "dropped" in seed.hint
    assert "spelled" in key([W.swapcase()]).message
    assert "re-tunes" in key(["rows", W]).message
    assert "identity" in key([W, "x_ptr"]).message
    assert "configuration sets" in key(["BLOCK"]).message
    assert "width" in key(["WRITE_SUM"]).message


def test_key_malformed_answers_get_a_message():
    for bad in (42, [], [""], [3], {3}, "[]", "key=", ""):
        fb = key(bad)
        assert not fb.ok and "could not be read" in fb.message


def test_key_in_the_forms_a_reader_writes_it():
    for form in ({W}, frozenset([W]), f"['{W}']", f'["{W}"]', f"key=['{W}']", f"[{W}]"):
        assert key(form).ok, form
    assert "no argument called dtype" in key(f"{W}, dtype").message  # still read as two names
    assert "re-tunes" in key(f"{W} rows").message


def test_bytes_in_the_forms_a_reader_writes_them():
    check = ch07.residual_bytes.check
    for form in (532480, 532480.0, "532480", "532,480", "532_480", "532480 B", "532480 bytes",
                 "520 KiB", "532.48 kB", "0.53248 MB", "0.5078125 MiB"):
        assert check(form).ok, form
    for unit, value in (("kB", 532.48), ("KiB", 520), ("MB", 0.53248)):
        fb = check(value)  # the right amount, in a unit the plain number does not carry
        assert not fb.ok and unit in fb.message and "bytes" in fb.hint
    for bad in ("532,48", "", "lots", [532480], True):
        fb = check(bad)
        assert not fb.ok and "could not be read" in fb.message, bad
    for wrong in (532481, "532,481", "531 KiB", -532480, "532480 GB"):
        fb = check(wrong)
        assert not fb.ok and fb.hint, wrong


def test_key_signature_is_the_kernels():
    import inspect

    from fusedrms.kernels import add_rmsnorm

    args = tuple(inspect.signature(add_rmsnorm.add_rmsnorm_kernel.fn).parameters)
    assert ch07.KERNEL_ARGS == args and W in args and "dtype" not in args
    assert W in ch07.autotune_key.question


def test_page_solution_is_the_checked_solution():
    """The dropdown on the page shows exactly the code the tests accept (no drifting copy)."""
    from pathlib import Path

    import nbformat

    from fusedrms.viz import file_section

    nb = nbformat.read(Path(__file__).resolve().parents[2] / "chapters" / "07_capstone.ipynb", 4)
    section = file_section(ch07.__file__, "solution-kernel")
    assert any(c.cell_type == "markdown" and section in c.source for c in nb.cells)


def test_residual_names_an_ignored_eps_and_a_wrong_signature():
    text = msg("eps ignored")
    assert "eps = 1e-06" in text and "eps argument" in text
    fb = ch07.residual_variant.check(ch07.residual_variant.mistakes["three arguments"])
    assert not fb.ok and "could not be read" in fb.message and "fn(x, r, w, eps)" in fb.message
    # a launcher with eps as a keyword, or *args, is read fine
    assert ch07.residual_variant.check(lambda *a: ch07.solution_residual(*a)).ok


def test_residual_rejects_a_function_that_ignores_its_eps():
    """Graded with an eps no one hard-codes: a kernel that keeps the usual 1e-5 (or 1e-6) and
    drops the argument is named, never accepted."""
    assert ch07.GRADE_EPS not in (1e-5, 1e-6)
    for mistake, constant in (("eps ignored, the usual default", "1e-05"),
                              ("eps ignored", "1e-06")):
        text = msg(mistake)
        assert text.startswith("Not yet.") and f"eps = {constant}" in text, text


def test_residual_refuses_a_race_the_interpreter_hides_and_unmasked_stores():
    """Program i clearing row i+1 gives the right output in the interpreter's in-order programs
    and a race on a GPU; unmasked stores past the last row would corrupt the process's heap:
    both are refused with what happened, and the notebook's process never runs them."""
    race = ch07.residual_variant.check(ch07.residual_variant.mistakes["program i clears row i+1 (a race)"])
    assert not race.ok and "programs 0 and 1" in race.message and "race" in race.message
    assert "only row i" in race.hint
    unmasked = ch07.residual_variant.check(ch07.residual_variant.mistakes["unmasked stores"])
    assert not unmasked.ok and "stores outside the tensors" in unmasked.message
    assert "past the end of s_ptr" in unmasked.message and "mask=mask" in unmasked.hint


# the solution kernel indexes rows as row * cols: right only for contiguous rows
_row_times_cols_kernel = ch07.solution_kernel


def _launch_without_contiguous(x, r, w, eps):
    y, s = torch.empty_like(x), torch.empty_like(x)
    cols = x.shape[-1]
    _row_times_cols_kernel[(x.numel() // cols,)](x, r, w, y, s, cols, eps,
                                                 BLOCK=triton.next_power_of_2(cols))
    return y, s


def test_residual_checks_rows_that_are_a_view_of_a_wider_tensor():
    fb = ch07.residual_variant.check(_launch_without_contiguous)
    assert not fb.ok and "16 elements apart" in fb.message and "contiguous()" in fb.hint


@triton.jit
def _idle_kernel(x_ptr, BLOCK: tl.constexpr):
    pass


def _idle_launch_then_the_reference(x, r, w, eps=1e-5):
    from fusedrms import reference

    _idle_kernel[(1,)](x, BLOCK=1)  # a kernel launched, the values from PyTorch
    return reference.add_rmsnorm_residual(x, r, w, eps)


@pytest.mark.skipif(env.current().on_gpu, reason="the interpreter's audit counts the stores")
def test_residual_rejects_outputs_no_kernel_stored():
    fb = ch07.residual_variant.check(_idle_launch_then_the_reference)
    assert not fb.ok and "from PyTorch" in fb.message and fb.hint, str(fb)


@triton.jit
def _copy_two(a_ptr, b_ptr, y_ptr, s_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(y_ptr + i, tl.load(a_ptr + i, mask=m, other=0.0), mask=m)
    tl.store(s_ptr + i, tl.load(b_ptr + i, mask=m, other=0.0), mask=m)


def _the_reference_copied_by_a_kernel(x, r, w, eps):
    from fusedrms import reference

    y0, s0 = (t.contiguous() for t in reference.add_rmsnorm_residual(x, r, w, eps))
    y, s = torch.empty_like(y0), torch.empty_like(s0)
    _copy_two[(triton.cdiv(y.numel(), 1024),)](y0, s0, y, s, y.numel(), BLOCK=1024)
    return y, s


@triton.jit
def _upcast_inputs_kernel(x_ptr, r_ptr, w_ptr, y_ptr, s_ptr, cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    col = tl.arange(0, BLOCK)
    mask = col < cols
    s = (tl.load(x_ptr + row * cols + col, mask=mask, other=0.0)
         + tl.load(r_ptr + row * cols + col, mask=mask, other=0.0)).to(s_ptr.dtype.element_ty)
    tl.store(s_ptr + row * cols + col, s, mask=mask)
    s = s.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(s * s, axis=0) / cols + eps)
    w = tl.load(w_ptr + col, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * cols + col, (s * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def _upcast_inputs_first(x, r, w, eps=1e-5):
    """x.float() and r.float() in PyTorch (contiguous fp32 copies), then the kernel on them."""
    x32, r32 = x.float().contiguous(), r.float().contiguous()
    y, s = torch.empty_like(x), torch.empty_like(x)
    cols = x.shape[-1]
    _upcast_inputs_kernel[(x.shape[0],)](x32, r32, w, y, s, cols, eps,
                                         BLOCK=triton.next_power_of_2(cols))
    return y, s


def test_residual_accepts_inputs_upcast_in_pytorch_before_the_kernel():
    fb = ch07.residual_variant.check(_upcast_inputs_first)
    assert fb.ok, str(fb)


def test_residual_rejects_a_kernel_that_only_copies_pytorchs_outputs():
    fb = ch07.residual_variant.check(_the_reference_copied_by_a_kernel)
    assert not fb.ok and "loaded 0 of the" in fb.message and "from PyTorch" in fb.message, str(fb)
    assert "tl.load(x_ptr" in fb.hint


# ---- the verdict is the parent's: an answer that patches the checker's functions in its own
# process changes nothing ----

@triton.jit
def _by_block_kernel(x_ptr, r_ptr, w_ptr, y_ptr, s_ptr, cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    col = tl.arange(0, BLOCK)
    mask = col < cols
    x = tl.load(x_ptr + row * cols + col, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + row * cols + col, mask=mask, other=0.0).to(tl.float32)
    s = (x + r).to(s_ptr.dtype.element_ty)
    tl.store(s_ptr + row * cols + col, s, mask=mask)
    s = s.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(s * s, axis=0) / BLOCK + eps)  # wrong: BLOCK, not cols
    w = tl.load(w_ptr + col, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * cols + col, (s * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


_wrong_but_honest = ch07._launcher(_by_block_kernel)


def _patches_allclose(x, r, w, eps):
    import fusedrms.checks

    fusedrms.checks.allclose = lambda *args, **kwargs: fusedrms.checks.Report(True, "patched")
    return _wrong_but_honest(x, r, w, eps)


def _patches_the_reference(x, r, w, eps):
    import fusedrms.reference

    def by_block(s, w, eps, accum=None):  # what the wrong kernel computes, as "the reference"
        sf = s.double()
        block = triton.next_power_of_2(s.shape[-1])
        return sf * torch.rsqrt((sf * sf).sum(-1, keepdim=True) / block + eps) * w.double()

    fusedrms.reference.rmsnorm = by_block
    return _wrong_but_honest(x, r, w, eps)


@pytest.mark.parametrize("answer", [_patches_allclose, _patches_the_reference],
                         ids=["checks.allclose", "reference.rmsnorm"])
def test_an_answer_that_patches_the_checkers_functions_gets_the_honest_verdict(answer):
    honest = ch07.residual_variant.check(_wrong_but_honest)
    assert not honest.ok and "y is wrong" in honest.message
    fb = ch07.residual_variant.check(answer)
    assert not fb.ok and (fb.message, fb.hint) == (honest.message, honest.hint), str(fb)


@pytest.mark.gpu
def test_on_the_gpu_the_residual_answers_pass_compiled_and_the_copy_is_refused():
    for answer in (ch07.solution_residual, _upcast_inputs_first):
        fb = ch07.residual_variant.check(answer)
        assert fb.ok and "compiled for the GPU" in fb.message, str(fb)
    fb = ch07.residual_variant.check(_the_reference_copied_by_a_kernel)
    assert not fb.ok and "from PyTorch" in fb.message, str(fb)
