"""Chapter 7 checkers accept their solutions and reject every listed mistake."""
import pytest

from fusedrms.exercises import ch07

EXERCISES = [ch07.residual_variant, ch07.residual_bytes, ch07.autotune_key]


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: e.name)
def test_solution_passes(ex):
    fb = ex.check(ex.solution)
    assert fb.ok, str(fb)


@pytest.mark.parametrize("ex,label", [(e, m) for e in EXERCISES for m in e.mistakes],
                         ids=lambda v: getattr(v, "name", v))
def test_each_mistake_is_rejected_with_a_message(ex, label):
    fb = ex.check(ex.mistakes[label])
    assert not fb.ok
    assert fb.message and "Traceback" not in fb.message


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: e.name)
def test_placeholder_gets_a_prompt(ex):
    assert not ex.check(None).ok and "no answer yet" in ex.check(None).message


def test_bytes_solution_agrees_with_the_traffic_model():
    assert ch07.residual_bytes_expected() == ch07.residual_bytes.solution == 532_480


def test_residual_messages_name_the_mistake():
    msg = lambda m: str(ch07.residual_variant.check(ch07.residual_variant.mistakes[m]))
    assert "swapped" in msg("(s, y) swapped")
    assert "changed its inputs" in msg("writes into the residual")
    assert "raised IndexError" in msg("raises")
    assert "pair (y, s)" in msg("returns y only")
    assert "x alone" in msg("normalizes x, not x + r")
    assert "weight" in msg("weight forgotten")
    assert "launches" in msg("the kernel instead of the wrapper")


def test_key_accepts_aliases_and_order():
    assert ch07.autotune_key.check(("dtype", "n_cols")).ok
    assert ch07.autotune_key.check(["width", "DTYPE"]).ok
    assert "re-tunes" in ch07.autotune_key.check(["rows"]).message
    assert "derived" in ch07.autotune_key.check(["block"]).message


def test_page_solution_is_the_checked_solution():
    """The dropdown on the page shows exactly the code the tests accept (no drifting copy)."""
    from pathlib import Path

    import nbformat

    from fusedrms.viz import file_section

    nb = nbformat.read(Path(__file__).resolve().parents[2] / "chapters" / "07_capstone.ipynb", 4)
    section = file_section(ch07.__file__, "solution-kernel")
    assert any(c.cell_type == "markdown" and section in c.source for c in nb.cells)
