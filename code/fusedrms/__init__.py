"""fusedrms: the importable residue of the Fused RMSNorm book.

Import ``fusedrms.env`` (or call ``fusedrms.env.setup()``) before any kernel module: it decides
whether Triton compiles for the GPU or runs in the interpreter.
"""
__version__ = "0.1.0"
