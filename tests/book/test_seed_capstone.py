"""The seed listing's two faults, reproduced: the launch conflict and the partial normalization."""
import pytest
import torch

from fusedrms import env
from fusedrms.book import seed_capstone as seed
from fusedrms.viz import file_section

DEV = env.current().device


def rows(n, cols, dtype=torch.float32):
    g = torch.Generator().manual_seed(3)
    return [torch.randn(*s, generator=g).to(dtype).to(DEV) for s in ((n, cols), (n, cols), (cols,))]


def test_listing_as_printed_does_not_launch():
    x, r, w = rows(4, 1024)
    result = seed.launch_as_printed(x, r, w)
    assert result["launched"] is False
    assert result["error_type"] == "ValueError"
    assert "Conflicting meta-parameters: BLOCK" in result["error"]


@pytest.mark.parametrize("block", [512, 1024])
def test_block_below_the_width_normalizes_part_of_the_row(block):
    x, r, w = rows(3, 2048)
    res = seed.partial_normalization_error(x, r, w, block)
    assert res["cols_written_per_row"] == block
    assert res["fraction_written"] == block / 2048
    # the mean of squares covers block columns but divides by 2048: scale off by about sqrt(2048/block)
    assert res["median_rel_err_written"] > 0.3


def test_block_at_the_width_is_correct():
    x, r, w = rows(3, 2048)
    res = seed.partial_normalization_error(x, r, w, 2048)
    assert res["fraction_written"] == 1.0 and res["max_rel_err_written"] < 1e-5


def test_listing_section_is_marked_for_the_page():
    text = file_section(seed.__file__, "seed-listing")
    assert "triton.Config({'BLOCK': 512}" in text and "BLOCK=triton.next_power_of_2(n_cols)" in text


@pytest.mark.gpu
def test_gpu_listing_conflict_and_partial_rows():
    x, r, w = rows(8, 4096)
    assert "Conflicting meta-parameters" in seed.launch_as_printed(x, r, w)["error"]
    assert seed.partial_normalization_error(x, r, w, 1024)["fraction_written"] == 0.25
