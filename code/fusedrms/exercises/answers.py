"""One reader for every non-code answer: numbers, units, arithmetic and option text.

A reader types an answer the way it comes to hand: copied from rendered math (a Unicode minus, a
thin space, 10⁻⁴), with thousands separators ("33,562,624"), as arithmetic ("1+4+4+16",
"1e-4/448"), with a unit ("532.5 kB", "12 µs", "4.2 TB/s"), or as an option's letter, number or
text. :func:`read` turns a number into a :class:`Reading` in the unit the checker grades in, and
keeps the precision it was written with (half a unit of its last digit), so a checker can accept
a right value rounded as written and ask for more digits when the rounding also fits a typical
mistake (:func:`match`). :func:`read_option` turns any spelling of an option into its letter.
Anything else raises :class:`~fusedrms.exercises.core.Malformed` with a message that says what to
write instead. Arithmetic is read from its syntax tree (numbers, + - * / **, parentheses and
sqrt), never evaluated as Python.
"""
from __future__ import annotations

import ast
import decimal
import math
import operator
import re
import unicodedata
import warnings
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Mapping, Sequence

from .core import Malformed

MAX_NUMBER_TEXT = 200  # characters of a number, arithmetic or a number with its unit
MAX_OPTION_TEXT = 1000  # an option's text pasted whole, with its letter
MAX_NODES = 100  # pieces of arithmetic (numbers and operators)
MAX_EXPONENT = 1000

# ---- text as a reader pastes it -> plain ASCII arithmetic ----

_DASHES = "\u2212\u2010\u2011\u2012\u2013\u2014\u2015\ufe63\uff0d"  # minus, hyphens, dashes
_INVISIBLE = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"))  # zero-width, BOM
_SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺", "0123456789-+")
_TIMES = "×·⋅∙✕"


def normalize(text: str) -> str:
    """The text with what rendered math and other keyboards put in it made plain: any dash or
    minus sign -> "-", thin and no-break spaces -> " ", 10⁻⁴ -> 10**(-4), × and · between numbers
    -> *, ÷ and fraction slashes -> /, √ -> sqrt, ^ -> **, full-width digits -> digits, runs of
    spaces -> one. A leading ≈, ~ or = is dropped."""
    text = text.translate(_INVISIBLE)
    text = re.sub("[⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺]+", lambda m: "**(" + m.group().translate(_SUPERSCRIPT) + ")",
                  text)
    text = unicodedata.normalize("NFKC", text)  # µ -> μ, no-break and thin spaces -> " ", ...
    text = re.sub(f"[{_DASHES}]", "-", text)
    text = re.sub(f"\\s*[{_TIMES}]\\s*(?=[\\d(.√])", "*", text)
    text = re.sub("[÷\u2044\u2215]", "/", text)
    text = text.replace("^", "**").replace("math.sqrt", "sqrt")
    text = re.sub(r"√\s*(\d[\d.]*)", r"sqrt(\1)", text).replace("√", "sqrt")
    text = " ".join(text.split())
    return text.lstrip("≈~= ").strip()


# digits grouped by threes with one separator throughout: "33,562,624", "33 562 624", "1'024"
_GROUPED = re.compile(r"(?<![\w.])\d{1,3}(?P<sep>[,' _])\d{3}(?:(?P=sep)\d{3})*(?!\d)")


def _ungroup(text: str) -> str:
    return _GROUPED.sub(lambda m: re.sub(r"[,' _]", "", m.group()), text)


# ---- units: each family converts to the unit its checker grades in ----

@dataclass(frozen=True)
class Units:
    """A family of units: what they measure (``kind``, for messages), the unit the checker grades
    in (``base``), a few spellings to suggest (``examples``) and each spelling's factor to the
    base (spellings in lower case)."""

    kind: str
    base: str
    examples: str  # the spellings a message suggests
    factors: Mapping[str, float]


TIME_US = Units("a time", "µs", "µs, ns, ms or s", {
    "µs": 1.0, "μs": 1.0, "us": 1.0, "usec": 1.0, "microsecond": 1.0, "microseconds": 1.0,
    "ns": 1e-3, "nanosecond": 1e-3, "nanoseconds": 1e-3, "ms": 1e3, "msec": 1e3,
    "millisecond": 1e3, "milliseconds": 1e3, "s": 1e6, "sec": 1e6, "second": 1e6,
    "seconds": 1e6})
BYTES = Units("a size in bytes", "B", "B, kB, KiB, MB or MiB", {
    "b": 1, "byte": 1, "bytes": 1, "kb": 1e3, "kilobyte": 1e3, "kilobytes": 1e3,
    "kib": 2 ** 10, "mb": 1e6, "megabyte": 1e6, "megabytes": 1e6, "mib": 2 ** 20, "gb": 1e9,
    "gigabyte": 1e9, "gigabytes": 1e9, "gib": 2 ** 30, "tb": 1e12, "tib": 2 ** 40})
BANDWIDTH_GBPS = Units("a bandwidth", "GB/s", "GB/s or TB/s", {
    "gb/s": 1.0, "tb/s": 1e3, "mb/s": 1e-3, "kb/s": 1e-6, "b/s": 1e-9, "gib/s": 2 ** 30 / 1e9,
    "tib/s": 2 ** 40 / 1e9, "mib/s": 2 ** 20 / 1e9, "gb per s": 1.0, "tb per s": 1e3})
PERCENT = Units("a percentage", "%", "%", {"%": 1.0, "percent": 1.0, "pct": 1.0})
RATIO = Units("a ratio", "x", "x", {"x": 1.0, "×": 1.0, "times": 1.0, "fold": 1.0})
INTENSITY = Units("an intensity", "FLOP/B", "FLOP/B", {
    f"{flop}{per}{byte}": 1.0 for flop in ("flop", "flops") for per in ("/", " per ")
    for byte in ("b", "byte")})
FAMILIES = (TIME_US, BYTES, BANDWIDTH_GBPS, PERCENT, RATIO, INTENSITY)
_SPELLINGS = sorted({s for f in FAMILIES for s in f.factors}, key=len, reverse=True)


def _split_unit(text: str) -> tuple[str, str]:
    """("532.5", "kB") from "532.5 kB": the longest known unit at the end, not glued to a word."""
    folded = text.casefold()
    for spelling in _SPELLINGS:
        if folded.endswith(spelling):
            number = text[:-len(spelling)].rstrip()
            if number and not (spelling[0].isalpha() and number[-1].isalpha()
                               and number[-1] not in "eE"):
                return number, text[-len(spelling):]
    return text, ""


def _family(unit: str, families: Sequence[Units]) -> Units | None:
    for family in families:
        if unit.casefold() in family.factors:
            return family
    return None


# ---- what was read ----

@dataclass(frozen=True)
class Reading:
    """A number as the reader wrote it, in the base unit of ``units`` (the checker's own family
    when no unit was written): ``half_unit`` is half a unit of its last written digit in that
    unit ("0.53 MB": 5,000 B; 0 for arithmetic, which is exact), ``significant`` its count of
    significant digits (0 for arithmetic)."""

    value: float
    half_unit: float = 0.0
    significant: int = 0
    unit: str = ""  # as written; "" when none was
    units: Units | None = None
    text: str = ""  # the answer as read, for feedback

    @property
    def scaled(self) -> bool:
        """True when a unit with a factor other than 1 was written ("0.53 MB", not "532 B")."""
        return bool(self.unit) and self.units is not None \
            and self.units.factors[self.unit.casefold()] != 1

    def fits(self, target: float) -> bool:
        """True when ``target`` rounded to the digits written gives what was written."""
        return abs(self.value - target) <= self.half_unit * (1 + 1e-9) + 1e-12 * abs(target)

    def shown(self) -> str:
        return self.text or f"{self.value:g}"


def _precision(digits: str) -> tuple[float, int]:
    """(half a unit of the last digit, significant digits) of a number literal's text."""
    try:
        parts = decimal.Decimal(digits).as_tuple()
    except decimal.InvalidOperation:
        return 0.0, 0
    if not isinstance(parts.exponent, int):
        return 0.0, 0
    significant = len(str(int("".join(map(str, parts.digits)) or "0")))
    return 0.5 * 10.0 ** max(parts.exponent, -400), significant


def _finite(value: float, what: str, text: str = "") -> float:
    shown = f" ({text[:40]})" if text else ""
    if math.isnan(value):
        raise Malformed(f"the answer is NaN{shown}; expected {what}. NaN never passes a check.")
    if math.isinf(value):
        raise Malformed(f"the answer is infinite{shown}; expected {what}.")
    return value


_LITERAL = re.compile(r"[+-]?(?:\d+(?:_\d+)*\.?\d*|\.\d+)(?:e[+-]?\d+)?", re.I)
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.Div: operator.truediv, ast.Pow: operator.pow}
_ARITHMETIC_HELP = ("write a number such as 12.5 or 1.2e-4, or arithmetic with numbers, "
                    "+ - * / ** (or ^), parentheses and sqrt(), such as '1e-4/448'")


def evaluate(text: str, what: str = "a number") -> tuple[float, float, int]:
    """(value, half a unit of its last digit, significant digits) of a number or of arithmetic
    in plain text (see :func:`normalize`); arithmetic is exact: (value, 0, 0)."""
    if not text:
        raise Malformed(f"the answer is empty; expected {what}.")
    if len(text) > MAX_NUMBER_TEXT:
        raise Malformed(f"expected {what}; the text is {len(text):,} characters long.")
    text = _ungroup(text)
    if text.casefold().lstrip("+-") in ("nan", "inf", "infinity"):
        _finite(float(text), what, text)
    scientific = re.fullmatch(r"([+-]?[\d.]+)\s*\*\s*10\s*\*\*\s*\(?([+-]?\d{1,3})\)?", text)
    if scientific:  # 2.23×10⁻⁷ keeps its three digits
        text = f"{scientific[1]}e{scientific[2]}"
    if _LITERAL.fullmatch(text):
        value = float(text)
        if math.isinf(value):
            raise Malformed(f"{text[:40]!r} is too large for a number here; expected {what}.")
        return (value, *_precision(text.replace("_", "")))
    if re.fullmatch(r"[+-]?\d+,\d+", text):
        raise Malformed(f"{text!r} reads like a decimal comma; write the decimal point as '.', "
                        f"e.g. {text.replace(',', '.')!r}.")
    if "," in text:
        raise Malformed(f"{text[:40]!r} has a comma that does not group thousands; write one "
                        f"number, e.g. 12.5 or '33,562,624'.")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        raise Malformed(f"could not read {text[:40]!r} as {what}; {_ARITHMETIC_HELP}.") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise Malformed(f"{text[:40]!r} is too long a calculation; give its result.")
    try:
        value = _value(tree.body)
    except ZeroDivisionError:
        raise Malformed(f"{text[:40]!r} divides by zero; expected {what}.") from None
    except (OverflowError, RecursionError):
        raise Malformed(f"{text[:40]!r} is too large to be {what}.") from None
    except _NotArithmetic as why:
        raise Malformed(f"could not read {text[:40]!r} as {what} ({why}); "
                        f"{_ARITHMETIC_HELP}.") from None
    return _finite(value, what, text), 0.0, 0


class _NotArithmetic(ValueError):
    pass


def _value(node) -> float:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return float(node.value)
        raise _NotArithmetic(f"{type(node.value).__name__} is not a number")
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _value(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow):
            if abs(right) > MAX_EXPONENT:
                raise OverflowError("exponent too large")
            if left < 0 and right != int(right):
                raise _NotArithmetic("a fractional power of a negative number")
        result = _OPS[type(node.op)](left, right)
        if not isinstance(result, float):  # a complex power
            raise _NotArithmetic("not a real number")
        return result
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "sqrt"
            and len(node.args) == 1 and not node.keywords):
        inside = _value(node.args[0])
        if inside < 0:
            raise _NotArithmetic("the square root of a negative number")
        return math.sqrt(inside)
    if isinstance(node, ast.Name):
        raise _NotArithmetic(f"{node.id!r} is a name, not a number")
    if isinstance(node, ast.Call):
        raise _NotArithmetic("sqrt() is the only function")
    if isinstance(node, ast.BinOp):
        raise _NotArithmetic(f"{type(node.op).__name__} is not one of + - * / **")
    raise _NotArithmetic(f"{type(node).__name__} is not arithmetic")


def _scalar(answer: Any, what: str) -> Reading | None:
    """A Reading of a number object (int, float, Fraction, Decimal, numpy or torch scalar), or
    None for text. Raises Malformed for anything else."""
    kind = type(answer).__name__
    if isinstance(answer, bool) or str(getattr(answer, "dtype", "")).endswith("bool"):
        raise Malformed(f"expected {what}, got a boolean ({answer}).")
    if isinstance(answer, (str, bytes)):
        return None
    if isinstance(answer, int):
        if abs(answer) >= 10 ** 300:
            raise Malformed(f"expected {what}, got a number too large for a float "
                            f"({len(str(abs(answer))):,} digits).")
        return Reading(float(answer), 0.5, len(str(abs(answer))))
    if isinstance(answer, float):  # numpy's float64 too
        value = _finite(float(answer), what)
        return Reading(value, *_precision(repr(value)))
    if isinstance(answer, Fraction):
        return Reading(_finite(float(answer), what))
    if isinstance(answer, decimal.Decimal):
        return Reading(_finite(float(answer), what), *_precision(str(answer)))
    if hasattr(answer, "item") and hasattr(answer, "dtype"):  # a numpy or torch scalar
        return _array_scalar(answer, what)
    if isinstance(answer, (complex, Mapping, Sequence, set, frozenset)) or answer is None:
        raise Malformed(f"expected {what}, got {_kind(answer)}. Write one number, e.g. "
                        f"answer = 12.5")
    try:
        value = float(answer)
    except Exception:  # noqa: BLE001 - an object whose __float__ is missing or raises
        raise Malformed(f"expected {what}, got {kind}. Write one number, e.g. answer = 12.5") \
            from None
    return Reading(_finite(value, what))


def _kind(answer: Any) -> str:
    if isinstance(answer, (list, tuple)):
        return f"a {type(answer).__name__} of {len(answer)}"
    return {dict: "a dict", set: "a set", complex: "a complex number"}.get(
        type(answer), type(answer).__name__)


def _array_scalar(answer: Any, what: str) -> Reading:
    import numpy as np

    try:
        size = answer.numel() if callable(getattr(answer, "numel", None)) else int(answer.size)
    except Exception:  # noqa: BLE001 - an object that only looks like an array
        raise Malformed(f"expected {what}, got {type(answer).__name__}.") from None
    if size != 1:
        raise Malformed(f"expected {what}, got an array or tensor with {size} elements.")
    dtype = str(answer.dtype).replace("torch.", "")
    try:
        value = answer.item()
    except Exception:  # noqa: BLE001
        raise Malformed(f"expected {what}, got {type(answer).__name__} whose value cannot be "
                        f"read.") from None
    if isinstance(value, bool):
        raise Malformed(f"expected {what}, got a boolean ({value}).")
    if isinstance(value, int):
        return _scalar(value, what)
    if not isinstance(value, float):
        raise Malformed(f"expected {what}, got {dtype} values.")
    value = _finite(value, what)
    if dtype in ("float32", "float16"):  # the digits as that precision prints them
        return Reading(value, *_precision(np.format_float_positional(getattr(np, dtype)(value))))
    return Reading(value, *_precision(repr(value))) if dtype == "float64" else Reading(value)


def read(answer: Any, what: str = "a number", units: Units | None = None,
         also: Sequence[Units] = ()) -> Reading:
    """A number, arithmetic, or either with a unit, as a :class:`Reading` in the base unit of
    ``units`` (no unit written: it is taken to be in that base unit). A unit of a family in
    ``also`` is read in that family (the checker tells the reader what it means); a unit of any
    other family, or an unknown word, is Malformed."""
    reading = _scalar(answer, what)
    if reading is not None:
        return Reading(reading.value, reading.half_unit, reading.significant, units=units)
    if isinstance(answer, bytes):
        answer = answer.decode(errors="replace")
    if len(answer) > 5 * MAX_NUMBER_TEXT:
        raise Malformed(f"expected {what}; the text is {len(answer):,} characters long.")
    text = normalize(answer)
    if text.endswith(".") and not re.search(r"\d\.$", text):  # "47.5 µs." as in a sentence
        text = text[:-1].rstrip()
    number, unit = _split_unit(text)
    family = _family(unit, (units, *also) if units else also) if unit else units
    if unit and family is None:
        other = _family(unit, FAMILIES)
        asked = f", in {units.base}" if units else ""
        raise Malformed(f"{unit!r} is a unit of {other.kind}, but the question asks for "
                        f"{what}{asked}.")
    try:
        value, half, significant = evaluate(number, what)
    except Malformed:
        word = re.search(r"\s*([^\W\d_][^\s\d]*)$", number)  # "47.5 kg": an unknown unit?
        if word and not unit and _readable(number[:word.start()], what):
            known = f"; write it in {units.base}, or with a unit such as {units.examples}" \
                if units else ""
            raise Malformed(f"could not read {text[:40]!r} as {what}: {word[1][:20]!r} is "
                            f"not a unit this question knows{known}.") from None
        raise
    scale = family.factors[unit.casefold()] if unit else 1.0
    return Reading(value * scale, half * scale, significant, unit, family, text)


def _readable(text: str, what: str) -> bool:
    try:
        evaluate(text, what)
    except Malformed:
        return False
    return True


def number(answer: Any, what: str = "a number", units: Units | None = None) -> float:
    """The value of :func:`read`, in the base unit of ``units``."""
    return read(answer, what, units).value


def _list_items(answer: Any, length: int, what: str) -> list:
    """The entries of a list, tuple, array or tensor; or of text that lists ``length`` numbers
    ("[-0.034, 0.096, ...]", "1; 2; 3", "129,024, 59,136")."""
    example = f"write e.g. answer = [{', '.join(['1.0'] * min(length, 4))}]"
    if hasattr(answer, "tolist") and not isinstance(answer, (str, bytes)):
        if hasattr(answer, "dim") and answer.dim() == 1 or getattr(answer, "ndim", None) == 1:
            if len(answer) != length:
                raise Malformed(f"expected {length} {what}, got {len(answer)}; {example}.")
            return [answer[i] for i in range(len(answer))]  # scalars of its dtype: its digits
        try:
            answer = answer.tolist()
        except Exception:  # noqa: BLE001
            raise Malformed(f"expected {length} {what}, got {type(answer).__name__}.") from None
    if isinstance(answer, bytes):
        answer = answer.decode(errors="replace")
    if isinstance(answer, str):
        if len(answer) > 5 * MAX_NUMBER_TEXT:
            raise Malformed(f"expected {length} {what}; the text is {len(answer):,} characters "
                            f"long.")
        text = normalize(answer).strip("[]() ")
        for pattern in (r"\s*;\s*", r",\s+", r",", r"\s+"):
            parts = [p for p in re.split(pattern, text) if p]
            if len(parts) == length:
                return parts
        raise Malformed(f"expected {length} {what}, could not find them in {answer[:40]!r}; "
                        f"{example}.")
    if isinstance(answer, Mapping) or not isinstance(answer, Sequence):
        raise Malformed(f"expected a list of {length} {what}, got {_kind(answer)}; {example}.")
    if len(answer) != length:
        raise Malformed(f"expected {length} {what}, got {len(answer)}; {example}.")
    return list(answer)


def read_list(answer: Any, length: int, what: str = "numbers",
              units: Units | None = None) -> list[Reading]:
    """``length`` numbers (each read by :func:`read`) from a list, tuple, array, tensor or text."""
    return [read(item, f"a number in the list of {what}", units)
            for item in _list_items(answer, length, what)]


# ---- judging a reading against the right value and the typical mistakes ----

@dataclass(frozen=True)
class Match:
    """How a reading compares with the right value: ``right``; ``rough`` (right to the digits
    written, but too few digits to tell it from ``also_fits``, the mistakes the same rounding
    fits, or from the answer's neighbours); or the typical ``mistake`` it is (its label)."""

    right: bool = False
    rough: bool = False
    mistake: str | None = None
    also_fits: tuple[str, ...] = ()


def close(value: float, target: float, rel: float, abs_: float = 0.0) -> bool:
    return abs(value - target) <= max(abs_, rel * abs(target))


def match(reading: Reading, target: float, mistakes: Mapping[str, float] | None = None, *,
          rel: float = 1e-3, abs_: float = 0.0, min_significant: int = 2,
          rounded: bool = True) -> Match:
    """Compare ``reading`` with ``target`` and each typical mistake: within ``rel`` (or ``abs_``)
    is that value; so is a value rounded as written when ``rounded``: right when it has at least
    ``min_significant`` significant digits and its rounding fits no mistake, else ``rough``."""
    mistakes = mistakes or {}
    if close(reading.value, target, rel, abs_):
        return Match(right=True)
    if rounded and reading.fits(target):
        fits = tuple(label for label, v in mistakes.items() if reading.fits(v))
        if fits or reading.significant < min_significant:
            return Match(rough=True, also_fits=fits)
        return Match(right=True)
    near = [label for label, v in mistakes.items() if close(reading.value, v, rel, abs_)]
    if rounded and not near:  # the mistake nearest to the value, among those its rounding fits
        near = sorted((label for label, v in mistakes.items() if reading.fits(v)),
                      key=lambda label: abs(reading.value - mistakes[label]))
    return Match(mistake=near[0]) if near else Match()


def match_count(reading: Reading, target: float,
                mistakes: Mapping[str, float] | None = None) -> Match:
    """:func:`match` for a count (of bytes): exact up to float noise when written without a
    scaled unit ("229,376", "229376 B", arithmetic); rounded as written with one ("229.4 kB")."""
    return match(reading, target, mistakes, rel=1e-9, abs_=1e-6, rounded=reading.scaled)


def more_digits(shown: str, fits: Sequence[str] = (), example: str = "") -> tuple[str, str]:
    """The message and hint for a right value written with too few digits."""
    why = (f"it also fits a typical slip ({fits[0]})" if fits
           else "so few digits cannot tell it from its neighbours")
    return (f"{shown} is right as far as it goes, but too rough: {why}.",
            f"Give more digits{f', e.g. {example}' if example else ''}.")


# ---- options: a letter, a number, or the option's text ----

def _loose(text: str) -> str:
    """Lower case words and numbers only: "Cols - 1." -> "cols 1"."""
    return " ".join(re.findall(r"[^\W_]+", normalize(text).casefold()))


def _contains(outer: str, inner: str) -> bool:
    return bool(inner) and f" {inner} " in f" {outer} "


_LABEL = re.compile(r"(?:(?:option|answer|choice)\s*[:=]?\s*)?"
                    r"(?:\(\s*(?P<a>[a-z]|\d{1,2})\s*\)|(?P<b>[a-z]|\d{1,2})(?:[).:]|\s+-\s)|"
                    r"(?P<c>[a-z]|\d{1,2})$)\s*(?P<rest>.*)", re.I | re.S)


def _by_text(text: str, options: Mapping[str, str]) -> list[str]:
    """The options whose text the reader's text is, contains or is part of (whole words)."""
    words = _loose(text)
    if not words:
        return []
    loose = {k: _loose(v) for k, v in options.items()}
    for k, v in loose.items():  # the whole text, with or without a leading "it"
        if words in (v, v.removeprefix("it ")):
            return [k]
    found = [k for k, v in loose.items() if _contains(words, v)]
    if found:
        return found
    if len(words.split()) >= 3 or len(words) >= 12:
        return [k for k, v in loose.items() if _contains(v, words)]
    return []


def read_option(answer: Any, options: Mapping[str, str], *,
                aliases: Mapping[str, str] | None = None,
                keywords: Mapping[str, Sequence[str]] | None = None) -> str:
    """The key of the option ``answer`` picks, from its letter in any written form ("b", "B",
    "(b)", "b)", "b.", "option b", "(b) and its text"), its number (2 for the second option),
    its text (whole or a distinctive part, in any case and spacing), an alias (text -> key), or
    a description that uses the words of exactly one option's ``keywords``. Malformed when it
    picks none, several, or when a letter and the text after it name different options."""
    keys = list(options)
    listed = f"{keys[0]}–{keys[-1]}" if len(keys) > 2 else " or ".join(keys)
    how = f"answer with one letter, {listed} (or the option's number or its text)"
    if isinstance(answer, bool) or str(getattr(answer, "dtype", "")).endswith("bool"):
        raise Malformed(f"expected an option, got a boolean ({answer}); {how}.")
    if not isinstance(answer, (str, bytes)):
        if isinstance(answer, (int, float)) or hasattr(answer, "item"):
            n = read(answer, "an option's number").value
            if n == int(n) and 1 <= n <= len(keys):
                return keys[int(n) - 1]
            raise Malformed(f"there is no option {n:g}; {how}.")
        raise Malformed(f"expected an option, got {_kind(answer)}; {how}.")
    if isinstance(answer, bytes):
        answer = answer.decode(errors="replace")
    if len(answer) > MAX_OPTION_TEXT:
        raise Malformed(f"the text is {len(answer):,} characters long; {how}.")
    text = normalize(answer)
    if not text:
        raise Malformed(f"the answer is empty; {how}.")
    loose = _loose(text)
    for alias, key in (aliases or {}).items():
        if loose == _loose(alias):
            return key
    labelled = _LABEL.fullmatch(text)
    if labelled:
        label = (labelled["a"] or labelled["b"] or labelled["c"]).lower()
        rest = labelled["rest"].strip()
        if label.isdigit():
            if not 1 <= int(label) <= len(keys):
                raise Malformed(f"there is no option {label}; {how}.")
            label = keys[int(label) - 1]
        if label in options:
            named = _by_text(rest, options) if rest else []
            if len(named) == 1 and named[0] != label:
                raise Malformed(f"{answer.strip()[:60]!r} gives the letter ({label}) with the "
                                f"words of ({named[0]}): which one? {how[0].upper() + how[1:]}.")
            return label
        if label not in options and not rest:
            raise Malformed(f"{answer.strip()[:40]!r} is not one of the options; {how}.")
    tokens = [t for t in loose.split() if t not in ("and", "or")]
    if len(tokens) > 1 and all(t in options for t in tokens) or (
            len(tokens) == 1 and len(tokens[0]) <= len(keys) and len(tokens[0]) > 1
            and all(c in options for c in tokens[0])):
        raise Malformed(f"{answer.strip()[:40]!r} gives several options: choose the one that "
                        f"fits; {how}.")
    named = _by_text(text, options)
    if not named and keywords:
        named = [k for k, words in keywords.items() if any(_contains(loose, _loose(w))
                                                           for w in words)]
    if len(named) == 1:
        return named[0]
    if named:
        raise Malformed(f"{answer.strip()[:40]!r} fits more than one option "
                        f"({', '.join(named)}); {how}.")
    raise Malformed(f"{answer.strip()[:40]!r} names none of the options; {how}.")
