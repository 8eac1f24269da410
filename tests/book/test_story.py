"""What the story modules share (fusedrms.book.story): missing values and the "your GPU" panel."""
from fusedrms.book import story


def test_a_missing_value_says_not_recorded():
    assert story.value({"a": "1.2×"}, "a") == "1.2×"
    assert story.value({}, "a") == story.MISSING == "not recorded"


def test_the_panel_reads_each_fact_from_both_recordings_and_marks_what_one_lacks():
    rows = [("looped cost", lambda f: f"{f['looped']:.2f}×"),
            ("ties", lambda f: f"{f['hits']} of {f['shapes']}"),
            ("share", lambda f: f"{f['a'] / f['b']:.0%}")]
    mine = {"looped": 1.5, "hits": 3, "shapes": 4, "a": 1, "b": 0}
    theirs = {"looped": 1.37, "a": 1, "b": 2}
    table = story.beside(rows, mine, theirs, "H200 (the book)")
    assert table == [
        {"": "looped cost", "H200 (the book)": "1.37×", "your GPU": "1.50×"},
        {"": "ties", "H200 (the book)": "-", "your GPU": "3 of 4"},
        {"": "share", "H200 (the book)": "50%", "your GPU": "-"}]


def test_a_file_not_recorded_is_none(monkeypatch, tmp_path):
    from fusedrms import records

    assert story.recorded("verify_gpu")["records"]
    monkeypatch.setattr(records, "DATA_DIR", tmp_path)
    assert story.recorded("verify_gpu") is None


def test_the_rotating_warm_up_is_read_from_its_number():
    doc = {"records": [{"mode": "cold", "warmup": 10},
                       {"mode": "rotating", "warm_ms": 25.0, "sets": 200}]}
    assert story.rotating_warm_up(doc) == "25 ms"
    assert story.rotating_warm_up({"records": [{"mode": "cold", "warmup": 10}]}) is None
    assert story.rotating_warm_up(None) is None
