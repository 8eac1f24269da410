"""fusedrms.records: record files, manifests, the reader's own recording, and staleness."""
import dataclasses
import json

import pytest

from fusedrms import env, record, records


def test_write_load_describe_roundtrip(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "DATA_DIR", tmp_path)
    path = records.write(tmp_path / "h200" / "demo.json", [{"impl": "a", "median_us": 1.5}],
                         extra={"note": "test"})
    doc = records.load("demo", machine="h200")
    assert doc["records"] == [{"impl": "a", "median_us": 1.5}]
    p = doc["provenance"]
    for key in ("gpu", "driver", "torch", "triton", "python", "date", "commit", "command"):
        assert key in p
    assert p["note"] == "test"
    assert records.describe(doc).startswith("Recorded on")
    assert json.loads(path.read_text())["provenance"]["torch"]


def test_missing_file_names_the_path_and_the_command(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "DATA_DIR", tmp_path)
    with pytest.raises(FileNotFoundError, match="fusedrms.record"):
        records.load("absent")


@pytest.mark.parametrize("name,slug", [("NVIDIA H200", "h200"), ("AMD Radeon RX 9070 XT", "rx9070xt"),
                                       ("NVIDIA GeForce RTX 4090", "rtx4090"), (None, None),
                                       ("none (CPU)", None)])
def test_gpu_slug(name, slug):
    assert records.gpu_slug(name) == slug


def _own_recording(tmp_path, monkeypatch, gpu="NVIDIA H100 80GB HBM3"):
    """A reader's recording for a GPU, and this process pretending to run on it."""
    monkeypatch.setenv("FUSEDRMS_RECORDINGS", str(tmp_path / "recordings"))
    folder = tmp_path / "recordings" / records.gpu_slug(gpu)
    records.write(folder / "hip_ladder.json", [{"name": "mine"}])
    records.write_manifest(folder, {"commit": "abc", "chapters": {}, "files": {
        "hip_ladder.json": {"chapter": "ch03"}}, "stale": {}})
    fake = dataclasses.replace(env.current(), gpu_name=gpu)
    monkeypatch.setattr(env, "current", lambda: fake)
    return folder


def test_the_readers_own_recording_is_preferred_and_says_so(tmp_path, monkeypatch):
    folder = _own_recording(tmp_path, monkeypatch)
    doc = records.load("hip_ladder")
    assert doc["records"] == [{"name": "mine"}] and doc["source"]["own"]
    assert records.describe(doc).startswith("Your recording: on")
    assert records.find("hip_ladder.json") == folder / "hip_ladder.json"
    assert records.badge_fields(doc) == {"own": True, "stale": None}
    committed = records.load("hip_ladder", machine="h200")  # asked for by name: the committed one
    assert not committed["source"]["own"] and committed["records"] != doc["records"]


def test_what_the_own_recording_lacks_comes_from_the_committed_one(tmp_path, monkeypatch):
    folder = _own_recording(tmp_path, monkeypatch)  # a recording of chapter 3's ladder only
    assert records.load("bench_grid")["source"] == {
        "folder": str(records.DATA_DIR / "h200"), "own": False, "chapter": "ch06"}
    assert records.find("bench_grid.csv") == records.DATA_DIR / "h200" / "bench_grid.csv"
    assert records.recording_dir(chapter="ch06") == records.DATA_DIR / "h200"
    assert records.recording_dir(chapter="ch03") == records.DATA_DIR / "h200"  # not "ok" in it
    manifest = records.read_manifest(folder)
    manifest["chapters"]["ch03"] = {"status": "ok"}
    records.write_manifest(folder, manifest)
    assert records.recording_dir(chapter="ch03") == folder
    assert records.load("hip_ladder")["source"]["own"]


def test_a_your_gpu_panel_needs_the_chapter_in_the_readers_recording(tmp_path, monkeypatch):
    folder = _own_recording(tmp_path, monkeypatch)  # chapter 3's ladder, not finished
    assert records.own_recording_has("ch03") is None and records.own_recording_has("ch06") is None
    manifest = records.read_manifest(folder)
    manifest["chapters"]["ch03"] = {"status": "ok"}
    records.write_manifest(folder, manifest)
    assert records.own_recording_has("ch03") == folder
    assert records.own_recording_has("ch06") is None  # the page's ch06 numbers are the H200's
    manifest["chapters"]["ch03"]["smoke"] = True  # a pipeline check, not a measurement
    records.write_manifest(folder, manifest)
    assert records.own_recording_has("ch03") is None


def test_without_an_own_recording_the_committed_one_is_read(tmp_path, monkeypatch):
    _own_recording(tmp_path, monkeypatch, gpu="NVIDIA H100 80GB HBM3")
    fake = dataclasses.replace(env.current(), gpu_name="NVIDIA A100")
    monkeypatch.setattr(env, "current", lambda: fake)
    assert records.recording_dir() == records.DATA_DIR / "h200"
    assert not records.load("hip_ladder")["source"]["own"]


def _package(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "kernels").mkdir(parents=True)
    (pkg / "kernels" / "k.py").write_text("x = 1\n")
    return pkg


def _recording(tmp_path, pkg, stale=None):
    folder = tmp_path / "rec"
    folder.mkdir()
    records.write_manifest(folder, {"commit": "c0ffee", "chapters": {"ch09": {
        "status": "ok", "sources": records.source_hashes(["kernels/k.py"], pkg)}},
        "files": {}, "stale": stale or {}})
    return folder


def test_staleness_follows_the_source_hashes(tmp_path):
    pkg = _package(tmp_path)
    folder = _recording(tmp_path, pkg)
    state = records.staleness("ch09", folder, pkg)
    assert state.state == "current" and state.badge == ""
    (pkg / "kernels" / "k.py").write_text("x = 2\n")
    state = records.staleness("ch09", folder, pkg)
    assert state.state == "stale" and state.changed == ["kernels/k.py"]
    assert "earlier version of the kernel" in state.badge and "kernels/k.py" in state.badge
    assert records.staleness("ch01", folder, pkg).state == "unrecorded"


KERNEL = ('"""A kernel; 4.1 µs × 2 on the H200."""\nimport math\n\n\n'
          'def scale(x):  # one rsqrt per row\n'
          '    """The scale of a row."""\n'
          '    s = f"{x} µs"  # not a docstring: a value\n'
          '    return math.sqrt(x), s\n')


def test_a_comment_or_docstring_never_makes_a_recording_stale(tmp_path):
    pkg = _package(tmp_path)
    (pkg / "kernels" / "k.py").write_text(KERNEL)
    folder = _recording(tmp_path, pkg)
    assert records.source_hash("kernels/k.py", pkg).startswith(records.CODE_HASH)
    for edit in (KERNEL.replace("one rsqrt per row", "one rsqrt per row: 3.9 µs"),
                 KERNEL.replace("4.1 µs × 2 on the H200.", "4.0 µs ×\n2 on the H200 (1024 rows)."),
                 KERNEL.replace("    return", "    # why: the H100 agrees\n\n    return"),
                 KERNEL.replace('"""The scale of a row."""', "'The scale.'  # of one row")):
        (pkg / "kernels" / "k.py").write_text(edit)
        assert records.staleness("ch09", folder, pkg).state == "current", edit
    for edit in (KERNEL.replace("math.sqrt(x)", "math.sqrt(x + 1)"),
                 KERNEL.replace('f"{x} µs"', 'f"{x} us"'),  # a string that is a value
                 KERNEL.replace("    s = f", "    s = 1\n    s = f")):
        (pkg / "kernels" / "k.py").write_text(edit)
        state = records.staleness("ch09", folder, pkg)
        assert state.state == "stale" and state.changed == ["kernels/k.py"], edit


def test_code_text_drops_comments_and_docstrings_at_their_own_columns():
    assert records.code_text(KERNEL) == ('import math\ndef scale(x):\n'
                                         '    s = f"{x} µs"\n    return math.sqrt(x), s')
    class_doc = 'class A:\n    """µ."""; x = 1  # µ\n    y = "#"\n'
    assert records.code_text(class_doc) == 'class A:\n    ; x = 1\n    y = "#"'


def test_a_recording_before_code_hashes_is_compared_by_its_bytes(tmp_path):
    """A manifest written before code hashes holds the sha256 of each file's bytes: still current
    where nothing changed, stale at any edit, a comment too (its hash cannot tell)."""
    pkg = _package(tmp_path)
    folder = _recording(tmp_path, pkg)
    legacy = {"kernels/k.py": records.sha256_file(pkg / "kernels" / "k.py")}
    manifest = records.read_manifest(folder)
    manifest["chapters"]["ch09"]["sources"] = legacy
    records.write_manifest(folder, manifest)
    assert records.hashes_now(legacy, pkg) == legacy
    assert records.staleness("ch09", folder, pkg).state == "current"
    (pkg / "kernels" / "k.py").write_text("x = 1  # a comment\n")
    assert records.staleness("ch09", folder, pkg).state == "stale"
    assert records.hashes_now({"kernels/gone.py": "code:00"}, pkg) == {"kernels/gone.py": None}


def test_a_source_that_does_not_parse_is_hashed_by_its_bytes(tmp_path):
    pkg = _package(tmp_path)
    (pkg / "kernels" / "k.py").write_text("def broken(:\n")
    digest = records.source_hash("kernels/k.py", pkg)
    assert digest == records.sha256_file(pkg / "kernels" / "k.py")
    assert records.hashes_now({"kernels/k.py": digest}, pkg) == {"kernels/k.py": digest}


def test_an_acknowledged_stale_entry_changes_the_badge_not_the_test(tmp_path):
    pkg = _package(tmp_path)
    folder = _recording(tmp_path, pkg, stale={"ch09": "the fix lands before its GPU re-recording"})
    (pkg / "kernels" / "k.py").write_text("x = 3\n")
    state = records.staleness("ch09", folder, pkg)
    assert state.state == "acknowledged" and state.reason.startswith("the fix")
    assert "measured on an earlier version of the kernel" in state.badge


def test_a_partial_chapter_shows_its_note_and_without_one_is_stale(tmp_path):
    """A run cut short keeps some files from an earlier recording: the badge says which."""
    pkg = _package(tmp_path)
    folder = _recording(tmp_path, pkg, stale={"ch09": "the lever table, from an earlier run."})
    manifest = records.read_manifest(folder)
    manifest["chapters"]["ch09"]["status"] = "partial"
    records.write_manifest(folder, manifest)
    state = records.staleness("ch09", folder, pkg)
    assert state.state == "partial" and state.badge == (
        "These numbers come from this recording, except the lever table, from an earlier run.")
    manifest["stale"] = {}
    records.write_manifest(folder, manifest)
    assert records.staleness("ch09", folder, pkg).state == "stale"  # a partial run must say why
    (pkg / "kernels" / "k.py").write_text("x = 5\n")
    assert records.staleness("ch09", folder, pkg).state == "stale"


def test_describe_carries_the_badge_of_a_stale_chapter(tmp_path, monkeypatch):
    pkg = _package(tmp_path)
    folder = _recording(tmp_path, pkg)
    monkeypatch.setattr(records, "PACKAGE_DIR", pkg)
    monkeypatch.setattr(records, "DATA_DIR", tmp_path)
    records.write(folder / "f.json", [])
    manifest = records.read_manifest(folder)
    manifest["files"]["f.json"] = {"chapter": "ch09"}
    records.write_manifest(folder, manifest)
    assert "earlier version" not in records.describe(records.load("f", machine="rec"))
    (pkg / "kernels" / "k.py").write_text("x = 4\n")
    doc = records.load("f", machine="rec")
    assert "earlier version of the kernel" in records.describe(doc)
    fields = records.badge_fields(doc)
    assert not fields["own"] and "earlier version of the kernel" in fields["stale"]


# ---------------------------------------------------------------- the committed recording

COMMITTED = records.DATA_DIR / records.COMMITTED


def test_every_committed_chapter_is_current_or_acknowledged():
    """Fails when a committed record was measured from sources that changed since (the manifest's
    hashes), naming the chapter to re-record with ``python -m fusedrms.record --chapters N``."""
    manifest = records.read_manifest(COMMITTED)
    assert manifest, "data/h200 has no MANIFEST.json"
    stale = []
    for chapter in manifest["chapters"]:
        state = records.staleness(chapter, COMMITTED)
        assert state.state != "unrecorded", chapter
        if state.state == "stale":
            stale.append(f"{chapter} (changed: {', '.join(state.changed)})")
        if state.state == "acknowledged":
            assert "earlier version of" in state.badge
        if state.state == "partial":  # the page shows a note that is a whole sentence as it is
            assert "earlier" in state.badge and state.badge.startswith("These numbers")
    assert not stale, ("re-record " + "; ".join(stale) + " with python -m fusedrms.record "
                       "--chapters N, or acknowledge it under 'stale' in the manifest")


def test_the_committed_manifest_lists_every_file_with_its_chapter():
    manifest = records.read_manifest(COMMITTED)
    on_disk = {str(p.relative_to(COMMITTED)) for p in COMMITTED.rglob("*")
               if p.is_file() and p.name != records.MANIFEST}
    assert on_disk == set(manifest["files"])
    for rel, entry in manifest["files"].items():
        assert entry["sha256"] == records.sha256_file(COMMITTED / rel), rel
        if not rel.startswith("logs/"):
            assert entry["chapter"] in record.CHAPTERS, rel


def test_every_file_the_chapters_read_has_a_chapter_that_records_it():
    produced = {f for c in record.CHAPTERS for f in (*record.companion(c).FILES,
                                                     *getattr(record.companion(c), "TUNING_FILES", {}))}
    manifest = records.read_manifest(COMMITTED)
    committed = {r for r in manifest["files"] if not r.startswith("logs/")}
    # a chapter's record() may also write side files (listings, logs): its manifest entry names them
    side = {f for entry in manifest["chapters"].values() for f in entry.get("files", [])}
    assert committed <= produced | side, committed - produced - side


def test_a_record_closure_ignores_readers_but_not_what_record_uses(tmp_path):
    module = tmp_path / "book" / "chxx.py"
    module.parent.mkdir()
    base = ("SHAPES = (1, 2)\n\ndef helper(n):\n    return n * 2\n\n"
            "def record(out_dir):\n    return [helper(s) for s in SHAPES]\n\n"
            "def reader(doc):\n    return doc['x']\n")
    module.write_text(base)
    first = records.source_hash("book/chxx.py::record", tmp_path)
    module.write_text(base.replace("return doc['x']", "return doc.get('x', 0)"))
    assert records.source_hash("book/chxx.py::record", tmp_path) == first  # a reader changed
    assert records.source_hash("book/chxx.py", tmp_path) != first
    module.write_text(base.replace("n * 2", "n * 3"))
    assert records.source_hash("book/chxx.py::record", tmp_path) != first  # what record runs
    module.write_text(base.replace("(1, 2)", "(1, 2, 4)"))
    assert records.source_hash("book/chxx.py::record", tmp_path) != first  # its constants
    assert records.source_hash("book/missing.py::record", tmp_path) is None


# ---- the copy floor: one measured copy bandwidth, chapter 2's

def test_the_copy_floor_is_chapter_2s_measured_copy():
    doc = records.load(records.COPY_FLOOR_FILE, machine=records.COMMITTED)
    measured = next(r for r in doc["records"] if r["kind"] == "bandwidth")
    floor = records.copy_floor()
    assert floor.GBps == measured["measured_GBps"] == records.copy_floor_GBps()
    assert floor.published_GBps == measured["published_GBps"] > floor.GBps
    assert floor.doc["source"]["chapter"] == "ch02"
    assert floor.us(4236e3 * 10) == pytest.approx(10 * 4236e3 / (floor.GBps * 1e3))
    assert floor.pct(floor.GBps * 1e3 * 5, 4.0) == pytest.approx(125.0)  # past it: allowed


def test_reprice_puts_every_floor_at_the_one_copy_and_drops_what_it_cannot():
    floor = records.CopyFloor(4000.0, "GPU")
    doc = {"provenance": {"copy_GBps": 4200.0}, "records": [
        {"median_us": 10.0, "bytes": 40e6, "floor_us": 9.5, "pct_of_floor": 95.0,
         "copy_GBps": 4210.0},
        {"median_us": 10.0, "floor_us": 9.0, "copy_GBps": 4400.0, "pct_of_floor": 90.0},
        {"median_us": 10.0, "floor_us": 9.0, "pct_of_floor": 90.0},  # priced at no known copy
        {"kind": "other", "median_us": 3.0}]}
    out = floor.reprice(doc)
    first, second, third, other = out["records"]
    assert first["floor_us"] == pytest.approx(10.0) and first["pct_of_floor"] == pytest.approx(100)
    assert second["floor_us"] == pytest.approx(9.0 * 4400 / 4000) and second["copy_GBps"] == 4000
    assert third["floor_us"] is None and third["pct_of_floor"] is None
    assert other == {"kind": "other", "median_us": 3.0}
    assert doc["records"][0]["pct_of_floor"] == 95.0  # the loaded document is left alone
    ladder = floor.reprice({"records": [{"us": 20.0, "bytes": 40e6, "fraction_of_floor": 0.4}]},
                           time="us", share="fraction_of_floor", per=1.0)
    assert ladder["records"][0]["fraction_of_floor"] == pytest.approx(0.5)
    assert floor.reprice(None) is None


def test_the_floor_beside_a_file_comes_from_the_same_recording(tmp_path, monkeypatch):
    folder = _own_recording(tmp_path, monkeypatch)  # chapter 3 only: no copy measured there
    ladder = records.load("hip_ladder")
    with pytest.raises(records.FloorMissing, match="--chapters 2"):
        records.copy_floor(beside=ladder)  # never the H200's copy for this GPU's times
    assert records.copy_floor() == records.copy_floor(records.COMMITTED)  # predictions: H200's
    records.write(folder / "traffic_bandwidth.json", [
        {"kind": "bandwidth", "gpu": "NVIDIA H100 80GB HBM3", "measured_GBps": 2900.0,
         "source": "measured", "published_GBps": 3350.0}])
    assert records.copy_floor(beside=ladder).GBps == 2900.0 == records.copy_floor().GBps
    grid = records.load("bench_grid")  # the committed H200 grid: the committed H200 copy
    assert records.copy_floor(beside=grid) == records.copy_floor(records.COMMITTED)


def test_a_copy_that_was_not_measured_is_no_floor(tmp_path, monkeypatch):
    folder = _own_recording(tmp_path, monkeypatch)
    records.write(folder / "traffic_bandwidth.json", [
        {"kind": "bandwidth", "gpu": "NVIDIA H100 80GB HBM3", "measured_GBps": 3350.0,
         "source": "published H100 SXM figure"}])
    with pytest.raises(records.FloorMissing):
        records.copy_floor(beside=records.load("hip_ladder"))
    assert records.copy_floor().gpu == "NVIDIA H200"


def test_a_page_shows_no_floor_rather_than_a_files_own(tmp_path, monkeypatch):
    folder = _own_recording(tmp_path, monkeypatch)
    records.write(folder / "hip_ladder.json", [{"name": "mine", "median_us": 2.0, "bytes": 8e6,
                                                "floor_us": 1.0, "fraction_of_floor": 0.5}])
    shown = records.at_copy_floor(records.load("hip_ladder"), share="fraction_of_floor", per=1)
    assert shown["records"][0]["floor_us"] is None and shown["records"][0]["fraction_of_floor"] is None
    grid = records.at_copy_floor(records.load("bench_grid"))
    floor = records.copy_floor(records.COMMITTED)
    case = next(r for r in grid["records"] if r.get("status") == "ok" and r.get("bytes"))
    assert case["pct_of_floor"] == pytest.approx(floor.pct(case["bytes"], case["median_us"]))
    assert records.at_copy_floor(None) is None


def test_an_acknowledged_change_to_recording_steps_alone_says_the_kernels_did_not_change():
    steps = records.Staleness("ch06", "acknowledged", ["book/ch06.py::record"], "why", "abc")
    assert "recording steps" in steps.badge and "kernels they time have not changed" in steps.badge
    kernel = records.Staleness("ch06", "acknowledged", ["book/ch06.py::record", "kernels/k.py"])
    assert "earlier version of the kernel" in kernel.badge
    peer = records.Staleness("ch06", "acknowledged", ["book/ch06.py::record",
                                                      "kernels/flashinfer_norm.cu"])
    assert "peer library's launch" in peer.badge and "book's kernels have not changed" in peer.badge
    both = records.Staleness("ch06", "acknowledged", ["kernels/peers.py", "kernels/add_rmsnorm.py"])
    assert "earlier version of the kernel" in both.badge
    timer = records.Staleness("ch06", "acknowledged", ["measure/timer.py", "book/ch06.py::record"])
    assert "timing code" in timer.badge and "kernels they time have not changed" in timer.badge
    timer_and_kernel = records.Staleness("ch06", "acknowledged", ["measure/timer.py", "kernels/k.py"])
    assert "earlier version of the kernel" in timer_and_kernel.badge
