"""Put the one source of a kernel on the page: the book shows code from code/, never a copy."""
from __future__ import annotations

import inspect
import re
from pathlib import Path

from IPython.display import Code


def show_source(obj, language: str = "python") -> Code:
    """Source of a function or a ``@triton.jit`` kernel, highlighted."""
    fn = getattr(obj, "fn", obj)  # JITFunction / Autotuner wrap the Python function
    while hasattr(fn, "fn"):
        fn = fn.fn
    return Code(inspect.getsource(fn), language=language)


def file_section(path: str | Path, marker: str) -> str:
    """Text between ``[book:marker]`` and ``[/book:marker]`` comment lines in ``path``."""
    text = Path(path).read_text()
    match = re.search(rf"^[^\n]*\[book:{re.escape(marker)}\][^\n]*\n(.*?)^[^\n]*\[/book:{re.escape(marker)}\]",
                      text, flags=re.S | re.M)
    if match is None:
        raise KeyError(f"no section [book:{marker}] ... [/book:{marker}] in {path}")
    return match.group(1).rstrip() + "\n"


def show_file_section(path: str | Path, marker: str, language: str = "cpp") -> Code:
    return Code(file_section(path, marker), language=language)


def split_listing(text: str, max_lines: int = 20) -> list[str]:
    """``text`` cut into parts of at most ``max_lines`` lines, at statement boundaries where it
    can be: a cut goes before a line at the smallest indentation of the body (a top-level
    statement or decorator), never inside a bracket left open. A block longer than a part (a
    kernel's loop) is cut before one of its least indented statements, never right after a line
    that opens a block or a comment."""
    lines = text.rstrip("\n").split("\n")
    if len(lines) <= max_lines:
        return [text.rstrip("\n")]
    depth, starts, top, in_string = 0, [], set(), False
    nested = []  # statements inside a block: a cut here only where no body-level one fits
    indents = [len(ln) - len(ln.lstrip()) for ln in lines if ln.strip()]
    body = sorted(set(indents))[:2]  # the def line's indentation and the body's
    opener = comment = False  # the last line ends with ":" / is a comment: no cut after it
    for i, ln in enumerate(lines):
        indent = len(ln) - len(ln.lstrip())
        after_decorator = i > 0 and lines[i - 1].lstrip().startswith("@")
        quotes = ln.count('"""') + ln.count("'''")
        if in_string or quotes % 2:  # inside a docstring, or on a line that opens or closes one
            in_string ^= quotes % 2 == 1
            continue
        if depth == 0 and ln.strip() and not after_decorator and not \
                ln.lstrip().startswith((")", "]", "}", "else", "elif", "except", "finally")):
            if opener:  # a header stays with its first line
                pass
            elif indent in body:
                starts.append(i)
                if indent == body[0]:
                    top.add(i)
            elif not comment:  # a comment stays with the line it explains
                nested.append((indent, i))
        depth += sum(ln.count(c) for c in "([{") - sum(ln.count(c) for c in ")]}")
        if ln.strip():
            opener = re.sub(r"#.*", "", ln).rstrip().endswith(":")
            comment = ln.lstrip().startswith("#")
    parts, begin = [], 0
    while len(lines) - begin > max_lines:
        left = len(lines) - begin
        target = begin + -(-left // -(-left // max_lines))  # parts of about equal length
        cuts = [s for s in starts if begin < s <= begin + max_lines]
        # between functions where that keeps a part at least half full, else between statements
        tops = [s for s in cuts if s in top and s - begin >= max_lines // 2]
        pool = tops or cuts
        if pool:
            cut = min(pool, key=lambda s: abs(s - target))
        else:  # a block longer than a part: cut before its least indented statement
            inner = [(indent, s) for indent, s in nested if begin < s <= begin + max_lines]
            cut = min(inner, key=lambda t: (t[0], abs(t[1] - target)))[1] if inner else \
                begin + max_lines
        parts.append("\n".join(lines[begin:cut]).rstrip("\n"))
        begin = cut
    parts.append("\n".join(lines[begin:]))
    return [p for p in parts if p.strip()]


def listing_text(obj, marker: str | None = None) -> str:
    """What :func:`show_listing` shows: a file's ``[book:marker]`` section when ``marker`` is
    given (``obj`` then being the path), ``obj`` itself when it is a string, else the source of
    the function or ``@triton.jit`` kernel ``obj``."""
    if marker is not None:
        return file_section(obj, marker)
    if isinstance(obj, str):  # the listing itself
        return obj
    fn = getattr(obj, "fn", obj)
    while hasattr(fn, "fn"):
        fn = fn.fn
    return inspect.getsource(fn)


def show_listing(obj, max_lines: int = 20, language: str = "python", marker: str | None = None):
    """Display :func:`listing_text` of ``obj`` (and ``marker``) as consecutive blocks of at most
    ``max_lines`` lines, so a long kernel reads as a few short listings. Returns None (the blocks
    are displayed)."""
    from IPython.display import display

    for part in split_listing(listing_text(obj, marker), max_lines):
        display(Code(part, language=language))
