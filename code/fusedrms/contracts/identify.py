"""Which contract does a kernel implement? Run it on :mod:`.inputs` and compare bit for bit.

:func:`identify` takes a function with a registry op's signature, a registered kernel's name or an
:class:`~fusedrms.registry.Impl`, and returns an :class:`Identification`: for every contract of
its op and every dtype, either a match (every output bit equal) or the first input where it
differs (row family, row, column, both values) and by how many units in the last place.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable

import torch

from .. import checks, dtypes as dtype_names, env, registry, validation
from . import catalog, inputs

InputError = validation.InputError
DTYPES = (torch.bfloat16, torch.float16)
OUTPUTS = {"rmsnorm": ("y",), "add_rmsnorm": ("y",), "add_rmsnorm_residual": ("y", "s"),
           "rmsnorm_fp8": ("codes", "scales")}


class KernelRaised(InputError):
    """The function under test raised on one of identify's inputs; the message says which."""


@dataclass(frozen=True)
class Difference:
    """Where a kernel's output first differs from a contract's, on one dtype."""

    dtype: str  # "bf16"
    output: str  # "y", "s", "codes", "scales"
    family: str = ""  # the row family (inputs.Cases.families)
    row: int = 0  # the row within it
    col: int = 0  # the column (the block, for scales)
    got: float = float("nan")
    expected: float = float("nan")
    ulps: int | None = None  # None: NaN or Inf involved, or the formats differ
    count: int = 0  # elements of this output that differ
    total: int = 0
    max_ulps: int | None = None
    note: str = ""  # set instead of a place when the output has another form

    def place(self) -> str:
        """Where, in words: "random row 3, col 17" (its output named unless it is y)."""
        if self.note:
            return self.note
        what = "" if self.output == "y" else f"{self.output}, "
        unit = "block" if self.output == "scales" else "col"
        return f"{what}{self.family} row {self.row}, {unit} {self.col}"

    def brief(self) -> str:
        """"1 ulp, random row 3, col 17", or the two values when the ulps say little."""
        if self.note:
            return self.note
        if self.ulps is not None and self.ulps <= 1000:
            return f"{self.ulps} ulp, {self.place()}"
        return f"{self.got:.4g} for {self.expected:.4g}, {self.place()}"

    def __str__(self) -> str:
        if self.note:
            return f"{self.dtype}: {self.note}"
        by = f"{self.ulps} ulp" if self.ulps is not None else "a NaN, Inf or format"
        return (f"{self.dtype}: {by} at {self.place()} (got {self.got:.6g}, expected "
                f"{self.expected:.6g}); {self.count} of {self.total} differ"
                + (f", at most {self.max_ulps} ulp" if self.max_ulps is not None else ""))


@dataclass
class Identification:
    """What :func:`identify` found. ``results[contract][dtype]`` is None where every bit matched,
    else the first :class:`Difference`."""

    name: str
    op: str
    device: str
    dtypes: tuple  # short names, in the order run
    results: dict = field(default_factory=dict)

    @property
    def matches(self) -> list[str]:
        """The contracts matched bit for bit in every dtype run."""
        return [c for c, by_dtype in self.results.items()
                if all(d is None for d in by_dtype.values())]

    def matches_in(self, dtype) -> list[str]:
        key = dtype_names.short(dtype)
        return [c for c, by_dtype in self.results.items() if by_dtype.get(key, 0) is None]

    def difference(self, contract: str, dtype=None) -> Difference | None:
        """The first difference from ``contract`` (in ``dtype``, or in the first dtype that has
        one); None when it matched."""
        by_dtype = self.results[catalog.get(contract).name]
        if dtype is not None:
            return by_dtype[dtype_names.short(dtype)]
        return next((d for d in by_dtype.values() if d is not None), None)

    def verdict(self) -> str:
        """One sentence: which contract it implements, or that it implements none."""
        if self.matches:
            return f"{self.name} matches {', '.join(self.matches)} bit for bit"
        partial = {d: self.matches_in(d) for d in self.dtypes}
        if any(partial.values()):
            parts = [f"{', '.join(m)} in {d}" for d, m in partial.items() if m]
            return f"{self.name} matches {'; '.join(parts)} only"
        return f"{self.name} matches no contract bit for bit"

    def rows(self) -> list[dict]:
        """One row per contract: its name and, per dtype, "match" or where it first differs
        (by how many ulps, or both values where that count says little)."""
        out = []
        for contract, by_dtype in self.results.items():
            row = {"contract": contract}
            for d, diff in by_dtype.items():
                row[d] = "match" if diff is None else diff.brief()
            out.append(row)
        return out

    def __str__(self) -> str:
        lines = [f"{self.verdict()} ({self.op}, {self.device}, {' and '.join(self.dtypes)})"]
        for contract, by_dtype in self.results.items():
            if all(d is None for d in by_dtype.values()):
                lines.append(f"  {contract}: match")
            for d in by_dtype.values():
                if d is not None:
                    lines.append(f"  {contract}, {d}")
        return "\n".join(lines)


# ---------------------------------------------------------------- comparing outputs

_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _differs(got: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """Elementwise: the bits differ (two NaNs, or two fp8 NaN codes, count as equal)."""
    view = _INT_VIEW[got.element_size()]
    differ = got.contiguous().view(view) != want.contiguous().view(view)
    if got.dtype in (torch.float8_e4m3fn, torch.float8_e4m3fnuz):
        return differ & ~(got.float().isnan() & want.float().isnan())
    return differ & ~(got.isnan() & want.isnan())


def _ulps(got: torch.Tensor, want: torch.Tensor) -> torch.Tensor | None:
    """Units in the last place where both are finite; None for formats without an order."""
    try:
        return checks.ulp_distance(got, want)
    except KeyError:
        return None


def compare(got, want: torch.Tensor, output: str, cases: inputs.Cases) -> Difference | None:
    """The first element where ``got`` differs from ``want``, or None."""
    dtype = dtype_names.short(cases.dtype)
    if not isinstance(got, torch.Tensor):
        return Difference(dtype, output, note=f"{output} is a {type(got).__name__}, not a tensor")
    got = got.detach().cpu()
    if got.dtype != want.dtype or tuple(got.shape) != tuple(want.shape):
        shown = str(got.dtype).replace("torch.", "")
        return Difference(dtype, output, note=f"{output} is {shown} {tuple(got.shape)}, the "
                          f"contract's {str(want.dtype).replace('torch.', '')} "
                          f"{tuple(want.shape)}")
    differ = _differs(got, want)
    if not differ.any():
        return None
    row, col = (int(i) for i in torch.nonzero(differ)[0].tolist())
    family, within = cases.where(row)
    finite = differ & got.float().isfinite() & want.float().isfinite()
    ulps = _ulps(got, want)
    one = int(ulps[row, col]) if ulps is not None and bool(finite[row, col]) else None
    worst = int(ulps[finite].max()) if ulps is not None and finite.any() else None
    return Difference(dtype, output, family, within, col, float(got[row, col].float()),
                      float(want[row, col].float()), one, int(differ.sum()), differ.numel(),
                      worst)


# ---------------------------------------------------------------- running a kernel

def _resolve(fn, op: str | None):
    """(name, op, callable, Impl or None) for a function, a registry name or an Impl."""
    impl = None
    if isinstance(fn, str):
        try:
            impl = registry.get(fn)
        except KeyError as err:
            raise InputError(str(err.args[0])) from None
    elif isinstance(fn, registry.Impl):
        impl = fn
    if impl is not None:
        if op is not None and op != impl.op:
            raise InputError(f"{impl.name} is a {impl.op} kernel, not {op}; leave op out")
        return impl.name, impl.op, impl.fn, impl
    if not callable(fn):
        raise InputError(f"fn must be a function, a registered kernel's name or a registry.Impl, "
                         f"got {type(fn).__name__}")
    return getattr(fn, "__name__", "fn"), op or "rmsnorm", fn, None


def _check_op(op: str) -> None:
    if op not in catalog.CONTRACT_OP:
        raise InputError(f"op {op!r} has no contracts; identify compares the forward ops "
                         f"{', '.join(catalog.CONTRACT_OP)}")


def _dtypes(requested, op: str, impl) -> tuple:
    allowed = (torch.bfloat16,) if op == "rmsnorm_fp8" else DTYPES
    if requested is None:
        chosen = [d for d in allowed if impl is None or d in impl.dtypes]
    else:
        requested = (requested,) if isinstance(requested, (str, torch.dtype)) else requested
        chosen = []
        for d in requested:
            try:
                dt = dtype_names.torch_dtype(d)
            except (dtype_names.DtypeError, KeyError, AttributeError):
                raise InputError(f"dtypes: unknown dtype {d!r}; use "
                                 f"{', '.join(dtype_names.short(a) for a in allowed)}") from None
            if dt not in allowed:
                raise InputError(f"dtypes: contracts differ in where they round to bf16 or fp16; "
                                 f"{dtype_names.short(dt)} is not among "
                                 f"{', '.join(dtype_names.short(a) for a in allowed)} for {op}")
            chosen.append(dt)
        if impl is not None and not set(chosen) <= set(impl.dtypes):
            raise InputError(f"{impl.name} does not take "
                             f"{', '.join(dtype_names.short(d) for d in chosen)}")
    if not chosen:
        raise InputError(f"{impl.name} takes none of the dtypes identify uses "
                         f"({', '.join(dtype_names.short(a) for a in allowed)})")
    return tuple(dict.fromkeys(chosen))


def _device(device, impl):
    device = torch.device(device if device is not None else env.current().device)
    if impl is not None and device.type not in impl.devices:
        why = impl.gpu_only_reason or f"it runs on {', '.join(impl.devices)} only"
        raise InputError(f"{impl.name} cannot run on {device.type}: {why}")
    return device


@functools.lru_cache(maxsize=16)
def _cases(op: str, dtype: torch.dtype, eps: float) -> tuple:
    return tuple(inputs.cases(op, dtype, eps))


@functools.lru_cache(maxsize=64)
def _expected(contract: str, op: str, dtype: torch.dtype, eps: float, index: int) -> tuple:
    case = _cases(op, dtype, eps)[index]
    out = catalog.CONTRACTS[contract].fn(*case.args("cpu"))
    return out if isinstance(out, tuple) else (out,)


def _outputs(out, op: str, name: str) -> tuple:
    """The kernel's result as the tuple of outputs the op compares."""
    want = OUTPUTS[op]
    if len(want) == 1:
        return (out,)
    if not isinstance(out, (tuple, list)) or len(out) < len(want):
        raise KernelRaised(f"{name} must return ({', '.join(want)}) for {op}, got "
                           f"{type(out).__name__}")
    return tuple(out[:len(want)])


def _call(fn: Callable, case: inputs.Cases, device, name: str):
    try:
        return fn(*case.args(device))
    except Exception as err:  # noqa: BLE001 - the kernel under test: anything can happen
        text = " ".join(str(err).split())[:300]
        raise KernelRaised(f"{name} raised {type(err).__name__} on identify's "
                           f"{dtype_names.short(case.dtype)} {case.x.shape[0]}x{case.x.shape[1]} "
                           f"inputs: {text}") from None


def identify(fn, op: str | None = None, dtypes=None, eps: float = 1e-6, device=None,
             contracts=None) -> Identification:
    """Which contracts ``fn`` matches bit for bit, and where it first differs from the others.

    ``fn``: a function with the signature of ``op`` (:mod:`fusedrms.registry`; default
    ``rmsnorm``), a registered kernel's name (``"triton.row"``) or an ``Impl``. ``dtypes``: bf16
    and fp16 by default (those a registered kernel takes); ``rmsnorm_fp8`` is bf16 only. ``eps`` is
    passed to every call (the fp8 ``crafted`` rows pass 0). ``device``: where ``fn`` runs (default:
    the GPU when there is one); the contracts run on the CPU. ``contracts``: names to compare with
    (default: every contract of the op). A function that raises, or returns the wrong form, gets
    :class:`KernelRaised` or a :class:`Difference` with a note.
    """
    name, op, call, impl = _resolve(fn, op)
    _check_op(op)
    eps = validation.check_eps(eps)
    chosen = _dtypes(dtypes, op, impl)
    device = _device(device, impl)
    wanted = catalog.names(op) if contracts is None else [
        catalog.get(c).name for c in ([contracts] if isinstance(contracts, str) else contracts)]
    for c in wanted:
        if c not in catalog.CONTRACTS:
            raise InputError(f"contracts: {c} is not one of the named contracts "
                             f"({', '.join(catalog.CONTRACTS)})")
        if catalog.CONTRACTS[c].op != catalog.CONTRACT_OP[op]:
            raise InputError(f"contract {c} is for {catalog.CONTRACTS[c].op}, not {op}")
    result = Identification(name, op, device.type, tuple(dtype_names.short(d) for d in chosen),
                            {c: {} for c in wanted})
    outputs = OUTPUTS[op]
    for dtype in chosen:
        first = {c: None for c in wanted}
        for index, case in enumerate(_cases(op, dtype, eps)):
            got = _outputs(_call(call, case, device, name), op, name)
            for c in wanted:
                if first[c] is not None:
                    continue
                expected = _expected(c, op, dtype, eps, index)
                for i, label in enumerate(outputs):
                    first[c] = compare(got[i], expected[i], label, case)
                    if first[c] is not None:
                        break
        for c in wanted:
            result.results[c][dtype_names.short(dtype)] = first[c]
    return result
