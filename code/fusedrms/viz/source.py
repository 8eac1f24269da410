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
