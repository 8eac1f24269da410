"""What every predict-then-check exercise's test asserts: the recorded answer passes as the solution
and as the reader would write it; each typical wrong prediction fails, with a hint, and its message
quotes the recorded value."""


def assert_prediction_contract(exercise, written: str, quoted: str) -> None:
    assert exercise.check(exercise.solution).ok
    assert exercise.check(written).ok
    for label, value in exercise.mistakes.items():
        fb = exercise.check(value)
        assert not fb.ok and fb.hint and quoted in fb.message, label
