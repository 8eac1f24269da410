"""code/scripts/scoreboard.py: each shape's verdict against the fastest peer inside the
recording's tie band, a peer missing as a miss (never a win), large calls below 90% of the floor,
in place against out of place; the committed recording and a folder of one's own."""
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "code" / "scripts"))

import scoreboard  # noqa: E402

FUSED, RESIDUAL = "add_rmsnorm", "add_rmsnorm_residual"


def _rec(impl, op, rows, cols, us, spread=0.002, floor_us=None, status="ok"):
    # three processes whose p10-p90 width is about ``spread`` of the median
    rec = {"sweep": "peers", "op": op, "impl": impl, "rows": rows, "cols": cols, "dtype": "bf16",
           "mode": "rotating", "processes": 3, "status": status}
    if status == "ok":
        rec.update(median_us=us, process_medians_us=[us * (1 - spread / 2), us, us * (1 + spread / 2)])
        if floor_us is not None:
            rec.update(floor_us=floor_us, pct_of_floor=100 * floor_us / us, copy_GBps=3000.0)
    return rec


def _folder(tmp_path, records) -> Path:
    folder = tmp_path / "rec"
    folder.mkdir()
    doc = {"provenance": {"gpu": "NVIDIA H100 80GB HBM3", "commit": "c0ffee" * 7, "date": "2026-12-07"},
           "records": records}
    (folder / "capstone_peers.json").write_text(json.dumps(doc))
    return folder


def _rows(capsys, folder, *flags):
    assert scoreboard.main([str(folder), *flags]) == 0
    out = capsys.readouterr().out.splitlines()
    return out, {tuple(line.split()[:3]): line for line in out if line.split()[:1] in
                 (["fused"], ["residual"], ["in"])}


def test_a_shape_slower_than_a_peer_beyond_the_band_misses_and_one_inside_it_is_a_tie(tmp_path, capsys):
    records = [_rec("capstone.fused", FUSED, 16, 4096, 10.5), _rec("torch.compile_add", FUSED, 16, 4096, 10.0),
               _rec("capstone.fused", FUSED, 32, 4096, 10.01), _rec("torch.compile_add", FUSED, 32, 4096, 10.0)]
    out, rows = _rows(capsys, _folder(tmp_path, records))
    slower = rows[("fused", "16x4096", "bf16")]
    assert "slower" in slower and "slower than a peer" in slower and "1.050" in slower
    tie = rows[("fused", "32x4096", "bf16")]
    assert " tie " in tie and tie.rstrip().endswith("-")  # no miss
    assert "fused: 2 shapes, 0 faster, 1 ties, 1 slower" in out[-4]
    assert out[-1] == "1 of 2 rows miss a bar"


def test_a_peer_missing_at_a_shape_is_a_miss_never_a_win(tmp_path, capsys):
    # Liger is timed at one shape and skipped at the other: that shape is not a win
    records = [_rec("capstone.fused", FUSED, 16, 4096, 5.0), _rec("torch.compile_add", FUSED, 16, 4096, 10.0),
               _rec("liger.rms_norm_add", FUSED, 16, 4096, 9.0),
               _rec("capstone.fused", FUSED, 32, 4096, 5.0), _rec("torch.compile_add", FUSED, 32, 4096, 10.0),
               _rec("liger.rms_norm_add", FUSED, 32, 4096, None, status="skipped: time")]
    out, rows = _rows(capsys, _folder(tmp_path, records), "--misses")
    assert ("fused", "32x4096", "bf16") in rows and ("fused", "16x4096", "bf16") not in rows
    assert "missing liger.rms_norm_add" in rows[("fused", "32x4096", "bf16")]
    assert "1 missing a peer" in out[-4]
    assert "1 faster, 0 ties, 0 slower among those with every peer timed" in out[-4]  # not 2


def test_a_large_call_below_90_percent_of_the_floor_misses_and_in_place_shows_its_cost(tmp_path, capsys):
    # 1024 x 65536 bf16 residual: 537 MB; out of place at 95% of the floor, in place at 85%
    floor = 100.0
    records = [_rec("capstone.fused_residual", RESIDUAL, 1024, 65536, floor / 0.95, floor_us=floor),
               _rec("capstone.fused_residual_in_place", RESIDUAL, 1024, 65536, floor / 0.85, floor_us=floor),
               _rec("torch.compile_residual", RESIDUAL, 1024, 65536, 150.0, floor_us=floor)]
    out, rows = _rows(capsys, _folder(tmp_path, records))
    assert "floor" not in rows[("residual", "1024x65536", "bf16")].split("  ")[-1]
    in_place = rows[("in", "place", "1024x65536")]
    assert "below 90% of the floor" in in_place and "85.0%" in in_place
    assert f"{0.95 / 0.85:.3f}" in in_place
    assert "floor at the copy each process measured (no chapter 2 here)" in out[0]


def test_the_committed_recording_prints_every_variant(capsys):
    assert scoreboard.main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("NVIDIA H200, commit ")
    for variant in ("fused", "residual", "in place"):
        assert f"\n{variant}: " in out


def test_a_folder_without_peers_or_a_path_that_is_no_folder_says_so(tmp_path, capsys):
    assert scoreboard.main([str(tmp_path)]) == 1
    assert "no capstone_peers.json or bench_grid.json in" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        scoreboard.main([str(tmp_path / "nothing")])
    assert e.value.code == 2
    assert "folder: " in capsys.readouterr().err


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"records": 3}'])
def test_a_peers_file_that_is_not_a_recording_is_named_without_a_traceback(tmp_path, capsys, text):
    (tmp_path / "capstone_peers.json").write_text(text)
    assert scoreboard.main([str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "capstone_peers.json" in out and ("could not be read" in out or "no harness records" in out)
