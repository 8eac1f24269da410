"""Long listings are cut into short blocks at statement boundaries, losing nothing."""
import inspect
import re

from fusedrms import viz
from fusedrms.kernels import add_rmsnorm, rmsnorm_backward, rmsnorm_fp8


def _texts():
    yield viz.file_section(rmsnorm_fp8.__file__, "shared-steps")
    yield viz.file_section(add_rmsnorm.__file__, "kernel")
    yield inspect.getsource(rmsnorm_fp8.divide_by_block_scale.fn)
    yield inspect.getsource(add_rmsnorm.launch)
    yield viz.file_section(rmsnorm_backward.__file__, "backward-kernel")  # a loop of 40 lines


def test_parts_are_short_and_add_up_to_the_listing():
    for text in _texts():
        parts = viz.split_listing(text, max_lines=20)
        assert all(len(p.split("\n")) <= 20 for p in parts)
        assert "\n".join(parts).split() == text.split()  # every token, in order


def test_cuts_keep_decorators_brackets_and_docstrings_whole():
    for text in _texts():
        for part in viz.split_listing(text, max_lines=20)[1:]:
            first = part.split("\n")[0].lstrip()
            assert not first.startswith(("def ", ")", "]", '"""', "else", "elif"))


def test_a_short_listing_is_one_part():
    assert viz.split_listing("a = 1\nb = 2\n") == ["a = 1\nb = 2"]


def test_a_long_loop_is_cut_between_its_statements_not_after_a_header_or_a_comment():
    text = viz.file_section(rmsnorm_backward.__file__, "backward-kernel")
    parts = viz.split_listing(text, max_lines=20)
    for before, after in zip(parts, parts[1:]):
        last = [ln for ln in before.split("\n") if ln.strip()][-1]
        assert not re.sub(r"#.*", "", last).rstrip().endswith(":"), (last, after[:80])
        assert not last.lstrip().startswith("#"), (last, after[:80])
        first = after.split("\n")[0]
        assert first.strip(), after[:80]
