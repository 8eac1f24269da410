"""fusedrms.record: the one command that records every chapter's GPU results."""
import json
import types

import pytest

from fusedrms import record, records


def test_list_names_every_chapter_with_files_and_estimates(capsys):
    assert record.main(["--list"]) == 0
    out = capsys.readouterr().out
    for chapter in record.CHAPTERS:
        mod = record.companion(chapter)
        assert chapter in out and all(f in out for f in mod.FILES)
        # each fits one device call of 10 minutes: the recording, and a re-tune on its own
        assert mod.ESTIMATE_S < 600 and getattr(mod, "TUNING_ESTIMATE_S", 0) < 600, chapter
        assert callable(mod.record) and mod.SOURCES
        assert all(records.source_hash(s) for s in mod.SOURCES), chapter


def test_help_documents_the_command(capsys):
    with pytest.raises(SystemExit):
        record.main(["--help"])
    out = capsys.readouterr().out
    assert "--chapters" in out and "--tune" in out and "MANIFEST.json" in out


@pytest.mark.parametrize("text,chapters", [(None, list(record.CHAPTERS)), ("3,2", ["ch02", "ch03"]),
                                           ("ch08", ["ch08"]), ("all", list(record.CHAPTERS))])
def test_chapter_selection(text, chapters):
    assert record.parse_chapters(text) == chapters


def test_an_unknown_chapter_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        record.main(["--chapters", "1", "--list"])
    assert e.value.code == 2 and "unknown chapter" in capsys.readouterr().err


def test_without_a_gpu_it_says_so(capsys):
    if records.provenance()["gpu"] != "none (CPU)":
        pytest.skip("this machine has a GPU")
    assert record.main(["--chapters", "2", "--out", "/nonexistent"]) == 2
    assert "needs a GPU" in capsys.readouterr().err


def _fake_chapters(monkeypatch, tmp_path):
    """Two chapters whose record() writes a file (or fails), with a source file to hash."""
    src = tmp_path / "pkg" / "src.py"
    src.parent.mkdir()
    src.write_text("v = 1\n")
    monkeypatch.setattr(records, "PACKAGE_DIR", src.parent)

    def good(out_dir, tune=False, log=print):
        log("measuring")
        return [records.write(out_dir / "good.json", [{"tune": tune}])]

    def bad(out_dir, tune=False, log=print):
        raise RuntimeError("the GPU fell over")

    mods = {"ch02": types.SimpleNamespace(FILES={"good.json": ""}, ESTIMATE_S=1, SOURCES=("src.py",),
                                          record=good),
            "ch03": types.SimpleNamespace(FILES={"bad.json": ""}, ESTIMATE_S=1, SOURCES=("src.py",),
                                          record=bad)}
    monkeypatch.setattr(record, "companion", lambda c: mods[c])
    return src


def test_a_failing_chapter_is_logged_and_the_others_still_run(tmp_path, monkeypatch):
    _fake_chapters(monkeypatch, tmp_path)
    out = tmp_path / "rec"
    manifest = record.run(["ch02", "ch03"], out, require_gpu=False, command="test")
    assert manifest["chapters"]["ch02"]["status"] == "ok"
    assert manifest["chapters"]["ch03"]["status"] == "failed"
    assert "the GPU fell over" in manifest["chapters"]["ch03"]["error"]
    assert "the GPU fell over" in (out / "logs" / "ch03.log").read_text()
    assert "measuring" in (out / "logs" / "ch02.log").read_text()
    on_disk = json.loads((out / records.MANIFEST).read_text())
    assert on_disk["files"]["good.json"]["chapter"] == "ch02"
    assert on_disk["files"]["good.json"]["sha256"] == records.sha256_file(out / "good.json")
    assert on_disk["chapters"]["ch02"]["sources"] == {"src.py": records.source_hash("src.py")}
    assert records.staleness("ch02", out, records.PACKAGE_DIR).state == "current"


def test_each_chapter_names_the_run_that_recorded_it(tmp_path, monkeypatch):
    """Chapters added to a recording by a second run, or kept by an install from another one,
    still show their own command on the badge."""
    _fake_chapters(monkeypatch, tmp_path)
    out = tmp_path / "rec"
    record.run(["ch02"], out, require_gpu=False, command="record --chapters 2")
    manifest = record.run(["ch03"], out, require_gpu=False, command="record --chapters 3")
    assert manifest["command"] == "record --chapters 2 ; record --chapters 3"
    assert [manifest["chapters"][c]["command"] for c in ("ch02", "ch03")] == [
        "record --chapters 2", "record --chapters 3"]


def test_adding_to_a_recording_needs_the_same_commit_and_sources(tmp_path, monkeypatch):
    src = _fake_chapters(monkeypatch, tmp_path)
    out = tmp_path / "rec"
    record.run(["ch02"], out, require_gpu=False)
    record.run(["ch02"], out, require_gpu=False)  # same commit, same sources: fine
    src.write_text("v = 1  # a comment, no code changed\n")
    record.run(["ch03"], out, require_gpu=False)  # ch02 is still current
    src.write_text("v = 2\n")
    with pytest.raises(record.RecordError, match="re-record it too"):
        record.run(["ch03"], out, require_gpu=False)
    manifest = records.read_manifest(out)
    manifest["commit"] = "0" * 40
    records.write_manifest(out, manifest)
    with pytest.raises(record.RecordError, match="new --out folder"):
        record.run(["ch02"], out, require_gpu=False)


def test_adding_to_a_recording_needs_the_same_gpu_driver_and_versions(tmp_path, monkeypatch):
    # a recording's folder carried to another machine at the same commit: never one recording
    _fake_chapters(monkeypatch, tmp_path)
    out = tmp_path / "rec"
    record.run(["ch02"], out, require_gpu=False)
    for key, value in (("gpu", "NVIDIA H200"), ("driver", "999.1"), ("versions", {"torch": "0"})):
        manifest = records.read_manifest(out)
        kept = manifest[key]
        manifest[key] = value
        records.write_manifest(out, manifest)
        with pytest.raises(record.RecordError, match=f"differs in its {key} .*new --out folder"):
            record.run(["ch03"], out, require_gpu=False)
        manifest[key] = kept
        records.write_manifest(out, manifest)
    assert "ch03" in record.run(["ch03"], out, require_gpu=False)["chapters"]


def test_smoke_is_passed_down_marked_and_kept_apart(tmp_path, monkeypatch):
    _fake_chapters(monkeypatch, tmp_path)
    seen = {}
    mod = record.companion("ch02")

    def smoke_aware(out_dir, tune=False, log=print, smoke=False):
        seen["smoke"] = smoke
        return [records.write(out_dir / "good.json", [])]

    monkeypatch.setattr(mod, "record", smoke_aware)
    out = tmp_path / "smoke"
    manifest = record.run(["ch02"], out, require_gpu=False, smoke=True)
    assert seen["smoke"] and manifest["smoke"] and manifest["chapters"]["ch02"]["smoke"]
    with pytest.raises(record.RecordError, match="never share a folder"):
        record.run(["ch02"], out, require_gpu=False)


def test_every_companion_takes_the_smoke_flag():
    import inspect

    for chapter in record.CHAPTERS:
        params = inspect.signature(record.companion(chapter).record).parameters
        assert {"tune", "log", "smoke"} <= set(params), chapter


def test_the_whole_book_records_in_five_device_calls():
    """Each call of DEVICE_CALLS fits one device call by the chapters' measured estimates, and
    together they record every chapter once; chapter 6's call times chapter 7's peers, the next
    call chapter 7's fp16 and fp32 grid ahead, both into the folder chapter 7 is recorded into."""
    flat = [c for call in record.DEVICE_CALLS for c in call["chapters"]]
    assert sorted(flat) == sorted(record.CHAPTERS) and len(record.DEVICE_CALLS) == 5
    for call in record.DEVICE_CALLS:
        assert record.call_estimate_s(call) <= record.DEVICE_CALL_S, call
    listing = record.listing()
    assert "device call 1: --chapters 6 --then 7 (" in listing
    assert "device call 2: --chapters 2,3,4 --ahead 7 into call 1's folder (" in listing
    assert "device call 3: --chapters 7 into call 1's folder (" in listing
    for i, call in enumerate(record.DEVICE_CALLS, 1):
        for later in call.get("then", ()) + call.get("ahead", ()):  # recorded later, same folder
            into = i if "into" not in call else call["into"]
            assert any(later in c["chapters"] and c.get("into") == into
                       for c in record.DEVICE_CALLS[i:]), (i, later)


def test_ahead_times_a_later_chapters_long_work_into_its_recording(tmp_path, monkeypatch):
    """--ahead: a call before chapter N's runs its ahead() in the same run (the folder's run_id);
    its files and log are the chapter's in the manifest; a failure is logged and reported, and a
    chapter without ahead() or recorded in the same call is refused."""
    _fake_chapters(monkeypatch, tmp_path)
    mod = record.companion("ch03")
    runs = []

    def ahead(out_dir, log=print, smoke=False, run=None):
        runs.append(run)
        log("timing ahead")
        return [records.write(out_dir / "early.json", [])]

    mod.ahead, mod.AHEAD_ESTIMATE_S = ahead, 1
    out = tmp_path / "rec"
    manifest = record.run(["ch02"], out, require_gpu=False, ahead=["ch03"])
    assert runs[0]["id"] == manifest["run_id"] and "ch03" in runs[0]["chapters"]
    assert manifest["ahead"]["ch03"]["status"] == "ok" and "ch03" not in manifest["chapters"]
    assert manifest["files"]["early.json"] == {"chapter": "ch03", "produced_by": "fusedrms.book.ch03.ahead",
                                               "sha256": records.sha256_file(out / "early.json")}
    assert "timing ahead" in (out / "logs" / "ch03_ahead.log").read_text()

    def fails(out_dir, log=print, smoke=False, run=None):
        raise RuntimeError("out of memory")

    mod.ahead = fails
    manifest = record.run(["ch02"], tmp_path / "other", require_gpu=False, ahead=["ch03"])
    assert manifest["ahead"]["ch03"]["status"] == "failed" and "out of memory" in manifest["ahead"]["ch03"]["error"]
    with pytest.raises(record.RecordError, match="now and also ahead"):
        record.run(["ch03"], tmp_path / "third", require_gpu=False, ahead=["ch03"])
    with pytest.raises(record.RecordError, match="no work to time ahead"):
        record.run(["ch03"], tmp_path / "fourth", require_gpu=False, ahead=["ch02"])


def test_chapters_that_ask_are_told_which_chapters_this_run_records(tmp_path, monkeypatch):
    _fake_chapters(monkeypatch, tmp_path)
    seen = []
    mod = record.companion("ch02")

    def run_aware(out_dir, tune=False, log=print, smoke=False, run=None):
        seen.append(run)
        return [records.write(out_dir / "good.json", [])]

    monkeypatch.setattr(mod, "record", run_aware)
    record.run(["ch02", "ch03"], tmp_path / "a", require_gpu=False)
    record.run(["ch02"], tmp_path / "b", require_gpu=False)
    assert seen[0]["chapters"] == ("ch02", "ch03") and seen[1]["chapters"] == ("ch02",)
    assert seen[0]["id"] != seen[1]["id"]  # a later run never reuses an earlier run's files


def test_a_later_run_into_the_folder_shares_the_recordings_run(tmp_path, monkeypatch):
    """--then: chapter 6 times chapter 7's peers for a later run into the same folder, which
    finds them made by its own recording (the folder's run_id); a new folder is another run."""
    _fake_chapters(monkeypatch, tmp_path)
    runs = []

    def sees_run(out_dir, tune=False, log=print, run=None):
        runs.append(run)
        return [records.write(out_dir / "good.json", [])]

    monkeypatch.setattr(record.companion("ch02"), "record", sees_run)
    out = tmp_path / "rec"
    record.run(["ch02"], out, require_gpu=False, then=["ch03"])
    assert runs[0]["chapters"] == ("ch02", "ch03")
    record.run(["ch02"], out, require_gpu=False)
    assert runs[1]["id"] == runs[0]["id"] == records.read_manifest(out)["run_id"]
    record.run(["ch02"], tmp_path / "other", require_gpu=False)
    assert runs[2]["id"] != runs[0]["id"]
    with pytest.raises(record.RecordError, match="now and also later"):
        record.run(["ch02"], tmp_path / "third", require_gpu=False, then=["ch02"])
