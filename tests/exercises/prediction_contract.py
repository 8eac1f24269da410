"""What every predict-then-check exercise's test asserts: the recorded answer passes as the solution
and as the reader would write it; each typical wrong prediction fails, with a hint, and its message
quotes the recorded value."""


def assert_prediction_contract(exercise, written: str, quoted: str) -> None:
    assert exercise.check(exercise.solution).ok
    assert exercise.check(written).ok
    for label, value in exercise.mistakes.items():
        fb = exercise.check(value)
        assert not fb.ok and fb.hint and quoted in fb.message, label


def assert_asked_before_shown(notebook: str, ask: str, shown: str, check: str) -> None:
    """In ``chapters/<notebook>``, the cell holding ``ask`` (the reader's prediction) comes before
    the one holding ``shown`` (the value), which comes before ``check``; the cell after the check
    folds the solution."""
    from pathlib import Path

    import nbformat

    nb = nbformat.read(Path(__file__).resolve().parents[2] / "chapters" / notebook, 4)
    where = [next(i for i, c in enumerate(nb.cells) if key in c.source)
             for key in (ask, shown, check)]
    assert where[0] < where[1] < where[2], where
    assert nb.cells[where[2] + 1].source.startswith("```{admonition} Solution\n:class: dropdown")
