"""code/scripts/lab_ready.py: a chapter converted so that its inline values read in JupyterLab
and in the book, its plumbing collapsed in Lab; what it cannot convert, refused by cell."""
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
sys.path.insert(0, str(ROOT / "code" / "scripts"))
import lab_ready  # noqa: E402


def _notebook(*cells):
    nb = nbformat.v4.new_notebook()
    for kind, source, tags in cells:
        make = nbformat.v4.new_code_cell if kind == "code" else nbformat.v4.new_markdown_cell
        cell = make(source)
        if tags:
            cell.metadata["tags"] = list(tags)
        nb.cells.append(cell)
    return nb


def _chapter():
    return _notebook(
        ("code", "from fusedrms.book import page", ["hide-input"]),
        ("code", 'page.glue("speed", 2.5, ".1f")\nfor d in ("bf16", "fp16"):\n'
                 '    page.glue(f"{d}_ulp", 1)', ["remove-input"]),
        ("markdown", "Speed {glue:text}`speed`, {glue}`bf16_ulp` and {glue:text}`fp16_ulp`.", []),
        ("code", 'page.glue("late", "x")', ["remove-cell"]),
        ("markdown", "Then {glue:text}`late`.", []),
        ("code", "print(1)", ["hide-output"]),
        ("code", "print(2)", []),
    )


def test_convert_rewrites_roles_runs_inline_and_collapses_what_the_site_hides():
    nb = _chapter()
    assert lab_ready.convert(nb)
    setup, glue, prose, late, late_prose, printed, plain = nb.cells
    assert prose.source == "Speed {eval}`speed`, {eval}`bf16_ulp` and {eval}`fp16_ulp`."
    assert late_prose.source == "Then {eval}`late`."
    assert nb.metadata["mystnb"] == {"execution_mode": "inline"}
    assert late.metadata["tags"] == ["remove-input", "remove-output"]
    assert setup.metadata["jupyter"] == {"source_hidden": True}
    assert glue.metadata["jupyter"] == {"source_hidden": True}
    assert late.metadata["jupyter"] == {"source_hidden": True, "outputs_hidden": True}
    assert printed.metadata["jupyter"] == {"outputs_hidden": True}
    assert "jupyter" not in plain.metadata
    assert not lab_ready.convert(nb), "converting twice changes nothing"
    assert lab_ready.check(nb) == []


def test_check_finds_a_converted_notebook_that_drifted():
    nb = _chapter()
    lab_ready.convert(nb)
    nb.cells[6].metadata["tags"] = ["remove-input"]  # tagged after the conversion
    nb.cells[4].source += " And {glue:text}`speed`."
    problems = lab_ready.check(nb)
    assert len(problems) == 1 and "run python code/scripts/lab_ready.py" in problems[0]
    assert lab_ready.check(_chapter()) == [], "an unconverted notebook is not checked"


@pytest.mark.parametrize("cells, says", [
    ([("code", 'page.glue("speed", 2.5)', []), ("markdown", "{glue:text}`speed:.1f`", [])],
     "format in page.glue('speed', value, '.1f')"),
    ([("markdown", "{glue:text}`speed`", []), ("code", 'page.glue("speed", 2.5)', [])],
     "'speed' is glued only further down, in cell 1"),
    ([("code", 'page.glue("speed", 2.5)', []), ("markdown", "{glue:text}`sped`", [])],
     "no code cell glues 'sped'"),
    ([("code", 'ridge = 3\npage.glue("ridge", ridge)', []), ("markdown", "{glue:text}`ridge`", [])],
     "glues 'ridge', which cell 0 also uses as a variable"),
    ([("code", 'bound_plain = 3\nfor n in ("plain",):\n    page.glue(f"bound_{n}", 1)', []),
      ("markdown", "{glue:text}`bound_plain`", [])],
     "glues 'bound_plain' (an f-string), which cell 0 also uses as a variable"),
    ([("code", 'page.glue("speed", 2.5)', []), ("markdown", "{eval}`speed * 2`", [])],
     "is not a glued name"),
    ([("code", 'page.glue("speed", 2.5)', []), ("markdown", "```{glue:figure} speed\n```", [])],
     "a glue directive"),
])
def test_convert_refuses_what_it_cannot_convert_and_changes_nothing(cells, says):
    nb = _notebook(*cells)
    before = nbformat.writes(nb)
    with pytest.raises(ValueError, match=r"cell \d") as err:
        lab_ready.convert(nb)
    assert says in str(err.value)
    assert nbformat.writes(nb) == before


def test_a_local_variable_of_a_function_is_not_a_collision():
    nb = _notebook(("code", 'def f():\n    speed = 1\n    return speed\n'
                            'page.glue("speed", [x for x in (1,)][0])', []),
                   ("markdown", "{glue:text}`speed`", []))
    assert lab_ready.problems(nb) == []


def test_the_command_converts_in_place_and_checks(tmp_path, capsys):
    path = tmp_path / "ch.ipynb"
    nbformat.write(_chapter(), path)
    assert lab_ready.main(["--check", str(path)]) == 0
    assert lab_ready.main([str(path)]) == 0
    assert "{eval}`speed`" in path.read_text()
    assert lab_ready.main(["--check", str(path)]) == 0
    bad = tmp_path / "bad.ipynb"
    nbformat.write(_notebook(("markdown", "{glue:text}`nothing`", [])), bad)
    assert lab_ready.main([str(bad)]) == 1
    assert "no code cell glues 'nothing'" in capsys.readouterr().err


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_converted_chapters_stay_converted(path):
    nb = nbformat.read(path, as_version=4)
    assert lab_ready.check(nb) == []


GLOSSARY = """# Glossary

```{glossary}
ULP
Unit in the last place
  The gap to the next number; see {term}`unit roundoff <Unit roundoff>`
  and {term}`ulps <ULP>`.

  A second paragraph \\[[Higham, 2002](cite-higham2002accuracy)\\].

Unit roundoff
  Half an {term}`ULP` above 1.
```
Not a term.
"""


def test_glossary_entries_read_sphinx_layout():
    entries = lab_ready.glossary_entries(GLOSSARY)
    assert set(entries) == {"ulp", "unit in the last place", "unit roundoff"}
    names, lines = entries["ulp"]
    assert names == ["ULP", "Unit in the last place"]
    assert [line for line in lines if line][-1] == \
        "A second paragraph \\[[Higham, 2002](cite-higham2002accuracy)\\]."


def test_terms_and_references_cell_for_lab_only(tmp_path, monkeypatch):
    glossary = tmp_path / "glossary.md"
    glossary.write_text(GLOSSARY)
    monkeypatch.setattr(lab_ready, "GLOSSARY", glossary)
    nb = _notebook(("markdown", "A gap in {term}`ulps <ULP>` "
                                "\\[[Zhang and Sennrich, 2019](cite-zhang2019rmsnorm)\\].", []),
                   ("code", "x = 1", []))
    assert lab_ready.convert(nb)
    cell = nb.cells[-1]
    assert cell.metadata["tags"] == ["lab-only", "remove-cell"]  # the book never shows it
    text = cell.source
    assert text.startswith("## Terms and references")
    # mystmd's glossary: a definition list; a term outside the list reads as plain text
    assert "```{glossary}\nULP\nUnit in the last place\n: The gap to the next number; see " \
           "unit roundoff and {term}`ulps <ULP>`.\n\n  A second paragraph" in text
    # each work under the label the prose shows; the glossary entry's citation counts too
    assert "- **Higham, 2002**: Nicholas J\\. Higham" in text
    assert "- **Zhang and Sennrich, 2019**: Biao Zhang and Rico Sennrich" in text
    assert not lab_ready.convert(nb) and lab_ready.check(nb) == []
    glossary.write_text(GLOSSARY.replace("Half an", "One half of an"))
    nb.cells.insert(1, nbformat.v4.new_markdown_cell("{term}`Unit roundoff`"))
    assert lab_ready.check(nb), "the glossary or the prose changed: the cell is behind"
    lab_ready.convert(nb)
    assert nb.cells[-1].id == cell.id and "One half of an {term}`ULP`" in nb.cells[-1].source
    nb.cells[:2] = [nbformat.v4.new_markdown_cell("No links.")]
    lab_ready.convert(nb)
    assert all("lab-only" not in c.metadata.get("tags", []) for c in nb.cells)


def test_a_link_to_a_work_the_bibliography_lacks_is_refused():
    nb = _notebook(("markdown", "\\[[Nobody, 2099](cite-nobody2099)\\]", []))
    with pytest.raises(ValueError, match=r"keys missing from references.bib: \['nobody2099'\]"):
        lab_ready.convert(nb)


def test_a_term_the_glossary_lacks_is_refused(tmp_path, monkeypatch):
    glossary = tmp_path / "glossary.md"
    glossary.write_text(GLOSSARY)
    monkeypatch.setattr(lab_ready, "GLOSSARY", glossary)
    nb = _notebook(("markdown", "{term}`Warp`", []))
    with pytest.raises(ValueError, match=r"\{term\} targets missing from glossary.md: \['Warp'\]"):
        lab_ready.convert(nb)
