"""Auto-checked exercises.

A chapter's exercises live in ``fusedrms.exercises.chNN`` as :class:`Exercise` objects. In the
notebook the reader writes ``answer = ...`` and calls ``exercise.check(answer)``. The check never
raises: it returns :class:`Feedback`, which prints (and renders in Jupyter) as a verdict with a hint.

A checker is a function ``grade(answer) -> Feedback``. Converters (:func:`as_number`,
:func:`as_vector`, :func:`as_choice`) turn what the reader typed into a clean value or raise
:class:`Malformed` with a message saying what to write instead; :meth:`Exercise.check` turns that
into feedback. Each exercise lists its ``mistakes`` (typical wrong answers), and the test suite
checks that every one is rejected and that ``solution`` is accepted.

A checker runs a reader's code (a kernel, HIP text, a function) through :mod:`.grader`: in a child
process with a time limit, so that a crash or an endless loop is a verdict, not a dead notebook.
"""
from __future__ import annotations

import html
import math
import reprlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence


class Malformed(ValueError):
    """The answer has the wrong form (not a number, wrong length, NaN...)."""


@dataclass(frozen=True)
class Feedback:
    ok: bool
    message: str
    hint: str = ""
    # set when the grader itself failed on the answer (its exception, for tests to find); the
    # reader still gets a message, never a traceback
    error: str = ""
    # no answer given yet: a neutral prompt, not a verdict (the built book shows the cell as the
    # notebook starts, so every exercise would otherwise read as failed)
    awaiting: bool = False

    def __bool__(self) -> bool:
        return self.ok

    def _head(self) -> tuple[str, str]:
        if self.ok:
            return "#1a7f37", "Correct."
        return ("#57606a", "Your turn.") if self.awaiting else ("#b35900", "Not yet.")

    def __str__(self) -> str:
        return (self._head()[1] + " " + self.message
                + (f"\nHint: {self.hint}" if self.hint else ""))

    __repr__ = __str__

    def _repr_html_(self) -> str:
        color, head = self._head()
        hint = f"<br><i>Hint:</i> {html.escape(self.hint)}" if self.hint else ""
        return (f'<div style="border-left:4px solid {color};padding:4px 10px">'
                f"<b style=\"color:{color}\">{head}</b> {html.escape(self.message)}{hint}</div>")


def correct(message: str) -> Feedback:
    return Feedback(True, message)


def wrong(message: str, hint: str = "") -> Feedback:
    return Feedback(False, message, hint)


def awaiting() -> Feedback:
    """What an exercise cell says before the reader has answered."""
    return Feedback(False, "Run the notebook to check your answer: write it in place of None "
                           "and run this cell.", awaiting=True)


@dataclass
class Exercise:
    """One exercise: a question, a grader, the solution and the typical mistakes it must reject."""

    name: str
    question: str
    grade: Callable[[Any], Feedback]
    solution: Any
    mistakes: dict[str, Any] = field(default_factory=dict)  # label -> a typical wrong answer
    needs_gpu: bool = False

    def check(self, answer: Any) -> Feedback:
        """Grade ``answer``; never raises (a checker's promise to the reader)."""
        if answer is None or answer is Ellipsis:
            # the question is printed above the cell already: say only what to do
            return awaiting()
        from ..validation import InputError

        try:
            return self.grade(answer)
        except Malformed as e:
            return wrong(f"the answer could not be read: {e}")
        except InputError as e:  # the package refused a value from the answer, and said why
            return wrong(f"the answer could not be used: {e}")
        except (Exception, SystemExit, GeneratorExit) as e:  # noqa: BLE001 - a form the grader
            # did not foresee; SystemExit too (an answer's __float__ may call sys.exit), which
            # would otherwise end the notebook's cell with a traceback. KeyboardInterrupt is the
            # reader's own Ctrl-C and stops the check, as it should.
            text = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
            return Feedback(False, f"the answer could not be read ({type(e).__name__}"
                                   f"{': ' + text if text else ''}).",
                            f"Write it in the form the question asks for: {self.question}",
                            error=f"{type(e).__name__}: {text}")


# ---- converters: clean value or Malformed with a message that says what to write ----

def as_number(answer: Any, what: str = "a number") -> float:
    if isinstance(answer, bool):
        raise Malformed(f"expected {what}, got a boolean ({answer}).")
    kind = type(answer).__name__
    if hasattr(answer, "numel") and hasattr(answer, "item"):  # a torch tensor or numpy scalar
        try:
            count = answer.numel() if callable(answer.numel) else int(answer.numel)
        except Exception:  # noqa: BLE001 - an object that only looks like a tensor
            raise Malformed(f"expected {what}, got {kind}.") from None
        if count != 1:
            raise Malformed(f"expected {what}, got a tensor with {count} elements.")
        try:
            answer = answer.item()
        except Exception:  # noqa: BLE001
            raise Malformed(f"expected {what}, got {kind} whose value cannot be read.") from None
        if isinstance(answer, bool):
            raise Malformed(f"expected {what}, got a boolean tensor ({answer}).")
    if isinstance(answer, (str, bytes)):
        text = answer.decode(errors="replace") if isinstance(answer, bytes) else answer
        try:
            answer = float(text.strip().replace("_", ""))
        except ValueError:
            raise Malformed(f"expected {what}, got the text {text[:40]!r}. Write a plain number, "
                            f"e.g. answer = 12.5") from None
    try:
        value = float(answer)
    except OverflowError:
        raise Malformed(f"expected {what}, got a number too large for a float "
                        f"({len(str(answer)) if isinstance(answer, int) else '?'} digits).") from None
    except Exception:  # noqa: BLE001 - a list, a dict, an object whose __float__ raises, ...
        raise Malformed(f"expected {what}, got {kind}. Write a plain number, e.g. answer = 12.5") \
            from None
    if math.isnan(value):
        raise Malformed(f"the answer is NaN; expected {what}. NaN never passes a check.")
    if math.isinf(value):
        raise Malformed(f"the answer is infinite; expected {what}.")
    return value


def as_vector(answer: Any, length: int, what: str = "numbers") -> list[float]:
    if hasattr(answer, "tolist"):
        try:
            answer = answer.tolist()
        except Exception:  # noqa: BLE001
            raise Malformed(f"expected a list of {length} {what}, got "
                            f"{type(answer).__name__}.") from None
    if isinstance(answer, (str, bytes)) or not isinstance(answer, Sequence):
        raise Malformed(f"expected a list of {length} {what}, got {type(answer).__name__}. "
                        f"Write e.g. answer = [1.0, 2.0, ...].")
    flat = list(answer)
    if len(flat) != length:
        raise Malformed(f"expected {length} {what}, got {len(flat)}.")
    return [as_number(v, "a number in the list") for v in flat]


def as_choice(answer: Any, choices: Sequence[str]) -> str:
    if not isinstance(answer, str):
        raise Malformed(f"expected one of {', '.join(repr(c) for c in choices)}, "
                        f"got {type(answer).__name__}.")
    key = answer.strip().lower()
    for c in choices:
        if key == c.lower():
            return c
    raise Malformed(f"{answer[:40]!r} is not one of {', '.join(repr(c) for c in choices)}.")


def option_letter(answer: Any) -> Any:
    """"b", "B", "(b)", "b)", "b." or "(b) it divides ..." -> "b" (for :func:`as_choice`);
    anything else unchanged."""
    if isinstance(answer, str):
        text = answer.strip()
        if text[:1] == "(" and ")" in text:
            return text[1:text.index(")")].strip()
        if len(text) >= 2 and (text[1] == ")" or text[1] in ".:" and text[2:3] in ("", " ")):
            return text[0]
    return answer


def as_fields(answer: Any, names: Sequence[str], example: str) -> list:
    """The parts of a compound answer, in the order of ``names``: from a tuple or list of that
    length, or from a dict with those keys. Anything else (a set, a string, a dict with other
    keys) is Malformed, with ``example`` showing the form."""
    shape = ", ".join(names)
    if isinstance(answer, Mapping):
        found = {str(k).strip().lower(): v for k, v in answer.items()}
        missing = [n for n in names if n.lower() not in found]
        if missing:
            raise Malformed(f"the dict lacks {', '.join(repr(m) for m in missing)}; expected the "
                            f"keys {shape}, e.g. {example}.")
        return [found[n.lower()] for n in names]
    if isinstance(answer, (str, bytes)) or not isinstance(answer, Sequence):
        raise Malformed(f"expected {len(names)} values ({shape}), got {type(answer).__name__}; "
                        f"write e.g. {example}.")
    if len(answer) != len(names):
        raise Malformed(f"expected {len(names)} values ({shape}), got {len(answer)}; write e.g. "
                        f"{example}.")
    return list(answer)


def close(a: float, b: float, rel: float = 1e-3, abs_: float = 1e-9) -> bool:
    return abs(a - b) <= abs_ + rel * abs(b)


def matches_as_written(answer: Any, value: float, target: float, min_significant: int = 2) -> bool:
    """True when ``value`` (read from ``answer``) is ``target`` rounded to the digits the reader
    wrote: 1.1 matches 1.1094 and 0.83 matches 0.8332, but 1.10 (three significant digits) does not
    match 1.1094, and an answer with fewer than ``min_significant`` significant digits matches only
    an exact target. Fractions and other values with no written digits never match this way."""
    import decimal

    import numpy as np

    if hasattr(answer, "item") and getattr(answer, "shape", None) in ((), (1,)):  # numpy or torch scalar
        kind = str(getattr(answer, "dtype", "")).replace("torch.", "")
        answer = answer.item()
        if kind in ("float32", "float16", "bfloat16") and isinstance(answer, float):
            answer = np.format_float_positional(np.float32(answer))  # the digits as fp32 prints them
    if isinstance(answer, bool) or not isinstance(answer, (int, float, str)):
        return False
    try:
        written = decimal.Decimal(answer.strip() if isinstance(answer, str) else repr(answer))
    except decimal.InvalidOperation:
        return False
    if not written.is_finite():
        return False
    digits = written.as_tuple()
    significant = len(str(int("".join(map(str, digits.digits)) or "0")))
    if significant < min_significant:
        return value == target
    half_unit = 0.5 * 10.0 ** digits.exponent
    return abs(value - target) <= half_unit * (1 + 1e-9)


def as_count(answer: Any, what: str = "a whole number") -> float:
    """A number that may be written with thousands separators: 33562624, "33,562,624",
    "33 562 624", "33_562_624" (commas, spaces, thin or no-break spaces, underscores)."""
    import re

    if isinstance(answer, str):
        text = answer.strip()
        grouped = re.fullmatch(r"\d{1,3}(?:([,\s_\u00a0\u2009\u202f])\d{3})(?:\1\d{3})*", text)
        if grouped:
            answer = re.sub(r"[,\s_\u00a0\u2009\u202f]", "", text)
    return as_number(answer, what)


def as_expression(answer: Any, what: str = "a number") -> float:
    """A number, or arithmetic a reader may type for one: "16/13", "sqrt(16/13)",
    "sqrt(16)/sqrt(13)", "(16/13)**0.5", "(16/13)^0.5", "-2/5". Numbers, + - * / ** ^,
    parentheses and sqrt() only; anything else is Malformed (never evaluated as Python)."""
    import ast
    import operator

    if not isinstance(answer, str) or not any(c in answer for c in "/*^()"):
        return as_number(answer, what)
    ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.Pow: operator.pow}

    def value(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
                and not isinstance(node.value, bool):
            return float(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = value(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp) and type(node.op) in ops:
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > 64:
                raise ValueError("exponent too large")
            return ops[type(node.op)](left, right)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("sqrt", "√") and len(node.args) == 1 and not node.keywords):
            return math.sqrt(value(node.args[0]))
        raise ValueError("not arithmetic")

    if len(answer) > 200:
        raise Malformed(f"expected {what}; the text is {len(answer)} characters long.")
    text = answer.strip().replace("^", "**").replace("√", "sqrt").replace("math.sqrt", "sqrt")
    try:
        result = value(ast.parse(text, mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, TypeError,
            RecursionError, MemoryError):
        raise Malformed(f"could not read {answer[:40]!r} as {what}; write a number such as 1.25, "
                        f"or arithmetic such as '5/4' or 'sqrt(16/13)'.") from None
    return as_number(result, what)


BYTE_UNITS = {"b": 1, "byte": 1, "bytes": 1, "kb": 1e3, "kib": 2 ** 10, "mb": 1e6,
              "mib": 2 ** 20}


def in_other_unit(values, expected) -> str | None:
    """The unit (kB, KiB, MB, MiB) in which ``values`` are the ``expected`` bytes, or None: an
    answer with the right amount in the wrong unit is a unit slip, not a wrong count."""
    for unit, scale in (("kB", 1e3), ("KiB", 2 ** 10), ("MB", 1e6), ("MiB", 2 ** 20)):
        if all(abs(v * scale - e) <= 0.005 * scale for v, e in zip(values, expected)):
            return unit
    return None


def as_quantity(answer: Any, units: Mapping[str, float], what: str) -> tuple[float, float]:
    """A number, or text with one of ``units`` after it ("62.9 µs", "33.56 MB", "532,480 B"),
    in the base unit (each unit's factor converts to it); and half a unit of its last written
    digit when a scaled unit rounds it ("33.56 MB": 5,000 bytes), else 0. The number may have
    thousands separators (:func:`as_count`); units match in any case."""
    import decimal
    import re

    if isinstance(answer, str):
        text = answer.strip()
        for unit in sorted(units, key=len, reverse=True):
            number = text[:-len(unit)].strip()
            if text.lower().endswith(unit.lower()) and number:
                scale = units[unit]
                value = as_count(number, what) * scale
                if scale == 1:
                    return value, 0.0
                try:
                    exponent = decimal.Decimal(re.sub(r"[,\s_]", "", number)).as_tuple().exponent
                except decimal.InvalidOperation:
                    exponent = 0
                exponent = exponent if isinstance(exponent, int) else 0  # NaN, Infinity
                return value, 0.5 * 10.0 ** min(exponent, 0) * scale
        answer = text
    return as_count(answer, what), 0.0


def as_bytes(answer) -> float:
    """A number of bytes: a number, or text such as ``532,480``, ``532480 B`` or ``520 KiB``."""
    return as_quantity(answer, BYTE_UNITS, "a number of bytes")[0]


# ---- a reader's Triton kernel, copied from its source for another process ----
#
# The interpreter mode is fixed when @triton.jit decorates (fusedrms.env), so the grader's child
# processes re-create the reader's kernel from its source (:func:`kernel_source`,
# :func:`rebuild_kernel`; :mod:`.reader_code` copies functions too).


class NotAudited(RuntimeError):
    """The reader's kernel could not be copied for another process; the message says why."""


class RaisedElsewhere(Exception):
    """An exception from a child process that could not travel whole: its type's name and its
    message."""

    def __init__(self, type_name: str, text: str):
        super().__init__(text)
        self.type_name = type_name

    def __reduce__(self):
        return RaisedElsewhere, (self.type_name, str(self))


def portable_error(err: BaseException) -> BaseException:
    """``err`` if it survives pickling (a class of the reader's travels as its recipe:
    :func:`.reader_code.dumps`), else a :class:`RaisedElsewhere` that reads the same."""
    from . import reader_code

    try:
        reader_code.loads(reader_code.dumps(err))
        return err
    except Exception:  # noqa: BLE001 - any exception class may refuse
        return RaisedElsewhere(type(err).__name__, str(err))


def changed_output(rows: int, cols: int, shape) -> BaseException | None:
    """Where the grader's child sent back an output of ``shape`` for a ``rows x cols`` case: None,
    or what to report if it is not that shape (the reader's kernel, Python under the interpreter,
    can rebind the child's own sizes)."""
    if tuple(shape) == (rows, cols):
        return None
    return RuntimeError(f"the checker's {rows}x{cols} output came back as {tuple(shape)}: "
                        f"something changed the checker's own values while your kernel ran")


def fields(value, n: int) -> tuple | None:
    """``value``'s ``n`` fields (a tuple, list or array of length ``n``), or None. The length is
    asked first: unpacking a long tensor or an endless generator would run into the time limit."""
    try:
        return tuple(value) if len(value) == n else None
    except Exception:  # noqa: BLE001 - no length, or one that raises: not n fields
        return None


def brief(value, limit: int = 80) -> str:
    """``value`` as its type and a short repr (bounded even for a long list or tensor)."""
    short = reprlib.Repr()
    short.maxstring = short.maxother = limit
    try:
        text = " ".join(short.repr(value).split())
    except Exception:  # noqa: BLE001 - a repr that raises
        text = "(no readable value)"
    return f"{type(value).__name__} {text[:limit]}"


def one_line(err: BaseException, limit: int = 300) -> str:
    """An exception as one readable line: its type's name and its message, shortened."""
    text = " ".join(str(err).split())
    name = getattr(err, "type_name", None) or type(err).__name__
    return f"{name}: {text[:limit]}{'...' if len(text) > limit else ''}"


def kernel_function(kernel):
    """The Python function under a @triton.jit / autotune / heuristics wrapper (or None)."""
    import triton

    seen = 0
    while not callable(kernel) or isinstance(kernel, triton.runtime.jit.KernelInterface):
        kernel = getattr(kernel, "fn", None)
        seen += 1
        if kernel is None or seen > 8:
            return None
    return kernel


def _global_names(code) -> list[str]:
    """Names ``code`` (and the functions nested in it) reads as globals. Not its closure: the
    interpreter does not see closures either, and the copy must fail where it fails."""
    import dis
    import types

    names = [i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += _global_names(const)
    return list(dict.fromkeys(names))


def _jit_source(fn) -> str:
    import inspect
    import re
    import textwrap

    try:
        text = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        raise NotAudited(f"the source of {fn.__name__} cannot be read") from None
    found = re.search(r"^def\s+\w+\s*\(", text, re.MULTILINE)
    if not found:
        raise NotAudited(f"the source of {fn.__name__} is not a plain def")
    return "@_fusedrms_triton.jit\n" + text[found.start():]


def kernel_source(kernel) -> dict:
    """A copy of ``kernel`` that another process can rebuild: the source of a module that defines
    it and the @triton.jit helpers it calls (``source``), the modules and objects it names
    (``imports``: name -> (module, attribute or None)), other values it reads (``values``:
    name -> picklable value), helpers it knows under another name (``aliases``) and the kernel's
    name in the module (``name``). :class:`NotAudited` when a part cannot be copied."""
    import inspect
    import pickle

    import triton

    top = kernel_function(kernel)
    if top is None:
        raise NotAudited("it is not a @triton.jit function")
    parts, defined = [], {}  # defined: function -> its def name in the copy
    bound: dict[str, Any] = {}  # every module-level name of the copy -> the object it stands for
    imports, values, aliases = {}, {}, {}

    def bind(name, value):
        if name in bound and bound[name] is not value:
            raise NotAudited(f"two functions it calls read different values named {name}")
        bound[name] = value

    def place(name, value):
        if inspect.ismodule(value):
            bind(name, value)
            imports[name] = (value.__name__, None)
        elif isinstance(value, triton.runtime.jit.KernelInterface):
            fn = kernel_function(value)
            if fn is None:
                raise NotAudited(f"{name} is a Triton object the checker cannot copy")
            inline(fn)
            if defined[fn] != name:
                bind(name, value)
                aliases[name] = defined[fn]
        else:
            try:
                pickle.dumps(value)
            except Exception:  # noqa: BLE001
                raise NotAudited(f"it reads {name}, a {type(value).__name__}, which the checker "
                                 f"cannot copy") from None
            bind(name, value)
            values[name] = value

    def inline(fn):
        if fn in defined:
            return
        bind(fn.__name__, fn)
        defined[fn] = fn.__name__
        source = _jit_source(fn)
        for name in _global_names(fn.__code__):
            if name in fn.__globals__:  # else a builtin, or undefined: the copy fails the same way
                place(name, fn.__globals__[name])
        parts.append(source)

    inline(top)
    # annotations stay text (tl.constexpr as "tl.constexpr", which Triton reads), so a name that
    # only an annotation uses need not exist in the copy
    header = "from __future__ import annotations\n\nimport triton as _fusedrms_triton\n\n\n"
    return {"source": header + "\n\n".join(parts),
            "imports": imports, "values": values, "aliases": aliases, "name": top.__name__}


def module_from_copy(path, module_name: str, copy: dict):
    """``(spec, module)`` for ``copy["source"]`` written to ``path``, its names bound (each import
    resolved, each value set) but not yet executed: the caller may bind more, then execute it."""
    import importlib
    import importlib.util

    path.write_text(copy["source"])
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    for name, (imported, attribute) in copy["imports"].items():
        value = importlib.import_module(imported)
        for part in (attribute.split(".") if attribute else ()):
            value = getattr(value, part)
        setattr(module, name, value)
    for name, value in copy["values"].items():
        setattr(module, name, value)
    return spec, module


def rebuild_kernel(copy: dict, folder):
    """The kernel :func:`kernel_source` copied, defined again from a module file in ``folder``
    (Triton reads a kernel's source from its file)."""
    from pathlib import Path

    spec, module = module_from_copy(Path(folder, "reader_kernel.py"), "fusedrms_reader_kernel",
                                    copy)
    spec.loader.exec_module(module)
    for name, target in copy["aliases"].items():
        setattr(module, name, getattr(module, target))
    return getattr(module, copy["name"])
