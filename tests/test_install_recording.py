"""code/scripts/install_recording.sh: one recording, or the parts of one made in several device
calls (their manifests merged as the committed one was by hand), or a refusal that changes
nothing."""
import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "code" / "scripts"))

import install_recording  # noqa: E402

def _recording(folder: Path, commit="c0ffee", chapters=("ch02",),
               started="2026-01-01T10:00:00+00:00", finished="2026-01-01T10:05:00+00:00", command="python -m fusedrms.record") -> dict:
    folder.mkdir(parents=True)
    (folder / "logs").mkdir()
    manifest = {"format": 1, "commit": commit, "started": started, "gpu": "NVIDIA H200",
                "backend": "cuda", "driver": "580", "versions": {"torch": "2.11", "triton": "3.6"},
                "command": command, "chapters": {}, "files": {}, "stale": {}, "finished": finished}
    for ch in chapters:
        (folder / f"{ch}.json").write_text(json.dumps({"chapter": ch}))
        (folder / "logs" / f"{ch}.log").write_text(f"{ch} log\n")
        manifest["chapters"][ch] = {"status": "ok", "commit": commit, "log": f"logs/{ch}.log",
                                    "files": [f"{ch}.json"]}
        manifest["files"][f"{ch}.json"] = {"chapter": ch, "sha256": "x"}
        manifest["files"][f"logs/{ch}.log"] = {"chapter": ch, "sha256": "y"}
    (folder / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def _tarball(folder: Path) -> Path:
    out = folder.with_suffix(".tar.gz")
    subprocess.run(["tar", "czf", str(out), "-C", str(folder), "."], check=True)
    return out


@pytest.fixture
def checkout(tmp_path):
    """The script and its Python half in a tree of their own, with the package (linked, its data
    apart) and a committed recording."""
    tree = tmp_path / "tree"
    (tree / "code" / "scripts").mkdir(parents=True)
    for name in ("install_recording.sh", "install_recording.py"):
        shutil.copy2(ROOT / "code" / "scripts" / name, tree / "code" / "scripts" / name)
    package = tree / "code" / "fusedrms"
    package.mkdir()
    for entry in (ROOT / "code" / "fusedrms").iterdir():
        if entry.name not in ("data", "__pycache__"):
            (package / entry.name).symlink_to(entry)
    _recording(package / "data" / "h200", commit="old", chapters=("ch03", "ch04"))
    return tree


def _install(tree: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(tree / "code" / "scripts" / "install_recording.sh"),
                           *map(str, args)], capture_output=True, text=True)


def _files(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_two_tarballs_install_as_one_recording(tmp_path, checkout):
    a = _recording(tmp_path / "a", chapters=("ch02", "ch05"), command="record --chapters 2,5")
    b = _recording(tmp_path / "b", chapters=("ch04",), started="2026-01-01T10:06:00+00:00",
                   finished="2026-01-01T10:09:00+00:00", command="record --chapters 4")
    run = _install(checkout, _tarball(tmp_path / "a"), _tarball(tmp_path / "b"))
    assert run.returncode == 0, run.stderr
    dest = checkout / "code" / "fusedrms" / "data" / "h200"
    got = _files(dest)
    want = {**_files(tmp_path / "a"), **_files(tmp_path / "b")}
    assert sorted(got) == sorted(want) and "ch03.json" not in got  # wholesale, as one
    assert all(got[f] == want[f] for f in got if f != "MANIFEST.json")
    hand = copy.deepcopy(a)  # by hand: B's files into A, A's manifest updated from B's
    hand["chapters"] = {c: {**a["chapters"], **b["chapters"]}[c] for c in ("ch02", "ch04", "ch05")}
    hand["files"].update(b["files"])
    hand["command"] = "record --chapters 2,5 ; record --chapters 4"
    hand["finished"] = b["finished"]
    assert json.loads(got["MANIFEST.json"]) == hand
    assert "installed 7 files" in run.stdout


def test_one_tarball_installs_byte_for_byte(tmp_path, checkout):
    _recording(tmp_path / "a", chapters=("ch02", "ch05"))
    run = _install(checkout, _tarball(tmp_path / "a"), "h200")
    assert run.returncode == 0, run.stderr
    assert _files(checkout / "code" / "fusedrms" / "data" / "h200") == _files(tmp_path / "a")


@pytest.mark.parametrize("what, b_kwargs, message", [
    ("commit", dict(commit="other", chapters=("ch04",)), "differ in commit"),
    ("chapter", dict(chapters=("ch04", "ch05")), "both record ch05"),
])
def test_recordings_that_are_not_one_are_refused_and_nothing_changes(
        tmp_path, checkout, what, b_kwargs, message):
    _recording(tmp_path / "a", chapters=("ch02", "ch05"))
    _recording(tmp_path / "b", **b_kwargs)
    dest = checkout / "code" / "fusedrms" / "data" / "h200"
    before = _files(dest)
    run = _install(checkout, _tarball(tmp_path / "a"), _tarball(tmp_path / "b"))
    assert run.returncode == 2 and message in run.stderr
    assert "a.tar.gz" in run.stderr and "b.tar.gz" in run.stderr
    assert _files(dest) == before


@pytest.mark.parametrize("key, value", [("gpu", "NVIDIA H100"), ("driver", "575"),
                                        ("versions", {"torch": "2.10", "triton": "3.6"})])
def test_a_different_gpu_driver_or_version_is_refused(key, value):
    a = {"commit": "c", "gpu": "NVIDIA H200", "driver": "580", "versions": {"torch": "2.11"},
         "chapters": {"ch02": {}}, "files": {}}
    b = {**a, "chapters": {"ch07": {}}, key: value}
    with pytest.raises(install_recording.MergeError, match=f"differ in {key}"):
        install_recording.merge_manifests([a, b], ["A", "B"])
    assert list(install_recording.merge_manifests([a, {**a, "chapters": {"ch07": {}}}])[
        "chapters"]) == ["ch02", "ch07"]


def test_a_tarball_without_a_manifest_is_not_a_recording(tmp_path, checkout):
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "x.txt").write_text("x")
    run = _install(checkout, _tarball(tmp_path / "junk"))
    assert run.returncode == 2 and "has no MANIFEST.json: not a recording" in run.stderr


def test_kept_chapters_come_over_whole_and_only_a_changed_one_is_marked(tmp_path, checkout):
    from fusedrms import records

    dest = checkout / "code" / "fusedrms" / "data" / "h200"
    committed = json.loads((dest / "MANIFEST.json").read_text())
    committed["chapters"]["ch03"]["sources"] = records.source_hashes(["traffic.py"])  # unchanged
    committed["chapters"]["ch04"]["sources"] = {"traffic.py": "an older hash"}  # changed since
    (dest / "MANIFEST.json").write_text(json.dumps(committed))
    before = _files(dest)
    _recording(tmp_path / "a", commit="new", chapters=("ch02",))
    run = _install(checkout, _tarball(tmp_path / "a"), "--keep", "ch03,ch04")
    assert run.returncode == 0, run.stderr
    got = _files(dest)
    for f in ("ch03.json", "logs/ch03.log", "ch04.json", "logs/ch04.log", "ch02.json"):
        assert got[f] == (before.get(f) or _files(tmp_path / "a")[f])
    manifest = json.loads(got["MANIFEST.json"])
    assert manifest["commit"] == "new" and list(manifest["chapters"]) == ["ch02", "ch03", "ch04"]
    assert manifest["chapters"]["ch03"] == committed["chapters"]["ch03"]
    assert list(manifest["stale"]) == ["ch04"] and "commit old" in manifest["stale"]["ch04"]
    assert "ch03 (2 files) from commit old: current" in run.stdout
    assert "ch04 (2 files) from commit old: acknowledged" in run.stdout


def test_keeping_a_chapter_the_committed_recording_lacks_is_refused_and_nothing_changes(tmp_path, checkout):
    dest = checkout / "code" / "fusedrms" / "data" / "h200"
    before = _files(dest)
    _recording(tmp_path / "a", commit="new", chapters=("ch02",))
    run = _install(checkout, _tarball(tmp_path / "a"), "--keep", "ch03,ch09")
    assert run.returncode != 0 and "the committed recording has no finished ch09" in run.stderr
    assert _files(dest) == before  # nothing changes
