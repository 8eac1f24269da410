"""The contract every auto-checked exercise keeps, for every chapter's checker module.

The solution is accepted; each listed typical mistake is rejected with a hint; malformed answers
get a message, never a traceback. Chapter 4's kernel exercises have their own versions of these
tests (they need fresh recorded-data folders); each chapter's file adds what is specific to it.
"""
import importlib
import math

import pytest

from fusedrms import env

MODULES = [importlib.import_module(f"fusedrms.exercises.ch{n:02d}") for n in (1, 2, 3, 5, 6, 7, 8, 9)]
EXERCISES = [e for m in MODULES for e in m.ALL]
MALFORMED = [None, "abc", float("nan"), [1, 2, 3], {"a": 1}, math.inf, True, -5, "1/0"]


def _id(value):
    return value if isinstance(value, str) else getattr(value, "name", repr(value))


@pytest.mark.parametrize("exercise", EXERCISES, ids=_id)
def test_solution_is_accepted(exercise):
    if exercise.needs_gpu and not env.current().on_gpu:
        pytest.skip("graded from a GPU measurement")
    feedback = exercise.check(exercise.solution)
    assert feedback.ok, str(feedback)


@pytest.mark.parametrize("exercise,label", [(e, m) for e in EXERCISES for m in e.mistakes], ids=_id)
def test_typical_mistake_is_rejected_with_a_hint(exercise, label):
    feedback = exercise.check(exercise.mistakes[label])
    assert not feedback.ok, f"{exercise.name} accepted the mistake {label!r}"
    assert feedback.hint or len(feedback.message) > 20, f"{exercise.name}: no hint for {label!r}"


@pytest.mark.parametrize("exercise", EXERCISES, ids=_id)
@pytest.mark.parametrize("bad", MALFORMED, ids=repr)
def test_malformed_answers_get_a_message_not_a_traceback(exercise, bad):
    feedback = exercise.check(bad)
    assert not feedback.ok and feedback.message
