"""Tuning tables: measured launch configurations, read by the kernels as inputs.

One table per kernel family (``kind``: ``"capstone"``, ``"fp8"``) and GPU, installed under
``fusedrms/tuning/<gpu-slug>/<kind>.json`` (``h200/capstone.json``). A table is a record file
(``{"provenance": {"gpu": ...}, "records": [...]}``); each kernel module registers how one record
becomes a key and a configuration (:func:`register`) and asks :func:`active` for the table of the
GPU it runs on. There is one loader and one cache, here.

Tables are written by a recording (``python -m fusedrms.record --tune``) into the recording's
folder, never into the package. Installing one is an explicit, checked step::

    python -m fusedrms.tuning install RECORDING_DIR     # copies RECORDING_DIR/tuning/*.json
    python -m fusedrms.tuning show                      # what the kernels use on this machine

``FUSEDRMS_TUNING=off`` makes every kernel use its documented fallback rule.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import warnings
from pathlib import Path
from typing import Callable

from .. import validation

TUNING_DIR = Path(__file__).resolve().parent
KINDS = {"capstone": "fusedrms.kernels.add_rmsnorm", "fp8": "fusedrms.kernels.rmsnorm_fp8"}

_PARSERS: dict[str, Callable[[dict], tuple]] = {}
_ACTIVE: dict[str, dict] = {}
_GENERATION = [0]


class TuningError(validation.InputError):
    """A tuning file that cannot be used, with what to do about it."""


def select_winner(times: dict) -> tuple:
    """``times``: {config: {rows: µs}}. Returns (winner, {config: worst ratio to the best}).

    One configuration per key serves every batch size, so the winner is the one least far off
    the best at any of them (minimax regret). Only row counts every config was timed at count.
    Ties go to the smaller total time.
    """
    complete = {c: t for c, t in times.items() if t}
    if not complete:
        raise ValueError("no timed configuration to choose from")
    rows = set.intersection(*(set(t) for t in complete.values()))
    if not rows:
        raise ValueError("the configurations share no timed row count")
    best = {n: min(t[n] for t in complete.values()) for n in rows}
    regret = {c: max(t[n] / best[n] for n in rows) for c, t in complete.items()}
    winner = min(complete, key=lambda c: (round(regret[c], 3), sum(complete[c][n] for n in rows)))
    return winner, regret


def register(kind: str, parse: Callable[[dict], tuple]) -> None:
    """``parse(record) -> (key, config)``; it raises (KeyError, TypeError, ValueError, InputError)
    on a malformed record, which the loader then skips."""
    _PARSERS[kind] = parse


def _parser(kind: str):
    if kind not in KINDS:
        raise TuningError(f"unknown tuning kind {kind!r}; known: {', '.join(KINDS)}")
    if kind not in _PARSERS:
        import importlib

        importlib.import_module(KINDS[kind])  # the kernel module registers its parser
    return _PARSERS[kind]


def empty(kind: str, why: str) -> dict:
    return {"kind": kind, "gpu": None, "configs": {}, "path": why, "skipped": 0, "first_skip": "",
            "doc": None}


def read_document(path) -> dict | None:
    """The JSON document at ``path``; None when no file is there. A directory, a file that is not
    JSON, or JSON that is not a record file raises :class:`TuningError` naming the path."""
    path = Path(path)
    if path.is_dir():
        raise TuningError(f"{path} is a folder; give the path of a tuning table (a .json file).")
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise TuningError(f"cannot read the tuning table {path}: {e}") from None
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise TuningError(f"{path} is not JSON ({e}); give a table written by "
                          f"'python -m fusedrms.record --tune'.") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("records"), list):
        raise TuningError(f"{path} is not a tuning table: expected an object with a 'records' list.")
    return doc


def load(kind: str, path) -> dict:
    """``{"kind", "gpu", "configs": {key: config}, "path", "skipped", "doc"}`` from ``path``.

    A missing file gives an empty table (no entry: the kernel's fallback rule). Malformed records
    are skipped and counted in ``skipped``; an unusable file raises :class:`TuningError`.
    """
    parse = _parser(kind)
    doc = read_document(path)
    if doc is None:
        return {**empty(kind, str(path)), "path": str(path)}
    provenance = doc.get("provenance") if isinstance(doc.get("provenance"), dict) else {}
    gpu = provenance.get("gpu")
    if gpu is not None and not isinstance(gpu, str):
        raise TuningError(f"{path}: provenance 'gpu' must be the GPU's name as text (such as "
                          f"\"NVIDIA H200\"), got {gpu!r} ({type(gpu).__name__}).")
    configs, skipped, first_skip = {}, 0, ""
    for i, rec in enumerate(doc["records"]):
        try:
            key, cfg = parse(rec)
        except (KeyError, TypeError, ValueError, AttributeError, ArithmeticError,
                validation.InputError) as e:  # ArithmeticError: int(Infinity) in a record
            skipped += 1
            first_skip = first_skip or f"entry {i}: {type(e).__name__}: {e}"[:200]
            continue
        configs[key] = cfg
    return {"kind": kind, "gpu": gpu, "configs": configs, "path": str(path),
            "skipped": skipped, "first_skip": first_skip, "doc": doc}


def installed_path(kind: str, slug: str) -> Path:
    return TUNING_DIR / slug / f"{kind}.json"


def active(kind: str) -> dict:
    """The installed table for the GPU this process runs on (cached; empty on the CPU path, with
    ``FUSEDRMS_TUNING=off``, or when no table is installed for this GPU)."""
    if kind in _ACTIVE:
        return _ACTIVE[kind]
    from .. import env, records

    e = env.current()
    if os.environ.get("FUSEDRMS_TUNING", "").lower() in ("0", "off", "no"):
        table = empty(kind, "disabled by FUSEDRMS_TUNING")
    elif not e.on_gpu:
        table = empty(kind, "interpreter: no tuning table applies")
    else:
        path = installed_path(kind, records.gpu_slug(e.gpu_name))
        try:
            table = load(kind, path)
        except TuningError as err:  # a broken installed file must not stop the op: say so, fall back
            warnings.warn(f"{err} The kernels use their fallback rule.", stacklevel=2)
            table = empty(kind, f"unusable: {path}")
    _ACTIVE[kind] = table
    return table


def override(kind: str, table: dict | None) -> None:
    """Use ``table`` (from :func:`load`) for ``kind`` in this process; None goes back to the
    installed one. For timing a freshly measured table before it is installed, and for tests."""
    _parser(kind)
    if table is None:
        _ACTIVE.pop(kind, None)
    else:
        _ACTIVE[kind] = table
    _GENERATION[0] += 1


def generation() -> int:
    """Changes whenever a table is overridden: kernels key their per-shape caches on it."""
    return _GENERATION[0]


def document(kind: str, slug: str | None = None) -> dict | None:
    """The installed table's JSON for a GPU (default: this GPU if one is installed, else the
    H200's), for chapters that show what the kernels run. None when there is none."""
    from .. import env, records

    slugs = [slug] if slug else [records.gpu_slug(env.current().gpu_name), "h200"]
    for s in slugs:
        if s and installed_path(kind, s).exists():
            return read_document(installed_path(kind, s))
    return None


# ---------------------------------------------------------------- installing a recording's tables

def check_table(kind: str, path) -> dict:
    """Load a table to be installed and refuse one that would silently do nothing."""
    table = load(kind, path)
    if table["doc"] is None:
        raise TuningError(f"no {kind} table at {path}.")
    if not table["gpu"] or table["gpu"] == "none (CPU)":
        raise TuningError(f"{path} names no GPU in its provenance; only a GPU recording's table "
                          f"can be installed.")
    if not table["configs"]:
        raise TuningError(f"{path} has no usable entry ({table['skipped']} malformed"
                          + (f"; {table['first_skip']}" if table["first_skip"] else "") + ").")
    if table["skipped"]:
        raise TuningError(f"{path}: {table['skipped']} of {len(table['doc']['records'])} entries "
                          f"are malformed (first, {table['first_skip']}); re-run the tuning "
                          f"rather than install part of it.")
    return table


def install(recording_dir, dry_run: bool = False, log=print) -> list[Path]:
    """Copy ``recording_dir/tuning/<kind>.json`` into ``tuning/<gpu-slug>/`` after checking each."""
    from .. import records

    src_dir = Path(recording_dir) / "tuning"
    if not src_dir.is_dir():
        raise TuningError(f"{src_dir} does not exist: record with --tune first "
                          f"('python -m fusedrms.record --chapters 7,8 --tune --out {recording_dir}').")
    found = [(kind, src_dir / f"{kind}.json") for kind in KINDS if (src_dir / f"{kind}.json").exists()]
    if not found:
        raise TuningError(f"{src_dir} holds no tuning table ({', '.join(k + '.json' for k in KINDS)}).")
    done = []
    for kind, src in found:
        table = check_table(kind, src)
        dest = installed_path(kind, records.gpu_slug(table["gpu"]))
        log(f"{kind}: {len(table['configs'])} entries for {table['gpu']} -> {dest}"
            + (" (dry run)" if dry_run else ""))
        if not dry_run:
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest)
            done.append(dest)
    for kind, _ in found:
        _ACTIVE.pop(kind, None)
    _GENERATION[0] += 1
    return done


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fusedrms.tuning",
                                description="Install a recording's tuning tables, or show the "
                                            "tables the kernels use here.")
    sub = p.add_subparsers(dest="cmd", required=True)
    ins = sub.add_parser("install", help="check and copy RECORDING_DIR/tuning/*.json into the package")
    ins.add_argument("recording_dir")
    ins.add_argument("--dry-run", action="store_true", help="check only, copy nothing")
    sub.add_parser("show", help="list the installed tables")
    args = p.parse_args(argv)
    if args.cmd == "show":
        for path in sorted(TUNING_DIR.glob("*/*.json")):
            kind = path.stem
            try:
                t = load(kind, path)
                print(f"{path.relative_to(TUNING_DIR)}: {t['gpu']}, {len(t['configs'])} entries")
            except TuningError as e:
                print(f"{path.relative_to(TUNING_DIR)}: {e}")
        return 0
    try:
        install(args.recording_dir, dry_run=args.dry_run)
    except TuningError as e:
        print(f"fusedrms.tuning: {e}", file=sys.stderr)
        return 2
    return 0
