"""Argument types shared by the package's command lines.

Each is an ``argparse`` ``type=``: a bad value becomes a usage message naming the argument and
exit status 2, never a traceback from deep inside (``--rows -1``, ``--seed 99999999999999999999``,
``--eps nan``, ``--dtypes fp64``, a result file that does not exist)::

    p.add_argument("--rows", type=cli.whole(1), default=1024)
    p.add_argument("--eps", type=cli.eps, default=1e-5)
"""
from __future__ import annotations

import argparse
import math
import os
import tempfile
from pathlib import Path

SEED_MAX = 2 ** 63 - 1  # torch.manual_seed takes 64-bit seeds
MAX_ELEMENTS = 1 << 28  # rows x cols a command line allocates (1 GiB of fp32), say so beyond


def _named(fn, name: str):
    fn.__name__ = name  # argparse says "invalid <name> value" for a ValueError
    return fn


def whole(low: int = 0, high: int | None = None):
    """A whole number in ``[low, high]``."""
    def parse(text: str) -> int:
        try:
            value = int(str(text).strip(), 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low or (high is not None and value > high):
            bound = f"from {low} to {high}" if high is not None else f">= {low}"
            raise argparse.ArgumentTypeError(f"must be a whole number {bound}, got {value}")
        return value

    return _named(parse, "whole number")


seed = whole(0, SEED_MAX)


def whole_list(low: int = 1, high: int | None = None):
    """Whole numbers separated by commas (``1024,4096``), each in ``[low, high]``."""
    one = whole(low, high)

    def parse(text: str) -> tuple:
        parts = [p for p in str(text).split(",") if p.strip()]
        if not parts:
            raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}")
        return tuple(one(p) for p in parts)

    return _named(parse, "list of whole numbers")


def number(low: float | None = None, high: float | None = None, above: bool = False):
    """A finite float in ``[low, high]`` (``above=True``: strictly greater than ``low``)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
        if low is not None and (value <= low if above else value < low):
            raise argparse.ArgumentTypeError(f"must be {'>' if above else '>='} {low:g}, got {value:g}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be <= {high:g}, got {value:g}")
        return value

    return _named(parse, "number")


def eps(text: str) -> float:
    """An epsilon the kernels accept (:func:`fusedrms.validation.check_eps`)."""
    from . import validation

    value = number()(text)
    try:
        return validation.check_eps(value)
    except validation.InputError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def dtype_name(text: str) -> str:
    """An input dtype a kernel reads, in any spelling :mod:`fusedrms.dtypes` knows (fp32, bf16,
    fp16, float32, bfloat16, ...): returns the short name."""
    from . import dtypes

    try:
        name = dtypes.short(text)
    except dtypes.DtypeError:
        name = None
    if name not in dtypes.ACTIVATIONS:
        raise argparse.ArgumentTypeError(f"unknown dtype {text!r}; use "
                                         f"{', '.join(dtypes.ACTIVATIONS)}")
    return name


def dtype(text: str):
    """As :func:`dtype_name`, returning the torch dtype."""
    from . import dtypes

    return dtypes.torch_dtype(dtype_name(text))


def dtype_names(text: str) -> tuple:
    """Dtype names separated by commas (``bf16,fp32``)."""
    parts = [p for p in str(text).split(",") if p.strip()]
    if not parts:
        raise argparse.ArgumentTypeError(f"expected dtypes separated by commas, got {text!r}")
    return tuple(dict.fromkeys(dtype_name(p) for p in parts))


def op(text: str) -> str:
    """One of the registry's ops (``rmsnorm``, ``add_rmsnorm``, ...)."""
    from .registry import OPS

    if text not in OPS:
        raise argparse.ArgumentTypeError(f"unknown op {text!r}; use one of {', '.join(OPS)}")
    return text


def names(text: str) -> tuple:
    """A non-empty comma-separated selection (``triton.*,hip.block``)."""
    parts = tuple(p.strip() for p in str(text).split(",") if p.strip())
    if not parts:
        raise argparse.ArgumentTypeError(f"select at least one name, got {text!r}")
    return parts


def selection(text: str) -> str:
    """As :func:`names`, kept as the text (``all``, a name, a glob or a comma-separated list)."""
    return ",".join(names(text))


def existing_file(text: str) -> Path:
    path = Path(text)
    if not path.is_file():
        what = "a directory" if path.is_dir() else "no such file"
        raise argparse.ArgumentTypeError(f"{text!r}: {what}; give the path of an existing file")
    return path


def _writable_from(path: Path) -> bool:
    """Whether the folders up to ``path`` exist or can be made: the nearest existing one is a
    folder that accepts a new file. Tried, not asked of ``os.access``: as root it says yes to
    everything, including /proc."""
    parent = path.parent if str(path.parent) else Path(".")
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not (parent.is_dir() and os.access(parent, os.W_OK | os.X_OK)):
        return False
    try:
        with tempfile.TemporaryFile(dir=parent):
            return True
    except OSError:
        return False


def output_file(text: str) -> Path:
    """A file to write: not a folder, and its folder exists or can be created."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; give a file path")
    if path.exists() and not os.access(path, os.W_OK):
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: the file is read-only; pick "
                                         f"another path")
    if not _writable_from(path):
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: its folder cannot be created "
                                         f"or written; pick another path")
    return path


def output_dir(text: str) -> Path:
    """A folder to write into: not a file, and it exists or can be created."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a file; give a folder")
    if not (path.is_dir() and os.access(path, os.W_OK)) and not _writable_from(path):
        raise argparse.ArgumentTypeError(f"cannot write into {text!r}; pick another folder")
    return path


def result_file(machine: str = "h200"):
    """A result file: a path to an existing file, or the name of a recorded one
    (``bench_grid`` for ``data/<machine>/bench_grid.json``). Returns the text as given."""
    def parse(text: str) -> str:
        from . import records

        if Path(text).is_file() or (records.DATA_DIR / machine / f"{text}.json").is_file():
            return text
        raise argparse.ArgumentTypeError(
            f"{text!r}: no such file, and no recorded result of that name in "
            f"data/{machine}/; give a JSON path or a recorded name such as bench_grid")

    return _named(parse, "result file")


def host_available_bytes() -> int | None:
    """Host memory available now (Linux's MemAvailable), or None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_elements(parser: argparse.ArgumentParser, rows: int, cols: int,
                   most: int = MAX_ELEMENTS) -> None:
    """A usage error for a problem too big to allocate here (rows x cols elements)."""
    if rows * cols > most:
        parser.error(f"--rows {rows} x --cols {cols} is {rows * cols:,} elements; at most "
                     f"{most:,} here. Use fewer rows.")
