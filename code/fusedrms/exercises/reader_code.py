"""A reader's code, copied so that another process can run it: HIP text, a @triton.jit kernel, or
a Python function with the kernels, functions and values it reads.

The grader runs every code answer in a child process (:mod:`fusedrms.exercises.grader`). A child
that runs Triton's interpreter, or that compiles for a GPU, must define the reader's kernels
itself (the interpreter mode is fixed when @triton.jit decorates), so an answer travels as a
recipe made from its source: :func:`copy_answer` here, :func:`rebuild` there. Library objects
(the fusedrms package, installed packages, the standard library) travel by name; the reader's
own functions, lambdas and closures by source; other values by pickling, in which a class of
the reader's that another process cannot import (one defined in a notebook, in module __main__, or
inside a function) travels as a recipe that :func:`rebuild_class` turns back into a class: its name,
its bases and the plain values of its body (``class BadSamples(ValueError): pass``). Values that
come back (an exception of such a class, raised in the child) are read with :func:`loads`, which
gives the reader's own class again.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import pickle
import sys
import sysconfig
import textwrap
import weakref
from pathlib import Path
from typing import Any

from .core import (NotAudited, _global_names, kernel_function, kernel_source, module_from_copy,
                   one_line, rebuild_kernel)

MAX_DEPTH = 8  # functions that call functions that call ...: far more than an answer needs
LAMBDA_NAME = "_fusedrms_lambda"


class NotCopied(NotAudited):
    """The answer could not be copied for another process; the message says which part."""


def copy_answer(answer: Any) -> dict:
    """A recipe :func:`rebuild` turns back into ``answer`` in another process."""
    if isinstance(answer, str):
        return {"kind": "text", "text": answer}
    return _recipe(answer, "the answer", 0)


def _recipe(value, name: str, depth: int) -> dict:
    import triton

    if depth > MAX_DEPTH:
        raise NotCopied(f"it calls functions more than {MAX_DEPTH} levels deep ({name})")
    reference = _library_name(value)
    if reference is not None:
        return {"kind": "reference", "module": reference[0], "name": reference[1]}
    if isinstance(value, triton.runtime.jit.KernelInterface):
        try:
            return {"kind": "kernel", "copy": kernel_source(value)}
        except NotAudited as err:
            raise NotCopied(str(err)) from None
        except Exception as err:  # noqa: BLE001 - a kernel shape the copy did not foresee
            raise NotCopied(f"the source of {name} could not be copied ({one_line(err)})") from None
    if inspect.isfunction(value):
        return _function_recipe(_unwrapped(value), depth)
    raise NotCopied(f"{name} is a {type(value).__name__}, not a function the checker can copy "
                    f"(define it with def)")


def _library_name(value) -> tuple[str, str] | None:
    """(module, qualified name) when ``value`` is a library object another process can import
    by name, else None. The reader's code (a notebook's __main__, a file of their own, a test
    module) is never imported: it travels by source, as a reader's answer does."""
    target = kernel_function(value) if _is_kernel(value) else value
    module, qualname = getattr(target, "__module__", None), getattr(target, "__qualname__", None)
    if not module or not qualname or "<" in qualname or not _is_library(module):
        return None
    found = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return (module, qualname) if found is value else None


def _is_kernel(value) -> bool:
    import triton

    return isinstance(value, triton.runtime.jit.KernelInterface)


def _is_library(module: str) -> bool:
    if module == "__main__":  # the notebook (or a script): never the child's __main__
        return False
    if module == "fusedrms" or module.startswith("fusedrms."):
        return True
    file = getattr(sys.modules.get(module), "__file__", None)
    if module in sys.builtin_module_names or module in getattr(sys, "stdlib_module_names", ()):
        return True
    if not file:
        return False
    paths = sysconfig.get_paths()
    roots = [Path(paths[k]).resolve() for k in ("purelib", "platlib", "stdlib", "platstdlib")]
    where = Path(file).resolve()
    return any(root in where.parents for root in roots)


def _unwrapped(fn):
    """The function a decorator built with functools.wraps (@torch.no_grad(), a reader's own
    wrapper) wraps: its source is the one inspect gives for ``fn``, and the copy, which drops
    decorators, must read that function's globals and closure, not the wrapper's."""
    try:
        inner = inspect.unwrap(fn)
    except ValueError:  # a cycle of __wrapped__
        return fn
    return inner if inspect.isfunction(inner) else fn


def _function_recipe(fn, depth: int) -> dict:
    source, name = _function_source(fn)
    recipe = {"kind": "function", "source": source, "name": name, "imports": {}, "values": {},
              "objects": {}}
    names = _global_names(fn.__code__) + _default_names(source)
    for global_name in dict.fromkeys(names):
        if fn.__globals__.get(global_name) is fn:  # a recursive function: the def defines it
            continue
        if global_name.startswith("__") and global_name.endswith("__"):
            # a module's own attributes (a class body in the function reads __name__ for its
            # __module__): the copy's module has its own, and the notebook's would break it
            continue
        if global_name in fn.__globals__:  # else a builtin, or undefined: the copy fails alike
            _place(recipe, global_name, fn.__globals__[global_name], depth)
    for free, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            contents = cell.cell_contents
        except ValueError:
            raise NotCopied(f"{fn.__name__} reads {free} before it is assigned") from None
        _place(recipe, free, contents, depth)  # a closure's variable becomes a module global
    return recipe


def _place(recipe: dict, name: str, value, depth: int) -> None:
    if inspect.ismodule(value):
        recipe["imports"][name] = (value.__name__, None)
        return
    reference = _library_name(value)
    if reference is not None:
        recipe["imports"][name] = reference
    elif _is_kernel(value) or inspect.isfunction(value):
        recipe["objects"][name] = _recipe(value, name, depth + 1)
    else:
        try:
            loads(dumps(value))
        except NotCopied as err:  # a class of the reader's that cannot be rebuilt: it says why
            raise NotCopied(f"it reads {name}: {err}") from None
        except Exception:  # noqa: BLE001 - any object may refuse
            raise NotCopied(f"it reads {name}, a {type(value).__name__}, which the checker "
                            f"cannot copy") from None
        recipe["values"][name] = value


def _function_source(fn) -> tuple[str, str]:
    """The function's source as a module defines it (decorators dropped), and its name there."""
    import re

    try:
        text = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        raise NotCopied(f"the source of {fn.__name__} cannot be read (define it in a cell or a "
                        f"file, with def)") from None
    if fn.__name__ == "<lambda>":
        return f"{LAMBDA_NAME} = {_lambda_text(fn, text)}\n", LAMBDA_NAME
    found = re.search(r"^(?:async\s+)?def\s+(\w+)\s*\(", text, re.MULTILINE)
    if not found:
        raise NotCopied(f"the source of {fn.__name__} is not a plain def")
    return "from __future__ import annotations\n\n" + text[found.start():], found.group(1)


def _lambda_text(fn, text: str) -> str:
    """The one lambda in ``text`` (the lines inspect gives) that has ``fn``'s parameters."""
    import ast

    code = fn.__code__
    wanted = list(code.co_varnames[:code.co_argcount + code.co_kwonlyargcount])
    for wrapped in (text, f"(\n{text}\n)", f"{{\n{text}\n}}", f"[\n{text}\n]", f"f(\n{text}\n)"):
        try:
            tree = ast.parse(wrapped)
        except SyntaxError:
            continue
        found = [ast.get_source_segment(wrapped, node) for node in ast.walk(tree)
                 if isinstance(node, ast.Lambda)
                 and [a.arg for a in node.args.args + node.args.kwonlyargs] == wanted]
        if len(found) == 1:
            return found[0]
    raise NotCopied("the source of a lambda cannot be told apart from the code around it; "
                    "define the function with def")


def _default_names(source: str) -> list[str]:
    """Names the def line reads when it runs (default values), which the function's code does
    not: they must exist in the copy too."""
    import ast

    try:
        node = ast.parse(source).body[-1]
    except (SyntaxError, IndexError):
        return []
    args = getattr(node, "args", None) or getattr(getattr(node, "value", None), "args", None)
    if args is None:
        return []
    defaults = list(args.defaults) + [d for d in args.kw_defaults if d is not None]
    return [n.id for d in defaults for n in ast.walk(d) if isinstance(n, ast.Name)]


# ---- the reader's classes: rebuilt from their name, bases and body, never imported ----

# the class a token stands for: in the notebook's process the reader's own, in the child its copy
_CLASSES: "weakref.WeakValueDictionary[str, type]" = weakref.WeakValueDictionary()
# a class rebuilt here -> the recipe it came from (sent back as that recipe, so that the process
# which copied it reads the original class)
_REBUILT: "weakref.WeakKeyDictionary[type, dict]" = weakref.WeakKeyDictionary()
# what a class body holds besides its values; none of it is copied (type() makes its own)
_CLASS_MACHINERY = {"__module__", "__qualname__", "__dict__", "__weakref__", "__firstlineno__",
                    "__static_attributes__", "__annotations__", "__annotate__",
                    "__annotate_func__", "__annotations_cache__"}


def _needs_recipe(value) -> bool:
    """A class another process cannot import by name: the reader's, defined in a notebook (module
    __main__, whose namesake in another process is not the notebook) or inside a function."""
    if not isinstance(value, type):
        return False
    module, qualname = getattr(value, "__module__", ""), getattr(value, "__qualname__", "")
    return module == "__main__" or "<" in qualname


def _class_recipe(cls: type) -> dict:
    """The recipe :func:`rebuild_class` makes ``cls`` again from: its name, its bases (importable,
    or recipes themselves) and its body's plain values. :class:`NotCopied` saying what to do when
    ``cls`` is more than that (a method, a property, another metaclass)."""
    known = _REBUILT.get(cls)
    if known is not None:
        return known
    where = "in your notebook" if cls.__module__ == "__main__" else "inside a function"
    what = f"{cls.__qualname__}, a class defined {where},"
    advice = (f"the checker copies a class of yours only when its body holds plain values. Give "
              f"{cls.__name__} such a body (class {cls.__name__}(ValueError): pass, or a "
              f"docstring), or use a built-in class such as ValueError")
    if type(cls) is not type:
        raise NotCopied(f"{what} has the metaclass {type(cls).__name__}: {advice}")
    namespace = {}
    for key, value in vars(cls).items():
        if key in _CLASS_MACHINERY:
            continue
        if key != "__doc__" and not isinstance(value, type) and (
                inspect.isroutine(value) or hasattr(type(value), "__get__")):  # code, not values
            kind = "method" if inspect.isroutine(value) or isinstance(
                value, (staticmethod, classmethod)) else type(value).__name__
            raise NotCopied(f"{what} has a {kind} ({key}): {advice}")
        try:
            dumps(value)
        except NotCopied:
            raise
        except Exception:  # noqa: BLE001 - any object may refuse
            raise NotCopied(f"{what} holds {key}, a {type(value).__name__}, which cannot be "
                            f"copied: {advice}") from None
        namespace[key] = value
    bases = []
    for base in cls.__bases__:
        reference = _library_name(base)
        if reference is not None:
            bases.append(("reference",) + reference)
        elif _needs_recipe(base):
            bases.append(("recipe", _class_recipe(base)))
        else:  # a class of a file of the reader's: imported by name, as pickle would
            bases.append(("value", base))
    recipe = {"token": f"{cls.__module__}:{cls.__qualname__}:{id(cls):x}", "name": cls.__name__,
              "qualname": cls.__qualname__, "module": cls.__module__, "bases": bases,
              "namespace": namespace}
    _CLASSES[recipe["token"]] = cls
    return recipe


def rebuild_class(recipe: dict) -> type:
    """The class :func:`_class_recipe` describes: the same object for the same recipe, and in the
    process that copied it, the reader's own class."""
    found = _CLASSES.get(recipe["token"])
    if found is not None:
        return found
    bases = []
    for kind, *what in recipe["bases"]:
        if kind == "reference":
            value = importlib.import_module(what[0])
            for part in what[1].split("."):
                value = getattr(value, part)
            bases.append(value)
        elif kind == "recipe":
            bases.append(rebuild_class(what[0]))
        else:
            bases.append(what[0])
    namespace = {**recipe["namespace"], "__module__": recipe["module"],
                 "__qualname__": recipe["qualname"]}
    cls = type(recipe["name"], tuple(bases), namespace)
    _REBUILT[cls] = recipe
    _CLASSES[recipe["token"]] = cls
    return cls


class _Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        if _needs_recipe(obj):
            return ("reader class", _class_recipe(obj))
        return None


class _Unpickler(pickle.Unpickler):
    def persistent_load(self, pid):
        kind, recipe = pid
        if kind != "reader class":
            raise pickle.UnpicklingError(f"unknown persistent id {kind!r}")
        return rebuild_class(recipe)


def dumps(value) -> bytes:
    """``pickle.dumps``, with the reader's classes (:func:`_needs_recipe`) as recipes."""
    import io

    buffer = io.BytesIO()
    _Pickler(buffer, pickle.HIGHEST_PROTOCOL).dump(value)
    return buffer.getvalue()


def loads(data: bytes):
    """``pickle.loads`` of what :func:`dumps` wrote: each class recipe the class it names."""
    import io

    return _Unpickler(io.BytesIO(data)).load()


def rebuild(recipe: dict, folder) -> Any:
    """The object :func:`copy_answer` copied, defined again in this process (each copied function
    and kernel in a module file of its own under ``folder``: Triton reads a kernel's source from
    its file)."""
    counter = [0]

    def build(part: dict):
        kind = part["kind"]
        if kind == "text":
            return part["text"]
        if kind == "reference":
            value = importlib.import_module(part["module"])
            for name in part["name"].split("."):
                value = getattr(value, name)
            return value
        counter[0] += 1
        where = Path(folder, f"part{counter[0]}")
        where.mkdir(parents=True, exist_ok=True)
        if kind == "kernel":
            return rebuild_kernel(part["copy"], where)
        spec, module = module_from_copy(where / "reader_function.py",
                                        f"fusedrms_reader_{counter[0]}", part)
        for name, inner in part["objects"].items():
            setattr(module, name, build(inner))
        spec.loader.exec_module(module)
        return getattr(module, part["name"])

    return build(recipe)

