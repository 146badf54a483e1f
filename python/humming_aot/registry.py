"""The compiled instances of this build and the facts of the build itself."""

from __future__ import annotations

import dataclasses
import functools

from ._ext import C


@dataclasses.dataclass(frozen=True)
class Instance:
    """One compiled kernel instance (the registry entry libhumming exposes)."""

    name: str
    backend: str
    scheduler: str
    archs: tuple[str, ...]
    act_type: str
    code_type: str
    scale_type: str
    zero: str
    out_type: str
    layout: int
    group_k: int  # -1: any
    group_n: int  # -1: any
    tile: tuple[int, int, int]
    stages: int
    threads: int
    smem_bytes: int
    act_granularity: int = -1  # activation scales: 0 none, 1 per token, 2 per token and K group; -1 any


@functools.lru_cache(maxsize=1)
def instances() -> tuple[Instance, ...]:
    out = []
    for d in C.instances():
        out.append(
            Instance(
                name=d["name"],
                backend=d["backend"],
                scheduler=d["scheduler"],
                archs=tuple(a for a in d["archs"].split(";") if a),
                act_type=d["act_type"],
                code_type=d["code_type"],
                scale_type=d["scale_type"],
                zero=d["zero"],
                out_type=d["out_type"],
                layout=d["layout"],
                group_k=d["group_k"],
                group_n=d["group_n"],
                tile=tuple(d["tile"]),
                stages=d["stages"],
                threads=d["threads"],
                smem_bytes=d["smem_bytes"],
                act_granularity=d["act_granularity"],
            )
        )
    return tuple(out)


def find(name: str) -> Instance:
    for inst in instances():
        if inst.name == name:
            return inst
    raise KeyError(
        f"no compiled instance is named {name!r}; this build has {len(instances())} "
        "(humming_aot.registry.instances() lists them)"
    )


def build_info() -> dict:
    """Version, architectures, profile, CUDA and torch versions this build was made with."""
    info = dict(C.build_info())
    info["archs"] = [a for a in info["archs"].split(";") if a]
    return info


def device_cc(device=None) -> int:
    """Compute capability (major * 10 + minor) of a CUDA device."""
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    return major * 10 + minor


def runs_on(name: str, cc: int) -> tuple[bool, str]:
    ok, why = C.instance_runs_on(name, int(cc))
    return bool(ok), why


def workspace_bytes(name: str, fmt, layout: int, n: int, k: int, m: int) -> int:
    """Stream-K scratch instance ``name`` takes for an ``m`` x ``n`` x ``k`` problem on the current
    CUDA device; 0 when no output tile is assembled from several blocks' partials."""
    return int(C.workspace_bytes(name, str(fmt), int(layout), int(n), int(k), int(m)))


# What a build for each architecture family compiles (HUMMING_CUDA_ARCHS): sm_80, sm_86 and sm_89
# share one build (their code runs on every 8.x device), the others take their arch-specific targets.
FAMILY_ARCHS = {"sm80": "80;86;89", "sm89": "80;86;89", "sm90": "90a", "sm100": "100a", "sm120": "120a"}


def build_family() -> str:
    """The family this build's architectures make up (a key of FAMILY_ARCHS), or "" for another set."""
    archs = set(build_info()["archs"])
    for fam, want in FAMILY_ARCHS.items():
        if archs == set(want.split(";")):
            return fam
    return ""


def family_hint(cc: int) -> str:
    """What to install for a device of compute capability ``cc`` that this build has no code for:
    its architecture family and the build that covers it."""
    from . import formats as F

    try:
        fam = F.arch_family(str(cc))
    except F.FormatError:
        return f"sm_{cc} belongs to no family humming-aot builds for ({', '.join(F.ARCH_FAMILIES)})"
    return (
        f"install humming-aot built for the {fam} family (from source: HUMMING_CUDA_ARCHS='{FAMILY_ARCHS[fam]}' "
        "pip install --no-build-isolation .)"
    )


def device_covered(cc: int) -> tuple[bool, str]:
    """Whether this build has machine code for a device of compute capability ``cc``."""
    insts = instances()
    if any(runs_on(i.name, cc)[0] for i in insts):
        return True, f"this build has kernels for sm_{cc}"
    archs = ", ".join(f"sm_{a}" for a in build_info()["archs"])
    return False, f"this build has kernels for {archs}; this device is sm_{cc}: {family_hint(cc)}"
