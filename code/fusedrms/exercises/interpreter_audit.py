"""What a Triton kernel does to memory, program by program, as Triton's interpreter runs it.

Inside :func:`audited` every kernel launch is logged as a :class:`Launch`: each load and store
with the program that made it and the addresses its taken lanes touched. Lanes outside every
tensor the launch was given are skipped, not performed (an unmasked store past a tensor's end
would corrupt the heap of the process and abort it), and counted. Lanes that a masked load skips
without ``other=`` read NaN, as undefined values would.

The interpreter runs programs one after another, in order, so a kernel whose program i writes
row i+1 gives the right output there and a race on a GPU, where programs run at the same time in
any order. :meth:`Launch.races` finds them from the log: two programs storing to one element, or
one program loading an element that another stores.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass
class Access:
    """One load or store: the addresses of the lanes it took (masked-off lanes left out)."""
    kind: str  # "load" or "store"
    program: int
    addresses: np.ndarray
    itemsize: int
    undefined_lanes: bool = False  # a masked load without other= that skipped lanes


@dataclass
class Tensor:
    """A tensor argument of a launch: its storage's bytes and its view, to name an address."""
    name: str
    start: int
    end: int
    data_ptr: int
    itemsize: int
    shape: tuple
    strides: tuple
    value: object = field(default=None, repr=False, compare=False)  # the tensor, in the child

    def __getstate__(self):
        # what the parent is sent: addresses and layout, not the tensor (it stays in the child)
        return {**self.__dict__, "value": None}


@dataclass
class Launch:
    kernel: str
    grid: tuple
    tensors: list = field(default_factory=list)  # [Tensor]
    accesses: list = field(default_factory=list)  # [Access]
    outside_loads: int = 0  # lanes outside every tensor argument, skipped
    outside_stores: int = 0
    first_outside: str = ""  # where the first of them pointed, in words

    def loads(self) -> list:
        return [a for a in self.accesses if a.kind == "load"]

    def name(self, address: int) -> str:
        """``address`` in words: ``y_ptr[1, 0]``, ``element 13 of y_ptr`` or how far past a
        tensor's end it lies."""
        for t in self.tensors:
            if t.start <= address < t.end:
                offset = (address - t.data_ptr) // t.itemsize
                if len(t.shape) == 2 and t.strides[1] == 1 and t.strides[0] > 0 and offset >= 0:
                    row, col = divmod(offset, t.strides[0])
                    if row < t.shape[0] and col < t.shape[1]:
                        return f"{t.name}[{row}, {col}]"
                return f"element {offset} of {t.name}"
        past = [t for t in self.tensors if address >= t.end]
        if past:
            t = max(past, key=lambda t: t.end)
            count = (address - t.end) // t.itemsize + 1
            return f"{count} element{'s' if count > 1 else ''} past the end of {t.name}"
        return "in memory no argument owns"

    def races(self) -> list[str]:
        """Each kind of cross-program conflict found, in words (empty when the programs keep to
        their own elements)."""
        stores = [a for a in self.accesses if a.kind == "store" and a.addresses.size]
        if not stores:
            return []
        address = np.concatenate([a.addresses for a in stores])
        program = np.concatenate([np.full(a.addresses.size, a.program, np.uint64) for a in stores])
        pairs = np.unique(np.stack([address, program]), axis=1)  # sorted by address, then program
        stored, owner = pairs[0], pairs[1]
        found = []
        shared = np.flatnonzero(stored[1:] == stored[:-1])
        if shared.size:
            i = int(shared[0])
            count = np.unique(stored[shared]).size
            found.append(f"programs {int(owner[i])} and {int(owner[i + 1])} of {self.kernel} both "
                         f"store {self.name(int(stored[i]))} ({count} element"
                         f"{'s' if count > 1 else ''} stored by more than one program)")
        loads = [a for a in self.accesses if a.kind == "load" and a.addresses.size]
        if loads:
            read = np.concatenate([a.addresses for a in loads])
            reader = np.concatenate([np.full(a.addresses.size, a.program, np.uint64)
                                     for a in loads])
            at = np.clip(np.searchsorted(stored, read), 0, stored.size - 1)
            crossing = np.flatnonzero((stored[at] == read) & (owner[at] != reader))
            if crossing.size:
                j = int(crossing[0])
                found.append(f"program {int(reader[j])} of {self.kernel} loads "
                             f"{self.name(int(read[j]))}, which program {int(owner[at[j]])} "
                             f"stores")
        return found


@dataclass
class Audit:
    launches: list = field(default_factory=list)  # [Launch]
    usable: bool = True  # False when this Triton's interpreter does not have the expected shape

    def races(self) -> list[str]:
        return [r for launch in self.launches for r in launch.races()]

    def stored(self) -> int:
        """How many distinct elements the launches stored (into any tensor)."""
        stores = [a.addresses for launch in self.launches for a in launch.accesses
                  if a.kind == "store" and a.addresses.size]
        return int(np.unique(np.concatenate(stores)).size) if stores else 0

    def elements_loaded_from(self, values) -> int:
        """How many elements holding ``values`` the launches loaded: from ``values`` itself (any
        layout) or from a tensor argument's storage that holds the same numbers in row-major
        order in any dtype (``x.contiguous()``, ``x.float()``), whichever they loaded more of.
        Only in the child, where the tensors are."""
        loads = [a.addresses for launch in self.launches for a in launch.accesses
                 if a.kind == "load" and a.addresses.size]
        if not loads:
            return 0
        loaded = np.unique(np.concatenate(loads)).astype(np.int64)
        want = values.detach().reshape(-1).double().cpu()
        holders, seen = [values], set()
        for t in (t for launch in self.launches for t in launch.tensors if t.value is not None):
            if t.start in seen or t.value.device.type != "cpu" or (t.end - t.start) % t.itemsize:
                continue
            seen.add(t.start)
            flat = torch.empty(0, dtype=t.value.dtype).set_(t.value.untyped_storage())
            if flat.numel() == want.numel() and _same(flat.double(), want):
                holders.append(flat)
        return max(int(np.isin(_addresses(h), loaded).sum()) for h in holders)

    def outside(self) -> Launch | None:
        """The first launch that loaded or stored outside its tensors, or None."""
        return next((l for l in self.launches if l.outside_loads or l.outside_stores), None)


def _same(a, b) -> bool:
    """Equal element by element, NaN equal to NaN (poisoned inputs)."""
    return bool(((a == b) | (a.isnan() & b.isnan())).all())


def _addresses(t) -> np.ndarray:
    """The byte address of each element of tensor ``t``, from its strides."""
    offsets = np.zeros((), dtype=np.int64)
    for size, stride in zip(t.shape, t.stride()):
        offsets = offsets[..., None] + np.arange(size, dtype=np.int64) * stride
    return (t.data_ptr() + offsets * t.element_size()).reshape(-1)


def _tensors(executor, args, kwargs) -> list:
    import inspect

    from triton.runtime import interpreter as interp

    try:
        bound = inspect.signature(executor.fn).bind_partial(*args, **kwargs).arguments
    except TypeError:
        bound = dict(zip(executor.arg_names, args))
    out = []
    for name, value in bound.items():
        if not hasattr(value, "data_ptr"):
            continue
        tensor = interp._unwrap_tensor(value) if hasattr(interp, "_unwrap_tensor") else value
        storage = tensor.untyped_storage()
        out.append(Tensor(name, storage.data_ptr(), storage.data_ptr() + storage.nbytes(),
                          tensor.data_ptr(), tensor.element_size(), tuple(tensor.shape),
                          tuple(tensor.stride()), tensor))
    return out


@contextlib.contextmanager
def audited():
    """Log every launch of Triton's interpreter inside the block; yields the :class:`Audit`."""
    audit = Audit()
    try:
        from triton.runtime import interpreter as interp

        builder, executor = interp.InterpreterBuilder, interp.GridExecutor
        originals = (builder.create_masked_load, builder.create_masked_store,
                     builder.set_grid_idx, executor.__call__)
        handle, np_dtype = interp.TensorHandle, interp._get_np_dtype
    except (ImportError, AttributeError):
        audit.usable = False
        yield audit
        return
    load, store, set_grid_idx, call = originals
    state = {"launch": None, "program": 0}

    def launch(self, *args, **kwargs):
        try:
            tensors = _tensors(self, args, kwargs)
        except Exception:  # noqa: BLE001
            tensors, audit.usable = [], False
        grid = tuple(self.grid) if isinstance(self.grid, tuple) else ()
        state["launch"] = Launch(getattr(self.fn, "__name__", "kernel"), grid, tensors)
        audit.launches.append(state["launch"])
        try:
            return call(self, *args, **kwargs)
        finally:
            state["launch"] = None

    def set_program(self, x, y, z):
        set_grid_idx(self, x, y, z)
        nx, ny, _ = self.grid_dim
        state["program"] = x + nx * (y + ny * z)

    def guarded(kind, ptrs, mask):
        """(addresses taken, the mask with lanes outside every tensor removed, or None)."""
        addresses = np.asarray(ptrs.data).astype(np.uint64)
        taken = np.broadcast_to(np.asarray(mask.data, dtype=bool), addresses.shape)
        current = state["launch"]
        if current is None or not current.tensors:
            return addresses, taken, None
        inside = np.zeros(addresses.shape, dtype=bool)
        for t in current.tensors:
            inside |= (addresses >= t.start) & (addresses < t.end)
        stray = taken & ~inside
        if not stray.any():
            return addresses, taken, None
        if not current.first_outside:
            current.first_outside = current.name(int(addresses[stray].flat[0]))
        if kind == "load":
            current.outside_loads += int(stray.sum())
        else:
            current.outside_stores += int(stray.sum())
        return addresses, taken & inside, handle(np.ascontiguousarray(taken & inside), mask.dtype)

    def log(kind, addresses, taken, element, undefined=False):
        current = state["launch"]
        if current is not None:
            current.accesses.append(Access(kind, state["program"], addresses[taken].copy(),
                                           np.dtype(np_dtype(element)).itemsize, undefined))

    def audited_load(self, ptrs, mask, other, *rest):
        try:  # the interpreter's internals differ between Triton versions: never fail the kernel
            element = ptrs.get_element_ty()
            addresses, taken, narrowed = guarded("load", ptrs, mask)
            dtype = np_dtype(element)
            reader_mask = np.broadcast_to(np.asarray(mask.data, dtype=bool), addresses.shape)
            undefined = other is None and not reader_mask.all()
            if (undefined or narrowed is not None) and np.issubdtype(dtype, np.floating):
                fill = np.full(addresses.shape, np.nan, dtype=dtype)
                if other is not None:  # lanes the reader masked keep their other=
                    fill = np.where(reader_mask, fill,
                                    np.broadcast_to(np.asarray(other.data), addresses.shape))
                other = handle(fill.astype(dtype), element)
            log("load", addresses, taken, element, undefined)
            mask = narrowed if narrowed is not None else mask
        except Exception:  # noqa: BLE001
            audit.usable = False
        return load(self, ptrs, mask, other, *rest)

    def audited_store(self, ptrs, value, mask, *rest):
        try:
            addresses, taken, narrowed = guarded("store", ptrs, mask)
            log("store", addresses, taken, ptrs.get_element_ty())
            mask = narrowed if narrowed is not None else mask
        except Exception:  # noqa: BLE001
            audit.usable = False
        return store(self, ptrs, value, mask, *rest)

    builder.create_masked_load, builder.create_masked_store = audited_load, audited_store
    builder.set_grid_idx, executor.__call__ = set_program, launch
    try:
        yield audit
    finally:
        (builder.create_masked_load, builder.create_masked_store,
         builder.set_grid_idx, executor.__call__) = originals
