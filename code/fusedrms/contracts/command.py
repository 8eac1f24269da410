"""``python -m fusedrms.contracts``: which numerics contract a registered kernel implements.

::

    python -m fusedrms.contracts --list                      # the contracts and their sources
    python -m fusedrms.contracts --kernel triton.row         # one kernel, bf16 and fp16
    python -m fusedrms.contracts --kernel 'capstone.*,hip.block' --dtypes fp16
    python -m fusedrms.contracts --kernel torch.rms_norm --device cpu
"""
from __future__ import annotations

import argparse
import fnmatch
import os
import sys

from .. import cli, env, registry
from . import catalog
from .identify import KernelRaised, identify

IDENTIFIABLE = tuple(catalog.CONTRACT_OP)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m fusedrms.contracts",
        description="Run a registered kernel on inputs that tell RMSNorm's numerics contracts "
                    "apart (HF Llama, Gemma, TransformerEngine, vLLM and FlashInfer fused add, "
                    "F.rms_norm without eps, Liger's casting modes, FP8 scale conventions) and "
                    "say which it matches bit for bit, and where it first differs from the "
                    "others.")
    p.add_argument("--kernel", type=cli.names, default=None,
                   help="registered kernel names, comma-separated; globs allowed "
                        "(triton.*, capstone.fused)")
    p.add_argument("--list", action="store_true", help="list the contracts and exit")
    p.add_argument("--dtypes", type=cli.dtype_names, default=None,
                   help="bf16 and/or fp16 (default: both, as the kernel takes them)")
    p.add_argument("--eps", type=cli.eps, default=1e-6, help="eps passed to every call")
    p.add_argument("--device", choices=["cpu", "gpu"], default=None,
                   help="where the kernel runs (default: the GPU when there is one)")
    return p


def _select(parser, patterns) -> list:
    known = [i for i in registry.impls() if i.op in IDENTIFIABLE]
    chosen = []
    for pattern in patterns:
        hits = [i for i in known if fnmatch.fnmatchcase(i.name, pattern)]
        if not hits:
            other = [i for i in registry.impls() if fnmatch.fnmatchcase(i.name, pattern)]
            if other:
                parser.error(f"--kernel {pattern}: {other[0].name} is a {other[0].op} kernel; "
                             f"contracts exist for {', '.join(IDENTIFIABLE)}")
            parser.error(f"--kernel {pattern}: no registered kernel of that name; known: "
                         f"{', '.join(i.name for i in known)}")
        chosen += [i for i in hits if i not in chosen]
    return chosen


def _print_contracts() -> None:
    for op in ("rmsnorm", "add_rmsnorm_residual", "rmsnorm_fp8"):
        print(f"{op}:")
        for name in catalog.names(op):
            c = catalog.CONTRACTS[name]
            print(f"  {name}: {c.rounds}\n      restates {c.source}"
                  + (f"\n      also: {', '.join(c.also)}" if c.also else ""))


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    args = parser.parse_args(argv)
    if args.list:
        _print_contracts()
        return 0
    if not args.kernel:
        parser.error("name a kernel with --kernel (or list the contracts with --list)")
    e = env.current()
    if args.device == "gpu" and not e.on_gpu:
        parser.error("--device gpu: no GPU here (or FUSEDRMS_FORCE_CPU is set); leave --device "
                     "out to run on the CPU")
    if args.device == "cpu" and e.on_gpu:  # the interpreter must be chosen before kernels load
        os.environ["FUSEDRMS_FORCE_CPU"] = "1"
        os.execv(sys.executable, [sys.executable, "-m", "fusedrms.contracts", *argv])
    allowed = ("bf16", "fp16")
    if args.dtypes and any(d not in allowed for d in args.dtypes):
        parser.error(f"--dtypes: contracts differ in where they round to bf16 or fp16; use "
                     f"{' and/or '.join(allowed)}")
    plan, skipped = [], []
    for impl in _select(parser, args.kernel):
        usable = ("bf16",) if impl.op == "rmsnorm_fp8" else allowed
        dtypes = [d for d in (args.dtypes or usable) if d in usable and cli.dtype(d) in impl.dtypes]
        if e.device.type not in impl.devices:
            skipped.append(f"{impl.name} cannot run here: "
                           f"{impl.gpu_only_reason or 'not on this device'}")
        elif not dtypes:
            skipped.append(f"{impl.name} takes none of {', '.join(args.dtypes or usable)}")
        else:
            plan.append((impl, dtypes))
    if not plan:
        parser.error("; ".join(skipped))
    print(e.describe())
    for line in skipped:
        print(f"skipped: {line}")
    failed = 0
    for impl, dtypes in plan:
        try:
            print(identify(impl, dtypes=dtypes, eps=args.eps))
        except KernelRaised as err:
            failed += 1
            print(f"{impl.name}: {err}")
    return 1 if failed else 0
