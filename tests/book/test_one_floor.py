"""One floor: every chapter's page readers price their floors at the copy bandwidth chapter 2
measured (records.copy_floor), never at the copy a recorded file measured for itself nor at the
data sheet. Each reader is read on the committed recording and its floors recomputed from bytes."""
import pytest

from fusedrms import records, traffic
from fusedrms.book import ch02, ch03, ch07, ch08, ch09_page
from fusedrms.book import ch07_results as CR
from fusedrms.viz import roofline

FLOOR = records.copy_floor(records.COMMITTED)
# the committed files that carry floors of their own, priced at the copies their processes measured
OWN_FLOORS = ("bench_grid", "capstone_peers", "capstone_confirm", "capstone_levers", "hip_ladder",
              "ch09_backward", "fp8_quant", "fp8_exactness_cost")


@pytest.fixture(autouse=True)
def _committed_recording(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEDRMS_RECORDINGS", str(tmp_path))  # no reader's own recording here


def _at_the_floor(floor_us, nbytes, share=None, time_us=None, per=100.0):
    assert floor_us == pytest.approx(FLOOR.us(nbytes))
    if share is not None:
        assert share == pytest.approx(per * FLOOR.us(nbytes) / time_us)


def test_the_floor_is_measured_below_the_data_sheet():
    assert FLOOR.doc["source"]["chapter"] == "ch02"
    assert FLOOR.published_GBps and FLOOR.GBps < FLOOR.published_GBps
    assert records.copy_floor() == FLOOR and records.copy_floor_GBps() == FLOOR.GBps


@pytest.mark.parametrize("name", OWN_FLOORS)
def test_every_recorded_file_is_priced_beside_the_one_floor(name):
    doc = records.load(name)
    assert records.copy_floor(beside=doc) == FLOOR
    if name != "fp8_quant":  # its floors are per design (naive_..., fused_...): ch08.timing_rows
        shown = records.at_copy_floor(doc)
        assert {r["copy_GBps"] for r in shown["records"] if isinstance(r, dict)
                and r.get("copy_GBps")} <= {FLOOR.GBps}


def test_chapter_2_prices_its_model_census_and_grid_at_the_floor():
    assert ch02.ceilings(FLOOR)["bandwidth_GBps"] == FLOOR.GBps
    extra = records.load("capstone_extra")
    census = ch02.kernel_times(extra, records.copy_floor(beside=extra))
    for r in census:
        est = traffic.price(ch02.CENSUS_DESIGNS[r["design"]], r["rows"], r["cols"], r["dtype"])
        kernel = next(k for k in est.kernels if k.name == r["kernel"])
        _at_the_floor(r["floor_us"], kernel.bytes_total)
    grid = records.load("bench_grid")
    best = ch02.best_pct_of_floor(grid, FLOOR)
    assert best == pytest.approx(max(FLOOR.pct(r["bytes"], r["median_us"]) for r in grid["records"]
                                     if r.get("status") == "ok" and r.get("bytes")
                                     and r.get("correct", True) and r.get("mode") == "cold"))
    from fusedrms.book import ch02_story

    assert ch02_story.story_values(ch02_story.load())["copy_rate"] == f"{FLOOR.GBps:,.0f} GB/s"


def test_chapter_3_reads_its_ladder_at_the_floor():
    timed = [r for r in ch03.load()["records"] if "median_us" in r]
    assert timed
    for r in timed:
        _at_the_floor(r["floor_us"], r["bytes"], r["fraction_of_floor"], r["median_us"], per=1.0)


def test_chapter_6_grid_at_the_floor():
    grid = records.at_copy_floor(records.load("bench_grid"))
    timed = [r for r in grid["records"] if r.get("status") == "ok" and r.get("bytes")]
    for r in timed:
        _at_the_floor(r["floor_us"], r["bytes"], r["pct_of_floor"], r["median_us"])


def test_chapter_7_peers_and_study_at_the_floor():
    doc, _ = CR.peers_doc()
    points = [p for p in CR.peer_points(doc) if p.raw.get("bytes")]
    assert points
    for p in points:
        _at_the_floor(p.floor_us, p.raw["bytes"], p.pct_floor, p.median_us)
    levers = ch07.normalized(records.load("capstone_levers"))
    for r in (r for r in levers if r["bytes"]):
        _at_the_floor(r["floor_us"], r["bytes"])


def test_chapter_8_timings_and_cost_at_the_floor():
    timing = ch08.timing_rows(records.load("fp8_quant"))
    assert timing
    for r in timing:
        nbytes = traffic.price("rmsnorm_fp8_fused", r["rows"], r["cols"], "bf16").bytes_total
        _at_the_floor(r["floor_us"], nbytes, r["pct_floor"], r["fused_us"])
    for r in ch08.exactness_cost_rows(records.load("fp8_exactness_cost")):
        _at_the_floor(r["floor_us"], r["bytes"], r["pct_of_floor"], r["median_us"])


def test_chapter_9_at_the_floor():
    timed = [r for r in ch09_page.load()["records"] if "us" in r and r.get("bytes")]
    assert timed
    for r in timed:
        _at_the_floor(r["floor_us"], r["bytes"], r["pct_floor"], r["us"])


def test_predictions_default_to_the_floor_not_the_data_sheet():
    row = roofline.width_table(["fused_add_rmsnorm"], rows=4096)[0]
    assert row["ideal_us"] == traffic.price("fused_add_rmsnorm", 4096, row["cols"], "bf16",
                                            FLOOR.GBps).ideal_us
