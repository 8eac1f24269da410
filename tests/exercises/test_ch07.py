"""Chapter 7 checkers beyond the shared contract in test_every_exercise.py."""

from fusedrms.exercises import ch07



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
