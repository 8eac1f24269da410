"""Chapter 2's pictures: they draw the traffic model's numbers."""
import pytest

from fusedrms import traffic
from fusedrms.viz import roofline


def test_roofline_places_each_design_at_its_intensity():
    ests = [traffic.price(s, 4096, 4096, "bf16") for s in ("eager_add_rmsnorm", "fused_add_rmsnorm")]
    fig = roofline.roofline(ests, 4800.0, 67.0, "H200")
    ax = fig.axes[0]
    points = [tuple(c.get_offsets()[0]) for c in ax.collections]
    assert [round(x, 6) for x, _ in points] == [round(e.intensity, 6) for e in ests]
    assert all(abs(y - e.intensity * 4.8) < 1e-9 for (_, y), e in zip(points, ests))


def test_width_table_and_plot_cover_every_model_width():
    recs = roofline.width_table(["eager_add_rmsnorm", "fused_add_rmsnorm"], rows=8)
    assert len(recs) == 2 * len(roofline.MODEL_WIDTHS)
    text = roofline.format_width_table(recs)
    assert "DeepSeek-V3" in text and "7168" in text
    fig = roofline.time_by_width(["rmsnorm", "rmsnorm_two_pass"], rows=8)
    assert len(fig.axes[0].lines) == 2


def _calculator_parts(calc):
    (step, dtype), (rows, cols), (bandwidth, _note) = (box.children for box in calc.children[:3])
    table, = (c for c in calc.children if "fusedrms-calculator-table" in c._dom_classes)
    plot, = (c for c in calc.children if "fusedrms-calculator-plot" in c._dom_classes)
    return step, dtype, rows, cols, bandwidth, table, plot


def test_calculator_recomputes_its_table_and_plot_for_every_input():
    calc = roofline.calculator(4800.0, 67.0, "published")
    step, dtype, rows, cols, bandwidth, table, plot = _calculator_parts(calc)
    assert "fused_add_rmsnorm" in table.value and "launches <b>1</b>" in table.value
    assert plot.value.startswith('<img src="data:image/png;base64,')
    seen = {(table.value, plot.value)}
    for widget, value in ((step, "eager_add_rmsnorm"), (rows, 64), (cols, 7168),
                          (dtype, "fp32"), (bandwidth, 2000.0)):
        widget.value = value
        state = (table.value, plot.value)
        assert state not in seen, f"changing {widget.description} changed neither table nor plot"
        seen.add(state)
    expected = traffic.price("eager_add_rmsnorm", 64, 7168, "fp32", 2000.0, 67.0)
    assert "launches <b>3</b>" in table.value
    assert f"{expected.bytes_read:,}" in table.value and f"{expected.bytes_written:,}" in table.value
    assert f"{expected.ideal_us:,.3f} µs" in table.value


def test_a_calculator_change_made_while_a_figure_draws_wins(monkeypatch):
    """A kernel can run a newer change while an older one still draws: the newer one stays."""
    calc = roofline.calculator(4800.0, 67.0)
    step, dtype, rows, cols, bandwidth, table, plot = _calculator_parts(calc)
    draw = roofline.calculator_plot
    pending = [lambda: setattr(rows, "value", 0)]

    def slow_draw(e, *args):
        if pending:
            pending.pop()()  # the reader's next change lands mid-draw
        return draw(e, *args)

    monkeypatch.setattr(roofline, "calculator_plot", slow_draw)
    dtype.value = "fp32"
    assert "rows must be at least 1" in table.value
    assert plot.value == ""


def test_calculator_plot_draws_the_chosen_design_and_marks_the_chosen_width():
    e = traffic.price("rmsnorm_fp8_fused", 64, 100_000, "bf16", 4800.0)
    ax = roofline.calculator_plot(e).axes[0]
    (line,) = ax.lines
    assert line.get_label() == traffic.get_step("rmsnorm_fp8_fused").label
    assert 100_000 in list(line.get_xdata())
    marker = ax.collections[-1].get_offsets()[0]
    assert tuple(marker) == (100_000, e.ideal_us)


@pytest.mark.parametrize("field,value,message", [
    ("rows", 0, "rows must be at least 1"),
    ("cols", -5, "cols must be at least 1"),
    ("bandwidth", 0.0, "must be positive"),
])
def test_calculator_shows_an_impossible_input_in_the_widget(field, value, message):
    calc = roofline.calculator(4800.0, 67.0)
    parts = dict(zip(("step", "dtype", "rows", "cols", "bandwidth", "table", "plot"),
                     _calculator_parts(calc)))
    parts[field].value = value
    assert message in parts["table"].value and "fusedrms-input-error" in parts["table"].value
    assert parts["plot"].value == "", "no plot of an earlier input beside the error"
    parts[field].value = 4096 if field != "bandwidth" else 4800.0
    assert "launches" in parts["table"].value and parts["plot"].value


def test_traffic_bars_add_up_to_the_row_trips():
    ests = [traffic.price(s, 64, 512, "bf16") for s in ("eager_add_rmsnorm", "fused_add_rmsnorm")]
    fig = roofline.traffic_bars(ests)
    ax = fig.axes[0]
    for n, e in enumerate(ests):
        right = max(p.get_x() + p.get_width() for p in ax.patches if abs(p.get_y() + 0.3 - n) < 1e-9)
        assert abs(right - e.bytes_total / (64 * 512 * 2)) < 1e-9


def test_the_pictures_draw_into_the_axes_they_are_given():
    """A page draws them into its own figure (the book's style and size)."""
    from matplotlib.figure import Figure

    ests = [traffic.price(s, 64, 4096, "bf16") for s in
            ("eager_add_rmsnorm", "fused_add_rmsnorm", "fused_add_rmsnorm_residual")]
    for draw in (lambda ax: roofline.traffic_bars(ests, ax=ax),
                 lambda ax: roofline.roofline(ests, 4800.0, 67.0, ax=ax),
                 lambda ax: roofline.time_by_width([e.step for e in ests], rows=64, ax=ax)):
        fig = Figure()
        ax = fig.subplots()
        assert draw(ax) is fig and len(fig.axes) == 1 and ax.has_data()
    fig = Figure()
    roofline.traffic_bars(ests, ax=fig.subplots())
    row_trips = [p.get_width() for p in fig.axes[0].patches]
    # one segment per tensor read or written, the weight (once per kernel that reads it) too
    assert len(row_trips) == (7 + 1) + (3 + 1) + (4 + 1)
    assert sum(row_trips) == pytest.approx(sum(float(e.row_trips) for e in ests) + 3 / 64)


def test_the_calculators_table_scrolls_in_page_tables_box_with_its_scroll_cue():
    from fusedrms.book import page

    html = roofline.estimate_html(traffic.price("fused_add_rmsnorm", 4096, 4096, "bf16", 4800.0))
    assert f'<div class="{page.SCROLL_CLASS}" style="{page.SCROLL_STYLE}"><table>' in html
    assert html.count("<div") == html.count("</div>")
