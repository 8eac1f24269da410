"""Chapter 7 exercises: the capstone.

- :data:`residual_variant`: write the residual-writing variant ``fn(x, r, w, eps) -> (y, s)``; the
  checker runs it on boundary shapes and dtypes against :func:`fusedrms.reference.add_rmsnorm_residual`.
- :data:`residual_bytes`: predict the bytes it moves at 16 x 4096 bf16.
- :data:`autotune_key`: choose the autotune key (a list of names, like ``@triton.autotune(key=...)``).
"""
from __future__ import annotations

from .. import env  # noqa: F401  (interpreter switch before the solution's @triton.jit)

import torch
import triton
import triton.language as tl

from .. import checks, reference
from .core import Exercise, Feedback, Malformed, as_number, correct, wrong

# ---------------------------------------------------------------- (a) write the residual variant


# [book:solution-kernel]
@triton.jit
def solution_kernel(x_ptr, r_ptr, w_ptr, y_ptr, s_ptr, cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    col = tl.arange(0, BLOCK)
    mask = col < cols
    x = tl.load(x_ptr + row * cols + col, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + row * cols + col, mask=mask, other=0.0).to(tl.float32)
    s = (x + r).to(s_ptr.dtype.element_ty)  # the next layer's residual, in x's dtype
    tl.store(s_ptr + row * cols + col, s, mask=mask)
    s = s.to(tl.float32)  # normalize what was stored
    rstd = tl.rsqrt(tl.sum(s * s, axis=0) / cols + eps)
    w = tl.load(w_ptr + col, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * cols + col, (s * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def solution_residual(x, r, w, eps=1e-5):
    x, r = x.contiguous(), r.contiguous()
    y, s = torch.empty_like(x), torch.empty_like(x)
    cols = x.shape[-1]
    solution_kernel[(x.numel() // cols,)](x, r, w, y, s, cols, eps,
                                          BLOCK=triton.next_power_of_2(cols))
    return y, s
# [/book:solution-kernel]


SHAPES = ((3, 13), (33, 257), (1, 1), (4, 1024))
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _one_line(err: BaseException, limit: int = 300) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:limit]}"


def _inputs(rows, cols, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    dev = env.current().device
    return [torch.randn(*s, generator=g).to(dtype).to(dev) for s in ((rows, cols), (rows, cols), (cols,))]


def _grade_residual(answer) -> Feedback:
    if isinstance(answer, triton.runtime.jit.KernelInterface):  # jit, interpreted or autotuned
        raise Malformed("that is the @triton.jit kernel; pass the Python function that launches "
                        "it: answer = my_add_rmsnorm_residual (called as fn(x, r, w, eps)).")
    if not callable(answer):
        raise Malformed(f"expected a function fn(x, r, w, eps) -> (y, s), got "
                        f"{type(answer).__name__}.")
    eps = 1e-5
    for i, (rows, cols) in enumerate(SHAPES):
        for dtype in DTYPES:
            where = f"on {rows}x{cols} {str(dtype).replace('torch.', '')}"
            x, r, w = _inputs(rows, cols, dtype, seed=100 + i)
            x0, r0 = x.clone(), r.clone()
            try:
                out = answer(x, r, w, eps)
            except Exception as e:  # noqa: BLE001  (the reader's code: report, never raise)
                return wrong(f"your function raised {_one_line(e)} {where}.",
                             "Run it on that shape in a cell to see the full traceback.")
            if not isinstance(out, (tuple, list)) or len(out) != 2:
                raise Malformed(f"your function returned {type(out).__name__}"
                                + (f" of length {len(out)}" if isinstance(out, (tuple, list)) else "")
                                + "; it must return a pair (y, s): the output and x + residual.")
            y, s = out
            if not all(isinstance(t, torch.Tensor) for t in (y, s)):
                raise Malformed("both y and s must be torch tensors.")
            if not (torch.equal(x, x0) and torch.equal(r, r0)):
                return wrong(f"your function changed its inputs {where}.",
                             "This exercise is out of place: write y and s into new tensors.")
            for name, t in (("y", y), ("s", s)):
                if tuple(t.shape) != (rows, cols) or t.dtype != dtype:
                    return wrong(f"{name} is {tuple(t.shape)} {t.dtype} {where}; expected "
                                 f"{(rows, cols)} {dtype}.",
                                 "Allocate outputs like x (torch.empty_like(x)) and cast once at "
                                 "the store.")
            ref_y, ref_s = reference.add_rmsnorm_residual(x, r, w, eps, accum=torch.float64)
            s_ok = checks.allclose(s, ref_s)
            # y against the reader's own stored s: the interpreter truncates bf16 casts, and a
            # one-step difference in s must not be counted twice
            y_ok = checks.allclose(y, reference.rmsnorm(s, w, eps, accum=torch.float64))
            if s_ok and y_ok:
                continue
            if checks.allclose(y, ref_s) and checks.allclose(s, ref_y):
                return wrong(f"y and s are swapped {where}.", "Return (y, s): the normalized "
                             "output first, then the residual sum.")
            if not s_ok:
                if checks.allclose(s, x):
                    return wrong(f"s equals x {where}: the residual sum is not stored.",
                                 "Store x + r (in x's dtype) into s.")
                return wrong(f"s is not x + residual {where}: {s_ok.message}.",
                             "s = (x + r) computed in fp32 and cast to x's dtype at the store.")
            ref_x_only = reference.rmsnorm(x, w, eps, accum=torch.float64)
            if checks.allclose(y, ref_x_only):
                return wrong(f"y normalizes x alone {where}.",
                             "Normalize the sum s = x + r, not x.")
            unweighted = reference.rmsnorm(ref_s, torch.ones_like(w), eps, accum=torch.float64)
            if checks.allclose(y, unweighted):
                return wrong(f"y is missing the weight {where}.", "Multiply by w[col].")
            return wrong(f"y is wrong {where}: {y_ok.message}.",
                         "Check the mean: divide the sum of squares by cols (not BLOCK), add eps, "
                         "take rsqrt; mask the padded lanes.")
    return correct(f"both outputs match the reference on {len(SHAPES)} shapes x {len(DTYPES)} "
                   f"dtypes (incl. 3x13 and 1x1), and the inputs are untouched.")


def _mistake_returns_y_only(x, r, w, eps=1e-5):
    return reference.add_rmsnorm(x, r, w, eps)


def _mistake_forgets_residual(x, r, w, eps=1e-5):
    return reference.rmsnorm(x, w, eps), (x.float() + r.float()).to(x.dtype)


def _mistake_s_is_x(x, r, w, eps=1e-5):
    return reference.add_rmsnorm(x, r, w, eps), x.clone()


def _mistake_swapped(x, r, w, eps=1e-5):
    y, s = reference.add_rmsnorm_residual(x, r, w, eps)
    return s, y


def _mistake_divides_by_block(x, r, w, eps=1e-5):
    y, s = reference.add_rmsnorm_residual(x, r, w, eps)
    block = triton.next_power_of_2(x.shape[-1])
    sf = s.float()
    rstd = torch.rsqrt((sf * sf).sum(-1, keepdim=True) / block + eps)
    return (sf * rstd * w.float()).to(x.dtype), s


def _mistake_in_place(x, r, w, eps=1e-5):
    y, s = reference.add_rmsnorm_residual(x, r, w, eps)
    r.copy_(s)
    return y, r


def _mistake_raises(x, r, w, eps=1e-5):
    raise IndexError("offsets out of range")


def _mistake_no_weight(x, r, w, eps=1e-5):
    y, s = reference.add_rmsnorm_residual(x, r, torch.ones_like(w), eps)
    return y, s


residual_variant = Exercise(
    "residual_variant",
    "Write fn(x, r, w, eps) -> (y, s): s = x + r stored in x's dtype, y = rmsnorm(s) * w.",
    _grade_residual, solution=solution_residual,
    mistakes={"returns y only": _mistake_returns_y_only,
              "normalizes x, not x + r": _mistake_forgets_residual,
              "s not stored (returns x)": _mistake_s_is_x,
              "(s, y) swapped": _mistake_swapped,
              "divides by BLOCK": _mistake_divides_by_block,
              "writes into the residual": _mistake_in_place,
              "raises": _mistake_raises,
              "weight forgotten": _mistake_no_weight,
              "a string": "def f(x, r, w): ...",
              "the kernel instead of the wrapper": solution_kernel})


# ---------------------------------------------------------------- (b) predict its bytes

BYTES_ROWS, BYTES_COLS, BYTES_DTYPE = 16, 4096, "bf16"


def residual_bytes_expected() -> int:
    from .. import traffic

    return traffic.price("fused_add_rmsnorm_residual", BYTES_ROWS, BYTES_COLS,
                         BYTES_DTYPE).bytes_total


def _grade_bytes(answer) -> Feedback:
    value = as_number(answer, "a number of bytes")
    expected = residual_bytes_expected()
    matrix = BYTES_ROWS * BYTES_COLS * 2
    weight = BYTES_COLS * 2
    if abs(value - expected) < 0.5:
        return correct(f"{expected:,} B = 4 row-trips x {matrix:,} B (read x and r, write y and s) "
                       f"+ the weight once ({weight:,} B).")
    known = {
        3 * matrix + weight: ("that is the fused kernel that does not write s (3 row-trips).",
                              "The residual-writing variant also stores s = x + r."),
        4 * matrix: ("the weight is missing.", f"Add the weight, read once: {weight:,} B."),
        4 * matrix + BYTES_ROWS * weight: ("the weight is counted once per row.",
                                           "Every program reads the same weight; the model "
                                           "counts it once (the cache serves the repeats)."),
        2 * (4 * matrix + weight): ("that is fp32 sizes.", "bf16 is 2 bytes per element."),
        7 * matrix + weight: ("that is the eager chain (7 row-trips).",
                              "Count one fused kernel: two reads, two writes."),
        5 * matrix + weight: ("one row-trip too many.",
                              "s stays in registers after it is stored; y is computed from it "
                              "without reading it back."),
    }
    for v, (msg, hint) in known.items():
        if abs(value - v) < 0.5:
            return wrong(f"{value:,.0f} B: {msg}", hint)
    return wrong(f"{value:,.0f} B is not it.",
                 f"Count the tensors with rows: x, r read; y, s written; each {BYTES_ROWS} x "
                 f"{BYTES_COLS} bf16. Then the weight once.")


residual_bytes = Exercise(
    "residual_bytes",
    f"How many bytes of global memory does the residual-writing variant move at "
    f"{BYTES_ROWS} x {BYTES_COLS} bf16?",
    _grade_bytes, solution=4 * BYTES_ROWS * BYTES_COLS * 2 + BYTES_COLS * 2,
    mistakes={"3 row-trips": 3 * 131072 + 8192, "no weight": 4 * 131072,
              "weight per row": 4 * 131072 + 16 * 8192, "fp32": 2 * (4 * 131072 + 8192),
              "eager": 7 * 131072 + 8192, "text": "lots", "NaN": float("nan")})


# ---------------------------------------------------------------- (c) the autotune key

KEY_NAMES = {"cols": "cols", "n_cols": "cols", "width": "cols", "hidden": "cols",
             "dtype": "dtype", "x.dtype": "dtype",
             "rows": "rows", "n_rows": "rows", "batch": "rows", "tokens": "rows",
             "block": "BLOCK", "block_size": "BLOCK",
             "eps": "eps", "num_warps": "num_warps", "rows_per_program": "rows_per_program",
             "num_stages": "num_stages"}


def _read_key(answer) -> set:
    if isinstance(answer, str):
        answer = [answer]
    if not isinstance(answer, (list, tuple, set)) or not answer:
        raise Malformed("write the key as a list of names, e.g. answer = ['cols'] "
                        "(the way @triton.autotune(key=[...]) takes it).")
    out = set()
    for item in answer:
        if not isinstance(item, str):
            raise Malformed(f"{item!r} is not a name; write names as strings, e.g. 'cols'.")
        key = item.strip().lower()
        if key not in KEY_NAMES:
            raise Malformed(f"{item!r} is not one of the names here: "
                            f"{', '.join(sorted(set(KEY_NAMES.values())))}.")
        out.add(KEY_NAMES[key])
    return out


def _grade_key(answer) -> Feedback:
    key = _read_key(answer)
    if key == {"cols", "dtype"}:
        return correct("(cols, dtype): the two things that change the compiled register tile. "
                       "BLOCK follows from cols; rows change every serving step and only set "
                       "the grid.")
    if "rows" in key:
        return wrong("keying on rows re-tunes (and re-compiles) for every batch size: in "
                     "serving the row count changes every step, so tuning would run inside the "
                     "model.", "Rows only change how many programs launch; leave them out.")
    tuned = key & {"num_warps", "rows_per_program", "num_stages"}
    if tuned:
        return wrong(f"{', '.join(sorted(tuned))} is what the tuner chooses, not what it is "
                     f"keyed on.", "The key is what the input looks like.")
    if "BLOCK" in key:
        return wrong("BLOCK is not an input: it is next_power_of_2(cols), derived, never tuned. "
                     "Letting configs set it is the seed listing's bug.",
                     "Key on what BLOCK is computed from, and on what else changes the tile.")
    if "eps" in key:
        return wrong("eps changes a value, not the kernel's shape or memory traffic.",
                     "Which inputs change how many bytes a row is and how it is laid out?")
    if key == {"cols"}:
        return wrong("half of it: a bf16 row and an fp32 row of the same width differ 2x in "
                     "bytes, so their best warps and rows per program differ.",
                     "Add the other property of x that changes bytes per row.")
    if key == {"dtype"}:
        return wrong("one configuration for 2048 and 16384 columns cannot fit both.",
                     "Add the width.")
    return wrong(f"{sorted(key)} is not the key.", "Which properties of x change the tile?")


autotune_key = Exercise(
    "autotune_key",
    "What should the capstone's tuning be keyed on? answer = [names]",
    _grade_key, solution=["cols", "dtype"],
    mistakes={"rows": ["rows"], "rows too": ["rows", "cols", "dtype"], "BLOCK": ["BLOCK"],
              "cols only": ["cols"], "dtype only": ["dtype"], "the tuned knob": ["num_warps"],
              "eps": ["cols", "eps"], "not a list": 42, "unknown name": ["hidden_size_x"]})

ALL = [residual_variant, residual_bytes, autotune_key]
