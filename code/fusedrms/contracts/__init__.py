"""Which RMSNorm is yours? The numerics contracts of production RMSNorms, and a test that names the
one a kernel implements, bit for bit.

"RMSNorm" is one formula and several functions: implementations differ in where they round to
the input's dtype, which sum a fused residual add normalizes, which eps they use and how an FP8
step computes its scales. Each convention is restated here as a small PyTorch function that rounds
where its original rounds (:mod:`.conventions`, :mod:`.fp8`), named in :data:`CONTRACTS`::

    from fusedrms import contracts

    found = contracts.identify("triton.row")        # or any fn(x, w, eps) -> y
    found.matches                                   # ["fp32_once"] on a GPU
    print(found)                                    # and where it differs from the others
    contracts.drift("llama", "fp32_once", layers=32)  # how far two contracts drift apart

Command line: ``python -m fusedrms.contracts --kernel triton.row`` (``--help``).
"""
from .catalog import CONTRACT_OP, CONTRACTS, Contract, get, names
from .drift import Drift, drift
from .identify import Difference, Identification, KernelRaised, identify

__all__ = ["CONTRACTS", "CONTRACT_OP", "Contract", "Difference", "Drift", "Identification",
           "KernelRaised", "drift", "get", "identify", "names"]
