"""Chapter 3's animation: frames from the trace, and the trace agrees with the real kernels."""
import pytest

from fusedrms.viz import hip_frames


def test_the_books_row_gives_the_books_numbers():
    t = hip_frames.trace([3, 4, -3, -4], [1, 0.5, 2, 1], 1e-5, threads=4)
    assert t.serial_running == [9, 25, 34, 50]
    assert t.partials == [9, 16, 9, 16]
    assert t.levels == [[9, 16, 9, 16], [18, 32], [50]]
    assert t.strides == [2, 1] and t.barriers == 3
    assert t.mean == 12.5 and abs(t.r - 0.28284) < 1e-5


def test_eight_frames_whose_captions_carry_the_trace():
    frames = hip_frames.frames()
    assert len(frames) == 8
    text = " ".join(f.caption for f in frames)
    for needle in ("9+9=18", "16+16=32", "18+32 = 50", "50/4 = 12.5", "0.2828"):
        assert needle in text, needle
    assert all(f.svg.startswith("<svg") for f in frames)


def test_idle_threads_join_with_zero():
    t = hip_frames.trace([1, 2, 3], [1, 1, 1], threads=8)
    assert t.partials[3:] == [0.0] * 5 and t.total == 14
    assert "no column" in hip_frames.frames([1, 2, 3], [1, 1, 1], threads=8)[3].caption


@pytest.mark.parametrize("threads", [1, 2, 4, 8])
def test_trace_matches_the_hip_kernels(threads):
    reports = hip_frames.check_against_kernels(threads=threads)
    assert set(reports) == {"serial", "block"} and all(r.ok for r in reports.values()), reports


def test_bad_inputs_are_explained():
    with pytest.raises(ValueError, match="threads"):
        hip_frames.trace([1, 2], [1, 1], threads=3)
    with pytest.raises(ValueError, match="weight"):
        hip_frames.trace([1, 2], [1])
    with pytest.raises(ValueError, match="columns"):
        hip_frames.trace(list(range(9)), [1] * 9)


def test_explorer_accepts_text_and_reports_bad_input():
    assert hip_frames.trace("3, 4, -3, -4", "1 0.5 2 1").total == 50
    with pytest.raises(ValueError, match="commas"):
        hip_frames.trace("3, four", "1, 1")
    box = hip_frames.explorer(threads=2)
    text_x, _, _, threads = box.children[1].children
    status, holder = box.children[2], box.children[3]
    frames_for = lambda: " ".join(h.value for h in holder.children[0].children[1].children)  # noqa: E731
    before = frames_for()
    threads.value = 8
    assert frames_for() != before and status.value == ""
    text_x.value = "3, four"
    assert "commas" in status.value and holder.children == ()
    text_x.value = "1, 2, 3, 4"
    assert status.value == "" and "sqrt(30" in frames_for()


def test_one_and_two_threads_read_as_english():
    one = " ".join(f.caption for f in hip_frames.frames("5", "1", threads=1))
    assert "1 threads" not in one and "1 dependent additions" not in one and "up.." not in one
    two = hip_frames.frames("1, 2, 3", "1, 1, 1", threads=2)[5].caption
    assert "single step" in two and "one thread" not in two
