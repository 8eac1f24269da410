"""The page lint's per-width rules, judged in Python from what the browser measured (no browser
needed): hidden table columns, the scroll cue, and text size in figures and SVGs."""
from __future__ import annotations

import pytest

from tests.browser import page_lint


def _table(scroll, client, cue=True, page_table=True, label="Timings"):
    return {"where": "code cell 3", "label": label, "page_table": page_table,
            "scroll_width": scroll, "client_width": client, "cue": cue}


def test_a_desktop_table_that_hides_columns_is_reported_with_its_name_and_the_hidden_px():
    found = page_lint.table_violations([_table(1194, 690)], 1280)
    (v,) = found
    assert v["rule"] == "table" and '"Timings"' in v["detail"] and "504" in v["detail"]
    assert page_lint.table_violations([_table(691, 690), _table(600, 600)], 1280) == []


def test_a_markdown_table_may_scroll_at_the_desktop_width_but_needs_the_cue_on_a_phone():
    wide_markdown = _table(900, 690, cue=False, page_table=False)
    assert page_lint.table_violations([wide_markdown], 1280) == []
    (v,) = page_lint.table_violations([wide_markdown], 390)
    assert "no scroll cue" in v["detail"]


def test_a_phone_table_that_scrolls_is_fine_with_the_cue_and_one_that_fits_needs_none():
    assert page_lint.table_violations([_table(900, 358, cue=True)], 390) == []
    assert page_lint.table_violations([_table(358, 358, cue=False)], 390) == []
    assert len(page_lint.table_violations([_table(900, 358, cue=False)], 390)) == 1


def test_raster_figure_text_scales_with_displayed_over_drawn_width():
    # a 690-px figure (1380 image pixels) with 10 pt labels shown in a 358-px phone column
    assert page_lint.shown_text_px(None, 1380, 358) == pytest.approx(13.89 * 358 / 690, abs=0.01)
    # the phone version, drawn 358 px wide, keeps its labels' size; data-text-px wins over 10 pt
    assert page_lint.shown_text_px(9.7, 716, 358) == pytest.approx(9.7)


def test_figure_text_under_9_px_is_reported_at_the_width_it_happens():
    desktop_image = {"where": "code cell 5", "natural_width": 1380, "shown_width": 358,
                     "text_px": 13.2}
    phone_image = dict(desktop_image, natural_width=716)
    (v,) = page_lint.figure_text_violations([desktop_image], [], 390)
    assert v["rule"] == "figure" and "6.8 px" in v["detail"] and "at 390 px" in v["detail"]
    assert page_lint.figure_text_violations([phone_image], [], 390) == []
    assert page_lint.figure_text_violations([dict(desktop_image, shown_width=690)], [], 1280) == []


def test_svg_labels_need_11_px_at_the_desktop_width_and_9_px_on_a_phone():
    svg = {"where": "code cell 7", "drawn_width": 760, "shown_width": 690, "font_px": 12.2}
    assert page_lint.figure_text_violations([], [svg], 1280) == []  # 11.1 px
    (v,) = page_lint.figure_text_violations([], [dict(svg, shown_width=358)], 390)  # 5.7 px
    assert "5.7 px" in v["detail"] and "at least 9" in v["detail"]
    assert page_lint.figure_text_violations([], [dict(svg, shown_width=600)], 390) == []


def test_an_animation_is_held_to_both_rules():
    frame = {"where": "code cell 9", "drawn_width": 780, "shown_width": 358, "font_px": 12.5,
             "animation": True}
    (v,) = page_lint.figure_text_violations([], [frame], 390)  # its desktop layout on a phone
    assert "5.7 px" in v["detail"] and "at least 9" in v["detail"]
    (v,) = page_lint.figure_text_violations([], [dict(frame, shown_width=600)], 1280)  # 9.6 px
    assert "at least 11" in v["detail"]
    phone = dict(frame, drawn_width=390, font_px=11.1)  # its phone layout: 10.2 px
    assert page_lint.figure_text_violations([], [phone], 390) == []


@pytest.mark.parametrize("text,found", [
    ("the answer: {eval}`warps_answer`.", True), ("{glue:text}`peer_list`", True),
    ("a {term}`warp <Warp>`", True), ("{cite:p}`tillet2019triton`", True),
    ("the answer: 8 warps.", False), ("a dict {eval: 1}", False), ("f'{x}'", False)])
def test_a_myst_role_left_as_text_is_a_placeholder(text, found):
    import re

    rule = dict(page_lint.FORBIDDEN_WORDS)["placeholder"]
    assert bool(re.search(rule, text, re.I)) is found
