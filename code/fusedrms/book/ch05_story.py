"""Chapter 5's story values: the suite, the drawer, the tuned configurations and the two casts on
the GPU, as the committed recording has them (the pattern: :mod:`fusedrms.book.story`)."""
from __future__ import annotations

from .. import records
from . import broken, ch05
from .story import MISSING, beside, recorded, value  # noqa: F401 (the notebook reads story.value)


def load(machine: str | None = records.COMMITTED) -> dict:
    """The three files the section reads (None where missing), from ``machine``'s recording
    (the committed one by default; None: the recording this reader's page would show)."""
    return {"suite": recorded("verify_gpu", machine), "drawer": recorded("verify_broken_gpu", machine),
            "configs": recorded("verify_configs_gpu", machine)}


def story_facts(docs: dict) -> dict:
    """The numbers behind the prose, unformatted (a section is absent where its file is)."""
    out: dict = {}
    suite = ch05.suite_summary(docs["suite"])
    if suite:
        recs = docs["suite"]["records"]
        bf16 = next((r for r in recs if r.get("kernel") == "triton.row"
                     and r.get("case") == "33x257" and r.get("dtype") == "bf16"
                     and r.get("status") == "pass" and r.get("rtol")), None)
        fp8 = [r for r in recs if r.get("op") == "rmsnorm_fp8" and r.get("status") != "skip"]
        out["suite"] = dict(suite, gpu=(docs["suite"].get("provenance") or {}).get("gpu"),
                            bf16_share=bf16 and bf16["max_rel_err"] / bf16["rtol"],
                            fp8_checks=len(fp8),
                            fp8_passed=sum(r.get("status") == "pass" for r in fp8))
    drawer = ch05.drawer_on_gpu(docs["drawer"], broken.SHOWN)
    if drawer:
        out["drawer"] = drawer
    configs = (docs["configs"] or {}).get("records")
    if configs:
        out["configs"] = dict(checks=len(configs), passed=sum(bool(r.get("ok")) for r in configs),
                              **{kind: sum(r.get("kind") == kind for r in configs)
                                 for kind in ch05.CONFIG_KINDS})
    return out


def story_values(docs: dict) -> dict[str, str]:
    """Every value the section's prose shows, formatted (absent where not recorded)."""
    f = story_facts(docs)
    v: dict[str, str] = {}
    s = f.get("suite")
    if s:
        v.update(gpu_kernels=str(s["kernels"]), gpu_checks=f"{s['checks']:,}",
                 gpu_fp8_checks=str(s["fp8_checks"]))
        if s["bf16_share"] is not None:
            v["gpu_bf16_share"] = f"{s['bf16_share']:.2f}"
    d = f.get("drawer")
    if d:
        v.update(gpu_drawer_wrong=str(len(d["wrong"])))
    c = f.get("configs")
    if c:
        v.update(configs_checks=str(c["checks"]), configs_capstone=str(c["capstone_config"]),
                 configs_fp8=str(c["fp8_config"]))
    return v


def your_gpu_rows(own: dict, book: dict) -> list[dict] | None:
    """The section's measured answers on the reader's recording beside the H200's (None when it
    holds none of the section's files). The page calls it only when the reader recorded chapter 5,
    whose recording writes all three files."""
    if not any(own.values()):
        return None
    theirs = story_facts(book)
    rows = [
        ("suite: checks passed", lambda f: f"{f['suite']['passed']:,} of {f['suite']['checks']:,}"),
        ("drawer: wrong kernels caught",
         lambda f: f"{len(f['drawer']['caught'])} of {len(f['drawer']['wrong'])}"),
        ("drawer: unmasked_weight passed",
         lambda f: "yes" if f["drawer"]["silent"]["broken.unmasked_weight"] else "no"),
        ("tuned configurations passed",
         lambda f: f"{f['configs']['passed']} of {f['configs']['checks']}"),
        ("row kernel, 33×257 bf16: share of its tolerance",
         lambda f: f"{f['suite']['bf16_share']:.2f}"),
        ("FP8 checks matched code for code",
         lambda f: f"{f['suite']['fp8_passed']} of {f['suite']['fp8_checks']}"),
    ]
    gpu = ((theirs.get("suite") or {}).get("gpu") or "H200").removeprefix("NVIDIA ")
    return beside(rows, story_facts(own), theirs, f"{gpu} (the book)")
