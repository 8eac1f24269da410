"""fusedrms.tuning: one loader for every table, robust to bad files; install is explicit and checked."""
import dataclasses
import json

import pytest
import torch

from fusedrms import env, records, tuning, validation
from fusedrms.kernels import add_rmsnorm as A
from fusedrms.kernels import rmsnorm_fp8_spec as spec

ENTRY = {"cols": 4096, "dtype": "bfloat16", "rows_per_program": 2, "num_warps": 8,
         "num_stages": 1, "programs_per_sm": None, "chunk": None}


def _write(path, doc):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def test_the_winner_minimizes_the_worst_ratio_not_the_sum():
    """Both tuners' rule: one configuration serves every batch size."""
    times = {"fast at 16384 rows": {256: 10.0, 16384: 100.0},
             "balanced": {256: 4.0, 16384: 104.0}, "slow": {256: 5.0, 16384: 120.0}}
    winner, regret = tuning.select_winner(times)
    assert winner == "balanced"
    assert regret["fast at 16384 rows"] == pytest.approx(2.5)
    assert regret["balanced"] == pytest.approx(1.04)
    # a tie in the worst ratio goes to the smaller total time
    assert tuning.select_winner({"a": {1: 2.0, 2: 10.0}, "b": {1: 2.0, 2: 9.0}})[0] == "b"


def test_the_winner_ignores_untimed_configs_and_needs_data():
    assert tuning.select_winner({"failed": {}, "timed": {256: 3.0}})[0] == "timed"
    with pytest.raises(ValueError, match="no timed configuration"):
        tuning.select_winner({"failed": {}})
    with pytest.raises(ValueError, match="share no timed row count"):
        tuning.select_winner({"a": {1: 1.0}, "b": {2: 1.0}})


def test_a_missing_file_is_an_empty_table(tmp_path):
    table = tuning.load("capstone", tmp_path / "nothing.json")
    assert table["configs"] == {} and table["gpu"] is None


@pytest.mark.parametrize("content,match", [("not json {", "is not JSON"), ("[1, 2]", "not a tuning table"),
                                           ('{"records": 3}', "not a tuning table")])
def test_unusable_files_give_a_clear_error(tmp_path, content, match):
    path = tmp_path / "t.json"
    path.write_text(content)
    with pytest.raises(tuning.TuningError, match=match):
        tuning.load("capstone", path)


def test_a_folder_is_not_a_table(tmp_path):
    with pytest.raises(tuning.TuningError, match="is a folder"):
        tuning.load("fp8", tmp_path)


def test_unknown_kind():
    with pytest.raises(tuning.TuningError, match="unknown tuning kind"):
        tuning.load("nope", "x.json")


def test_malformed_records_are_skipped_and_counted(tmp_path):
    path = _write(tmp_path / "t.json", {"provenance": {"gpu": "NVIDIA H200"},
                                        "records": [ENTRY, {"cols": 8}, {**ENTRY, "dtype": 7}]})
    table = tuning.load("capstone", path)
    assert table["configs"] == {(4096, "bfloat16"): A.LaunchConfig(2, 8, 1, None)}
    assert table["skipped"] == 2 and table["gpu"] == "NVIDIA H200"


def test_zero_widths_are_refused_not_divided_by():
    with pytest.raises(validation.InputError, match="cols must be a positive"):
        A.heuristic_config(0, torch.bfloat16)
    with pytest.raises(validation.InputError, match="block_cols must be a whole number >= 1"):
        spec.n_blocks(128, 0)
    from fusedrms.kernels import rmsnorm as T

    with pytest.raises(validation.InputError, match="block_size must be a positive"):
        T.rows_per_program_for(0)
    from fusedrms.measure import timer

    with pytest.raises(ValueError, match="need reps >= 1"):
        timer.median_us(lambda: None, reps=0)


def test_the_committed_tables_load_completely():
    for kind in tuning.KINDS:
        path = tuning.installed_path(kind, "h200")
        table = tuning.check_table(kind, path)
        assert table["gpu"] == "NVIDIA H200" and table["configs"], kind


def test_active_is_empty_off_the_gpu_or_when_switched_off(monkeypatch):
    monkeypatch.setattr(tuning, "_ACTIVE", {})
    if not env.current().on_gpu:
        assert tuning.active("capstone")["configs"] == {}
    monkeypatch.setattr(tuning, "_ACTIVE", {})
    monkeypatch.setenv("FUSEDRMS_TUNING", "off")
    assert tuning.active("fp8")["path"] == "disabled by FUSEDRMS_TUNING"


def test_override_changes_the_generation_and_resets(monkeypatch):
    monkeypatch.setattr(tuning, "_ACTIVE", {})
    before = tuning.generation()
    fake = {**tuning.empty("capstone", "test"), "gpu": "X", "configs": {(1, "float32"): None}}
    tuning.override("capstone", fake)
    assert tuning.active("capstone") is fake and tuning.generation() == before + 1
    tuning.override("capstone", None)
    assert "capstone" not in tuning._ACTIVE


def test_install_checks_then_copies_into_the_gpu_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tuning, "TUNING_DIR", tmp_path / "pkg")
    monkeypatch.setattr(tuning, "_ACTIVE", {})
    rec = tmp_path / "rec"
    with pytest.raises(tuning.TuningError, match="record with --tune first"):
        tuning.install(rec)
    _write(rec / "tuning" / "capstone.json", {"provenance": {"gpu": "NVIDIA H200"}, "records": [ENTRY]})
    assert tuning.main(["install", str(rec), "--dry-run"]) == 0
    assert not (tmp_path / "pkg").exists()
    assert tuning.main(["install", str(rec)]) == 0
    assert (tmp_path / "pkg" / "h200" / "capstone.json").exists()
    assert "1 entries for NVIDIA H200" in capsys.readouterr().out


@pytest.mark.parametrize("doc,match", [
    ({"provenance": {"gpu": "none (CPU)"}, "records": [ENTRY]}, "names no GPU"),
    ({"provenance": {"gpu": "NVIDIA H200"}, "records": [{"cols": 1}]}, "no usable entry"),
    ({"provenance": {"gpu": "NVIDIA H200"}, "records": [ENTRY, {"cols": 1}]}, "malformed"),
])
def test_install_refuses_tables_that_would_do_nothing_or_part(tmp_path, monkeypatch, doc, match, capsys):
    monkeypatch.setattr(tuning, "TUNING_DIR", tmp_path / "pkg")
    _write(tmp_path / "rec" / "tuning" / "capstone.json", doc)
    with pytest.raises(tuning.TuningError, match=match):
        tuning.install(tmp_path / "rec")
    assert tuning.main(["install", str(tmp_path / "rec")]) == 2
    assert match in capsys.readouterr().err


@pytest.mark.parametrize("text,match", [
    # issue 26: json reads Infinity as a float; int(inf) raised OverflowError through install
    ('{"provenance": {"gpu": "NVIDIA H200"}, "records": [{"cols": 4096, "dtype": "bfloat16", '
     '"rows_per_program": Infinity, "num_warps": 8, "num_stages": 1}]}',
     "no usable entry (1 malformed; entry 0: OverflowError"),
    ('{"provenance": {"gpu": 123}, "records": []}', "provenance 'gpu' must be the GPU's name"),
    ('{"provenance": {"gpu": ["H200"]}, "records": []}', "got ['H200'] (list)"),
])
def test_install_explains_non_finite_numbers_and_a_gpu_that_is_not_a_name(
        tmp_path, monkeypatch, text, match, capsys):
    monkeypatch.setattr(tuning, "TUNING_DIR", tmp_path / "pkg")
    path = tmp_path / "rec" / "tuning" / "capstone.json"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    assert tuning.main(["install", str(tmp_path / "rec")]) == 2
    err = capsys.readouterr().err
    assert match in err and "Traceback" not in err
    assert not (tmp_path / "pkg").exists()


def test_document_prefers_this_gpu_then_the_h200(monkeypatch):
    doc = tuning.document("fp8")
    assert doc["provenance"]["gpu"] == "NVIDIA H200"
    fake = dataclasses.replace(env.current(), gpu_name="Some Other GPU")
    monkeypatch.setattr(env, "current", lambda: fake)
    assert tuning.document("fp8") == doc
    assert records.gpu_slug("Some Other GPU") == "someothergpu"
