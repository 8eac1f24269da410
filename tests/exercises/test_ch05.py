
import torch

from fusedrms.book import broken
from fusedrms import checks, verify
from fusedrms.exercises import ch05


def test_tolerance_range():
    t = ch05.fp16_tolerance
    assert t.check((1e-3, "cast")).ok  # torch.testing's fp16 default is inside the range
    assert t.check((1.5e-3, "Cast ")).ok
    assert t.check([9.81e-4, "cast"]).ok
    assert not t.check((4.9e-4, "cast")).ok  # below u + the reduction term
    assert not t.check((2.5e-3, "cast")).ok  # above two ulps
    assert not t.check((3.9e-3, "cast")).ok  # bf16 precision
    assert not t.check((0.0, "cast")).ok and not t.check((-1e-3, "cast")).ok
    assert not t.check((1e-3, "reduction")).ok
    assert ch05.fp16_tolerance.solution[0] == checks.tolerance_for(torch.float16, 4096)[0]


def test_the_bounds_mean_what_they_say():
    """Correct fp16 results (round to nearest, fp32 math) pass the lower bound; bf16 ones fail the
    upper."""
    g = torch.Generator().manual_seed(5)
    exact = torch.rand(100_000, generator=g, dtype=torch.float64) + 0.5
    rounded_err = ((exact.to(torch.float16).double() - exact).abs() / exact).max().item()
    assert rounded_err <= ch05.TOO_TIGHT_BELOW
    bf16_err = ((exact.to(torch.bfloat16).double() - exact).abs() / exact).max().item()
    assert bf16_err > ch05.TOO_LOOSE_ABOVE


def test_find_the_bug_spellings():
    assert ch05.find_the_bug.check("broken.padded_mean").ok
    assert ch05.find_the_bug.check(" Padded_Mean ").ok
    assert not ch05.find_the_bug.check("padded").ok


def test_mystery_report_hides_the_name_and_shows_the_evidence():
    text = ch05.mystery_report()
    assert "padded" not in text and "mystery" in text
    assert text.splitlines()[-1].endswith("failed") and "FAIL" in text
    # the evidence the solution cites: power-of-two widths pass, others fail
    results = verify.run([broken.IMPLS[ch05.MYSTERY]], dtypes=[torch.float32])
    status = {r.case: r.status for r in results}
    assert status["1024x4096"] == status["1x1"] == status["w = 0"] == "pass"
    assert status["3x13"] == status["33x257"] == "FAIL"
    assert all(r.unwritten == 0 for r in results)
