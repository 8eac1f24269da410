"""Chapter 4's companion (fusedrms.book.ch04): the readers that turn records into the page's
sentences and tables, in every data state (complete, partial, nothing recorded)."""
import re

import pytest

from fusedrms import records
from fusedrms.book import ch04

LIMIT = 32768


def _no_bad_english(text):
    assert "  " not in text and "(not recorded" not in text and "None" not in text
    assert not re.search(r"\b1 [a-z-]+s\b", text.replace("1 step", "")), text  # "1 shapes"
    assert "-0" not in text and ", ," not in text and ".." not in text


def test_register_answer_in_every_state():
    full = ch04.register_answer({"widest_clean": {"cols": 32768, "registers": 128, "spills": 0},
                                 "first_spill": {"cols": 65536, "registers": 128, "spills": 92}},
                                LIMIT)
    assert "spilled 92 32-bit values per thread (368 bytes of local memory)" in full
    assert full.endswith("so triton.row stops at 32,768 columns and refuses wider rows")
    one = ch04.register_answer({"widest_clean": None,
                                "first_spill": {"cols": 65536, "registers": 128, "spills": 1}},
                               LIMIT)
    assert "spilled 1 32-bit value per thread (4 bytes" in one
    spills_inside = ch04.register_answer(
        {"widest_clean": None, "first_spill": {"cols": 16384, "registers": 255, "spills": 8}}, LIMIT)
    assert "even at its 32,768-column limit the row kernel spills" in spills_inside
    none = ch04.register_answer(ch04.spill_widths([]), LIMIT)
    assert "not recorded yet" in none and "32,768" in none
    for text in (full, one, spills_inside, none):
        _no_bad_english(text.replace("(not", "[not"))


def _version(variant, rows, cols, us, dtype="float32"):
    return dict(variant=variant, rows=rows, cols=cols, dtype=dtype, correct=True, median_us=us)


FULL = [_version("triton.row", 1024, 4096, 10.1), _version("triton.looped", 1024, 4096, 10.3),
        _version("triton.multirow", 1024, 4096, 10.0),
        _version("triton.row", 65536, 128, 41.4, "bfloat16"),
        _version("triton.multirow", 65536, 128, 9.0, "bfloat16"),
        _version("triton.row", 16384, 256, 12.0, "bfloat16"),
        _version("triton.multirow", 16384, 256, 5.2, "bfloat16"),
        _version("triton.row", 1024, LIMIT, 78.6), _version("triton.looped", 1024, LIMIT, 108.3)]


def test_versions_answer_with_everything_recorded():
    ratios = ch04.version_ratios(FULL, LIMIT)
    assert abs(ratios["looped_cost"] - 108.3 / 78.6) < 1e-12
    assert 1.49 < ratios["looped_bytes"] < 1.51  # x read twice, y written once
    text = ch04.versions_answer(ratios, LIMIT)
    assert "at 1024×32,768 fp32 the looped kernel took 1.38× the row kernel's time" in text
    assert "4.6× faster than one program per row at 128 columns and 2.3× faster at 256" in text
    assert "the slowest variant took 1.03× the fastest's time" in text
    _no_bad_english(text)


def test_versions_answer_when_the_multirow_kernel_loses_or_ties():
    recs = [r for r in FULL if r["cols"] != 256]
    recs = [dict(r, median_us=50.0) if r["variant"] == "triton.multirow" and r["cols"] == 128
            else r for r in recs]
    text = ch04.versions_answer(ch04.version_ratios(recs, LIMIT), LIMIT)
    assert "the multirow kernel was 1.2× slower than one program per row at 128 columns" in text
    assert "256" not in text
    tie = [dict(r, median_us=41.0) if r["variant"] == "triton.multirow" else r for r in FULL]
    assert "as fast as one program per row (within 1%)" in ch04.versions_answer(
        ch04.version_ratios(tie, LIMIT), LIMIT, 0.02)
    assert "1.0× faster" in ch04.versions_answer(ch04.version_ratios(tie, LIMIT), LIMIT, 0.005)


def test_versions_answer_with_nothing_or_a_wrong_result_recorded():
    text = ch04.versions_answer(ch04.version_ratios([], LIMIT), LIMIT)
    assert text.count("not recorded yet") == 2 and "×" not in text.replace("1024×32,768", "")
    wrong = [dict(r, correct=False) if r["variant"] == "triton.looped" else r for r in FULL]
    assert ch04.version_ratios(wrong, LIMIT)["looped_cost"] is None  # a wrong kernel's time never counts


def _records(times_by_shape, spread=0.01):
    return [dict(rows=rows, cols=cols, dtype=dtype, num_warps=nw, median_us=us, repeats=3,
                 min_us=us * (1 - spread / 2), max_us=us * (1 + spread / 2))
            for (rows, cols, dtype), times in times_by_shape.items() for nw, us in times.items()]


def _sweep(times_by_shape, spread=0.01, band=0.05):
    return ch04.summarize_warps(_records(times_by_shape, spread), band)


BAND = {"repeats": 0.01, "again": {"rows": 1024, "cols": 4096, "dtype": "float32", "diff": 0.023},
        "band": 0.023}


def test_the_tie_band_is_derived_from_repeats_and_a_setting_measured_twice():
    recs = _records({(1024, 4096, "float32"): {4: 9.05, 8: 10.36, 16: 9.70}}, spread=0.01)
    for r in recs:
        r["rule_num_warps"] = 8
    band = ch04.tie_band(recs, [])
    assert band["again"] is None and band["band"] == band["repeats"]
    assert band["repeats"] == pytest.approx(0.8 * 0.01, rel=0.05)  # p10-p90 of min, median, max
    versions = [{"variant": "triton.row", "rows": 1024, "cols": 4096, "dtype": "float32",
                 "median_us": 10.128}]
    band = ch04.tie_band(recs, versions)
    assert band["again"]["diff"] == pytest.approx(10.36 / 10.128 - 1)
    assert band["band"] == pytest.approx(10.36 / 10.128 - 1)
    listed = dict(recs[0], repeat_medians_us=[9.0, 9.05, 9.5], repeats=3)
    assert ch04.repeat_medians(listed) == [9.0, 9.05, 9.5]
    assert ch04.repeat_medians({"median_us": 1.0, "repeats": 1}) == []
    assert ch04.tie_band([], [])["band"] is None


def test_the_committed_band_covers_the_setting_recorded_twice():
    warps = records.load("triton_warps", records.COMMITTED)["records"]
    versions = records.load("triton_versions", records.COMMITTED)["records"]
    band = ch04.tie_band(warps, versions)
    assert band["again"] is not None and band["band"] >= band["again"]["diff"]
    assert band["band"] >= band["repeats"]


def test_warps_sentences_with_one_miss():
    said = ch04.warps_sentences(_sweep({(1024, 4096, "float32"): {4: 9.05, 8: 10.36, 16: 9.70},
                                        (4096, 8192, "bfloat16"): {4: 37.7, 8: 36.1, 16: 35.5}},
                                       band=0.023), BAND)
    assert said["answer"] == ("the rule tied with the fastest setting (within ±2.3%) at 1 of 2 "
                              "shapes; it misses at 1024×4096 fp32, where its 8 warps take "
                              "10.36 µs and 4 warps 9.05 µs (14% slower)")
    assert "spread by up to 1.0% in nine cases in ten" in said["noise"]
    assert "recorded a second time in the variants' run, differs by 2.3%" in said["noise"]
    assert "within ±2.3% as ties" in said["noise"]
    assert ("At 1 of 2 shapes two or more settings tie; at the others one setting is clearly "
            "fastest.") in said["noise"]
    assert said["learned"] == "within ±2.3% of the fastest at 1 of 2 measured shapes"
    assert "5%" not in str(said)
    for text in said.values():
        if isinstance(text, str):
            _no_bad_english(text)


def test_warps_sentences_all_hits_one_shape_and_nothing():
    one = {"repeats": 0.08, "again": None, "band": 0.08}
    said = ch04.warps_sentences(_sweep({(4096, 1024, "bfloat16"): {4: 5.9, 8: 6.6, 16: 10.8}},
                                       spread=0.08, band=0.08), one)
    assert said["answer"] == ("the rule tied with the fastest setting (within ±8.0%) at the one "
                              "shape measured")
    assert "second time" not in said["noise"]
    assert said["noise"].endswith("At the one shape no two settings tie: the setting matters.")
    many = ch04.warps_sentences(_sweep({(4096, c, "float32"): {4: 10.0, 8: 10.2, 16: 10.3}
                                        for c in (1024, 2048, 4096)}), {"band": 0.05})
    assert many["answer"] == "the rule tied with the fastest setting (within ±5.0%) at all 3 shapes"
    assert "At every one of the 3 shapes two or more settings" in many["noise"]
    assert "memory-bound" in many["noise"]
    unknown = ch04.warps_sentences(_sweep({(4096, 1024, "bfloat16"): {4: 5.9, 8: 6.6}}), None)
    assert unknown["noise"].startswith("How much repeated measurements of one setting vary is")
    empty = ch04.warps_sentences(ch04.summarize_warps([]))
    assert empty["noise"] == "The num_warps sweep is not recorded yet."
    assert "not recorded yet" in empty["answer"] and "0 of 0" not in str(empty)
    assert empty["learned"] == "not yet measured"  # "the rule for num_warps was not yet measured"


def _census(n, nearest, truncated, one=0, far=0, rows=1024, cols=4096):
    return dict(elements=n, equal_to_nearest_even=nearest, equal_to_truncation=truncated,
                one_step_from_nearest_even=one, more_than_one_step_from_nearest_even=far,
                rows=rows, cols=cols)


def test_rounding_paragraph_in_every_state():
    live = _census(8481, 4351, 8481, one=4130)
    gpu = [_census(39, 39, 17, rows=3, cols=13), _census(4194304, 4194296, 2100188, one=8)]
    text = ch04.rounding_paragraph(live, "under the interpreter", gpu)
    assert text.startswith("Here (under the interpreter) every output equals the truncated value.")
    assert "at 1024×4096, 4,194,296 of 4,194,304 outputs equal the round-to-nearest-even" in text
    assert "one step off for 50% of them" in text and "left 8 of them one bf16 step" in text
    assert "On the recorded H200, at" in ch04.rounding_paragraph(live, "here", gpu, "H200")
    assert text.endswith("and none further.")
    exact = ch04.rounding_paragraph(_census(39, 39, 17), "on this GPU", [_census(39, 39, 17)])
    assert "every output equals the round-to-nearest-even value" in exact
    assert exact.endswith("None of them is a step away.")
    mixed = ch04.rounding_paragraph(_census(10, 8, 5, one=2), "on this GPU", [])
    assert "8 of 10 outputs equal the round-to-nearest-even value and 5 the truncated one" in mixed
    assert mixed.endswith("The GPU's census is not recorded yet.")


PTX = {"kind": "ptx", "dtype": "float32", "num_warps": 8, "registers_per_thread": 36, "spills": 0,
       "global_load_forms": ["ld.global.v4.b32"], "widest_global_load_vector": 4,
       "global_loads": 8, "global_stores": 4, "butterfly_shuffles": 8, "barriers": 2,
       "shared_loads": 2, "rsqrt": 1}


def test_compiled_table_is_narrow_and_readable():
    rows = ch04.compiled_table([PTX, dict(PTX, dtype="bfloat16", registers_per_thread=32)])
    assert all(set(r) == {"", "float32", "bfloat16"} for r in rows)
    labels = [r[""] for r in rows]
    assert "widest global load (bytes per thread)" in labels and "cross-lane operations" not in labels
    assert next(r for r in rows if r[""] == "registers per thread")["bfloat16"] == 32
    assert next(r for r in rows if r[""].startswith("widest"))["float32"] == 16


def test_compiled_answer_in_every_state():
    text = ch04.compiled_answer(PTX)
    assert text.startswith("for 4096 fp32 columns the compiler loads 16 bytes (4 fp32 values) "
                           "per instruction, reduces with 8 butterfly shuffles and 2 barriers, "
                           "and uses 36 registers per thread: the vectorized")
    scalar = ch04.compiled_answer(dict(PTX, global_load_forms=["ld.global.b32"],
                                       widest_global_load_vector=1, butterfly_shuffles=1,
                                       barriers=1))
    assert "one fp32 value per instruction (no vector loads)" in scalar
    assert "1 butterfly shuffle and 1 barrier" in scalar and "vectorized" not in scalar
    amd = ch04.compiled_answer({"kind": "amdgcn", "cross_lane_ops": 12, "barriers": 2,
                                "global_load_forms": []})
    assert "12 cross-lane operations" in amd
    assert ch04.compiled_answer(None) == "the compiled kernel for 4096 fp32 columns is not recorded yet"


def test_learned_phrases_in_every_state():
    full = ch04.learned_phrases(ch04.version_ratios(FULL, LIMIT))
    # the looped kernel's cost is measured AT the row kernel's limit, not on wider rows
    assert full["looped"] == ("wider rows go to the looped kernel, which at that width took "
                              "1.38× the row kernel's time")
    assert full["narrow"] == "narrow rows want the multirow kernel"
    none = ch04.learned_phrases(ch04.version_ratios([], LIMIT))
    assert none == {"looped": "wider rows go to the looped kernel",
                    "narrow": "the multirow kernel on narrow rows is not recorded yet"}
    slower = [dict(r, median_us=60.0) if r["variant"] == "triton.multirow" else r for r in FULL]
    assert "slower" in ch04.learned_phrases(ch04.version_ratios(slower, LIMIT))["narrow"]
    mixed = [dict(r, median_us=60.0) if r["variant"] == "triton.multirow" and r["cols"] == 128
             else r for r in FULL]
    assert ch04.learned_phrases(ch04.version_ratios(mixed, LIMIT))["narrow"] == (
        "the multirow kernel's gain on narrow rows was small or none")
    for phrases in (full, none):
        for text in phrases.values():
            _no_bad_english(text.replace("(not", "[not"))


def _warp_record(group, rows, cols, dtype, nw):
    return dict(group=group, rows=rows, cols=cols, dtype=dtype, num_warps=nw, median_us=1.0)


def test_warps_scope_says_what_the_sweep_timed():
    recs = [_warp_record("seed shape", 1024, 4096, "float32", nw) for nw in (4, 8, 16)]
    recs += [_warp_record("width sweep", 4096, c, d, nw) for c in (1024, 16384)
             for d in ("bfloat16", "float32") for nw in (4, 8, 16)]
    assert ch04.warps_scope(recs) == (
        "The recorded run timed 4, 8 and 16 warps at the book's running example (1024×4096 fp32) "
        "and over 4096 rows at widths from 1024 to 16,384 columns in bf16 and fp32, with the "
        "same steady-state timer.")
    seed_only = ch04.warps_scope(recs[:2])
    assert seed_only == ("The recorded run timed 4 and 8 warps at the book's running example "
                         "(1024×4096 fp32), with the same steady-state timer.")
    one_width = ch04.warps_scope([_warp_record("width sweep", 4096, 2048, "float32", 4)])
    assert "timed 4 warps over 4096 rows at 2048 columns in fp32" in one_width
    assert ch04.warps_scope([]) == "The sweep that would test it is not recorded yet."
    assert ch04.warps_scope([{"rows": "x"}]) == ch04.warps_scope([])


def test_exercise_4_3s_printed_solution_runs_after_its_cell_on_either_path():
    """The solution box's code uses the variable the exercise cell defines with or without a GPU
    (``measured``), and its answer passes the checker."""
    import json
    from pathlib import Path

    from fusedrms import env
    from fusedrms.exercises import ch04 as exercises

    path = Path(__file__).resolve().parents[2] / "chapters" / "04_triton.ipynb"
    cells = json.loads(path.read_text())["cells"]
    i = next(i for i, c in enumerate(cells)
             if "ch04.choose_num_warps.check(answer)" in "".join(c["source"]))
    setup = "".join(cells[i]["source"]).split("answer = None")[0]
    solution = re.search(r"```python\n(.*?)```", "".join(cells[i + 1]["source"]), re.S).group(1)
    namespace = {"ENV": env.current(), "book": ch04, "ch04": exercises, "MISSING": "(missing)"}
    exec(setup, namespace)  # noqa: S102 - the chapter's own cell
    exec(solution, namespace)  # noqa: S102 - the chapter's own solution
    assert exercises.choose_num_warps.check(namespace["answer"]).ok
