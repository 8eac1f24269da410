"""The interpreter's audit: stores outside every tensor skipped and counted, masked loads without
other= read NaN, and programs that touch each other's elements found, though the interpreter's
in-order programs give the right output."""
import torch
import triton
import triton.language as tl

from fusedrms.exercises import grader, interpreter_audit


@triton.jit
def _copy_rows(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    col = tl.arange(0, BLOCK)
    mask = col < cols
    tl.store(y_ptr + row * cols + col, tl.load(x_ptr + row * cols + col, mask=mask, other=0.0),
             mask=mask)


@triton.jit
def _clears_the_next_row(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    col = tl.arange(0, BLOCK)
    below = (row + 1) * cols + col
    tl.store(y_ptr + below, tl.zeros([BLOCK], tl.float32),
             mask=(col < cols) & (below < tl.num_programs(0) * cols))
    mask = col < cols
    tl.store(y_ptr + row * cols + col, tl.load(x_ptr + row * cols + col, mask=mask, other=0.0),
             mask=mask)


@triton.jit
def _reads_the_previous_output(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    col = tl.arange(0, BLOCK)
    mask = (col < cols) & (row * cols + col >= cols)  # rows after the first
    before = tl.load(y_ptr + (row - 1) * cols + col, mask=mask, other=0.0)
    tl.store(y_ptr + row * cols + col, before + 1.0, mask=col < cols)


@triton.jit
def _unmasked(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    col = tl.arange(0, BLOCK)
    tl.store(y_ptr + row * cols + col, tl.load(x_ptr + row * cols + col, mask=col < cols))


def _audit(kernel, rows=3, cols=5):
    """(In the grader's child) launch ``kernel`` under the audit: (y, races, outside, undefined)."""
    x, y = torch.randn(rows, cols), torch.zeros(rows, cols)
    with interpreter_audit.audited() as audit:
        kernel[(rows,)](x, y, cols, BLOCK=8)
    launch = audit.launches[0]
    undefined = any(a.undefined_lanes for a in launch.loads())
    return (torch.equal(y, x), launch.races(), launch.outside_stores, launch.first_outside,
            undefined)


def test_a_clean_kernel_has_nothing_to_report():
    same, races, outside, _, undefined = grader.run(_copy_rows, _audit)
    assert same and races == [] and outside == 0 and not undefined


def test_a_race_hidden_by_the_interpreters_order_is_found():
    same, races, _, _, _ = grader.run(_clears_the_next_row, _audit)
    assert same  # right output, in order
    assert len(races) == 1 and "programs 0 and 1" in races[0] and "y_ptr[1, 0]" in races[0]
    _, races, _, _, _ = grader.run(_reads_the_previous_output, _audit)
    assert any("loads y_ptr[0, 0], which program 0 stores" in r for r in races), races


def test_stores_outside_every_tensor_are_skipped_and_counted():
    same, _, outside, first, undefined = grader.run(_unmasked, _audit)
    assert outside == 8 - 5 and first == "1 element past the end of y_ptr"
    assert undefined  # the masked x load has no other=: its lanes read NaN


def _loaded_from_x(how, rows=3, cols=5):
    """(In the grader's child) copy rows of x's fp16 values prepared ``how``, under the audit:
    (how many of x's values were loaded, the audit after pickling)."""
    import pickle

    g = torch.Generator().manual_seed(0)
    x = torch.randn(rows, 2 * cols, generator=g).half()[:, ::2]  # a strided view
    y = torch.empty(rows, cols, dtype=torch.float32)
    with interpreter_audit.audited() as audit:
        if how == "a copy of y":
            source = x.float().contiguous() * 2  # other values
        elif how == "half the rows":
            source = x.float().contiguous()[: rows // 2 + 1]
        else:
            source = {"x.float()": x.float().contiguous(), "x.contiguous()": x.contiguous()}[how]
        for row in range(source.shape[0]):  # a launch per row, on views
            _copy_rows[(1,)](source[row], y[row], cols, BLOCK=8)
    loaded = audit.elements_loaded_from(x)
    return loaded, pickle.loads(pickle.dumps(audit)).launches[0].tensors[0].value


def test_loads_of_x_are_counted_through_its_copies_and_not_through_other_values():
    for how in ("x.float()", "x.contiguous()"):
        loaded, sent = grader.run(how, _loaded_from_x)
        assert loaded == 15 and sent is None, how  # the tensor itself stays in the child
    assert grader.run("half the rows", _loaded_from_x)[0] == 10
    assert grader.run("a copy of y", _loaded_from_x)[0] == 0
