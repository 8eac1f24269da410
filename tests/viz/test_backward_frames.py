import xml.etree.ElementTree as ET

import pytest
import torch

from fusedrms import reference
from fusedrms.viz import backward_frames as BF

F64 = torch.float64


def test_trace_matches_the_reference_formula():
    t = BF.trace()
    x = torch.tensor([BF.HAND_X, *BF.MORE_X], dtype=F64)
    dy = torch.tensor([BF.HAND_DY, *BF.MORE_DY], dtype=F64)
    ref = reference.rmsnorm_backward(x, torch.tensor(BF.HAND_W, dtype=F64), dy, 1e-5, accum=F64)
    for i, row in enumerate(t.rows):
        assert row.dx == pytest.approx(ref["dx"][i].tolist(), rel=1e-12, abs=1e-14)
    assert t.dw == pytest.approx(ref["dw"].tolist(), rel=1e-12)
    assert t.rows[0].r == pytest.approx(12.5 ** -0.5, rel=1e-6)


def test_partials_cover_every_row_once():
    t = BF.trace()
    assert [sum(col) for col in zip(*t.partials)] == pytest.approx(t.dw)
    with pytest.raises(ValueError, match="exactly one program"):
        BF.trace(programs=((0,), (2,)))


def test_frames_state_their_numbers_and_are_well_formed_svg():
    frames = BF.frames()
    assert len(frames) == 8
    h = BF.trace().rows[0]
    text = " ".join(f.caption for f in frames)
    assert f"{h.dot:.4f}" in text and f"{h.dx[1]:.4f}" in text
    assert "not associative" in text
    for f in frames:
        ET.fromstring(f.svg)


def test_bad_rows_are_refused():
    with pytest.raises(ValueError, match="dy needs"):
        BF.trace_row([1, 2], [1, 1], [1])
