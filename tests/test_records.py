import json

import pytest

from fusedrms import records


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
    assert "Recorded on" in records.describe(doc)
    assert json.loads(path.read_text())["provenance"]["torch"]


def test_missing_file_names_the_path_and_the_script(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "DATA_DIR", tmp_path)
    with pytest.raises(FileNotFoundError, match="gpu_session.sh"):
        records.load("absent")
