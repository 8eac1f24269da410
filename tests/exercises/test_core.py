import math

import pytest
import torch

from fusedrms.exercises import core


def test_as_number_accepts_numbers_strings_and_scalar_tensors():
    assert core.as_number(3) == 3.0
    assert core.as_number(" 2.5 ") == 2.5
    assert core.as_number(torch.tensor(1.5)) == 1.5


@pytest.mark.parametrize("bad", ["three", True, [1.0], torch.ones(2), float("nan"), math.inf, object()])
def test_as_number_rejects_with_a_message(bad):
    with pytest.raises(core.Malformed) as err:
        core.as_number(bad)
    assert str(err.value)


def test_as_vector_checks_length_and_elements():
    assert core.as_vector(torch.tensor([1.0, 2.0]), 2) == [1.0, 2.0]
    with pytest.raises(core.Malformed, match="expected 3"):
        core.as_vector([1, 2], 3)
    with pytest.raises(core.Malformed):
        core.as_vector("1,2", 2)
    with pytest.raises(core.Malformed, match="NaN"):
        core.as_vector([1, float("nan")], 2)


def test_as_choice_is_case_insensitive_and_strict():
    assert core.as_choice(" YES ", ["yes", "no"]) == "yes"
    with pytest.raises(core.Malformed):
        core.as_choice("maybe", ["yes", "no"])


def test_check_never_raises_for_malformed_answers():
    ex = core.Exercise("demo", "What is 2+2?",
                       lambda a: core.correct("ok") if core.as_number(a) == 4 else core.wrong("no", "add"),
                       solution=4, mistakes={"off by one": 5})
    assert ex.check(4).ok
    assert not ex.check(5).ok
    fb = ex.check(None)
    assert not fb.ok and fb.awaiting and ex.question not in str(fb)
    assert str(fb).startswith("Your turn. Run the notebook to check your answer")
    assert "Not yet" not in fb._repr_html_() and "Your turn." in fb._repr_html_()
    assert not ex.check(...).ok and ex.check(...).awaiting and not ex.check(5).awaiting
    fb = ex.check("four")
    assert not fb.ok and "could not be read" in fb.message


def test_feedback_renders_as_text_and_html():
    fb = core.wrong("bad <value>", "try <this>")
    assert str(fb).startswith("Not yet.") and "Hint: try <this>" in str(fb)
    assert "&lt;value&gt;" in fb._repr_html_()
    assert not fb
    assert core.correct("fine")


@pytest.mark.parametrize("answer,value,target,ok", [
    (1.1, 1.1, 1.1094, True), ("1.10", 1.10, 1.1094, False), (0.83, 0.83, 0.83318, True),
    (0.8, 0.8, 0.83318, False), (1, 1.0, 1.1094, False), (torch.tensor(1.1), 1.1, 1.1094, True),
    ("11/10", 1.1, 1.1094, False), (True, 1.0, 1.0, False), ("1e0", 1.0, 1.04, False),
])
def test_matches_as_written(answer, value, target, ok):
    assert core.matches_as_written(answer, value, target) is ok


def test_as_count_reads_grouped_digits_only():
    assert core.as_count("1,234,567") == core.as_count("1 234 567") == 1234567
    with pytest.raises(core.Malformed):
        core.as_count("12,34")  # a decimal comma, or a typo: not a grouping of thousands


# ---------------------------------------------------------------- issue 17: checkers never raise

class _FloatRaises:
    def __float__(self):
        raise RuntimeError("no float here")


@pytest.mark.parametrize("bad", [10 ** 400, -10 ** 400, _FloatRaises(), {1, 2}, {"a": 1},
                                 b"\xff", torch.tensor(True), "9" * 500])
def test_as_number_turns_every_failure_into_malformed(bad):
    with pytest.raises(core.Malformed) as err:
        core.as_number(bad)
    assert 10 < len(str(err.value)) < 200


def test_as_fields_reads_tuples_and_dicts_and_refuses_the_rest():
    assert core.as_fields((1, "a"), ("rtol", "dominant"), "(1, 'a')") == [1, "a"]
    assert core.as_fields({"Dominant": "a", "rtol": 1}, ("rtol", "dominant"), "...") == [1, "a"]
    for bad, match in (({"rtol": 1, "why": "cast"}, "lacks 'dominant'"), ({1, "a"}, "got set"),
                       ("1, a", "got str"), ((1,), "got 1")):
        with pytest.raises(core.Malformed, match=match):
            core.as_fields(bad, ("rtol", "dominant"), "(1e-3, 'cast')")


def test_check_never_raises_even_when_the_grader_does():
    def grader(answer):
        return {}[answer]  # a grader bug: KeyError

    ex = core.Exercise("demo", "Give a key.", grader, solution=0)
    feedback = ex.check(3)
    assert not feedback.ok and "KeyError" in feedback.message and feedback.error
    assert "Give a key." in feedback.hint


def test_check_reports_a_package_input_error_as_its_message():
    from fusedrms import validation

    def grader(answer):
        raise validation.InputError("x has zero columns; pass at least one column.")

    feedback = core.Exercise("demo", "q", grader, solution=0).check([])
    assert not feedback.ok and "zero columns" in feedback.message and not feedback.error


def test_issue_17_reproducers_get_messages():
    from fusedrms.exercises import ch01, ch03, ch04, ch05

    rows = [{"block_size": b, "rows": 3, "cols": 0, "correct": True, "time_us": 1.0}
            for b in (32, 64, 128)]
    cases = [(ch01.sum_of_squares, 10 ** 400), (ch04.choose_num_warps, {"num_warps": 10 ** 400}),
             (ch01.sum_of_squares, _FloatRaises()),
             (ch05.fp16_tolerance, {"rtol": 1e-3, "dominant": "reduction"}),
             (ch05.fp16_tolerance, {1e-3, "cast"}), (ch03.block_sizes, rows),
             (ch03.block_sizes, [dict(r, cols=8, rows=-1) for r in rows]),
             (ch03.block_sizes, [dict(r, cols=8, rows=float("inf")) for r in rows])]
    for exercise, answer in cases:
        feedback = exercise.check(answer)
        assert not feedback.ok and feedback.message and not feedback.error, (exercise.name, answer)
    assert ch05.fp16_tolerance.check({"rtol": ch05.TERMS["rtol"], "dominant": "cast"}).ok


@pytest.mark.parametrize("text,value", [("16/13", 16 / 13), ("sqrt(16)/sqrt(13)", (16 / 13) ** 0.5),
                                        ("(16/13)^0.5", (16 / 13) ** 0.5), ("-2/5", -0.4),
                                        (" 5 / 4 ", 1.25), ("1.5", 1.5), (2, 2.0)])
def test_as_expression_reads_arithmetic_a_reader_types(text, value):
    from fusedrms.exercises.core import as_expression

    assert as_expression(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["__import__('os').getcwd()", "5/0", "2**99999", "sqrt(-1)",
                                  "(1", "x/2", "(" * 300 + "1" + ")" * 300, "(-1)**0.5"])
def test_as_expression_refuses_anything_else_with_a_message(text):
    from fusedrms.exercises.core import Malformed, as_expression

    with pytest.raises(Malformed):
        as_expression(text)


def test_a_quantity_is_read_with_its_unit_and_the_precision_it_was_written_with():
    units = {"b": 1, "kb": 1e3, "mib": 2 ** 20}
    assert core.as_quantity("532,480 B", units, "bytes") == (532480, 0.0)
    assert core.as_quantity(532480, units, "bytes") == (532480, 0.0)
    value, half = core.as_quantity("33.56 kB", units, "bytes")
    assert value == pytest.approx(33560) and half == pytest.approx(5)
    assert core.as_quantity("2 MiB", units, "bytes") == (2 ** 21, 0.5 * 2 ** 20)
    assert core.as_bytes("520 KiB") == 532480 and core.as_bytes("532 480") == 532480
    for bad in ("kB", "12 parsecs", "lots"):
        with pytest.raises(core.Malformed):
            core.as_quantity(bad, units, "bytes")


# ---- a reader's Triton kernel copied for the interpreter's child process ----

import threading  # noqa: E402

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from fusedrms import env  # noqa: E402

SCALE = tl.constexpr(2.0)
_LOCK = threading.Lock()


@triton.jit
def _doubled(v, scale):
    return v * scale


times_scale = _doubled  # a helper known under another name


@triton.jit
def _scaled_copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets, mask=offsets < n, other=0.0)
    tl.store(y_ptr + offsets, times_scale(x, SCALE) + tl.sum(x, axis=0), mask=offsets < n)


@triton.jit
def _reads_a_lock(x_ptr, BLOCK: tl.constexpr):
    if _LOCK:
        pass


@pytest.mark.skipif(env.current().on_gpu, reason="runs the copy in this process's interpreter")
def test_a_kernel_copy_computes_what_the_kernel_computes(tmp_path):
    """A helper under another name, a constexpr global and the tl module travel with the copy."""
    kernel = _scaled_copy
    copy = core.kernel_source(kernel)
    assert copy["imports"]["tl"] == ("triton.language", None)
    rebuilt = core.rebuild_kernel(copy, tmp_path)
    assert rebuilt is not kernel and rebuilt.fn.__module__ == "fusedrms_reader_kernel"
    x = torch.arange(5, dtype=torch.float32)
    y, y_copy = torch.zeros(5), torch.zeros(5)
    kernel[(1,)](x, y, 5, BLOCK=8)
    rebuilt[(1,)](x, y_copy, 5, BLOCK=8)
    assert torch.equal(y, y_copy) and not torch.equal(y, torch.zeros(5))


def test_a_global_the_copy_cannot_carry_is_named():
    with pytest.raises(core.NotAudited, match="_LOCK"):
        core.kernel_source(_reads_a_lock)
    with pytest.raises(core.NotAudited, match="not a @triton.jit"):
        core.kernel_source(42)


def test_an_error_that_cannot_travel_reads_the_same():
    class LocalError(Exception):  # a local class with a method: no copy can rebuild it
        def where(self):
            return "row 3"

    original = LocalError("row 3 out of range " * 30)
    portable = core.portable_error(original)
    assert isinstance(portable, core.RaisedElsewhere)
    assert core.one_line(portable) == core.one_line(original)
    assert core.one_line(original).startswith("LocalError: row 3") and core.one_line(original).endswith("...")
    picklable = ValueError("bad")
    assert core.portable_error(picklable) is picklable


class _ExitsWhenRead:
    def __float__(self):
        raise SystemExit(0)

    __index__ = __int__ = __float__


def test_an_answer_that_exits_when_read_gets_a_verdict_not_the_end_of_the_cell():
    ex = core.Exercise("demo", "What is 2+2?",
                       lambda a: core.correct("ok") if core.as_number(a) == 4 else core.wrong("no"),
                       solution=4)
    fb = ex.check(_ExitsWhenRead())
    assert not fb.ok and "could not be read" in fb.message and "SystemExit" in fb.error


def test_fields_asks_the_length_before_unpacking():
    import itertools

    import torch

    assert core.fields((1, 2), 2) == (1, 2) and core.fields([1, 2, 3, 4], 4) == (1, 2, 3, 4)
    assert core.fields(torch.zeros(2 ** 26), 4) is None  # would take seconds to unpack
    assert core.fields(itertools.count(), 2) is None and core.fields(5, 2) is None
    assert core.brief(list(range(10 ** 6))).startswith("list [0, 1, 2")
    assert len(core.brief(list(range(10 ** 6)))) < 100


def test_changed_output_names_a_shape_that_is_not_the_cases():
    assert core.changed_output(3, 13, (3, 13)) is None
    changed = core.changed_output(3, 13, (1, 13))
    assert isinstance(changed, RuntimeError) and "3x13" in str(changed) and "(1, 13)" in str(changed)
