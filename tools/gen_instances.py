#!/usr/bin/env python3
"""Enumerate the curated kernel matrix and write one translation unit per instance.

The matrix lives in tools/matrix/*.json (data, one file per backend). For a set of target
architectures and a build profile this script

* ``--list``  prints one instance name per line and writes nothing,
* ``--count`` prints the number of instances and writes nothing,
* ``--out DIR`` writes ``DIR/instances/<name>.cu`` (an explicit instantiation each),
  ``DIR/registry.cpp`` (the table libhumming exposes) and ``DIR/instances.cmake`` (the sources and
  the -gencode flags of each), rewriting only files whose content changed and deleting instance
  files that are no longer in the set.

Output is deterministic: instances are sorted by name. It needs only the Python standard library
(formats.py is loaded by path, so torch is not imported).
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MATRIX_DIR = ROOT / "tools" / "matrix"
TABLE_DIR = ROOT / "python" / "humming_aot" / "tables"
PROFILES = ("ci", "dev", "full")  # each includes the ones before it
# A profile may end in "+experimental" (e.g. "dev+experimental"): matrix entries marked
# "experimental" are compiled only then. They hold kernels not yet checked on a GPU, kept out of
# every default build (and so out of every dispatch) until a GPU run has passed them.
EXPERIMENTAL = "+experimental"


def split_profile(profile: str) -> tuple[str, bool]:
    """(base profile, whether experimental entries are included); ValueError for an unknown one."""
    base = profile.removesuffix(EXPERIMENTAL)
    if base not in PROFILES:
        raise ValueError(
            f"unknown profile {profile!r}; profiles: {', '.join(PROFILES)}, each optionally with {EXPERIMENTAL}"
        )
    return base, base != profile


def _load_formats():
    spec = importlib.util.spec_from_file_location("_humming_formats", ROOT / "python" / "humming_aot" / "formats.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(mod)
    return mod


F = _load_formats()

ZERO_SUFFIX = {"none": "", "int": "-zi", "float": "-zf"}
ZERO_ENUM = {"none": 0, "int": 1, "float": 2}


@dataclass(frozen=True)
class Instance:
    name: str
    backend: str
    scheduler: str
    archs: tuple[str, ...]
    act: str
    code: str
    scale: str  # "none" when unscaled
    zero: str
    out: str
    layout: int
    header: str
    template_args: tuple[str, ...]
    key: dict = field(default_factory=dict, compare=False, hash=False)
    # The kernel template of the backend's namespace and the suffix of its entry points
    # (can_implement<...>, launch<...>, workspace_bytes<...>), for backends with several kernels.
    kernel: str = "Dense"
    entry_suffix: str = ""

    @property
    def ident(self) -> str:
        return "inst_" + re.sub(r"[^0-9A-Za-z]", "_", self.name)


def _dtype_id(name: str) -> int:
    return 0 if name == "none" else F.dtype(name).id


def _arch_list(text: str) -> list[str]:
    archs = [a.strip().lower().removeprefix("sm_") for a in re.split(r"[;, ]+", text) if a.strip()]
    for a in archs:
        F.arch_family(a)  # raises FormatError naming the known architectures
    return archs


def _entries(matrix: dict, profile: str, archs: list[str], axes: tuple[str, ...]):
    """(archs this backend compiles for, iterator over (entry, combination)) for the entries of
    ``profile`` and the profiles it includes; each combination is one value per axis."""
    base, experimental = split_profile(profile)
    wanted = PROFILES[: PROFILES.index(base) + 1]
    backend_archs = tuple(a for a in archs if a in matrix["archs"])

    def combos():
        if not backend_archs:
            return
        for entry in matrix["entries"]:
            if entry["profile"] in wanted and (experimental or not entry.get("experimental", False)):
                for combo in itertools.product(*(entry[a] for a in axes)):
                    yield entry, combo

    return backend_archs, combos()


def _generic_instances(matrix: dict, profile: str, archs: list[str]) -> list[Instance]:
    backend_archs, combos = _entries(matrix, profile, archs, ("act", "code", "scale", "zero", "out"))
    out = []
    for entry, (act, code, scale, zero, o) in combos:
        if entry.get("same_act_scale_out") and not (act == o and (scale == act or scale not in ("bf16", "f16"))):
            continue
        if entry.get("same_act_out") and act != o:
            continue
        # Skip what the format rules reject (checked with a representative group size).
        try:
            F.WeightFormat(
                F.dtype(code), 0 if scale == "none" else 128, 1, None if scale == "none" else F.dtype(scale), zero
            )
            F.ActivationFormat(F.dtype(act), "none" if act in ("bf16", "f16") else "token")
        except F.FormatError:
            continue
        weight = code + ("" if scale == "none" else f"-s{scale}") + ZERO_SUFFIX[zero]
        name = f"generic_{matrix['scheduler']}_a-{act}_w-{weight}_c-{o}"
        targs = (
            f"{_dtype_id(act)}u",
            f"{_dtype_id(code)}u",
            f"{_dtype_id(scale)}u",
            str(ZERO_ENUM[zero]),
            f"{_dtype_id(o)}u",
        )
        key = dict(
            act_type=_dtype_id(act),
            act_granularity=-1,
            code_type=_dtype_id(code),
            group_k=-1,
            group_n=-1,
            scale_type=_dtype_id(scale),
            zero=ZERO_ENUM[zero],
            global_scale=-1,
            out_type=_dtype_id(o),
            layout=matrix["layout"],
            tile_m=32,
            tile_n=64,
            tile_k=32,
            stages=1,
            threads=256,
            smem_bytes=(32 * 33 + 32 * 65) * 4,
        )
        out.append(
            Instance(
                name,
                "generic",
                matrix["scheduler"],
                backend_archs,
                act,
                code,
                scale,
                zero,
                o,
                matrix["layout"],
                "humming/kernel/generic_dense.cuh",
                targs,
                key,
            )
        )
    return out


def _weight_only_combos(matrix: dict, profile: str, archs: list[str]):
    """(archs, [(act, code, zero, group, tile, weight name)]) of a tensor-core backend's matrix:
    act x code x zero x group x tile, the combinations the format rules accept (scales and output
    in the activation type)."""
    backend_archs, combos = _entries(matrix, profile, archs, ("act", "code", "zero", "group", "tile"))
    out = []
    for _, (act, code, zero, group, tile_name) in combos:
        try:
            F.WeightFormat(F.dtype(code), group, 1, F.dtype(act), zero)
        except F.FormatError:
            continue
        gran = "gc" if group == 0 else f"g{group}"
        out.append((act, code, zero, group, matrix["tiles"][tile_name], f"{code}{gran}-s{act}{ZERO_SUFFIX[zero]}"))
    return backend_archs, out


def _tensor_core_key(
    act, act_granularity, code, group, scale, zero, out, layout, tile, stages, threads, smem, group_n=1
) -> dict:
    """Registry key of an instance of a tensor-core backend: one scale per `group` inputs (0: per
    channel) and `group_n` output channels, any global scale, the tile (m, n, k) and its resources."""
    return dict(
        act_type=_dtype_id(act),
        act_granularity=act_granularity,
        code_type=_dtype_id(code),
        group_k=group,
        group_n=group_n,
        scale_type=_dtype_id(scale),
        zero=ZERO_ENUM[zero],
        global_scale=-1,
        out_type=_dtype_id(out),
        layout=layout,
        tile_m=tile[0],
        tile_n=tile[1],
        tile_k=tile[2],
        stages=stages,
        threads=threads,
        smem_bytes=smem,
    )


def _weight_only_key(act, code, zero, group, layout, tile, stages, threads, smem) -> dict:
    """Registry key of a weight-only instance of the sm80 / sm90 backends: activations, scales and
    output of one type."""
    return _tensor_core_key(act, 0, code, group, act, zero, act, layout, tile, stages, threads, smem)


def _sm90_smem(stage_bytes: int, stages: int, barrier_sets: int = 2, notes: bool = False) -> int:
    """Dynamic shared memory of an sm90 kernel (its kSmemTotal; each instance's translation unit
    asserts the two agree): alignment slack, the ring, a full and an empty mbarrier per stage (and a
    "converted" one where the producer converts the codes: barrier_sets 3), the stream-K fix-up
    flag, and in grouped kernels (notes) a 32-byte segment note per stage (backend/sm90/pipeline.h,
    SegmentNote)."""
    return 1024 + stage_bytes * stages + stages * 8 * barrier_sets + 16 + (stages * 32 if notes else 0)


def _sm90_glu_exchange(smem: int, bm: int, consumers: int, boxes: int, blocks: int = 1) -> int:
    """Bytes a grouped sm90 kernel keeps after its ring and output boxes (smem: what it has without
    the boxes; boxes: their bytes) for the gated activation's exchange (kernel/sm90_dense.cuh,
    kGluBytes, the same rule): a float per sum (bm / 2 a thread) of each thread of half the consumer
    warpgroups, where their number is even, each has one 64-channel block (blocks; two-block
    warpgroups pair a gate and an up block in registers, with no exchange), the tile has at most
    128 tokens and it fits; it takes the boxes' bytes (a tile with the activation stores
    directly), so only what it needs beyond them."""
    exchange = consumers // 2 * 128 * (bm // 2) * 4
    fits = blocks == 1 and consumers % 2 == 0 and bm <= 128 and smem + max(boxes, exchange) <= SM90_MAX_SMEM
    return max(exchange - boxes, 0) if fits else 0


def _sm90_out_boxes(smem: int, bm: int, consumers: int, out: str, channels_n: int = 0) -> int:
    """Bytes of the output boxes an sm90 kernel keeps after its ring (epilogue/staged_store.h,
    staged_store_bytes, the same rule): one of bm rows x 128 bytes per consumer warpgroup, in tiles
    of 64 tokens and more with a 16-bit output, where they fit beside the ring. With the tokens on
    the WGMMA's M side (channels_n, staged_token_rows_store_bytes): 64 tokens x channels_n 16-bit
    outputs per consumer warpgroup, where they fit."""
    if channels_n:
        boxes = consumers * 64 * channels_n * 2
        return boxes if F.dtype(out).bits == 16 and smem + boxes <= SM90_MAX_SMEM else 0
    boxes = consumers * bm * 128
    fits = F.dtype(out).bits == 16 and bm >= 64 and bm % 16 == 0 and smem + boxes <= SM90_MAX_SMEM
    return boxes if fits else 0


def _weight_only_instance(name, backend, matrix, archs, act, code, zero, targs, key) -> Instance:
    """An instance of a weight-only tensor-core backend (kernel/<backend>_dense.cuh): scales and
    output in the activation type."""
    header = f"humming/kernel/{backend}_dense.cuh"
    return Instance(
        name, backend, matrix["scheduler"], archs, act, code, act, zero, act, matrix["layout"], header, targs, key
    )


def _sm80_instances(matrix: dict, profile: str, archs: list[str]) -> list[Instance]:
    backend_archs, combos = _weight_only_combos(matrix, profile, archs)
    out = []
    for act, code, zero, group, t, weight in combos:
        wm, wn, wk = t["warps"]
        bn, bk = 64 * wn, t["warp_k"] * wk
        name = (
            f"sm80_mma_{matrix['scheduler']}_a-{act}_w-{weight}_c-{act}"
            f"_t{t['bm']}x{bn}x{bk}_w{wm}x{wn}x{wk}_s{t['stages']}"
        )
        targs = (
            f"{_dtype_id(act)}u",
            f"{_dtype_id(code)}u",
            f"{_dtype_id(act)}u",
            str(ZERO_ENUM[zero]),
            f"{_dtype_id(act)}u",
            str(group),
            str(t["bm"]),
            str(wm),
            str(wn),
            str(wk),
            str(t["warp_k"]),
            str(t["stages"]),
        )
        bits = F.dtype(code).bits
        rows = 0 if group == 0 else (1 if group >= bk else bk // group)
        zero_bytes = {"none": 0, "int": 1, "float": 2}[zero]  # per zero point staged with the scales
        stage = t["bm"] * bk * 2 + bk * bn * bits // 8 + rows * bn * 2 + (rows * bn * zero_bytes + 15) // 16 * 16
        # The kernel's dynamic shared memory (sm80::Dense::kSmemTotal; the instance's translation unit
        # asserts the two agree): the stages (the K-slice reduction reuses one), a 16-byte word area
        # and the block's segment list (scheduler/streamk.h: kMaxSegments records of 16 bytes).
        smem = stage * t["stages"] + 16 + 6 * 16
        key = _weight_only_key(
            act, code, zero, group, matrix["layout"], (t["bm"], bn, bk), t["stages"], 32 * wm * wn * wk, smem
        )
        out.append(_weight_only_instance(name, "sm80", matrix, backend_archs, act, code, zero, targs, key))
    return out


def _sm80_a8_instances(matrix: dict, profile: str, archs: list[str]) -> list[Instance]:
    """GEMM with 8-bit activations on the sm80 family (kernel/sm80_a8_dense.cuh) on mma.sync: FP8
    activations (machine code for sm_89 and newer only) x e4m3 weights, or e4m3 x u4 / i4 / e2m1
    (W4A8); i8 activations x i8, u4 or i4 (every arch of the matrix). Per-token activation scales x
    per-channel weight scales (group 0); with group 128, 4-bit codes take a scale per channel and
    128 inputs, e4m3 codes 128 x 128 weight blocks with activation scales per token and 128 inputs
    (DeepSeek FP8); with group 32, e2m1 codes e8m0 scales (MXFP4); weights in the generic layout."""
    backend_archs, combos = _entries(matrix, profile, archs, ("act", "code", "scale", "group", "out", "tile"))
    out = []
    for _, (act, code, scale, group, o, tile_name) in combos:
        four = F.dtype(code).bits == 4
        codes = {"i8": ("i8", "u4", "i4"), "e4m3": ("e4m3", "u4", "i4", "e2m1"), "e5m2": ("e4m3",)}[act]
        # Group 128: 4-bit codes take a scale per channel and 128 inputs, e4m3 codes 128 x 128 fp32
        # blocks with activation scales per token and 128 inputs; integers per channel only.
        blocks = bool(group) and code == "e4m3"
        if code not in codes or (group and act == "i8") or (blocks and scale != "f32"):
            continue
        # MXFP4: e2m1 codes with e8m0 scales per 32 inputs (and no other group of 32, nor e8m0 else).
        if (scale == "e8m0") != (code == "e2m1" and group == 32) or (group == 32 and scale != "e8m0"):
            continue
        # FP8 mma.sync needs sm_89: the float instances are built for the matrix's archs from 89 on.
        inst_archs = backend_archs if act == "i8" else tuple(a for a in backend_archs if a not in ("80", "86", "87"))
        if not inst_archs:
            continue
        t = matrix["tiles"][tile_name]
        wm, wn, wk = t["warps"]
        bm, bn, bk = t["bm"], 64 * wn, t["warp_k"] * wk
        # 4-bit rows of 64 bytes; a group of 128 inputs is one stage; a tile's channels in one block.
        if ((four or group) and bk != 128) or (blocks and group % bn) or (group and t["warp_k"] % 32):
            continue
        gran = "gc" if group == 0 else (f"g{group}n{group}" if blocks else f"g{group}")
        act_name = f"{act}-g{group}" if blocks else f"{act}-pt"
        tile = f"_t{bm}x{bn}x{bk}_w{wm}x{wn}x{wk}_s{t['stages']}"
        name = f"sm80_mma_{matrix['scheduler']}_a-{act_name}_w-{code}{gran}-s{scale}_c-{o}{tile}"
        group_n = group if blocks else 1
        targs = (
            tuple(f"{_dtype_id(v)}u" for v in (act, code, scale))
            + (str(group), str(group_n), f"{_dtype_id(o)}u")
            + tuple(str(v) for v in (bm, wm, wn, wk, t["warp_k"], t["stages"]))
        )
        # sm80::DenseA8::kSmemTotal: the stages (bm activation rows of bk bytes, bn weight rows of
        # bk codes, then with group scales the bn channels' scales of each of the stage's groups, with blocks
        # bm fp32 activation scales and the weight block's in a 16-byte unit), a 16-byte word area
        # and the block's segment list (kMaxSegments records of 16 bytes).
        scales = (bm * 4 + 16 if blocks else bk // group * bn * F.dtype(scale).bits // 8) if group else 0
        stage = bm * bk + bn * bk * F.dtype(code).bits // 8 + scales
        smem = stage * t["stages"] + 16 + 6 * 16
        # act_granularity 1: ActScale::kToken; 2: ActScale::kGroup
        key = _tensor_core_key(
            act, 2 if blocks else 1, code, group, scale, "none", o, matrix["layout"], (bm, bn, bk), t["stages"],
            32 * wm * wn * wk, smem, group_n=group_n,
        )  # fmt: skip
        out.append(
            Instance(
                name,
                "sm80",
                matrix["scheduler"],
                inst_archs,
                act,
                code,
                scale,
                "none",
                o,
                matrix["layout"],
                "humming/kernel/sm80_a8_dense.cuh",
                targs,
                key,
                kernel="DenseA8",
                entry_suffix="_a8",
            )
        )
    return out


# Shared memory one block may use on sm_90 (227 KiB); tiles whose ring needs more for a code width
# are left out of the matrix for that width.
SM90_MAX_SMEM = 227 * 1024


def _sm90_instances(matrix: dict, profile: str, archs: list[str]) -> list[Instance]:
    backend_archs, combos = _weight_only_combos(matrix, profile, archs)
    out = []
    for act, code, zero, group, t, weight in combos:
        bm, consumers, atoms, stages = t["bm"], t["consumers"], t["k_atoms"], t["stages"]
        # "blocks": 64-channel blocks per consumer warpgroup (1, or 2 with at most two consumers:
        # two WGMMAs per K step on the same activations; kernel/sm90_dense.cuh Blocks).
        blocks = t.get("blocks", 1)
        if blocks not in (1, 2) or (blocks == 2 and consumers > 2):
            raise SystemExit(
                f"tile {t}: one or two 64-channel blocks per consumer warpgroup (two: at most two consumers)"
            )
        bn, bk = 64 * consumers * blocks, 64 * atoms
        if group and group < bk and bk % group:
            continue
        # A grouped tile's "producer": "warp" (default: the producer's first warp walks the experts'
        # tiles) or "lone" (one producer thread walks them; named _lone); "split": true, with the
        # warp's walk, splits each tile's K into shares where the tiles leave multiprocessors idle
        # (scheduler/moe.h grouped_k_shares; named _ks).
        lone = t.get("producer", "warp") == "lone"
        split = bool(t.get("split", False))
        if (lone or split) and matrix["scheduler"] != "moe":
            raise SystemExit(f"tile {t}: only grouped (moe) tiles choose their producer's walk or split K")
        if lone and split:
            raise SystemExit(f"tile {t}: the K-split grouped tiles walk the experts with the producer's warp")
        name = (
            f"sm90_wgmma_{matrix['scheduler']}_a-{act}_w-{weight}_c-{act}_t{bm}x{bn}x{bk}_w1x{consumers}x1_s{stages}"
            + ("_lone" if lone else "")
            + ("_ks" if split else "")
        )
        sched = "Split" if split else "Lone" if lone else "Warp"
        targs = (
            f"{_dtype_id(act)}u",
            f"{_dtype_id(code)}u",
            str(ZERO_ENUM[zero]),
            str(group),
            str(bm),
            str(consumers),
            str(blocks),
            str(atoms),
            str(stages),
            # The scheduler kind (kernel/sm90_dense.cuh, kSched*): "moe" instances walk the experts'
            # tiles (scheduler/moe.h), with the producer's warp or one producer thread, or the warp
            # with K shares of each tile.
            "sm90::kSchedDense" if matrix["scheduler"] != "moe" else f"sm90::kSchedGrouped{sched}",
        )
        bits = F.dtype(code).bits
        rows = 0 if group == 0 else (1 if group >= bk else bk // group)
        stage = bm * bk * 2 + bk * bn * bits // 8 + rows * bn * 2 + (rows * bn if zero == "int" else 0)
        stage = (stage + 1023) // 1024 * 1024
        smem = _sm90_smem(stage, stages, notes=matrix["scheduler"] == "moe")
        if smem > SM90_MAX_SMEM:  # e.g. the 256-channel decode tiles with 8-bit codes
            continue
        boxes = 0
        if matrix["scheduler"] != "moe" or consumers <= 3:  # four-consumer grouped tiles store directly
            boxes = _sm90_out_boxes(smem, bm, consumers * blocks, act)
        if matrix["scheduler"] == "moe":
            smem += _sm90_glu_exchange(smem, bm, consumers, boxes, blocks)
        smem += boxes
        key = _weight_only_key(
            act, code, zero, group, matrix["layout"], (bm, bn, bk), stages, 128 * (1 + consumers), smem
        )
        out.append(_weight_only_instance(name, "sm90", matrix, backend_archs, act, code, zero, targs, key))
    return out


def _sm90_a8_instances(matrix: dict, profile: str, archs: list[str]) -> list[Instance]:
    """GEMM with 8-bit activations on the sm90 backend (kernel/sm90_a8_dense.cuh): 8-bit float
    activations x e4m3, u4, i4 or e2m1 weights, or i8 x i8, u4 or i4, in the generic layout, with
    per-token x per-channel scales (group 0); with group 128, 4-bit codes take a scale per channel
    and 128 inputs (per-token activations), e4m3 codes DeepSeek-style 1 x 128 activation groups x
    128 x 128 weight blocks. A matrix with the "moe" scheduler (sm90_a8_moe.json) makes the grouped
    (mixture-of-experts) kernels: the producer's warp (kSchedGroupedWarp) or, in tiles whose
    "producer" is "lone", its one issuing thread (kSchedGroupedLone) walks the experts' tiles; no
    conversion in the stage."""
    backend_archs, combos = _entries(matrix, profile, archs, ("act", "code", "scale", "group", "out", "tile"))
    grouped = matrix["scheduler"] == "moe"
    out = []
    for entry, (act, code, scale, group, o, tile_name) in combos:
        t = matrix["tiles"][tile_name]
        bm, consumers, stages, batch = t["bm"], t["consumers"], t["stages"], t.get("batch", 1)
        # A grouped tile's "producer": "warp" (default: the producer's first warp walks the experts'
        # tiles) or "lone" (its one issuing thread walks them; named _lone).
        lone = t.get("producer", "warp") == "lone"
        if lone and not grouped:
            raise SystemExit(f"tile {tile_name}: only grouped (moe) tiles choose their producer's walk")
        # "convert": "producer": the producer warpgroup's idle warps convert 4-bit codes into an
        # 8-bit box in each stage (names end _pc); else each consumer thread in registers.
        staged = t.get("convert", "registers") == "producer"
        # An entry's "layout": 4: 4-bit codes read into register fragments from layout 4 (sm90a8,
        # names end _l4); else the matrix's layout (the generic one).
        layout = entry.get("layout", matrix["layout"])
        # "bn": the tokens on the WGMMA's M side (64 per consumer warpgroup, bm = 64 x consumers)
        # and bn channels on its N side (kernel template ChannelsN; names _w<consumers>x1x1):
        # e4m3 x e4m3 with per-channel scales or blocks (then bn a multiple of 128). Else the
        # weights are the M (64 channels per consumer warpgroup; names _w1x<consumers>x1).
        channels_n = t.get("bn", 0)
        bn, bk = channels_n or 64 * consumers, 128
        four = F.dtype(code).bits == 4
        if channels_n and (
            (act, code) != ("e4m3", "e4m3") or bm != 64 * consumers or batch > 1 or (group and bn % 128)
        ):
            continue
        if staged and (not four or grouped):  # 8-bit codes need no conversion; grouped kernels convert none
            continue
        if layout != matrix["layout"] and (not four or staged):  # layout 4: register fragments of 4-bit codes
            continue
        # Batches of stages (8-bit floats): their sums fit, the ring holds them and one more.
        if batch > 1 and (act == "i8" or batch * bm // 2 > 64 or stages < batch + 1):
            continue
        blocks = bool(group) and not four  # 8-bit codes: 128 x 128 blocks; 4-bit: per channel
        if act == "i8" and (group or code in ("e4m3", "e2m1")):  # integer WGMMA: integer codes, per channel
            continue
        if act != "i8" and code == "i8":
            continue
        if blocks and scale != "f32":  # what the kernel's block path takes
            continue
        # 8-bit floats keep each stage's sums apart: at most 128 tokens, or 192 with 4-bit codes
        # in register fragments and two consumers
        if act != "i8" and not channels_n and bm > (192 if four and not staged and consumers == 2 else 128):
            continue
        if group == 0:
            weight = f"{code}gc-s{scale}"
        else:
            weight = f"{code}g{group}n{group}-s{scale}" if blocks else f"{code}g{group}-s{scale}"
        act_name = f"{act}-g{group}" if blocks else f"{act}-pt"
        name = (
            (
                f"sm90_wgmma_{matrix['scheduler']}_a-{act_name}_w-{weight}_c-{o}_t{bm}x{bn}x{bk}_"
                + (f"w{consumers}x1x1" if channels_n else f"w1x{consumers}x1")
                + f"_s{stages}"
            )
            + (f"_b{batch}" if batch > 1 else "")
            + ("_pc" if staged else "")
            + (f"_l{layout}" if layout != matrix["layout"] else "")
            + ("_lone" if lone else "")
        )
        group_n = group if blocks else 1
        targs = tuple(f"{_dtype_id(v)}u" for v in (act, code, scale)) + (str(group), str(group_n), f"{_dtype_id(o)}u")
        targs += (
            str(bm),
            str(consumers),
            str(stages),
            str(batch),
            "1" if staged else "0",
            str(layout),
            str(channels_n),
            ("sm90::kSchedGroupedLone" if lone else "sm90::kSchedGroupedWarp") if grouped else "sm90::kSchedDense",
        )
        # A box of weights (bn rows of bk codes: 64 bytes each with 4-bit codes) and one of
        # activations per stage. Then the scales: with blocks, fp32, bm of the activations (grouped
        # tiles with the tokens on M: 4 more, kScaleLead) and one per 128-channel weight block the
        # tile touches; with groups, the bn channels' in their type.
        wblocks = ((64 if bn % 128 else 0) + bn + 127) // 128
        lead = 4 if grouped and blocks and channels_n and bm >= 64 else 0
        scales = (bm + lead + wblocks) * 4 if blocks else (bn * F.dtype(scale).bits // 8 if group else 0)
        stage = bn * bk * F.dtype(code).bits // 8 + bm * bk + scales
        # With the producer's conversion, the 8-bit box (bn rows of bk bytes) after them.
        stage = (stage + 1023) // 1024 * 1024 + (bn * bk if staged else 0)
        smem = _sm90_smem(stage, stages, barrier_sets=3 if staged else 2, notes=grouped)
        if smem > SM90_MAX_SMEM:
            continue
        if not grouped or channels_n or consumers <= 3:  # four-consumer grouped tiles store directly
            smem += _sm90_out_boxes(smem, bm, consumers, o, channels_n)
        # act_granularity 1: ActScale::kToken; 2: ActScale::kGroup
        tile = (bm, bn, bk)
        key = _tensor_core_key(
            act, 2 if blocks else 1, code, group, scale, "none", o, layout, tile, stages,
            128 * (1 + consumers), smem, group_n=group_n,
        )  # fmt: skip
        out.append(
            Instance(
                name,
                "sm90",
                matrix["scheduler"],
                backend_archs,
                act,
                code,
                scale,
                "none",
                o,
                layout,
                "humming/kernel/sm90_a8_dense.cuh",
                targs,
                key,
                kernel="DenseA8",
                entry_suffix="_a8",
            )
        )
    return out


# Emitters by the matrix's "emitter" (default: its "backend").
BACKENDS = {
    "generic": _generic_instances,
    "sm80": _sm80_instances,
    "sm80_a8": _sm80_a8_instances,
    "sm90": _sm90_instances,
    "sm90_a8": _sm90_a8_instances,
}


def enumerate_instances(archs: list[str], profile: str, name_filter: str | None = None) -> list[Instance]:
    split_profile(profile)  # ValueError naming the accepted profiles
    found: dict[str, Instance] = {}
    for path in sorted(MATRIX_DIR.glob("*.json")):
        matrix = json.loads(path.read_text())
        emitter = matrix.get("emitter", matrix["backend"])
        if emitter not in BACKENDS:
            raise SystemExit(f"{path.name}: backend {emitter!r} has no emitter in gen_instances.py")
        for inst in BACKENDS[emitter](matrix, profile, archs):
            found.setdefault(inst.name, inst)
    pattern = re.compile(name_filter) if name_filter else None
    return [found[n] for n in sorted(found) if pattern is None or pattern.search(n)]


# ---- emitters ------------------------------------------------------------------------------------


def _gencode(arch: str) -> str:
    return f"-gencode=arch=compute_{arch},code=sm_{arch}"


def instance_tu(inst: Instance) -> str:
    targs = ", ".join(inst.template_args)
    ns = inst.backend
    # The registry's shared-memory figure decides which devices can run the instance: keep it exact.
    sfx = inst.entry_suffix
    check = (
        f"static_assert({ns}::{inst.kernel}<{targs}>::kSmemTotal == {inst.key['smem_bytes']},\n"
        '              "gen_instances.py and the kernel disagree on shared memory");\n\n'
        if inst.backend in ("sm80", "sm90")
        else ""
    )
    return (
        f"// Generated by tools/gen_instances.py; do not edit.\n// {inst.name}\n"
        f'#include "{inst.header}"\n\n'
        "namespace humming {\nnamespace instances {\n\n"
        + check
        + f"Status {inst.ident}_can_implement(const GemmArgs &args) {{\n"
        f"  return {ns}::can_implement{sfx}<{targs}>(args);\n}}\n\n"
        f"Status {inst.ident}_launch(const GemmArgs &args, void *stream) {{\n"
        f"  return {ns}::launch{sfx}<{targs}>(args, stream);\n}}\n\n"
        f"size_t {inst.ident}_workspace(const GemmArgs &args) {{\n"
        f"  return {ns}::workspace_bytes{sfx}<{targs}>(args);\n}}\n\n"
        f"Status {inst.ident}_prepare() {{\n  return {ns}::prepare{sfx}<{targs}>();\n}}\n\n"
        "} // namespace instances\n} // namespace humming\n"
    )


def dispatch_tables() -> list[dict]:
    """The built-in M-range tables in the order the Python dispatcher tries them (file name order,
    the table named "default" last)."""
    tables = [json.loads(p.read_text()) for p in sorted(TABLE_DIR.glob("*.json"))]
    tables.sort(key=lambda t: t.get("name") == "default")
    return tables


def _c_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


# A tile cost's key: an optional kernel class (activation and code widths), the tile shape, an
# optional batch (humming.h, TileCost).
TILE_COST_KEY = re.compile(r"(?:a(8|16)w(4|8):)?(\d+)x(\d+)x(\d+)(?:_b(\d+))?")


def tile_costs(table: dict) -> list[tuple[int, int, int, list[float], int, int, int]]:
    """A table's "tile_costs" ({"[aAwC:]BMxBNxBK[_bB]": [c0, c1, c2, c3] or [c0, ..., c4]}, keys
    starting with "_" are notes) as (tile_m, tile_n, tile_k, coefficients, act_bits, code_bits,
    batch), in key order; act_bits 0 for a key without a class (the weight-only kernels)."""
    out = []
    for key, c in sorted(table.get("tile_costs", {}).items()):
        if key.startswith("_"):
            continue
        m = TILE_COST_KEY.fullmatch(key)
        if m is None:
            raise SystemExit(f"tile cost key {key!r} is not [a8w4:]BMxBNxBK[_bB]")
        if not isinstance(c, list) or len(c) not in (4, 5):
            raise SystemExit(f"tile cost {key!r} needs 4 or 5 numbers (humming.h, TileCost), got {c!r}")
        act, code, tm, tn, tk, batch = m.groups()
        out.append((int(tm), int(tn), int(tk), [float(v) for v in c], int(act or 0), int(code or 0), int(batch or 1)))
    return out


def tables_code() -> list[str]:
    lines, ranges, costs = [], [], []
    entries = []
    for t in dispatch_tables():
        first = len(ranges)
        for r in t["ranges"]:
            m_max = -1 if r.get("m_max") is None else int(r["m_max"])
            n_min = int(r.get("n_min", 0))
            k_max = int(r.get("k_max", 0))
            est = 1 if r.get("estimate") else 0
            ranges.append(f"    {{{m_max}, {n_min}, {k_max}, {_c_string('|'.join(r['prefer']))}, {est}}},")
        first_cost = len(costs)
        for tm, tn, tk, c, act, code, batch in tile_costs(t):
            costs.append(f"    {{{tm}, {tn}, {tk}, {{{', '.join(repr(v) for v in c)}}}, {act}, {code}, {batch}}},")
        match = t.get("match", {})
        ccs = ";".join(str(c) for c in match.get("cc", []))
        sms = int(match.get("sms", -1))
        entries.append(
            f"    {{{_c_string(t.get('name', ''))}, {_c_string(ccs)}, {sms}, "
            f"{_c_string(match.get('name_contains', ''))}, {first}, {len(t['ranges'])}, "
            f"{first_cost}, {len(costs) - first_cost}}},"
        )
    lines.append(f"extern const size_t kDispatchRangeCount = {len(ranges)};")
    lines.append("extern const DispatchRange kDispatchRanges[] = {")
    lines += ranges or ['    {-1, 0, 0, "", 0},']
    lines.append("};")
    lines.append(f"extern const size_t kTileCostCount = {len(costs)};")
    lines.append("extern const TileCost kTileCosts[] = {")
    lines += costs or ["    {0, 0, 0, {0, 0, 0, 0}, 0, 0, 1},"]
    lines.append("};")
    lines.append(f"extern const size_t kDispatchTableCount = {len(entries)};")
    lines.append("extern const DispatchTable kDispatchTables[] = {")
    lines += entries or ['    {"", "", -1, "", 0, 0, 0, 0},']
    lines.append("};")
    return lines


def registry_tu(instances: list[Instance], archs: list[str], profile: str) -> str:
    lines = [
        "// Generated by tools/gen_instances.py; do not edit.",
        '#include "humming/humming.h"',
        "",
        "namespace humming {",
        "namespace instances {",
    ]
    for inst in instances:
        lines.append(f"Status {inst.ident}_can_implement(const GemmArgs &);")
        lines.append(f"Status {inst.ident}_launch(const GemmArgs &, void *);")
        lines.append(f"size_t {inst.ident}_workspace(const GemmArgs &);")
        lines.append(f"Status {inst.ident}_prepare();")
    lines += ["} // namespace instances", "", "namespace generated {", ""]
    lines.append(f'extern const char kBuildArchs[] = "{";".join(archs)}";')
    lines.append(f'extern const char kBuildProfile[] = "{profile}";')
    lines.append(f"extern const size_t kInstanceCount = {len(instances)};")
    lines.append("extern const InstanceInfo kInstances[] = {")
    for inst in instances:
        k = inst.key
        lines.append(
            f'    {{"{inst.name}", "{inst.backend}", "{inst.scheduler}", "{";".join(inst.archs)}", '
            f"{k['act_type']}u, {k['act_granularity']}, {k['code_type']}u, {k['group_k']}, {k['group_n']}, "
            f"{k['scale_type']}u, {k['zero']}, {k['global_scale']}, {k['out_type']}u, {k['layout']}, "
            f"{k['tile_m']}, {k['tile_n']}, {k['tile_k']}, {k['stages']}, {k['threads']}, {k['smem_bytes']}, "
            f"&instances::{inst.ident}_can_implement, &instances::{inst.ident}_launch, "
            f"&instances::{inst.ident}_workspace, &instances::{inst.ident}_prepare}},"
        )
    if not instances:  # a zero-length array is not valid C++; the count stays 0
        lines.append(
            '    {"", "", "", "", 0u, 0, 0u, 0, 0, 0u, 0, 0, 0u, 0, 0, 0, 0, 0, 0, 0, nullptr, nullptr, nullptr, nullptr},'
        )
    lines += ["};", ""]
    lines += tables_code()
    lines += ["", "} // namespace generated", "} // namespace humming", ""]
    return "\n".join(lines)


def cmake_list(instances: list[Instance], out: Path) -> str:
    lines = ["# Generated by tools/gen_instances.py; do not edit.", "set(HUMMING_INSTANCE_SOURCES"]
    lines += [f'  "{(out / "instances" / (inst.name + ".cu")).as_posix()}"' for inst in instances]
    lines.append(")")
    for inst in instances:
        flags = ";".join(_gencode(a) for a in inst.archs)
        lines.append(
            f'set_source_files_properties("{(out / "instances" / (inst.name + ".cu")).as_posix()}" '
            f'PROPERTIES COMPILE_OPTIONS "{flags}")'
        )
    return "\n".join(lines) + "\n"


def _write_if_changed(path: Path, text: str) -> bool:
    if path.exists() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return True


def write_all(instances: list[Instance], archs: list[str], profile: str, out: Path) -> int:
    out = out.resolve()
    changed = 0
    keep = set()
    for inst in instances:
        p = out / "instances" / f"{inst.name}.cu"
        keep.add(p.name)
        changed += _write_if_changed(p, instance_tu(inst))
    inst_dir = out / "instances"
    if inst_dir.exists():
        for stale in inst_dir.glob("*.cu"):
            if stale.name not in keep:
                stale.unlink()
                changed += 1
    changed += _write_if_changed(out / "registry.cpp", registry_tu(instances, archs, profile))
    changed += _write_if_changed(out / "instances.cmake", cmake_list(instances, out))
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", required=True, help="target architectures, e.g. '90a' or '80;86;89;90a'")
    ap.add_argument("--profile", default="dev", help="ci | dev | full, optionally with +experimental")
    ap.add_argument("--filter", default="", help="regular expression; keep instances whose name matches")
    ap.add_argument("--list", action="store_true", help="print instance names, write nothing")
    ap.add_argument("--count", action="store_true", help="print the number of instances, write nothing")
    ap.add_argument("--out", type=Path, help="directory in the build tree to write into")
    args = ap.parse_args(argv)
    try:
        archs = _arch_list(args.arch)
    except F.FormatError as e:
        ap.error(str(e))
    if not archs:
        ap.error("no architecture given; e.g. --arch 90a or --arch '80;90a'")
    try:
        re.compile(args.filter)
    except re.error as e:
        ap.error(f"--filter is not a valid regular expression: {e}")
    try:
        instances = enumerate_instances(archs, args.profile, args.filter or None)
    except ValueError as e:
        ap.error(str(e))
    for arch in archs:
        if not any(arch in inst.archs for inst in enumerate_instances([arch], args.profile)):
            print(
                f"gen_instances: warning: no matrix entry compiles for sm_{arch} in profile {args.profile}; "
                "kernels for it will be missing",
                file=sys.stderr,
            )
    if args.list:
        print("\n".join(i.name for i in instances))
        return 0
    if args.count:
        print(len(instances))
        return 0
    if args.out is None:
        ap.error("give --out DIR to write, or --list / --count")
    changed = write_all(instances, archs, args.profile, args.out)
    print(
        f"gen_instances: {len(instances)} instances for {';'.join(archs)} ({args.profile}), {changed} files written",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
