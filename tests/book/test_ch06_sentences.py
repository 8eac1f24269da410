"""Chapter 6's sentences (fusedrms.book.ch06_sentences): good English in every state of the
data (all timed, some missing, none recorded), and never a claim the numbers do not support."""
import pytest

from fusedrms import records
from fusedrms.book import ch06
from fusedrms.book import ch06_sentences as said

FLOOR = records.CopyFloor(4000.0, "GPU")  # a copy at 4,000 GB/s
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


def test_every_sentence_says_nothing_when_nothing_is_recorded():
    for say in (said.sync_sentence, said.warmup_sentence, said.process_counts_sentence,
                said.process_sentence, said.l2_sentence, said.dirty_sentence,
                said.graph_sentences, said.floor_sentence, said.health_sentence,
                said.ncu_sentence, ch06.grid_span):
        assert say(None) is None, say.__name__
    assert ch06.not_timed_at(None, rows=1) == []


def test_sentences_on_the_committed_recording_read_well():
    from fusedrms.measure import harness as h

    rules, grid, ncu = (h.recorded(n) for n in ("timing_rules", "bench_grid", "ncu_summary"))
    if not (rules and grid and ncu):
        pytest.skip("no committed chapter 6 recording")
    view = ch06.ncu_view(ncu)
    grid = records.at_copy_floor(grid)
    for text in (said.sync_sentence(ch06.sync_rows(rules), records.copy_floor_beside(rules)),
                 said.warmup_sentence(ch06.warmup_view(rules)),
                 said.process_counts_sentence(grid),
                 said.process_sentence(ch06.process_view(grid)),
                 said.l2_sentence(ch06.l2_rows(rules)), said.dirty_sentence(view),
                 *said.graph_sentences(ch06.graph_rows(rules)),
                 said.floor_sentence(ch06.floor_summary(grid, "capstone.fused")),
                 said.health_sentence(ch06.grid_health(grid), "capstone.fused"),
                 said.ncu_sentence(view), ch06.grid_span(grid)):
        _reads_well(text)


def test_sync_sentence_concludes_only_what_the_clocks_show():
    def row(rows, no_sync, events):
        return dict(rows=rows, cols=8192, bytes=rows * 3 * 8192 * 2, no_sync_us=no_sync,
                    sync_us=events + 20, events_us=events)

    launch = _reads_well(said.sync_sentence([row(1024, 24, 15), row(65536, 78, 741)], FLOOR))
    assert "it times the launch" in launch and "below the copy floor at 1 of 2 sizes" in launch
    assert "down to" not in launch  # one size below: no range to state
    two = _reads_well(said.sync_sentence([row(1024, 8, 15), row(65536, 78, 741)], FLOOR))
    assert "below the copy floor at 2 of 2 sizes, down to 9.7% of it" in two
    # a clock that grows with the work is not said to time the launch
    honest = _reads_well(said.sync_sentence([row(1024, 20, 15), row(65536, 850, 841)], FLOOR))
    assert "times the launch" not in honest and "below the copy floor" not in honest
    one = _reads_well(said.sync_sentence([row(1024, 24, 15)], None))
    assert one.startswith("At 1,024 rows")


def test_process_sentences_in_every_state():
    full = _grid(*[_grid_record("k", r) for r in (1, 16, 256)])
    assert _reads_well(said.process_counts_sentence(full)) == \
        "In the recorded benchmark, 3 cold cases ran in three processes"
    cut = _grid(_grid_record("k", 1),
                _grid_record("k", 16, process_medians_us=[10.0, 10.1], processes=2),
                _grid_record("torch.compile", 1, process_medians_us=[10.0], processes=1))
    text = _reads_well(said.process_counts_sentence(cut))
    assert "1 cold case ran in three processes, 1 in two and 1 in one" in text
    assert "torch.compile's 1 ran in one by design" in text and "the other 1 in fewer" in text
    quiet = _reads_well(said.process_sentence(ch06.process_view(full)))
    assert "no process was more than 5% off" in quiet and "3 cases measured" in quiet
    loud = _grid(_grid_record("k", 1, process_medians_us=[10.0, 10.0, 20.0]),
                 _grid_record("k", 16))
    text = _reads_well(said.process_sentence(ch06.process_view(loud)))
    assert "in 1 case one process was more than 5% off" in text and "100% above it" in text


def test_floor_sentence_never_contradicts_its_own_count():
    fs = dict(cases=13, min_pct=84.63, max_pct=104.1, median_pct=95.6, at_least=12, share=85.0,
              min_bytes=64e6)
    text = _reads_well(said.floor_sentence(fs))
    # 84.63% is below 85%: the range must not read "85% to 104%" beside "12 of 13 at 85%"
    assert "84.6% to 104.1%" in text and "at 85% or more on 12 of them" in text
    assert "on all 13" in said.floor_sentence(dict(fs, min_pct=86.0, at_least=13))
    assert "below 85% on all 13" in said.floor_sentence(dict(fs, max_pct=80.0, at_least=0))
    one = _reads_well(said.floor_sentence(dict(fs, cases=1, max_pct=84.63, at_least=0)))
    assert one.startswith("On the one grid shape that moves")


def test_health_sentence_reports_skipped_cases_as_missing_never_as_results():
    grid = _grid(_grid_record("capstone.fused", 1),
                 _grid_record("torch.eager_chain", 1, correct=False),
                 _grid_record("torch.compile_add", 1, status="skipped: time budget"),
                 _grid_record("torch.compile_add", 16, status="skipped: time budget"),
                 _grid_record("j", 1, status="unsupported: too wide"))
    text = _reads_well(said.health_sentence(ch06.grid_health(grid), "capstone.fused"))
    assert "2 cases of torch.compile_add were not timed" in text and "missing" in text
    assert "failed" not in text and "1 case was a width" in text and "(j)" in text
    assert "A peer outside the tolerance is not broken" in text
    clean = _reads_well(said.health_sentence(ch06.grid_health(_grid(
        _grid_record("capstone.fused", 1))), "capstone.fused"))
    assert "every output within the tolerance" in clean and "not timed" not in clean
    # our own kernel outside the tolerance is never excused as a peer's definition
    ours = said.health_sentence(ch06.grid_health(_grid(
        _grid_record("capstone.fused", 1, correct=False))), "capstone.fused")
    assert "A peer outside the tolerance" not in ours
    err = _reads_well(said.health_sentence(ch06.grid_health(_grid(
        _grid_record("q", 1, status="error: KeyError: x"))), "capstone.fused"))
    assert "1 case failed with an error (q)" in err


def test_graph_sentences_report_both_lone_calls():
    r = dict(impl="capstone.fused", rows=1, cols=2048, cold_us=4.77, cold_graph_us=5.25,
             held_us=4.24, held_graph_us=4.19, back_to_back_us=42.9, graph_back_to_back_us=1.61)
    answer, lesson = said.graph_sentences([r])
    _reads_well(answer), _reads_well(lesson)
    assert "27 times as long" in answer
    assert "a flushed call took 10% longer" in lesson and "a warm one took 1.2% less time" in lesson
    faster = dict(r, cold_graph_us=2.0, held_graph_us=2.0)
    assert said.graph_sentences([faster])[1].startswith("Replaying made even a lone call faster")
    same = said.graph_sentences([dict(r, held_graph_us=4.24)])[1]
    assert "a warm one took the same time" in same


def test_l2_and_dirty_sentences_follow_the_numbers():
    head = dict(rows=1024, cols=4096, bytes=25e6, warm_us=7.7, cold_us=10.5,
                cold_over_warm=10.5 / 7.7)
    big = dict(rows=16384, cols=4096, bytes=403e6, warm_us=97.0, cold_us=97.0,
               cold_over_warm=1.0)
    text = _reads_well(said.l2_sentence(([head, big], dict(headline=head, l2_bytes=60e6))))
    assert "inside the L2" in text and "1.36 times better" in text and "the same" in text
    flat = dict(head, cold_us=7.8, cold_over_warm=7.8 / 7.7)
    assert "little difference" in said.l2_sentence(([flat], dict(headline=flat)))
    view = dict(status="ok", op="add_rmsnorm", rows=16384, cols=8192, dtype="bf16",
                bytes_write=244.9e6, model_bytes=805322752)
    short = _reads_well(said.dirty_sentence(view))
    assert "268.4 MB" in short and "23.5 MB fewer" in short
    full = _reads_well(said.dirty_sentence(dict(view, bytes_write=268435456)))
    assert "nothing was left in L2" in full
    total = _reads_well(said.dirty_sentence(dict(view, bytes_write=None, dram_bytes=810e6)))
    assert "more" in total and "fewer" not in total


def test_ncu_sentence_says_where_the_configuration_came_from():
    view = dict(status="ok", duration_us=181.66, dram_throughput_pct=89.86,
                config=dict(label="rows/prog 1, warps 16",
                            source="tuned on NVIDIA H200 for (8192, bfloat16)"))
    text = _reads_well(said.ncu_sentence(view))
    assert "89.9%" in text and "tuning table for the NVIDIA H200 at 8,192 bf16 columns" in text
    assert "(8192" not in text
    bare = _reads_well(said.ncu_sentence(dict(view, config=None, dram_throughput_pct=None)))
    assert "does not record its launch configuration" in bare
    assert said.ncu_sentence(dict(view, status="error")) is None


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
