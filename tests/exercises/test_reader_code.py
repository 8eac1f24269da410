"""Copying a reader's code for another process: what travels by name, by source and by value."""
import math
import re
import threading

import pytest
import torch
import triton
import triton.language as tl

from fusedrms import env, reference
from fusedrms.exercises import grader, reader_code

SCALE = 3.0


@triton.jit
def _times(x_ptr, y_ptr, n, factor, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask, other=0.0) * factor, mask=mask)


def _helper(x):
    return x * SCALE


def _make_launcher(kernel, factor):
    def launch(x):  # a closure over a kernel and a number, calling a helper of this module
        y = torch.empty_like(x)
        kernel[(1,)](x, y, x.numel(), factor, BLOCK=triton.next_power_of_2(x.numel()))
        return _helper(y) + math.sqrt(4.0)

    return launch


def _call(answer, *args):
    return answer(*args)


def test_a_closure_over_a_kernel_travels_and_computes_the_same():
    launch = _make_launcher(_times, 2.0)
    recipe = reader_code.copy_answer(launch)
    assert recipe["kind"] == "function" and recipe["objects"]["kernel"]["kind"] == "kernel"
    assert recipe["values"]["factor"] == 2.0 and recipe["imports"]["math"] == ("math", None)
    x = torch.arange(5, dtype=torch.float32)
    assert torch.equal(grader.run(launch, _call, x), x * 2 * SCALE + 2)


def test_library_objects_travel_by_name_and_a_lambda_by_its_source():
    assert reader_code.copy_answer(reference.rmsnorm) == {
        "kind": "reference", "module": "fusedrms.reference", "name": "rmsnorm"}
    norm = lambda x, w, eps: reference.rmsnorm(x, w, eps)  # noqa: E731 - what a reader may write
    recipe = reader_code.copy_answer(norm)
    assert recipe["source"].startswith(f"{reader_code.LAMBDA_NAME} = lambda x, w, eps:")
    x, w = torch.randn(2, 5), torch.randn(5)
    assert torch.equal(grader.run(norm, _call, x, w, 1e-5), reference.rmsnorm(x, w, 1e-5))


def test_what_cannot_travel_is_named():
    lock = threading.Lock()

    def reads_a_lock():
        return lock.locked()

    with pytest.raises(reader_code.NotCopied, match="lock, a lock"):
        reader_code.copy_answer(reads_a_lock)
    with pytest.raises(reader_code.NotCopied, match="not a function"):
        reader_code.copy_answer(42)
    both = [lambda a: a, lambda a: -a]  # two lambdas alike on one line: which one is meant?
    with pytest.raises(reader_code.NotCopied, match="def"):
        reader_code.copy_answer(both[0])


def _factorial(n):
    return 1 if n <= 1 else n * _factorial(n - 1)


def test_a_recursive_function_and_text_travel():
    assert grader.run(_factorial, _call, 5) == 120
    assert reader_code.copy_answer("__device__ float f();") == {
        "kind": "text", "text": "__device__ float f();"}


@pytest.mark.skipif(env.current().on_gpu, reason="rebuilds in this process's interpreter")
def test_a_rebuilt_function_is_a_new_object(tmp_path):
    launch = _make_launcher(_times, 2.0)
    copy = reader_code.rebuild(reader_code.copy_answer(launch), tmp_path)
    assert copy is not launch and copy.__name__ == "launch"
    x = torch.ones(3)
    assert torch.equal(copy(x), launch(x))


def _logged(fn):
    import functools

    @functools.wraps(fn)
    def inner(*args, **kwargs):
        return fn(*args, **kwargs)

    return inner


@torch.no_grad()
def _scaled_without_grad(x):
    return _helper(x) + math.sqrt(4.0)


@_logged
def _scaled_and_logged(x):
    return _helper(x) + math.sqrt(4.0)


@pytest.mark.parametrize("answer", [_scaled_without_grad, _scaled_and_logged],
                         ids=["torch.no_grad", "functools.wraps"])
def test_a_decorated_function_travels_with_its_own_globals(answer):
    """The copy drops decorators; it must read the function's names, not its wrapper's."""
    x = torch.arange(5, dtype=torch.float32)
    assert torch.equal(grader.run(answer, _call, x), x * SCALE + 2)


class _NotebookError(ValueError):
    """A reader's exception, as a notebook cell defines it (module __main__, no source file)."""
    code = 3


class _NotebookSubError(_NotebookError):
    pass


class _WithMethod(ValueError):
    def __str__(self):
        return "custom"


for _cls in (_NotebookError, _NotebookSubError, _WithMethod):
    _cls.__module__ = "__main__"


@pytest.fixture
def notebook(monkeypatch):
    """The classes above defined in this process's __main__, as a notebook's cells define them:
    this process can pickle them by name; another process, whose __main__ is not the notebook,
    cannot import them."""
    import sys

    for cls in (_NotebookError, _NotebookSubError, _WithMethod):
        monkeypatch.setattr(sys.modules["__main__"], cls.__name__, cls, raising=False)


_NOTEBOOK_ERRORS = (_NotebookSubError, KeyError)


def _raises_a_notebook_error(which):
    raise _NOTEBOOK_ERRORS[which](f"case {which}")


def _returns_an_instance(_):
    err = _NotebookSubError("kept")
    return [err, _NotebookError]


def test_a_notebook_class_travels_and_comes_back_as_the_readers_own(notebook):
    with pytest.raises(_NotebookSubError, match="case 0") as raised:
        grader.run(_raises_a_notebook_error, _call, 0)
    assert type(raised.value) is _NotebookSubError and raised.value.code == 3
    err, cls = grader.run(_returns_an_instance, _call, 0)
    assert type(err) is _NotebookSubError and cls is _NotebookError and str(err) == "kept"


def test_a_class_defined_inside_a_function_travels():
    class Local(ValueError):
        pass

    def raises(n):
        raise Local(n)

    with pytest.raises(Local, match="7"):
        grader.run(raises, _call, 7)


def test_a_class_that_cannot_be_rebuilt_is_named_with_what_to_do(notebook):
    import abc

    def reads_a_method_class():
        raise _WithMethod("x")

    class Abstract(abc.ABC):
        pass

    def reads_an_abstract_class():
        return Abstract

    for answer, needle in ((reads_a_method_class, "_WithMethod, a class defined in your notebook, "
                                                  "has a method (__str__)"),
                           (reads_an_abstract_class, "metaclass ABCMeta")):
        with pytest.raises(reader_code.NotCopied, match=re.escape(needle)) as err:
            reader_code.copy_answer(answer)
        assert "plain values" in str(err.value) and "ValueError" in str(err.value)


def _defines_a_class_in_its_body(n):
    class Inner(ValueError):  # its body reads __name__ (for __module__): not the function's global
        pass

    return Inner.__name__, n + 1


def test_a_function_that_defines_a_class_in_its_body_travels():
    assert grader.run(_defines_a_class_in_its_body, _call, 1) == ("Inner", 2)
