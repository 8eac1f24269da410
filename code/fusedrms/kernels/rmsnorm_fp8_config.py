"""How chapter 8's fused FP8 kernel is launched (:class:`FusedConfig`: warps, the register cap,
the division, rows per program, the tile), the candidates its recording times, the loader of their
tuning table, and the book's rule where no table applies (:func:`baseline_config`).
:mod:`fusedrms.kernels.rmsnorm_fp8` launches with them and re-exports every name."""
from __future__ import annotations

from .. import env  # first, as everywhere in the package: it decides GPU or interpreter

import dataclasses

import triton

from .. import tuning, validation
from .rmsnorm_fp8_spec import BLOCK_COLS, CONTRACTS, DEFAULT_CONTRACT, HIDDEN_SIZE, n_blocks


def num_warps_for(tile_elements: int) -> int:
    """About 16 elements per thread, 4 to 16 warps (the book's rule from chapter 4)."""
    return max(4, min(16, tile_elements // 512))


# Registers per thread decide how many programs (rows) an SM keeps in flight: an SM has 65536
# registers, so two 16-warp (512-thread) programs fit only at <= 64 registers per thread. Without a
# cap the compiler may take a few more and leave one row per SM, and the kernel waits on memory
# latency instead of streaming (chapter 8 measures both).
REGISTER_CAP = {16: 64}


def supports_maxnreg() -> bool:
    """Whether this Triton's CUDA backend takes the ``maxnreg`` launch option."""
    try:
        from triton.backends.nvidia.compiler import CUDAOptions
    except ImportError:
        return False
    return "maxnreg" in getattr(CUDAOptions, "__dataclass_fields__", {})


def launch_options(num_warps: int, cap_registers: bool = True) -> dict:
    """Triton launch options: ``num_warps``, plus ``maxnreg`` on CUDA when the cap applies."""
    options = {"num_warps": num_warps}
    if (cap_registers and num_warps in REGISTER_CAP and env.current().backend == "cuda"
            and supports_maxnreg()):
        options["maxnreg"] = REGISTER_CAP[num_warps]
    return options


DIVISIONS = ("per_element", "block_reciprocal")  # how step 5 divides: same codes, bit for bit
TILES = ("padded", "split")


@dataclasses.dataclass(frozen=True)
class FusedConfig:
    """How the fused kernel is launched and divides. ``maxnreg`` None: the compiler decides."""
    num_warps: int
    maxnreg: int | None = None
    division: str = "per_element"
    rows_per_program: int = 1
    tile: str = "padded"  # or "split": the row's blocks as three power-of-two pieces
    lean: bool = False  # quantize_tile's LEAN: fast per-block divisions, no clamp before the cast

    @property
    def label(self) -> str:
        cap = f", maxnreg {self.maxnreg}" if self.maxnreg else ""
        per = f", {self.rows_per_program} rows/program" if self.rows_per_program > 1 else ""
        tile = ", unpadded (split) tile" if self.tile == "split" else ""
        lean = ", lean block steps" if self.lean else ""
        return (f"warps {self.num_warps}{cap}{per}{tile}, {self.division.replace('_', ' ')} "
                f"division{lean}")

    def runs(self, contract: str) -> bool:
        """Whether this launch computes ``contract``: the rows kernel (several rows per program)
        computes the exact one only."""
        return self.rows_per_program == 1 or contract == "exact"


# The lean block steps are exact where every per-block operand is a normal fp32 number: an absmax
# floor of at least 2^-60 guarantees it (the largest bf16 absmax stays below 2^128). Below it the
# launch takes div_rn.
LEAN_MIN_FLOOR = 2.0 ** -60


def baseline_config(cols: int = HIDDEN_SIZE) -> FusedConfig:
    """The chapter's first design: the book's warps rule, the 16-warp register cap, div_rn per
    element. Used wherever no tuned table applies (and recorded next to any tuned winner)."""
    warps = num_warps_for(triton.next_power_of_2(n_blocks(cols)) * BLOCK_COLS)
    return FusedConfig(warps, REGISTER_CAP.get(warps), "per_element")


# Candidates chapter 8's recording checks and times at every tuned width (book/ch08_tuning.py);
# the first is the baseline at the DeepSeek width. Fewer warps keep more rows in flight per SM
# (the recorded warps sweep); the block reciprocal removes a true division per element (a
# reciprocal instruction plus about eight more) in favour of one multiply and four fmas. The lean
# block steps drop div_rn's range checks and slow-path calls from the per-block divisions and the
# clamp the hardware cast already does (served, warps 4, 7168 columns: 124 -> 106 registers with
# the H200's Triton 3.6; about 21.7 -> 19.6 instructions per element in sm_90 SASS).
CANDIDATES = (FusedConfig(16, 64, "per_element"), FusedConfig(8, None, "block_reciprocal"),
              FusedConfig(4, None, "block_reciprocal"), FusedConfig(16, 64, "block_reciprocal"),
              FusedConfig(8, None, "per_element"),
              FusedConfig(4, None, "block_reciprocal", 1, "split"),
              FusedConfig(4, None, "block_reciprocal", lean=True),
              FusedConfig(4, None, "block_reciprocal", 1, "split", lean=True),
              FusedConfig(8, None, "block_reciprocal", lean=True),
              FusedConfig(8, None, "block_reciprocal", 2), FusedConfig(16, None, "block_reciprocal", 2),
              FusedConfig(2, None, "block_reciprocal"), FusedConfig(4, None, "per_element"),
              FusedConfig(8, 48, "block_reciprocal"),
              FusedConfig(4, 128, "block_reciprocal"))  # in order of promise: a deadline cuts the tail


def config_from_record(rec: dict) -> tuple:
    """One tuning-table entry -> ``((cols, contract), FusedConfig)``; raises for a malformed or
    inexact one. An entry without a contract is the exact contract's (tables before both were
    tuned)."""
    cfg = FusedConfig(int(rec["num_warps"]), None if rec.get("maxnreg") is None else int(rec["maxnreg"]),
                      str(rec["division"]), int(rec.get("rows_per_program", 1)),
                      str(rec.get("tile", "padded")), rec.get("lean", False) is True)
    contract = rec.get("contract", "exact")
    if not (cfg.division in DIVISIONS and cfg.num_warps in (1, 2, 4, 8, 16, 32)
            and cfg.rows_per_program in (1, 2, 4, 8) and cfg.tile in TILES
            and contract in CONTRACTS and rec.get("bit_exact") is True
            and cfg.runs(contract)):
        raise ValueError(f"not a bit-exact fused configuration: {rec!r}")
    return (int(rec["cols"]), contract), cfg


tuning.register("fp8", config_from_record)


def choose_config(cols: int, contract: str = DEFAULT_CONTRACT) -> tuple[FusedConfig, str]:
    """(configuration, where it came from): the entry tuned on this GPU for this width and
    contract, else the exact contract's entry for the width (a table tuned before the served
    contract had its own), else the baseline. The interpreter always takes the baseline (a GPU
    table says nothing about it)."""
    e = env.current()
    table = tuning.active("fp8")
    if e.on_gpu and table.get("gpu") == e.gpu_name:
        configs = table.get("configs", {})
        for key in ((cols, contract), (cols, "exact")):
            if key in configs:
                how = "" if key[1] == contract else f", the {key[1]} contract's entry"
                return configs[key], f"tuned on {table['gpu']} for {cols} columns{how}"
    return baseline_config(cols), "baseline (no tuned entry for this GPU and width)"


def resolve_config(cols, num_warps, cap_registers, division, config) -> FusedConfig:
    if config is not None:
        if not isinstance(config, FusedConfig):
            raise validation.InputError(f"config must be a FusedConfig, got {type(config).__name__}.")
        if config.rows_per_program not in (1, 2, 4, 8):
            raise validation.InputError(f"rows_per_program must be 1, 2, 4 or 8, got "
                                        f"{config.rows_per_program!r}.")
        if config.tile not in TILES or (config.tile == "split" and config.rows_per_program > 1):
            raise validation.InputError(f"tile must be one of {TILES} ('split' with one row per "
                                        f"program), got {config.tile!r}.")
        if config.lean is not False and (config.lean is not True or config.rows_per_program > 1):
            raise validation.InputError(f"lean must be True or False (True with one row per "
                                        f"program), got {config.lean!r}.")
        num_warps, division = config.num_warps, config.division
    if division is not None and division not in DIVISIONS:
        raise validation.InputError(f"division must be one of {', '.join(map(repr, DIVISIONS))}, "
                                    f"got {division!r}.")
    if num_warps is not None and num_warps not in (1, 2, 4, 8, 16, 32):
        raise validation.InputError(f"num_warps must be a power of two from 1 to 32, got "
                                    f"{num_warps!r}; leave it None for the book's rule.")
    if config is not None:
        return config
    base = baseline_config(cols)
    warps = num_warps or base.num_warps
    cap = REGISTER_CAP.get(warps) if cap_registers else None
    return FusedConfig(warps, cap, division or "per_element")
