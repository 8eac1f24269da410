"""Make a chapter read completely in JupyterLab as well as in the built book.

    python code/scripts/lab_ready.py chapters/03_hip.ipynb [...]   # convert in place
    python code/scripts/lab_ready.py --check chapters/*.ipynb     # exit 1: a converted one drifted

A converted chapter:

- writes its inline values as ``{eval}`name``` where it wrote ``{glue:text}`name``` (or
  ``{glue}`name```). ``page.glue(name, value, fmt)`` binds ``name`` to the formatted text in the
  notebook, so jupyterlab-myst shows it once the markdown cell runs (Run All runs every cell),
  and myst-nb shows it in the built book;
- asks myst-nb to execute it inline (notebook metadata ``mystnb.execution_mode: inline``): the
  book evaluates each ``{eval}`` in the kernel, after the cells above it have run;
- keeps every code cell on the page's execution path: ``remove-cell`` becomes ``remove-input`` +
  ``remove-output`` (myst-nb's inline mode runs a removed cell only when the next rendered code
  cell runs, so the prose in between would read the values before it);
- collapses in JupyterLab what the site hides: ``hide-input``/``remove-input`` set
  ``jupyter.source_hidden``, ``hide-output``/``remove-output`` set ``jupyter.outputs_hidden``
  (one click opens either). The tags stay the one source: the metadata follows them;
- ends with a "Terms and references" cell for JupyterLab only (tags ``lab-only``,
  ``remove-cell``: the book has its Glossary and References pages). jupyterlab-myst resolves a
  ``{term}`` only against a glossary in the same notebook, and has no bibliography (the prose
  cites with links, ``\\[[Higham, 2002](cite-higham2002accuracy)\\]``, that
  code/scripts/references.py writes): the cell holds the glossary entries of the chapter's terms
  (from book/glossary.md) and the works it cites, under the labels the prose shows (from
  book/references.bib). Rerun the script when either file changes (the check says so).

It refuses, naming the cell, what it cannot convert mechanically: a format in the prose
(``{glue:text}`name:.1f```: format in ``page.glue`` instead), a glue directive, an ``{eval}`` of
something that is not a glued name, a name no earlier cell glues, and a glued name that the
notebook's code also uses as a variable (``page.glue`` leaves the code's variable alone, so the
prose would show it).
"""
from __future__ import annotations

import argparse
import ast
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
import notebooks  # noqa: E402
import references  # noqa: E402

INLINE = {"execution_mode": "inline"}
GLUE_ROLE = re.compile(r"\{glue(?::(?:text|any))?\}`([^`]*)`")
OTHER_GLUE = re.compile(r"\{glue:[a-z]+\}|```+\s*\{glue")
EVAL_ROLE = re.compile(r"\{eval\}`([^`]*)`")
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")  # myst-nb's default eval_name_regex
SOURCE_HIDDEN_BY = ("hide-input", "remove-input")
OUTPUTS_HIDDEN_BY = ("hide-output", "remove-output")
ROOT = Path(__file__).resolve().parents[2]
GLOSSARY = ROOT / "book" / "glossary.md"
LAB_ONLY = ["lab-only", "remove-cell"]
TERM_ROLE = re.compile(r"\{term\}`([^`<]*?)(?:\s*<([^>`]+)>)?`")
TERMS_HEADING = "## Terms and references"


@dataclass
class Glued:
    """What the code cells glue: literal names and f-string patterns, with the first cell."""
    names: dict[str, int] = field(default_factory=dict)
    patterns: list[tuple[re.Pattern, int]] = field(default_factory=list)
    variables: dict[str, int] = field(default_factory=dict)  # names the code assigns

    def first_cell(self, name: str) -> int | None:
        cells = [i for p, i in self.patterns if p.fullmatch(name)]
        if name in self.names:
            cells.append(self.names[name])
        return min(cells) if cells else None


def is_converted(nb) -> bool:
    return nb.metadata.get("mystnb", {}).get("execution_mode") == "inline"


def _python(source: str) -> ast.AST | None:
    """A code cell as Python (IPython magics translated), or None if it does not parse."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        source = TransformerManager().transform_cell(source)
    except ImportError:
        pass
    try:
        return ast.parse(source)
    except SyntaxError:
        return None


def _glue_name(arg: ast.AST) -> str | re.Pattern | None:
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr):  # f"share_{name}" -> share_.+
        parts = [re.escape(p.value) if isinstance(p, ast.Constant) else ".+" for p in arg.values]
        return re.compile("".join(parts))
    return None


def glued(nb) -> Glued:
    found = Glued()
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        tree = _python(cell.source)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and node.args and (
                    (isinstance(node.func, ast.Attribute) and node.func.attr == "glue")
                    or (isinstance(node.func, ast.Name) and node.func.id == "glue")):
                name = _glue_name(node.args[0])
                if isinstance(name, str):
                    found.names.setdefault(name, index)
                elif name is not None:
                    found.patterns.append((name, index))
        for name in _module_level_names(tree):
            found.variables.setdefault(name, index)
    return found


def _module_level_names(tree: ast.AST):
    """Names a cell binds in the notebook's namespace (not inside functions or classes)."""
    scopes = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp,
              ast.SetComp, ast.DictComp, ast.GeneratorExp)
    todo = list(ast.iter_child_nodes(tree))
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            yield node.id
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            yield from ((a.asname or a.name).split(".")[0] for a in node.names)
        if isinstance(node, scopes):
            if not isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp,
                                     ast.GeneratorExp)):
                yield node.name
            continue
        todo.extend(ast.iter_child_nodes(node))


def _where(index: int, cell) -> str:
    first = next((line.strip() for line in cell.source.splitlines() if line.strip()), "")
    return f"cell {index} ({first[:50]!r})"


def problems(nb) -> list[str]:
    """What keeps the chapter from converting (or a converted one from reading right)."""
    found, out = glued(nb), []
    for name, index in found.names.items():
        if name in found.variables:
            out.append(f"{_where(index, nb.cells[index])} glues {name!r}, which cell "
                       f"{found.variables[name]} also uses as a variable: rename one of them")
    patterned = set()  # prose names glued through an f-string that the code also assigns
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        if OTHER_GLUE.search(GLUE_ROLE.sub("", cell.source)):
            out.append(f"{_where(index, cell)}: a glue directive or role other than "
                       "{glue:text}: show the value from a code cell instead")
        names = GLUE_ROLE.findall(cell.source) + EVAL_ROLE.findall(cell.source)
        for name in names:
            if ":" in name and NAME.match(name.split(":")[0]):
                out.append(f"{_where(index, cell)}: {name!r} formats in the prose: format in "
                           f"page.glue({name.split(':')[0]!r}, value, {name.split(':', 1)[1]!r})")
                continue
            if not NAME.match(name):
                out.append(f"{_where(index, cell)}: {{eval}}`{name}` is not a glued name "
                           "(myst-nb evaluates names only)")
                continue
            first = found.first_cell(name)
            if first is not None and name not in found.names and name in found.variables \
                    and name not in patterned:
                patterned.add(name)
                out.append(f"{_where(first, nb.cells[first])} glues {name!r} (an f-string), "
                           f"which cell {found.variables[name]} also uses as a variable: "
                           "rename one of them")
            if first is None:
                out.append(f"{_where(index, cell)}: no code cell glues {name!r}")
            elif first > index:
                out.append(f"{_where(index, cell)}: {name!r} is glued only further down, in cell "
                           f"{first}: a reader running the notebook reaches the prose first")
    return out


def _lab_metadata(cell) -> bool:
    """Set ``jupyter.source_hidden``/``outputs_hidden`` from the cell's tags; True if changed."""
    tags = cell.metadata.get("tags", [])
    want = {"source_hidden": any(t in tags for t in SOURCE_HIDDEN_BY),
            "outputs_hidden": any(t in tags for t in OUTPUTS_HIDDEN_BY)}
    jupyter = dict(cell.metadata.get("jupyter", {}))
    for key, hidden in want.items():
        if hidden:
            jupyter[key] = True
        else:
            jupyter.pop(key, None)
    if jupyter == cell.metadata.get("jupyter", {}):
        return False
    if jupyter:
        cell.metadata["jupyter"] = jupyter
    else:
        del cell.metadata["jupyter"]
    return True


def convert(nb) -> bool:
    """Convert ``nb`` in place (see the module's docstring); True if anything changed. Raises
    ValueError listing every problem, and changes nothing, when it cannot."""
    found = problems(nb)
    if found:
        raise ValueError("\n".join(found))
    changed = False
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            source = GLUE_ROLE.sub(lambda m: f"{{eval}}`{m.group(1)}`", cell.source)
            changed |= source != cell.source
            cell.source = source
        elif cell.cell_type == "code":
            tags = cell.metadata.get("tags", [])
            if "remove-cell" in tags:
                tags = [t for t in tags if t != "remove-cell"]
                tags += [t for t in ("remove-input", "remove-output") if t not in tags]
                cell.metadata["tags"] = tags
                changed = True
            changed |= _lab_metadata(cell)
    if not is_converted(nb):
        nb.metadata["mystnb"] = {**nb.metadata.get("mystnb", {}), **INLINE}
        changed = True
    changed |= _terms_and_references(nb)
    changed |= notebooks.clean(nb)
    return changed


# -- the Lab-only terms and references ---------------------------------------------------------

def glossary_entries(text: str) -> dict[str, tuple[list[str], str]]:
    """The ``{glossary}`` block of a MyST page: lowercased term -> (its names, its definition
    lines). Sphinx's layout: term lines at column 0 (several name one entry), the definition
    indented below."""
    block = re.search(r"^```\{glossary\}\n(.*?)^```", text, re.S | re.M)
    entries, names, lines = {}, [], []

    def close():
        for name in names:
            entries[name.lower()] = (list(names), list(lines))
    for line in (block.group(1) if block else "").splitlines():
        if line.strip() and not line[0].isspace():
            if lines:
                close()
                names, lines = [], []
            names.append(line.strip())
        elif names:
            lines.append(line.strip())
    if names:
        close()
    return entries


def _term_target(match: re.Match) -> str:
    return (match.group(2) or match.group(1)).strip()


def _glossary_markdown(targets: list[str], entries: dict) -> list[str]:
    """A MyST definition list (mystmd's glossary syntax): each term, then ``: definition``. A term
    a definition mentions that is not in the list reads as plain text."""
    shown = {entries[t.lower()][0][0] for t in targets}

    def unlink(match):
        name = entries.get(_term_target(match).lower(), ([None],))[0][0]
        return match.group(0) if name in shown else (match.group(1).strip() or name)
    out = []
    for name in sorted(shown, key=str.lower):
        names, lines = entries[name.lower()]
        body = "\n".join(lines).strip().split("\n\n")
        paragraphs = [TERM_ROLE.sub(unlink, " ".join(p.split())) for p in body]
        out += names + [": " + "\n\n  ".join(paragraphs), ""]
    return out


def _reference_lines(keys: list[str]) -> list[str]:
    bib = references.load()
    missing = [k for k in keys if k not in bib.entries]
    if missing:
        raise ValueError(f"cite- links to keys missing from {references.BIB.name}: {missing}")
    label = references.labels(bib)  # in the References page's order
    text = references.entry_markdown(bib.entries[k] for k in label if k in keys)
    return [f"- **{label[k]}**: {line}" for k, line in text.items()]


def terms_and_references(nb) -> str | None:
    """The Lab-only cell's markdown for ``nb``'s ``{term}`` roles and ``](cite-KEY)`` links, or
    None."""
    prose = "\n".join(c.source for c in nb.cells
                      if c.cell_type == "markdown" and "lab-only" not in c.metadata.get("tags", []))
    targets = list(dict.fromkeys(_term_target(m) for m in TERM_ROLE.finditer(prose)))
    glossary = []
    if targets:
        entries = glossary_entries(GLOSSARY.read_text())
        unknown = [t for t in targets if t.lower() not in entries]
        if unknown:
            raise ValueError(f"{{term}} targets missing from {GLOSSARY.name}: {unknown}")
        glossary = ["", "```{glossary}", *_glossary_markdown(targets, entries)[:-1], "```"]
    keys = list(dict.fromkeys(references.CITE_LINK.findall(prose + "\n".join(glossary))))
    if not targets and not keys:
        return None
    what = " and ".join(w for w, used in (("glossary entries", targets), ("works", keys)) if used)
    pages = " and ".join(w for w, used in (("Glossary", targets), ("References", keys)) if used)
    lines = [TERMS_HEADING, "",
             f"The {what} this chapter links to, for reading it in JupyterLab (the book links "
             f"them to its {pages} {'pages' if targets and keys else 'page'}).", *glossary]
    if keys:
        lines += [""] + _reference_lines(keys)
    return "\n".join(lines)


def _terms_and_references(nb) -> bool:
    """Put the Lab-only cell at the end (or drop it when nothing needs it); True if changed."""
    want = terms_and_references(nb)
    old = [c for c in nb.cells if "lab-only" in c.metadata.get("tags", [])]
    if want is None and not old:
        return False
    if old and old[0] is nb.cells[-1] and len(old) == 1 and old[0].source == want:
        return False
    nb.cells = [c for c in nb.cells if c not in old]
    if want is not None:
        cell = nbformat.v4.new_markdown_cell(want)
        cell.metadata["tags"] = list(LAB_ONLY)
        if old:
            cell.id = old[0].id  # stays the same cell for git and for JupyterLab
        nb.cells.append(cell)
    return True


def check(nb) -> list[str]:
    """For a converted notebook: what converting it again would change or refuse."""
    if not is_converted(nb):
        return []
    copy = nbformat.from_dict(nb)
    try:
        if convert(copy):
            return ["it differs from its conversion (a {glue} role, a remove-cell tag, "
                    "jupyter.source_hidden/outputs_hidden not following the tags, or its terms "
                    "and references cell behind the prose, book/glossary.md or "
                    "book/references.bib): run python code/scripts/lab_ready.py on it"]
    except ValueError as err:
        return str(err).splitlines()
    return []


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if a converted notebook drifted")
    parser.add_argument("notebooks", nargs="+", type=Path)
    args = parser.parse_args(argv)
    failed = False
    for path in args.notebooks:
        nb = nbformat.read(path, as_version=4)
        if args.check:
            found = check(nb) if is_converted(nb) else []
            status = "converted" if is_converted(nb) else "not converted"
            print(f"{path}: {status}" + "".join(f"\n  {p}" for p in found))
            failed |= bool(found)
            continue
        try:
            changed = convert(nb)
        except ValueError as err:
            print(f"{path}: not converted, fix these first:\n  "
                  + str(err).replace("\n", "\n  "), file=sys.stderr)
            failed = True
            continue
        if changed:
            nbformat.write(nb, path)
        print(f"{path}: {'converted' if changed else 'already converted'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
