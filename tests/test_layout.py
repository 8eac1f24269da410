"""The package's architecture, checked: one timer, a library that never imports the book, no
Python inside the shell scripts."""
import ast
import re
from pathlib import Path

import fusedrms

PKG = Path(fusedrms.__file__).resolve().parent
ROOT = PKG.parents[1]
LIBRARY = [p for p in PKG.rglob("*.py")
           if not {"book", "exercises", "data"} & set(p.relative_to(PKG).parts)]


def _imports(path: Path) -> set[str]:
    """Absolute names of the fusedrms modules ``path`` imports (relative imports resolved)."""
    package = ["fusedrms", *path.relative_to(PKG).parent.parts]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m.startswith("fusedrms")}


def test_only_the_timer_creates_gpu_events():
    makers = sorted(str(p.relative_to(PKG)) for p in PKG.rglob("*.py")
                    if re.search(r"\bEvent\(", p.read_text()))
    assert makers == ["measure/timer.py"]


# verify's negative tests (--kernel 'broken.*') run the deliberately broken kernels, whose one home
# is the book; and book.page (how a page shows things: the column width, badges) is presentation,
# not a chapter. Those are the only ways in.
ALLOWED = {"verify.py": {"fusedrms.book", "fusedrms.book.broken", "fusedrms.book.broken_backward"}}
PRESENTATION = "fusedrms.book.page"


def test_the_library_never_imports_the_book():
    offenders = {}
    for p in LIBRARY:
        rel = str(p.relative_to(PKG))
        bad = {m for m in _imports(p) if m.startswith("fusedrms.book")
               and m != "fusedrms.book" and not m.startswith(PRESENTATION)} - ALLOWED.get(rel, set())
        if bad:
            offenders[rel] = sorted(bad)
    assert not offenders


def test_no_python_inside_the_shell_scripts():
    for script in (ROOT / "code" / "scripts").rglob("*.sh"):
        text = script.read_text()
        assert not re.search(r"python3?\s+(-\s*<<|-c\b)", text), script


def test_each_chapter_experiment_has_one_home():
    """Only book/ modules write records (records.write) outside the harness, verify and ncu,
    which write the files their own command lines are asked for."""
    writers = sorted(str(p.relative_to(PKG)) for p in LIBRARY if "records.write(" in p.read_text())
    assert set(writers) <= {"measure/harness.py", "measure/ncu.py", "verify.py"}, writers


def _module(path: Path) -> str:
    parts = ["fusedrms", *path.relative_to(PKG).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_import_cycles_among_the_library_modules():
    """Counting imports inside functions too: a lazy import hides a cycle, it does not remove it."""
    modules = {_module(p): p for p in LIBRARY}
    graph = {m: {i for i in _imports(p) if i in modules and i != m} for m, p in modules.items()}
    for m in graph:  # importing fusedrms.a.b runs fusedrms.a's __init__ first: not an edge we own
        graph[m] = {i for i in graph[m] if not m.startswith(i + ".")}
    state, cycles = {}, []

    def visit(m, stack):
        state[m] = "open"
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                cycles.append(stack[stack.index(n):] + [n])
            elif n not in state:
                visit(n, stack + [n])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, cycles
