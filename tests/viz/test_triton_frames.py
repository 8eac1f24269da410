"""Chapter 4's animation: the replay follows the row kernel, and the real kernel agrees."""
import math
import xml.etree.ElementTree as ET

import pytest
import torch

from fusedrms import reference
from fusedrms.viz import triton_frames as tf


def test_thirteen_columns_in_a_sixteen_lane_block():
    t = tf.trace()
    assert (t.cols, t.block) == (13, 16)
    assert t.mask == [True] * 13 + [False] * 3
    assert t.x[13:] == [0.0, 0.0, 0.0] and t.squares[13:] == [0.0, 0.0, 0.0]
    assert t.total == pytest.approx(sum(v * v for v in tf.DEFAULT_X))
    assert t.mean == pytest.approx(t.total / 13) and t.mean_if_block == pytest.approx(t.total / 16)
    assert t.r_if_block / t.r == pytest.approx(math.sqrt(16 / 13), rel=1e-5)


def test_replay_matches_reference_and_real_kernel():
    t = tf.trace()
    x, w = torch.tensor(tf.DEFAULT_X), torch.tensor(tf.DEFAULT_W)
    expected = reference.rmsnorm(x, w, 1e-5, accum=torch.float64)
    assert torch.allclose(torch.tensor(t.y[:13]), expected.reshape(-1), rtol=1e-6)
    assert t.kernel_y is not None
    assert max(abs(a - b) for a, b in zip(t.kernel_y, t.y[:13])) < 1e-5


def test_frames_are_valid_svg_with_computed_captions():
    frames = tf.frames()
    assert len(frames) == 8
    for f in frames:
        ET.fromstring(f.svg)  # well-formed
    t = tf.trace(run_kernel=False)
    assert f"{t.total:g}" in frames[3].caption
    assert "/ 13" in frames[4].caption and "/ 16" in frames[4].caption
    assert "stored the same 13 values" in frames[-1].caption
    assert "not run" in tf.frames(run_kernel=False)[-1].caption


def test_other_widths_and_bad_inputs():
    t = tf.trace([1.0] * 5, [2.0] * 5, eps=0.0, run_kernel=False)
    assert t.block == 8 and t.y[:5] == [2.0] * 5
    with pytest.raises(ValueError, match="columns"):
        tf.trace([1.0] * 33, [1.0] * 33)
    with pytest.raises(ValueError, match="one weight per column"):
        tf.trace([1.0] * 3, [1.0] * 2)
    with pytest.raises(ValueError, match="finite"):
        tf.trace([float("nan")] * 3, [1.0] * 3)
