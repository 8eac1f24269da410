"""Triton 3.6 and older, under NumPy 2.4 and newer: the interpreter's ``range(0, cols, BLOCK)``
fails with ``TypeError: only 0-dimensional arrays can be converted to Python scalars``.

The interpreter holds every scalar argument as a one-element NumPy array and converts it for
``range`` with ``int(array)``, which NumPy 2.4 refuses for arrays of one dimension (Triton fixed it
upstream in triton-lang/triton#9172 by squeezing the array first). Every looped kernel of the book,
and every looped kernel a reader writes, loops to a runtime ``cols``, so without this repair a
machine with those versions rejects correct kernels on the CPU path.
"""
from __future__ import annotations

import inspect

from .. import env

_BROKEN = "int(self.handle.data))"


def scalar_index_in_interpreter() -> bool:
    """Under the interpreter, let a scalar argument index (``range``, slices) on any NumPy;
    returns whether the repair is installed. No-op on a GPU, on a Triton that needs none, and
    idempotent."""
    if env.HAS_GPU:
        return False
    from triton.runtime import interpreter

    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None:
        return False
    if getattr(original, "scalar_index", False):
        return True
    try:
        broken = _BROKEN in inspect.getsource(original)
    except (OSError, TypeError):
        broken = False
    if not broken:
        return False

    def patch_lang_tensor(tensor, *args, **kwargs):
        original(tensor, *args, **kwargs)  # records what it replaces, so its restore undoes ours
        tensor.__index__ = lambda self: int(self.handle.data.reshape(-1)[0])

    patch_lang_tensor.scalar_index = True
    interpreter._patch_lang_tensor = patch_lang_tensor
    return True
