"""Recorded results: every performance number in the book is loaded from a file written here.

A record file is JSON: ``{"provenance": {...}, "records": [{...}, ...]}``. The provenance names the
GPU, driver, CUDA/ROCm, torch, triton and Python versions, the date, the git commit and the command.

A *recording* is a folder of record files with a ``MANIFEST.json`` (written by
``python -m fusedrms.record``): commit, date, GPU, driver, versions, the command, each file with the
chapter that produced it, and per chapter the sha256 of the sources it measured. Two recordings
are read:

- the reader's own, ``recordings/<gpu-slug>/`` at the top of the repository (``FUSEDRMS_RECORDINGS``
  moves it), used when it exists for the GPU this process runs on (chapter by chapter: what it
  did not record comes from the committed one);
- the committed one, ``fusedrms/data/h200/``, otherwise.

:func:`staleness` compares a chapter's recorded source hashes with the sources now (a Python
source's code alone: its comments and docstrings do not count): a chapter whose kernels changed
since it was recorded is ``"stale"`` (a test fails and names it), unless the
manifest lists it under ``"stale"`` with a reason (``"acknowledged"``: the badge then says the
numbers were measured on an earlier version of the kernel).

:func:`copy_floor` is the book's one floor: the device-to-device copy bandwidth chapter 2 recorded
(``traffic_bandwidth.json``). Files that priced floors at the copy their own processes measured
are shown through :func:`at_copy_floor`, which reprices them at it.
"""
from __future__ import annotations

import ast
import datetime as _dt
import hashlib
import io
import json
import os
import platform
import re
import subprocess
import sys
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
DATA_DIR = PACKAGE_DIR / "data"
COMMITTED = "h200"  # the recording the book ships with
MANIFEST = "MANIFEST.json"
_VENDOR_WORDS = ("nvidia", "amd", "radeon", "geforce", "graphics")


def gpu_slug(gpu_name: str | None) -> str | None:
    """A folder name for a GPU: ``"NVIDIA H200"`` -> ``"h200"``, ``"AMD Radeon RX 9070 XT"`` ->
    ``"rx9070xt"``. None for no GPU."""
    if not gpu_name or gpu_name.startswith("none"):
        return None
    words = [w for w in re.split(r"[^a-z0-9]+", gpu_name.lower()) if w and w not in _VENDOR_WORDS]
    return "".join(words) or None


def repo_root() -> Path | None:
    """The checkout the package runs from (None for an installed package)."""
    root = PACKAGE_DIR.parents[1]
    return root if (root / "pyproject.toml").exists() and (root / "code").is_dir() else None


def recordings_dir() -> Path:
    """Where a reader's recordings go: ``$FUSEDRMS_RECORDINGS``, else ``recordings/`` in the
    checkout (ignored by git), else ``~/.cache/fusedrms/recordings``."""
    if os.environ.get("FUSEDRMS_RECORDINGS"):
        return Path(os.environ["FUSEDRMS_RECORDINGS"])
    root = repo_root()
    return root / "recordings" if root else Path.home() / ".cache" / "fusedrms" / "recordings"


def own_recording_dir(gpu_name: str | None = None) -> Path | None:
    """The reader's recording folder for this GPU (or ``gpu_name``), if one with a manifest exists."""
    if gpu_name is None:
        from . import env

        gpu_name = env.current().gpu_name
    slug = gpu_slug(gpu_name)
    folder = recordings_dir() / slug if slug else None
    return folder if folder and (folder / MANIFEST).exists() else None


def own_recording_has(chapter: str, gpu_name: str | None = None) -> Path | None:
    """The reader's recording folder when it holds ``chapter`` ("ch07") finished, else None: a
    "your GPU" panel shows only a chapter this reader recorded (a page falls back to the
    committed recording file by file, and its numbers are not the reader's)."""
    folder = own_recording_dir(gpu_name)
    manifest = read_manifest(folder) if folder else None
    entry = ((manifest or {}).get("chapters") or {}).get(chapter) or {}
    return folder if entry.get("status") == "ok" and not entry.get("smoke") else None


def _git_commit() -> str:
    if os.environ.get("FUSEDRMS_COMMIT"):  # set where there is no .git (a copied tree)
        return os.environ["FUSEDRMS_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             cwd=PACKAGE_DIR, timeout=10)
        return out.stdout.strip() if out.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def provenance() -> dict:
    """Who measured: hardware, software versions, date, commit and command line."""
    from . import env

    e = env.current()
    return {
        "gpu": e.gpu_name or "none (CPU)",
        "backend": e.backend,
        "driver": e.versions.get("driver"),
        "cuda": e.versions.get("cuda"),
        "hip": e.versions.get("hip"),
        "torch": e.versions["torch"],
        "triton": e.versions.get("triton"),
        "python": platform.python_version(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "commit": _git_commit(),
        "command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]),
    }


def write(path: str | Path, records: list[dict], extra: dict | None = None) -> Path:
    """Write ``records`` with provenance to ``path`` (JSON)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"provenance": {**provenance(), **(extra or {})}, "records": records}
    path.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    return path


# ---------------------------------------------------------------- which recording a reader sees

def recording_dir(machine: str | None = None, chapter: str | None = None,
                  filename: str | None = None) -> Path:
    """The folder a reader's page reads: ``machine``'s committed folder when given, else the
    reader's own recording for this GPU when there is one, else the committed H200 recording.

    With ``chapter`` (``"ch06"``) or ``filename``, the own recording counts only when it recorded
    that chapter or holds that file: a reader who recorded chapters 3 and 4 still sees the other
    chapters from the committed recording."""
    if machine is not None:
        return DATA_DIR / machine
    own = own_recording_dir()
    if own is not None and chapter is not None:
        entry = (read_manifest(own) or {}).get("chapters", {}).get(chapter) or {}
        if entry.get("status") not in ("ok", "partial"):
            own = None
    if own is not None and filename is not None and not (own / filename).exists():
        own = None
    return own or DATA_DIR / COMMITTED


def find(filename: str, machine: str | None = None) -> Path:
    """The path of a recorded file (any kind: JSON, text, image) in the recording a reader sees."""
    return recording_dir(machine, filename=filename) / filename


def load(name: str, machine: str | None = None) -> dict:
    """Load the record file ``name`` (``<name>.json``) from :func:`recording_dir`.

    The document gets a ``"source"`` entry: the folder, whether it is the reader's own recording,
    and the chapter that produced it (from the manifest). Raises FileNotFoundError naming the file.
    """
    folder = recording_dir(machine, filename=f"{name}.json")
    path = folder / f"{name}.json"
    if not path.exists():
        raise FileNotFoundError(f"no recorded results at {path}; record them on a GPU with "
                                f"'python -m fusedrms.record' (see CONTRIBUTING.md)")
    return _read(path, machine)


def _read(path: Path, machine: str | None = None) -> dict:
    """A record file with its ``"source"`` entry (see :func:`load`)."""
    doc = json.loads(path.read_text())
    folder = path.parent
    entry = (read_manifest(folder) or {}).get("files", {}).get(path.name, {})
    doc["source"] = {"folder": str(folder), "own": folder != DATA_DIR / (machine or COMMITTED),
                     "chapter": entry.get("chapter")}
    return doc


SHOWN_STATES = ("stale", "acknowledged", "partial")  # the badge says so


def describe(doc: dict) -> str:
    """One line naming where and when a record file was measured (and whose recording it is)."""
    p = doc["provenance"]
    runtime = f"CUDA {p['cuda']}" if p.get("cuda") else (f"HIP {p['hip']}" if p.get("hip") else "")
    whose = "Your recording: " if doc.get("source", {}).get("own") else "Recorded "
    line = (f"{whose}on {p['gpu']} (driver {p.get('driver')}, {runtime}), torch {p['torch']}, "
            f"triton {p['triton']}, Python {p['python']}, {p['date'][:10]}, "
            f"commit {str(p['commit'])[:10]}")
    chapter = doc.get("source", {}).get("chapter")
    if chapter:
        state = staleness(chapter, Path(doc["source"]["folder"]))
        if state.state in SHOWN_STATES:
            line += f". {state.badge}"
    return line


def badge_fields(doc: dict) -> dict:
    """What a chapter's provenance badge needs beyond the provenance, for a loaded document:
    ``own`` (the reader's recording) and ``stale`` (the sentence when the numbers come from an
    earlier version of the kernel, else None). ``page.badge(doc["provenance"], **badge_fields(doc))``."""
    source = doc.get("source", {})
    chapter = source.get("chapter")
    state = staleness(chapter, Path(source["folder"])) if chapter and source.get("folder") else None
    return {"own": bool(source.get("own")),
            "stale": state.badge if state and state.state in SHOWN_STATES else None}


# ---------------------------------------------------------------- the copy floor

COPY_FLOOR_FILE = "traffic_bandwidth"  # chapter 2's recording holds the one measured copy


class FloorMissing(FileNotFoundError):
    """No measured copy bandwidth in the recording a page reads (a page says "not recorded")."""


@dataclass(frozen=True)
class CopyFloor:
    """The book's one floor: the device-to-device copy bandwidth chapter 2 measured, in GB/s
    (10^9 bytes, read + write counted), on ``gpu``. A design's copy floor is its bytes at this
    rate. It is a reference, not a limit: a kernel that reads more than it writes can pass it.
    ``published_GBps`` is the data sheet's figure for that GPU (None when the table lacks it),
    kept for the page that explains why it is the wrong floor."""
    GBps: float
    gpu: str
    published_GBps: float | None = None
    doc: dict = field(default_factory=dict, compare=False, repr=False)

    def us(self, nbytes: float) -> float:
        """The time ``nbytes`` take at the copy's rate, in µs."""
        return nbytes / (self.GBps * 1e3)

    def pct(self, nbytes: float, time_us: float) -> float:
        """A measured time as a percentage of its floor (100: the copy's rate; above: faster)."""
        return 100.0 * self.us(nbytes) / time_us

    def reprice(self, doc: dict | None, time: str = "median_us", share: str = "pct_of_floor",
                per: float = 100.0) -> dict | None:
        """``doc`` (a loaded record file) with every priced record at this floor: ``floor_us``
        from the record's ``bytes`` (or, where it has none, from its own floor and the copy it
        was priced at, ``copy_GBps``), ``share`` = ``per`` x floor / ``time``, and ``copy_GBps``
        this floor's. A floor that cannot be repriced becomes None, never another copy's. The
        provenance stays as recorded."""
        return _repriced(doc, self, time, share, per)


def _repriced(doc: dict | None, floor: CopyFloor | None, time: str, share: str,
              per: float) -> dict | None:
    if doc is None:
        return None

    def one(rec):
        if not isinstance(rec, dict) or ("floor_us" not in rec and share not in rec):
            return rec
        nbytes = rec.get("bytes")
        if not nbytes and rec.get("floor_us") and rec.get("copy_GBps"):
            nbytes = rec["floor_us"] * rec["copy_GBps"] * 1e3  # the bytes its own floor priced
        if floor is None or not nbytes:
            return dict(rec, floor_us=None, copy_GBps=None, **{share: None})
        rec = dict(rec, floor_us=floor.us(nbytes), copy_GBps=floor.GBps)
        rec[share] = per * rec["floor_us"] / rec[time] if rec.get(time) else None
        return rec

    return {**doc, "records": [one(r) for r in doc.get("records", [])]}


def at_copy_floor(doc: dict | None, time: str = "median_us", share: str = "pct_of_floor",
                  per: float = 100.0) -> dict | None:
    """A loaded record file as a page shows it: every floor at the copy floor of the same
    recording (:func:`copy_floor` beside it, :meth:`CopyFloor.reprice`); where that recording
    measured no copy, with no floors at all (None), never the file's own."""
    return _repriced(doc, copy_floor_beside(doc), time, share, per)


def copy_floor(machine: str | None = None, beside: dict | None = None) -> CopyFloor:
    """The copy floor of the recording a reader sees (``machine``'s committed one when given).

    ``beside``: a loaded record file whose numbers the floor will price; the floor then comes from
    the same recording (the reader's own, or the committed one), so a GPU's times are never
    priced at another GPU's copy. Raises :class:`FloorMissing` when that recording has no
    measured copy bandwidth (chapter 2 not recorded there, or its copy failed); without
    ``beside`` the committed recording's floor stands in for a reader's recording that lacks
    one."""
    source = (beside or {}).get("source") or {}
    folder = (Path(source["folder"]) if source.get("folder")
              else recording_dir(machine, filename=f"{COPY_FLOOR_FILE}.json"))
    path = folder / f"{COPY_FLOOR_FILE}.json"
    doc = _read(path, machine) if path.exists() else {"records": []}
    rec = next((r for r in doc["records"] if r.get("kind") == "bandwidth"
                and r.get("source") == "measured" and r.get("measured_GBps")), None)
    if rec is None and not source and machine is None and folder != DATA_DIR / COMMITTED:
        return copy_floor(COMMITTED)  # the reader's recording has no copy: the committed one's
    if rec is None:
        raise FloorMissing("the copy bandwidth is not measured in this recording: record chapter 2 "
                           "on the same GPU ('python -m fusedrms.record --chapters 2')")
    published = rec.get("published_GBps")
    return CopyFloor(float(rec["measured_GBps"]), rec.get("gpu") or doc["provenance"]["gpu"],
                     float(published) if published else None, doc)


def copy_floor_beside(doc: dict | None) -> CopyFloor | None:
    """:func:`copy_floor` beside a loaded record file, or None when there is no file or its
    recording measured no copy (a page then draws and says no floor)."""
    try:
        return copy_floor(beside=doc) if doc is not None else None
    except FloorMissing:
        return None


def copy_floor_GBps(machine: str | None = None) -> float:
    """The book's one floor in GB/s: :func:`copy_floor`'s rate."""
    return copy_floor(machine).GBps


# ---------------------------------------------------------------- manifest and staleness

def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def function_closure(text: str, root: str) -> str:
    """The source of module-level ``root`` and of every module-level definition it uses, by name,
    transitively: what a companion's ``record`` runs, without the readers beside it."""
    tree = ast.parse(text)
    defs: dict = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defs[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        defs[name.id] = node
    if root not in defs:
        raise KeyError(f"{root!r} is not defined at module level")
    seen, todo = set(), [root]
    while todo:
        name = todo.pop()
        if name in seen or name not in defs:
            continue
        seen.add(name)
        todo += [n.id for n in ast.walk(defs[name]) if isinstance(n, ast.Name)]
    nodes = sorted({id(defs[n]): defs[n] for n in seen}.values(), key=lambda n: n.lineno)
    return "\n".join(ast.get_source_segment(text, n) for n in nodes)


def source_path(source: str, package_dir: Path | None = None) -> Path:
    """The file behind a source entry: ``"kernels/k.py"`` or ``"book/ch07.py::record"``."""
    return Path(package_dir or PACKAGE_DIR) / source.split("::")[0]


# A recorded hash of a Python source with this prefix is of its code alone (:func:`code_text`);
# one without it (recordings before) of the file's bytes, and is compared as such
CODE_HASH = "code:"


def code_text(text: str) -> str:
    """A Python source without its comments and docstrings, each line's trailing blanks and the
    lines left empty: what a measurement can depend on, so that a comment that cites a
    measurement never makes the recording it cites stale. Positions come from the tokenizer and
    the parser, whose comment and docstring spans read the same on every Python version (an
    ``ast.dump`` or token stream does not: 3.12 added fields and split f-strings)."""
    lines = text.splitlines()
    cuts = [(t.start, t.end) for t in tokenize.generate_tokens(io.StringIO(text).readline)
            if t.type == tokenize.COMMENT]

    def column(line: int, byte_offset: int) -> int:  # the parser counts UTF-8 bytes
        return len(lines[line - 1].encode()[:byte_offset].decode())

    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            d = body[0]
            cuts.append(((d.lineno, column(d.lineno, d.col_offset)),
                         (d.end_lineno, column(d.end_lineno, d.end_col_offset))))
    for (l1, c1), (l2, c2) in sorted(cuts, reverse=True):  # from the end: positions stay valid
        lines[l1 - 1:l2] = [lines[l1 - 1][:c1] + lines[l2 - 1][c2:]]
    return "\n".join(line.rstrip() for line in lines if line.strip())


def _code_hash(text: str) -> str | None:
    """:data:`CODE_HASH` and the sha256 of ``text``'s :func:`code_text`, or None where it does not
    parse (the caller then hashes its bytes, without the prefix: compared as bytes)."""
    try:
        return CODE_HASH + hashlib.sha256(code_text(text).encode()).hexdigest()
    except (SyntaxError, ValueError, tokenize.TokenError):
        return None


def source_hash(source: str, package_dir: Path | None = None, *, code: bool = True) -> str | None:
    """sha256 of a source, or with ``"file.py::name"`` of ``name``'s closure in that file (so
    editing a chapter's readers never makes its recorded measurements stale). A Python source's
    hash is of its code alone (:func:`code_text`), unless ``code=False``: the hash of its bytes,
    as recordings before :data:`CODE_HASH` stored it."""
    path = source_path(source, package_dir)
    if not path.exists():
        return None
    code = code and source.split("::")[0].endswith(".py")
    if "::" not in source:
        return (code and _code_hash(path.read_text())) or sha256_file(path)
    closure = function_closure(path.read_text(), source.split("::", 1)[1])
    return (code and _code_hash(closure)) or hashlib.sha256(closure.encode()).hexdigest()


def source_hashes(sources, package_dir: Path | None = None) -> dict:
    """``{source: sha256}`` of the package sources a chapter's record measured (None for a
    listed file that does not exist, e.g. another GPU's tuning table)."""
    return {s: source_hash(s, package_dir) for s in sources}


def hashes_now(recorded: dict, package_dir: Path | None = None) -> dict:
    """The hashes of ``recorded``'s sources now, each as it was recorded (of its code, or of its
    bytes for a recording before :data:`CODE_HASH`): equal exactly where nothing it hashes
    changed. None for a source that is gone."""
    return {s: source_hash(s, package_dir, code=str(h).startswith(CODE_HASH))
            for s, h in recorded.items()}


def read_manifest(folder: Path) -> dict | None:
    path = Path(folder) / MANIFEST
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError as e:
        raise ValueError(f"{path} is not valid JSON ({e}); re-record or restore it from git") from None


def write_manifest(folder: Path, manifest: dict) -> Path:
    path = Path(folder) / MANIFEST
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=False) + "\n")
    tmp.replace(path)  # a run cut short never leaves half a manifest
    return path


# how the book calls the peer libraries' kernels (a change here changes a peer's time, not ours)
PEER_SOURCES = ("kernels/peers.py", "kernels/peers_flashinfer.py", "kernels/flashinfer_norm.cu")
MEASURING_SOURCES = ("book/", "measure/")  # recording steps and timers: no kernel of the book


@dataclass
class Staleness:
    """How a chapter's recorded numbers relate to the sources now."""
    chapter: str
    state: str  # "current", "stale", "acknowledged", "partial", "unrecorded"
    changed: list = field(default_factory=list)  # sources whose hash differs (or that are gone)
    reason: str = ""  # the manifest's note for an acknowledged entry
    commit: str | None = None

    @property
    def badge(self) -> str:
        """The sentence a chapter's provenance badge adds (empty when the numbers are current)."""
        at = f" (commit {str(self.commit)[:10]})" if self.commit else ""
        if self.state == "acknowledged" and self.changed and all(
                c.startswith(MEASURING_SOURCES) for c in self.changed):
            return (f"These numbers were measured by an earlier version of this chapter's "
                    f"recording steps or the book's timing code{at}; the kernels they time have "
                    f"not changed since.")
        if self.state == "acknowledged" and self.changed and all(
                c.startswith(MEASURING_SOURCES) or c in PEER_SOURCES for c in self.changed):
            return (f"These numbers were measured with an earlier version of a peer library's "
                    f"launch or of this chapter's recording steps or the book's timing code{at}; "
                    f"the book's kernels have not changed since.")
        if self.state == "acknowledged":
            return (f"These numbers were measured on an earlier version of the kernel{at}; "
                    f"they have not been re-recorded since it changed.")
        if self.state == "stale":
            return (f"These numbers were measured on an earlier version of the kernel{at}: "
                    f"{', '.join(self.changed)} changed since.")
        if self.state == "partial":  # the manifest's note names the part kept, and why
            return f"These numbers come from this recording, except {self.reason}"
        if self.state == "unrecorded":
            return "This chapter has no recorded GPU results yet."
        return ""


def staleness(chapter: str, folder: Path | None = None, package_dir: Path | None = None) -> Staleness:
    """The state of ``chapter``'s records (``"ch07"``) in ``folder`` (default: what a reader sees)."""
    folder = Path(folder) if folder is not None else recording_dir(chapter=chapter)
    manifest = read_manifest(folder) or {}
    entry = manifest.get("chapters", {}).get(chapter)
    if not entry or entry.get("status") not in ("ok", "partial"):
        return Staleness(chapter, "unrecorded")
    commit = entry.get("commit", manifest.get("commit"))
    recorded = entry.get("sources") or {}
    now = hashes_now(recorded, package_dir)
    changed = [s for s, h in sorted(recorded.items()) if now[s] != h]
    if not recorded:
        changed = ["(sources not recorded)"]
    note = manifest.get("stale", {}).get(chapter)
    if not changed and entry.get("status") == "partial":
        # a run cut short: some of the chapter's files are kept from an earlier recording
        if not note:
            return Staleness(chapter, "stale", ["(a partial recording without a note)"], commit=commit)
        return Staleness(chapter, "partial", [], note, commit)
    if not changed:
        return Staleness(chapter, "current", commit=commit)
    if note:
        return Staleness(chapter, "acknowledged", changed, note, commit)
    return Staleness(chapter, "stale", changed, commit=commit)
