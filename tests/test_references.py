"""code/scripts/references.py: the References page generated from book/references.bib, and the
prose citing its entries with links that read in JupyterLab as in the book."""
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "code" / "scripts"))
import references  # noqa: E402

PAGES = sorted((ROOT / "chapters").glob("*.ipynb")) + sorted((ROOT / "book").glob("*.md"))


@pytest.fixture(scope="module")
def bib():
    return references.load()


@pytest.fixture(scope="module")
def labels(bib):
    return references.labels(bib)


@pytest.mark.parametrize("key, label", [
    ("higham2002accuracy", "Higham, 2002"),  # one author
    ("zhang2019rmsnorm", "Zhang and Sennrich, 2019"),  # two
    ("hsu2024liger", "Hsu et al., 2024"),  # three or more
    ("dubey2024llama3", "Dubey et al., 2024"),  # BibTeX's "and others"
    ("deepseek2024v3", "DeepSeek-AI, 2024"),  # an organization, as written
    ("amd_hip_guide", "Advanced Micro Devices, Inc., 2024"),  # braced: one name, commas kept
    ("tilefoundry", "tilefoundry, 2026"),  # no author: the title up to its colon
    ("nvidia_cuda_guide", "NVIDIA Corporation, 2024a"),  # same label: a, b in the page's order
    ("nvidia_transformer_engine", "NVIDIA Corporation, 2024b"),
])
def test_labels(labels, key, label):
    assert labels[key] == label


def test_labels_are_unique(labels):
    assert len(set(labels.values())) == len(labels)


def test_page_is_generated_from_the_bibliography():
    assert references.main(["--check"]) == 0, "run python code/scripts/references.py"


def test_page_lists_every_entry_after_its_target_in_sort_order(bib, labels):
    text = references.PAGE.read_text()
    assert text.startswith(references.INTRO)
    targets = [line[len("(cite-"):-len(")=")] for line in text.splitlines()
               if line.startswith("(cite-")]
    assert sorted(targets) == sorted(bib.entries)
    assert targets == [e.key for e in references.sorted_entries(bib)]
    assert targets.index("goldberg1991floating") < targets.index("higham2002accuracy")
    # links and DOIs stay links
    assert "[doi:10\\.1137/1\\.9780898718027](https://doi.org/10.1137/1.9780898718027)" in text
    assert "(https://arxiv.org/abs/1910.07467)" in text
    assert "(cite-higham2002accuracy)=\n**\\[Higham, 2002\\]** Nicholas J\\. Higham" in text


def test_page_check_fails_when_the_page_drifted(tmp_path, monkeypatch):
    page = tmp_path / "references.md"
    page.write_text(references.PAGE.read_text().replace("Higham", "Hingham", 1))
    monkeypatch.setattr(references, "PAGE", page)
    monkeypatch.setattr(references, "ROOT", tmp_path)
    assert references.main(["--check"]) == 1
    assert references.main([]) == 0 and references.main(["--check"]) == 0


def test_rewrite_turns_roles_into_links(labels):
    text = ("worst case {cite}`higham2002accuracy`; libraries "
            "{cite}`kwon2023vllm, ye2025flashinfer`.")
    assert references.rewrite_text(text, labels) == (
        "worst case \\[[Higham, 2002](cite-higham2002accuracy)\\]; libraries "
        "\\[[Kwon et al., 2023](cite-kwon2023vllm); [Ye et al., 2025](cite-ye2025flashinfer)\\].")
    with pytest.raises(ValueError, match="nobody2099"):
        references.rewrite_text("{cite}`nobody2099`", labels)


def test_rewrite_changes_only_the_markdown_cells_that_cite(tmp_path, labels):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("Plain."),
                nbformat.v4.new_markdown_cell("See {cite}`goldberg1991floating`."),
                nbformat.v4.new_code_cell("# {cite}`goldberg1991floating`")]
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    assert references.rewrite(path, labels)
    sources = [c.source for c in nbformat.read(path, as_version=4).cells]
    assert sources == ["Plain.", "See \\[[Goldberg, 1991](cite-goldberg1991floating)\\].",
                       "# {cite}`goldberg1991floating`"]
    assert not references.rewrite(path, labels)


def _markdown(path: Path) -> str:
    if path.suffix == ".ipynb":
        nb = nbformat.read(path, as_version=4)
        return "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    return path.read_text()


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_prose_cites_with_links_to_known_entries(path, bib, labels):
    text = _markdown(path)
    assert not references.CITE_ROLE.search(text), \
        f"a {{cite}} role (Lab shows it as a warning): python code/scripts/references.py " \
        f"--rewrite {path.relative_to(ROOT)}"
    links = references.CITE_LINK.findall(text)
    assert not [k for k in links if k not in bib.entries]
    for label, key in references.LABELLED_LINK.findall(text):  # the label of the work it names
        assert label == labels.get(key), (key, label)
