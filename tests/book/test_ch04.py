"""Chapter 4's companion (fusedrms.book.ch04): the readers that turn records into the page's
tables, in every data state (complete, partial, nothing recorded). The prose's
claims about the committed recording: test_ch04_story.py."""
import re

import pytest
import torch

from fusedrms import env, records, reference
from fusedrms.book import ch04
from fusedrms.kernels import rmsnorm as T

LIMIT = 32768


def _version(variant, rows, cols, us, dtype="float32"):
    return dict(variant=variant, rows=rows, cols=cols, dtype=dtype, correct=True, median_us=us)


FULL = [_version("triton.row", 1024, 4096, 10.1), _version("triton.looped", 1024, 4096, 10.3),
        _version("triton.multirow", 1024, 4096, 10.0),
        _version("triton.row", 65536, 128, 41.4, "bfloat16"),
        _version("triton.multirow", 65536, 128, 9.0, "bfloat16"),
        _version("triton.row", 16384, 256, 12.0, "bfloat16"),
        _version("triton.multirow", 16384, 256, 5.2, "bfloat16"),
        _version("triton.row", 1024, LIMIT, 78.6), _version("triton.looped", 1024, LIMIT, 108.3)]


def _records(times_by_shape, spread=0.01):
    return [dict(rows=rows, cols=cols, dtype=dtype, num_warps=nw, median_us=us, repeats=3,
                 min_us=us * (1 - spread / 2), max_us=us * (1 + spread / 2))
            for (rows, cols, dtype), times in times_by_shape.items() for nw, us in times.items()]


def _sweep(times_by_shape, spread=0.01, band=0.05):
    return ch04.summarize_warps(_records(times_by_shape, spread), band)


def test_version_ratios_read_the_looped_cost_and_the_multirow_gains():
    ratios = ch04.version_ratios(FULL, LIMIT)
    assert ratios["looped_cost"] == pytest.approx(108.3 / 78.6)
    assert 1.4 < ratios["looped_bytes"] < 1.5  # x read twice, y written once, w once
    assert ratios["multirow"] == {128: pytest.approx(41.4 / 9.0), 256: pytest.approx(12.0 / 5.2)}
    assert ratios["seed_spread"] == pytest.approx(10.3 / 10.0)
    wrong = [dict(r, correct=False) if r["variant"] == "triton.looped" else r for r in FULL]
    assert ch04.version_ratios(wrong, LIMIT)["looped_cost"] is None  # a wrong result never counts
    empty = ch04.version_ratios([], LIMIT)
    assert empty["looped_cost"] is None and empty["seed_spread"] is None


def test_summarize_warps_finds_where_the_rule_misses_beyond_the_band():
    sweep = _sweep({(1024, 4096, "float32"): {4: 9.05, 8: 10.36, 16: 9.70},
                    (4096, 1024, "bfloat16"): {4: 5.9, 8: 6.0, 16: 10.8}}, band=0.05)
    assert sweep["rule_hits"] == 1 and len(sweep["rows"]) == 2
    (miss,) = sweep["misses"]
    assert (miss["shape"], miss["rule"], miss["fastest"]) == ("1024x4096", 8, 4)
    assert _sweep({(1024, 4096, "float32"): {4: 9.05, 8: 10.36}}, band=0.2)["misses"] == []
    assert ch04.summarize_warps([{"rows": "x"}])["rows"] == []


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


@pytest.mark.skipif(env.current().on_gpu, reason="the interpreter's cast, not a GPU's")
def test_the_interpreter_truncates_every_bf16_output_the_page_counts():
    """The page tells a reader without a GPU to expect every output equal to the truncated value
    and fewer to the rounded one: the census its cell takes, here."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(33, 257, generator=g).to(torch.bfloat16)
    w = torch.randn(257, generator=g).to(torch.bfloat16)
    exact = reference.rmsnorm(x, w, accum=torch.float32, out_dtype=torch.float32)
    c = ch04.bf16_rounding_census(T.rmsnorm_row(x, w), exact)
    assert c["equal_to_truncation"] == c["elements"] > c["equal_to_nearest_even"]


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
