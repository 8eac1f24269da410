"""The Python half of install_recording.sh: merge recordings of one commit, keep chapters.

    python3 code/scripts/install_recording.py merge OUT TARBALL [TARBALL ...]
    python3 code/scripts/install_recording.py keep OLD NEW ch09,...

``merge`` unpacks the recordings (``code/scripts/gpu/run.sh record`` packs each: a folder with a
MANIFEST.json, as ``python -m fusedrms.record`` writes it) into the empty folder OUT: every file,
and one manifest (:func:`merge_manifests`). One tarball is unpacked as it is. Recordings that
differ in commit, GPU, driver or versions, or that record the same chapter, are refused (exit 2).
``keep`` carries chapters over from the committed recording OLD into the staged NEW (``--keep``).
"""
from __future__ import annotations

import datetime as _dt
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # code/, whatever the working folder
from fusedrms import records  # noqa: E402

MANIFEST = records.MANIFEST
# What makes two recordings one: the same commit measured on the same machine and software.
SAME = ("format", "commit", "gpu", "backend", "driver", "versions", "smoke")


class MergeError(ValueError):
    """Recordings that are not parts of one recording."""


def _when(text):
    return _dt.datetime.fromisoformat(text) if text else None


def merge_manifests(manifests: list[dict], names: list[str] | None = None) -> dict:
    """One manifest for recordings of one commit made in several runs (``--chapters`` groups):
    the first one's fields; every chapter's entry, in book order; every file, in the order
    given; the commands joined with `` ; ``; the earliest start and the latest finish.
    ``names`` label the recordings in error messages."""
    names = names or [f"recording {i + 1}" for i in range(len(manifests))]
    first = manifests[0]
    for name, m in zip(names[1:], manifests[1:]):
        for key in SAME:
            if m.get(key) != first.get(key):
                raise MergeError(f"{names[0]} and {name} differ in {key} ({first.get(key)!r} vs "
                                 f"{m.get(key)!r}): they are not one recording; record every "
                                 f"chapter again at one commit on one machine")
    owner: dict[str, str] = {}
    for name, m in zip(names, manifests):
        for chapter in m.get("chapters", {}):
            if chapter in owner:
                raise MergeError(f"{owner[chapter]} and {name} both record {chapter}: install "
                                 f"one of them (which one is a choice to make, not to guess)")
            owner[chapter] = name
    merged = {key: value for key, value in first.items()}
    for m in manifests[1:]:
        merged.update({k: v for k, v in m.items() if k not in merged})
    merged["command"] = " ; ".join(str(m["command"]) for m in manifests if m.get("command"))
    chapters = {c: e for m in manifests for c, e in m.get("chapters", {}).items()}
    merged["chapters"] = {c: chapters[c] for c in sorted(chapters)}
    merged["files"] = {f: e for m in manifests for f, e in m.get("files", {}).items()}
    stale = {c: why for m in manifests for c, why in m.get("stale", {}).items()}
    merged["stale"] = {c: why for c, why in stale.items()
                       if chapters.get(c, {}).get("status") != "ok"}
    for key, pick in (("started", min), ("finished", max)):
        times = [m[key] for m in manifests if m.get(key)]
        if times:
            merged[key] = pick(times, key=_when)
    return merged


def merge_dirs(out: Path, dirs: list[Path], names: list[str] | None = None) -> dict:
    """Copies the recordings ``dirs`` into ``out`` with one merged manifest; returns it."""
    out, dirs = Path(out), [Path(d) for d in dirs]
    names = names or [str(d) for d in dirs]
    manifests = []
    for name, d in zip(names, dirs):
        try:
            manifest = records.read_manifest(d)
        except ValueError as e:
            raise MergeError(f"{name}: {e}") from None
        if manifest is None:
            raise MergeError(f"{name} has no {MANIFEST}: not a recording")
        manifests.append(manifest)
    merged = merge_manifests(manifests, names)
    if len(dirs) == 1:  # one recording installs as it is, byte for byte
        shutil.copytree(dirs[0], out, dirs_exist_ok=True)
        return manifests[0]
    seen: dict[str, str] = {}
    for name, d in zip(names, dirs):
        for path in sorted(p for p in d.rglob("*") if p.is_file()):
            rel = str(path.relative_to(d))
            if rel == MANIFEST:
                continue
            if rel in seen:
                raise MergeError(f"{seen[rel]} and {name} both hold {rel}")
            seen[rel] = name
    for d in dirs:
        shutil.copytree(d, out, dirs_exist_ok=True, ignore=lambda folder, files: [
            f for f in files if Path(folder) == d and f == MANIFEST])
    records.write_manifest(out, merged)
    return merged


def unpack(tarball: Path, folder: Path) -> None:
    with tarfile.open(tarball) as tar:
        if hasattr(tarfile, "data_filter"):  # no paths outside the folder, no device files
            tar.extractall(folder, filter="data")
        else:
            tar.extractall(folder)


def keep(old: Path, new: Path, chapters: list[str]) -> None:
    """``--keep``: the named chapters' files, logs and manifest entries from the committed
    recording ``old`` into ``new``. A kept chapter whose sources changed since it was measured is
    listed as stale, with the reason; one whose sources did not change stays current (no note
    that would hide a later change)."""
    mo, mn = records.read_manifest(old), records.read_manifest(new)
    stale = dict(mn.get("stale", {}))
    for ch in chapters:
        entry = mo["chapters"].get(ch)
        if not entry or entry.get("status") != "ok":
            sys.exit(f"--keep {ch}: the committed recording has no finished {ch}")
        files = {f: e for f, e in mo["files"].items() if e.get("chapter") == ch}
        for f in files:
            (new / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(old / f, new / f)
        mn["files"] = {f: e for f, e in mn["files"].items() if e.get("chapter") != ch} | files
        mn["chapters"][ch] = entry
        recorded = entry.get("sources") or {}
        current = bool(recorded) and records.hashes_now(recorded) == recorded
        if current:
            stale.pop(ch, None)
        else:
            stale[ch] = (f"kept from the recording of commit {str(entry.get('commit'))[:10]}: its "
                         "sources changed since, and the new recording did not include it; "
                         "re-recorded in the next GPU run")
        print(f"kept {ch} ({len(files)} files) from commit {str(entry.get('commit'))[:10]}: "
              f"{'current' if current else 'acknowledged'}")
    mn["stale"] = stale
    records.write_manifest(new, mn)


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "merge":
        tarballs = argv[2:]
        with tempfile.TemporaryDirectory() as work:
            dirs = [Path(work, str(i)) for i in range(len(tarballs))]
            try:
                for tarball, folder in zip(tarballs, dirs):
                    unpack(Path(tarball), folder)
                merged = merge_dirs(Path(argv[1]), dirs, tarballs)
            except (MergeError, tarfile.TarError, OSError) as e:
                print(f"install_recording: {e}", file=sys.stderr)
                return 2
        print(f"recording of commit {str(merged.get('commit'))[:10]} on {merged.get('gpu')}: "
              f"{', '.join(merged.get('chapters', {}))}")
        return 0
    if len(argv) == 4 and argv[0] == "keep":
        keep(Path(argv[1]), Path(argv[2]), argv[3].split(","))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
