"""Chapter 2's pictures: they draw the traffic model's numbers."""
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


def test_calculator_recomputes_when_an_input_changes():
    calc = roofline.calculator(4800.0, 67.0, "published")
    out = calc.children[-1]
    assert "fused_add_rmsnorm" in out.value and "launches <b>1</b>" in out.value
    step = calc.children[0].children[0]
    step.value = "eager_add_rmsnorm"
    assert "launches <b>3</b>" in out.value


def test_traffic_bars_add_up_to_the_row_trips():
    ests = [traffic.price(s, 64, 512, "bf16") for s in ("eager_add_rmsnorm", "fused_add_rmsnorm")]
    fig = roofline.traffic_bars(ests)
    ax = fig.axes[0]
    for n, e in enumerate(ests):
        right = max(p.get_x() + p.get_width() for p in ax.patches if abs(p.get_y() + 0.3 - n) < 1e-9)
        assert abs(right - e.bytes_total / (64 * 512 * 2)) < 1e-9
