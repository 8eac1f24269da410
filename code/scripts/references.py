"""The book's references page and its citations, from book/references.bib, readable everywhere.

    python code/scripts/references.py                          # write book/references.md
    python code/scripts/references.py --check                  # exit 1: the page drifted
    python code/scripts/references.py --rewrite chapters/*.ipynb book/glossary.md
        # turn {cite}`key` roles into links to the page's entries

JupyterLab (jupyterlab-myst) has no bibliography: a ``{cite}`` role shows there as its key with a
warning sign. So the prose cites with a plain link,
``\\[[Higham, 2002](cite-higham2002accuracy)\\]``, which reads the same in Lab and in the book,
and the book resolves ``cite-KEY`` to the MyST target this script writes before each entry of
book/references.md. The label is the author-year label sphinxcontrib-bibtex showed
(``author_year`` style), with ``a``/``b`` where two works share one. Rewrite the page after editing
references.bib (the check says so).
"""
from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
BIB = ROOT / "book" / "references.bib"
PAGE = ROOT / "book" / "references.md"
CITE_ROLE = re.compile(r"\{cite(?::[a-z]+)?\}`([^`]+)`")
CITE_LINK = re.compile(r"\]\(cite-([^)\s]+)\)")
LABELLED_LINK = re.compile(r"\[([^\[\]]+)\]\(cite-([^)\s]+)\)")  # (label, key)
INTRO = """# References

Papers, technical reports and vendor datasheets the book relies on. Chapters cite them where a
fact or an idea comes from; datasheet figures are *published* peaks, which the book compares with
what it measures, never substitutes for a measurement.
"""


def load(path: Path = BIB):
    from pybtex.database import parse_file

    return parse_file(str(path))


def _style():
    from pybtex.plugin import find_plugin

    return find_plugin("pybtex.style.formatting", "plain")()


def sorted_entries(bib) -> list:
    """The entries in the order sphinxcontrib-bibtex's plain style lists them (author, year,
    title)."""
    return list(_style().sort(bib.entries.values()))


def _plain(latex: str) -> str:
    from pybtex.richtext import Text

    return " ".join(Text.from_latex(latex).render_as("text").split())


def _surname(person) -> str:
    return " ".join(_plain(str(part)) for part in
                    person.rich_prelast_names + person.rich_last_names)


def _who(entry) -> str:
    """The author part of the label: one name, two joined by "and", or the first "et al."; an
    organization as written; with no author, the title up to its colon (else the key)."""
    persons = entry.persons.get("author") or entry.persons.get("editor") or []
    if not persons:
        title = _plain(entry.fields.get("title", "")).split(":")[0].strip()
        return title or entry.key
    names = [_surname(p) for p in persons]
    if names[-1] == "others":  # BibTeX's "and others": more authors than listed
        return f"{names[0]} et al."
    if len(names) == 1:
        return names[0]
    if len(names) == 2:
        return f"{names[0]} and {names[1]}"
    return f"{names[0]} et al."


def labels(bib) -> dict[str, str]:
    """key -> "Higham, 2002"; works whose labels would coincide get "2024a", "2024b" in the
    page's order."""
    plain = {e.key: f"{_who(e)}, {e.fields.get('year', 'n.d.')}" for e in sorted_entries(bib)}
    shared = defaultdict(list)
    for key, label in plain.items():
        shared[label].append(key)
    out = {}
    for label, keys in shared.items():
        for i, key in enumerate(keys):
            out[key] = label + ("abcdefghijklmnopqrstuvwxyz"[i] if len(keys) > 1 else "")
    return out


def entry_markdown(entries) -> dict[str, str]:
    """key -> the entry formatted by pybtex's plain style as one line of Markdown (links kept)."""
    from pybtex.plugin import find_plugin

    markdown = find_plugin("pybtex.backends", "markdown")()
    return {e.key: " ".join(e.text.render(markdown).split())
            for e in _style().format_entries(entries)}


def page(bib) -> str:
    """book/references.md: the title and intro, then each entry after its ``(cite-KEY)=``
    target, labelled as the prose cites it."""
    entries = sorted_entries(bib)
    label, text = labels(bib), entry_markdown(entries)
    blocks = [INTRO]
    for e in entries:
        blocks.append(f"(cite-{e.key})=\n**\\[{label[e.key]}\\]** {text[e.key]}\n")
    return "\n".join(blocks)


def cite_link(keys: list[str], label: dict[str, str]) -> str:
    """``\\[[Higham, 2002](cite-higham2002accuracy)\\]``; several keys joined by "; "."""
    missing = [k for k in keys if k not in label]
    if missing:
        raise ValueError(f"{{cite}} keys missing from {BIB.name}: {missing}")
    return "\\[" + "; ".join(f"[{label[k]}](cite-{k})" for k in keys) + "\\]"


def rewrite_text(text: str, label: dict[str, str]) -> str:
    """``text`` with every ``{cite}`k1,k2``` role replaced by its links."""
    return CITE_ROLE.sub(
        lambda m: cite_link([k.strip() for k in m.group(1).split(",") if k.strip()], label), text)


def rewrite(path: Path, label: dict[str, str]) -> bool:
    """Rewrite the roles in a notebook's markdown cells (only those that have one) or in a
    Markdown page; True if it changed."""
    if path.suffix == ".ipynb":
        nb = nbformat.read(path, as_version=4)
        changed = False
        for cell in nb.cells:
            if cell.cell_type == "markdown" and CITE_ROLE.search(cell.source):
                cell.source = rewrite_text(cell.source, label)
                changed = True
        if changed:
            nbformat.write(nb, path)
        return changed
    text = path.read_text()
    new = rewrite_text(text, label)
    if new != text:
        path.write_text(new)
    return new != text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help=f"change nothing; exit 1 if {PAGE.name} is not what this writes")
    parser.add_argument("--rewrite", nargs="+", type=Path, metavar="FILE",
                        help="replace {cite} roles in these notebooks / Markdown pages by links")
    args = parser.parse_args(argv)
    bib = load()
    if args.rewrite:
        label = labels(bib)
        for path in args.rewrite:
            print(f"{path}: {'rewritten' if rewrite(path, label) else 'no {cite} role'}")
        return 0
    want = page(bib)
    if args.check:
        if PAGE.read_text() != want:
            print(f"{PAGE.relative_to(ROOT)} differs from {BIB.name}: run "
                  "python code/scripts/references.py")
            return 1
        print(f"{PAGE.relative_to(ROOT)}: up to date")
        return 0
    PAGE.write_text(want)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
