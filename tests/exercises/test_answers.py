"""The shared reader of non-code answers: numbers, arithmetic, units, digits as written, options."""
import re
import time
from fractions import Fraction

import numpy as np
import pytest
import torch

from fusedrms.exercises import answers
from fusedrms.exercises.core import Malformed

# ---------------------------------------------------------------- text as pasted


@pytest.mark.parametrize("text,plain", [
    ("\u22120.4", "-0.4"), ("\u2013 0.4", "- 0.4"), ("\u20140.4", "-0.4"), ("\uff0d0.4", "-0.4"),
    ("33\u2009562\u202f624", "33 562 624"), ("1\u00a0024", "1 024"), ("4\u200b2", "42"),
    ("10\u207b\u2074", "10**(-4)"), ("4\u00b2", "4**(2)"), ("2 \u00d7 3", "2*3"), ("2\u00b73", "2*3"),
    ("6 \u00f7 3", "6 / 3"), ("\u221a(16/13)", "sqrt(16/13)"), ("\u221a2", "sqrt(2)"),
    ("(16/13)^0.5", "(16/13)**0.5"), ("\uff11\uff12", "12"), ("\u2248 47.5", "47.5"),
    ("5/4 \u00d7", "5/4 \u00d7"), ("  12   \u00b5s ", "12 \u03bcs"),
])
def test_normalize_makes_pasted_text_plain(text, plain):
    assert answers.normalize(text) == plain


# ---------------------------------------------------------------- numbers and arithmetic

@pytest.mark.parametrize("answer,value", [
    ("\u22120.4", -0.4), ("\u2212 0.4", -0.4), ("1+4+4+16", 25), ("1\u00b2+2\u00b2+(\u22122)\u00b2+4\u00b2", 25),
    ("201334784/3900e9*1e6", 201334784 / 3900e9 * 1e6), ("1e-4/448", 1e-4 / 448),
    ("1e\u22124/448", 1e-4 / 448), ("2.23\u00d710\u207b\u2077", 2.23e-7), ("33,562,624", 33562624),
    ("33 562 624", 33562624), ("33_562_624", 33562624), ("1,234.5", 1234.5),
    ("201,334,784/4,236e9*1e6", 201334784 / 4236e9 * 1e6), ("sqrt(16)/sqrt(13)", (16 / 13) ** 0.5),
    ("-2/5", -0.4), ("\u00bd", 0.5), ("25.", 25), (".5", 0.5), (7, 7), (2.5, 2.5),
    (Fraction(5, 4), 1.25), (np.float32(0.25), 0.25), (np.int64(3), 3), (torch.tensor(1.5), 1.5),
    (b"12", 12),
])
def test_read_takes_every_right_form(answer, value):
    assert answers.read(answer).value == pytest.approx(value, rel=1e-12)


@pytest.mark.parametrize("answer,needle", [
    ("__import__('os').getcwd()", "sqrt() is the only function"), ("x/2", "name"),
    ("5//4", "FloorDiv"), ("2**99999", "too large"), ("10**10**10", "too large"),
    ("(-1)**0.5", "negative"), ("sqrt(-1)", "negative"), ("5/0", "divides by zero"),
    ("(1", "could not read"), ("[1, 2]", "comma"), ("[1]", "not arithmetic"), ("1 if 2 else 3", "not arithmetic"),
    ("(" * 300 + "1" + ")" * 300, "characters long"), ("+".join(["1"] * 90), "too long a calc"),
    ("-0,4", "decimal comma"), ("1,2,3", "comma"), ("1e999", "too large"), ("nan", "NaN"),
    ("-inf", "infinite"), ("", "empty"), ("   ", "empty"), ("9" * 10 ** 6, "characters long"),
    ("lots", "could not read"),
])
def test_read_refuses_anything_but_arithmetic_with_a_message(answer, needle):
    with pytest.raises(Malformed, match=re.escape(needle)):
        answers.read(answer)


@pytest.mark.parametrize("junk", [None, [1.0], (1, 2), {"a": 1}, {1}, 1e999, -1e999, float("nan"),
                                  10 ** 400, True, np.bool_(True), torch.tensor(True), 1j,
                                  torch.ones(3), np.ones(2), object(), Ellipsis])
def test_junk_is_malformed_with_a_short_message_never_another_error(junk):
    for reader in (answers.read, lambda a: answers.read_list(a, 4),
                   lambda a: answers.read_option(a, {"a": "one", "b": "two"})):
        if reader is not answers.read and isinstance(junk, (tuple, list)):
            continue  # a list is the right shape for read_list
        with pytest.raises(Malformed) as err:
            reader(junk)
        assert 10 < len(str(err.value)) < 300


def test_huge_and_nested_text_is_refused_fast():
    start = time.perf_counter()
    for text in ("9" * 10 ** 6, "1" * 199 + "x", "2**2**2**2**2**2",
                 "1" + "+1" * 99, "1" * 100 + "," + "1" * 98, "\u2212" * 10 ** 5):
        with pytest.raises(Malformed):
            answers.read(text)
        with pytest.raises(Malformed):
            answers.read_option(text, {"a": "one", "b": "two"})
    assert time.perf_counter() - start < 1.0


# ---------------------------------------------------------------- units

@pytest.mark.parametrize("answer,units,value", [
    ("532.5 kB", answers.BYTES, 532500), ("0.53 MB", answers.BYTES, 530000),
    ("532500 bytes", answers.BYTES, 532500), ("520 KiB", answers.BYTES, 532480),
    ("532,480 B", answers.BYTES, 532480), ("0.5 MiB", answers.BYTES, 2 ** 19),
    ("12 us", answers.TIME_US, 12), ("12 \u00b5s", answers.TIME_US, 12),
    ("12 \u03bcs", answers.TIME_US, 12), ("12us", answers.TIME_US, 12), ("1.2 ms", answers.TIME_US, 1200),
    ("4.753e-5 s", answers.TIME_US, 47.53), ("47529 ns", answers.TIME_US, 47.529),
    ("47.5 \u00b5s.", answers.TIME_US, 47.5), ("4.2 TB/s", answers.BANDWIDTH_GBPS, 4200),
    ("4,236 GB/s", answers.BANDWIDTH_GBPS, 4236), ("78.6%", answers.PERCENT, 78.6),
    ("78.6 percent", answers.PERCENT, 78.6), ("1.25x", answers.RATIO, 1.25),
    ("5/4 \u00d7", answers.RATIO, 1.25), ("0.83 FLOP/B", answers.INTENSITY, 0.83),
    ("5/6 flops per byte", answers.INTENSITY, 5 / 6), ("1/3 kB", answers.BYTES, 1000 / 3),
    ("47.5", answers.TIME_US, 47.5),  # no unit: the checker's own
])
def test_a_unit_converts_to_the_checkers_unit(answer, units, value):
    reading = answers.read(answer, "a value", units)
    assert reading.value == pytest.approx(value) and reading.units is units


@pytest.mark.parametrize("answer,units,needle", [
    ("78.6 GB", answers.PERCENT, "'GB' is a unit of a size in bytes"),
    ("201334784 B", answers.TIME_US, "asks for a value, in µs"),
    ("47.5 kg", answers.TIME_US, "'kg' is not a unit this question knows; write it in µs"),
    ("12 parsecs", answers.BYTES, "'parsecs' is not a unit"), ("kB", answers.BYTES, "name"),
    ("25 B", None, "'B' is a unit of a size"),
])
def test_a_unit_of_another_kind_or_an_unknown_word_is_named(answer, units, needle):
    with pytest.raises(Malformed, match=needle):
        answers.read(answer, "a value", units)


def test_a_unit_of_a_family_the_checker_expects_is_read_in_that_family():
    reading = answers.read("3.3 TB/s", "a percentage", answers.PERCENT,
                           also=(answers.BANDWIDTH_GBPS,))
    assert reading.units is answers.BANDWIDTH_GBPS and reading.value == pytest.approx(3300)


# ---------------------------------------------------------------- digits as written

@pytest.mark.parametrize("answer,half,significant", [
    ("0.53 MB", 5000, 2), ("532.5 kB", 50, 4), ("532500 bytes", 0.5, 6), ("1.2 ms", 50, 2),
    (0.83, 0.005, 2), ("2.23\u00d710\u207b\u2077", 0.005e-7, 3), (33562624, 0.5, 8),
    ("1e-4/448", 0, 0), (np.float32(0.0339), 0.00005, 3), (torch.tensor(0.0339), 0.00005, 3),
])
def test_a_reading_keeps_the_precision_it_was_written_with(answer, half, significant):
    units = answers.TIME_US if "ms" in str(answer) else answers.BYTES
    reading = answers.read(answer, "a value", units)
    assert reading.half_unit == pytest.approx(half) and reading.significant == significant


def test_match_accepts_a_rounding_that_fits_only_the_right_value():
    mistakes = {"one slip": 1.2308, "another": 0.9014}
    assert answers.match(answers.read("1.1"), 1.1094, mistakes, rel=2e-3).right
    assert answers.match(answers.read("1.1094"), 1.1094, mistakes, rel=2e-3).right
    assert not answers.match(answers.read("1.10"), 1.1094, mistakes, rel=2e-3).right  # 3rd digit
    rough = answers.match(answers.read("1"), 1.1094, mistakes, rel=2e-3)
    assert rough.rough and not rough.right  # one digit: right as far as it goes
    both = answers.match(answers.read("1"), 1.1094, {"no change": 1.0}, rel=2e-3)
    assert both.rough and both.also_fits == ("no change",)
    assert answers.match(answers.read("1.23"), 1.1094, mistakes, rel=2e-3).mistake == "one slip"
    assert answers.match(answers.read("1.5"), 1.1094, mistakes, rel=2e-3) == answers.Match()


def test_match_prefers_an_exact_mistake_to_one_its_rounding_fits():
    # 2 (one digit) also fits 7/4 rounded, but it is the launch ratio exactly
    found = answers.match(answers.read(2), 1.25, {"seven quarters": 1.75, "launches": 2.0})
    assert found.mistake == "launches"


def test_a_byte_count_is_exact_unless_written_rounded_in_a_unit():
    count = 532480
    for right in ("532,480", "532480 B", "520 KiB", "532.5 kB", "0.5325 MB", "4*16*4096*2+8192",
                  532480.00000000006):
        assert answers.match_count(answers.read(right, "bytes", answers.BYTES), count).right, right
    for wrong in ("532,481", "532.4 kB", 532000, "0.5324 MB"):
        found = answers.match_count(answers.read(wrong, "bytes", answers.BYTES), count)
        assert not found.right and not found.rough, wrong
    slips = {"weight left out": count - 8192, "weight per row": count + 15 * 8192}
    # two digits that fit no slip are right; one digit that also fits a slip is too rough
    assert answers.match_count(answers.read("0.53 MB", "bytes", answers.BYTES), count, slips).right
    rough = answers.match_count(answers.read("0.5 MB", "bytes", answers.BYTES), count, slips)
    assert rough.rough and rough.also_fits == ("weight left out",)


def test_more_digits_says_the_value_is_right_so_far():
    message, hint = answers.more_digits("0.53 MB", ("weight per row",), "the exact count")
    assert "right as far as it goes" in message and "weight per row" in message
    assert "more digits" in hint and "the exact count" in hint


# ---------------------------------------------------------------- lists

@pytest.mark.parametrize("answer", [
    [-0.0339, 0.0962, 0.0339, 0.0453], (-0.0339, 0.0962, 0.0339, 0.0453),
    ["\u22120.0339", "0.0962", "0.0339", "0.0453"], np.array([-0.0339, 0.0962, 0.0339, 0.0453]),
    torch.tensor([-0.0339, 0.0962, 0.0339, 0.0453]), "[\u22120.0339, 0.0962, 0.0339, 0.0453]",
    "-0.0339; 0.0962; 0.0339; 0.0453", "-0.0339 0.0962 0.0339 0.0453",
])
def test_read_list_takes_containers_and_text(answer):
    readings = answers.read_list(answer, 4)
    assert [r.value for r in readings] == pytest.approx([-0.0339, 0.0962, 0.0339, 0.0453], abs=1e-7)
    assert all(r.half_unit == pytest.approx(0.00005) for r in readings)  # the digits as written


def test_read_list_reads_grouped_counts_and_units():
    assert [r.value for r in answers.read_list("129,024, 59,136", 2)] == [129024, 59136]
    pair = answers.read_list(["126 KiB", "57.75 KiB"], 2, "bytes", answers.BYTES)
    assert [r.value for r in pair] == [129024, 59136]
    for bad, needle in (([1, 2, 3], "expected 4"), ("1, 2", "could not find them"),
                        ({"a": 1}, "a dict"), (torch.ones(2, 2), "expected 4"),
                        ([1, None, 2, 3], "NoneType")):
        with pytest.raises(Malformed, match=needle):
            answers.read_list(bad, 4)


# ---------------------------------------------------------------- options

OPTIONS = {
    "a": "The CPU clock was read right after the call without a synchronize: it timed the launch.",
    "b": "The L2 was warm: the inputs were still in the cache from the previous call.",
    "c": "Only one process was measured: another process could have been slower.",
    "d": "it divides the sum of squares by cols - 1",
}


@pytest.mark.parametrize("answer,key", [
    ("a", "a"), ("A", "a"), (" (a) ", "a"), ("a)", "a"), ("a.", "a"), ("A:", "a"), ("(A)", "a"),
    ("option a", "a"), ("Answer: A", "a"), ("a - the clock", "a"), ("a \u2013 the clock", "a"),
    (1, "a"), ("1", "a"), ("(1)", "a"), (np.int64(2), "b"), (3.0, "c"),
    (OPTIONS["a"], "a"), (OPTIONS["a"].upper(), "a"), ("  the  l2 was WARM ", "b"),
    ("(a) The CPU clock was read right after the call", "a"),
    ("the CPU clock was read right after the call", "a"),  # a distinctive part of it
    ("Divides the sum of squares by cols \u2212 1.", "d"), ("divides the sum of squares by cols-1", "d"),
])
def test_read_option_takes_a_letter_a_number_or_the_text(answer, key):
    assert answers.read_option(answer, OPTIONS) == key


@pytest.mark.parametrize("answer,needle", [
    ("e", "not one of the options"), (5, "no option 5"), (0, "no option 0"), ("(7)", "no option 7"),
    (1.5, "no option 1.5"), ("b, c", "several options"), ("a or b", "several options"),
    ("ab", "several options"), ("(b) the CPU clock was read right after the call", r"words of \(a\)"),
    ("something else entirely", "names none"), ("the", "names none"),
    ("was", "names none"), ("", "empty"), (True, "boolean"), (["a"], "a list"),
    ("x" * 5000, "characters long"),
])
def test_read_option_refuses_with_a_message(answer, needle):
    with pytest.raises(Malformed, match=needle):
        answers.read_option(answer, OPTIONS)


def test_read_option_keywords_and_aliases():
    words = {"b": ("warm", "cache"), "c": ("one process",), "d": ("n - 1", "unbiased")}
    assert answers.read_option("a warm cache", OPTIONS, keywords=words) == "b"
    assert answers.read_option("n-1 like LayerNorm", OPTIONS, keywords=words) == "d"
    assert answers.read_option("broken.unbiased_mean", OPTIONS,
                               aliases={"broken.unbiased_mean": "d"}) == "d"
    with pytest.raises(Malformed, match=r"more than one option \(b, c\)"):
        answers.read_option("cache and one process", OPTIONS, keywords=words)


def test_the_reader_never_runs_python(monkeypatch):
    import builtins

    ran = []
    monkeypatch.setattr(builtins, "print", lambda *args, **kwargs: ran.append(args))
    for text in ("print('ran')", "__import__('builtins').print('ran')", "(lambda: print(1))()",
                 "[print(1) for _ in '1']"):
        with pytest.raises(Malformed):
            answers.read(text)
        with pytest.raises(Malformed):
            answers.read_list(text + ";1;2;3", 4)
    assert ran == [] and answers.read("2**10").value == 1024
