"""Chapter 6's remaining sentences (fusedrms.book.ch06_sentences) and the grid's not-timed
reader: good English in every state of the data, never a claim the numbers do not support."""

from fusedrms.book import ch06
from fusedrms.book import ch06_sentences as said

BAD_ENGLISH = ("1 cases", "1 shapes", "1 sizes", "-0", "((", "))", " ,", "..", "  ",
               "None", "nan", "shapes shapes", "cases cases")


def _reads_well(text):
    assert text and not any(bad in text for bad in BAD_ENGLISH), text
    return text


def _grid_record(impl, rows, status="ok", **kw):
    base = dict(sweep="grid", op="add_rmsnorm", impl=impl, rows=rows, cols=4096, dtype="bf16",
                mode="cold", status=status)
    if status == "ok":
        base.update(median_us=10.0, p10_us=9.5, p90_us=10.5, bytes=rows * 3 * 8192,
                    pct_of_floor=90.0, correct=True, process_medians_us=[9.9, 10.0, 10.2])
    return dict(base, **kw)


def _grid(*recs, processes=3, compile_processes=1):
    return {"provenance": {"settings": dict(processes=processes,
                                            compile_processes=compile_processes),
                           "sweeps": [dict(name="grid", rows=[1, 16384], cols=[2048, 16384])]},
            "records": list(recs)}


def test_not_timed_at_names_skipped_peers_but_not_declared_widths():
    grid = _grid(_grid_record("a", 1), _grid_record("torch.compile", 1, status="skipped: x"),
                 _grid_record("w", 1, status="unsupported: too wide"))
    assert ch06.not_timed_at(grid, sweep="grid", rows=1) == ["torch.compile"]
    assert ch06.grid_span(grid) == "1 to 16,384 rows, widths 2,048 to 16,384"


def test_cooperation_sentence_compares_the_h200_and_names_who_was_not_timed():
    timed = [dict(impl="hip.serial", median_us=1048.5), dict(impl="hip.block", median_us=17.62)]
    text = _reads_well(said.cooperation_sentence(timed, 25.8, ["torch.compile"]))
    assert "a factor of 59.5" in text and "stronger than on the RX 9070 XT (25.8)" in text
    assert "did not time torch.compile at this shape: it is missing" in text
    assert "weaker" in said.cooperation_sentence(timed, 100.0)
    assert "about as strong as on the RX 9070 XT (60.0)" in said.cooperation_sentence(timed, 60.0)
    both = _reads_well(said.cooperation_sentence([], None, ["a", "b"]))
    assert both.startswith("The recording did not time a and b") and "they are missing" in both
    assert said.cooperation_sentence([], None, []) is None


def test_implementations_counts_in_words_in_every_state():
    assert said.implementations(None) == "the fused kernel and a peer"
    assert said.implementations([{"impl": "capstone.fused"}] * 3) == "the fused kernel alone"
    two = [{"impl": "capstone.fused"}, {"impl": "torch.eager_chain"}]
    assert said.implementations(two) == "two implementations"

