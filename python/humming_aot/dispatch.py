"""Choosing a compiled instance for (format, device, n, k, m).

The built-in tables are also compiled into libhumming (tools/gen_instances.py), whose
``humming::select_instance`` applies the same rules; tests keep the two choices equal.

Choices come from M-range tables kept as data (``humming_aot/tables/*.json``; the first table
whose ``match`` fits the device wins, ``default.json`` last). A range lists instance-name patterns
in order of preference; a range with ``n_min`` applies only to layers of at least that many output
channels, one with ``k_max`` only to layers of at most that many inputs, and either is followed by
the range of the same ``m_max`` that the other layers take. The choice for one (format, n, k, device, M range) is cached, so a layer
pays a dictionary lookup per call. Overrides:

* ``load_table(path_or_dict)`` puts a tuned table in front of the built-in ones;
* ``force(name)`` (or env ``HUMMING_AOT_INSTANCE``) makes every matching call use one instance;
* env ``HUMMING_AOT_TABLE`` names a table file loaded at import.

``explain(...)`` returns the reasoning behind a choice as text.

No silent slow path: when the choice on a GPU is an instance of the generic backend (correct for
every format, but far slower than a tensor-core kernel), the first such call of each format on each
device class warns with a :class:`SlowPathWarning` that names the formats with fast kernels there;
``explain`` says the same. With env ``HUMMING_STRICT=1`` (read when a choice is made) the call
raises :class:`SlowPathError` instead. A forced or named instance is a deliberate choice and is
neither warned about nor refused.
"""

from __future__ import annotations

import bisect
import fnmatch
import math
import functools
import json
import operator
import os
import re
import pathlib
import warnings

from . import formats as F
from . import registry
from ._ext import C
from .pack import LAYOUT_NAMES, layout_id
from .pack import LAYOUTS as _LAYOUT_IDS  # the layouts a table's optional "layouts" list names

_TABLE_DIR = pathlib.Path(__file__).resolve().parent / "tables"
_user_tables: list[dict] = []
_forced: str | None = os.environ.get("HUMMING_AOT_INSTANCE") or None
_cache: dict = {}
_candidates: dict = {}  # (format, n, k, range, cc, layout, table) -> instances that run the problem
# Bumped whenever the tables or the forced instance change: layer plans compare it to know their
# cached choices still hold (the number of loaded tables alone does not tell reset + load apart).
_epoch = 0
_plans: dict = {}  # (format text, n, k, layout) -> the LayerPlan shared by every user of that weight
_warned: set = set()  # (format text, cc) that already had their slow-path warning


class DispatchError(ValueError):
    """No compiled instance can run the problem; the message says why for each candidate."""


class SlowPathWarning(UserWarning):
    """A format runs on the generic backend (the slow fallback) on this GPU: no fast kernel of this
    build computes it there, or none can run this problem."""


class SlowPathError(DispatchError):
    """HUMMING_STRICT=1 and the dispatcher would run the format on the generic backend on a GPU."""


# A tile cost's key: an optional kernel class (activation and code widths), the tile shape, an
# optional batch (humming.h, TileCost; tools/gen_instances.py parses the same grammar).
_TILE_COST_KEY = re.compile(r"(?:a(8|16)w(4|8):)?(\d+)x(\d+)x(\d+)(?:_b(\d+))?")


def _tile_costs(table: dict) -> dict:
    """{(kernel class or None, (tile_m, tile_n, tile_k), batch): [c0, c1, c2, c3(, c4)]} of a
    table's "tile_costs" (see humming.h's TileCost: c0 + c1 per thousand inputs of the busiest block
    + c2 per segment of it + c3 with a stream-K part + c4 per partial of the most split tile).
    The class is "a{act bits}w{code bits}"; None for a key without one, which covers the
    weight-only kernels (16-bit activations) of any code width."""
    out = {}
    for key, c in table.get("tile_costs", {}).items():
        if key.startswith("_"):
            continue
        act, code, tm, tn, tk, batch = _TILE_COST_KEY.fullmatch(key).groups()
        out[(f"a{act}w{code}" if act else None, (int(tm), int(tn), int(tk)), int(batch or 1))] = c
    return out


# An instance name's batch part, "_b<stages per batch>", which later parts ("_l4", "_lone") may
# follow (humming::name_batch in registry.cpp reads it the same way).
_BATCH = re.compile(r"_b(\d+)(?=_|$)")


@functools.lru_cache(maxsize=8192)
def _cost_class(name: str) -> tuple[str, int, int] | None:
    """(kernel class "a{act bits}w{code bits}", activation bits, batch) of a tiled instance's name;
    None for names without a tile (the generic backend's)."""
    fmt = re.search(r"_(a-.*_c-[a-z0-9]+)_t\d", name)
    if fmt is None:
        return None
    g = F.parse_gemm_format(fmt.group(1))
    batch = re.search(_BATCH, name)
    return f"a{g.act.type.bits}w{g.weight.code.bits}", g.act.type.bits, int(batch.group(1)) if batch else 1


def _cost_for(costs: dict, inst):
    """The tile cost of an instance (humming::tile_cost_covers): its kernel class's, else (16-bit
    activations) the weight-only one; None where none covers it."""
    found = _cost_class(inst.name)
    if found is None:
        return None
    cls, act_bits, batch = found
    tile = tuple(inst.tile)
    c = costs.get((cls, tile, batch))
    if c is None and act_bits == 16:
        c = costs.get((None, tile, batch))
    return c


def _validate_table(t: dict, origin: str) -> dict:
    if not isinstance(t, dict) or not isinstance(t.get("ranges"), list) or not t["ranges"]:
        raise ValueError(
            f"dispatch table {origin} needs a non-empty list 'ranges' of "
            "{{'m_max': int|null, 'n_min': int (optional), 'k_max': int (optional), 'prefer': [patterns]}}"
        )
    costs = t.get("tile_costs", {})
    ok = isinstance(costs, dict) and all(
        key.startswith("_")
        or (
            _TILE_COST_KEY.fullmatch(key)
            and isinstance(c, list)
            and len(c) in (4, 5)
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in c)
        )
        for key, c in (costs.items() if isinstance(costs, dict) else [])
    )
    if not ok:
        raise ValueError(
            f"dispatch table {origin}: 'tile_costs' maps tile shapes '[a8w4:]BMxBNxBK[_b2]' (an optional "
            "kernel class of activation and code widths, an optional batch) to 4 or 5 finite numbers (keys "
            "starting with '_' are notes)"
        )
    last = 0  # m_max of the last range without n_min or k_max
    ranges = t["ranges"]
    for i, r in enumerate(ranges):
        m_max = r.get("m_max")
        if not isinstance(r.get("prefer"), list) or not all(isinstance(p, str) for p in r["prefer"]):
            raise ValueError(f"dispatch table {origin}: range {i} needs 'prefer', a list of name patterns")
        for p in r["prefer"]:
            # The C++ dispatcher matches '*' and '?' only; keep both sides reading patterns alike.
            if any(c in p for c in "[]|"):
                raise ValueError(
                    f"dispatch table {origin}: pattern {p!r} in range {i} may use the wildcards '*' and '?' only"
                )
        if "estimate" in r and (not isinstance(r["estimate"], bool) or (r["estimate"] and not _tile_costs(t))):
            raise ValueError(
                f"dispatch table {origin}: 'estimate' of range {i} must be true or false, and true needs the "
                "table's 'tile_costs'"
            )
        if "why" in r and (not isinstance(r["why"], str) or not r["why"].strip()):
            raise ValueError(f"dispatch table {origin}: 'why' of range {i} must be a non-empty sentence")
        limits = [key for key in ("n_min", "k_max") if r.get(key) is not None]
        for key in limits:
            v = r[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"dispatch table {origin}: {key} must be a positive integer (range {i} has {v!r})")
        if limits:
            # A range for some layers only is followed by the one the other layers of its M range take.
            if i + 1 == len(ranges) or ranges[i + 1].get("m_max") != m_max:
                raise ValueError(
                    f"dispatch table {origin}: range {i} has {' and '.join(limits)}, so the next range must "
                    f"have the same m_max ({m_max!r}) for the other layers"
                )
            continue
        if m_max is None:
            if i != len(ranges) - 1:
                raise ValueError(f"dispatch table {origin}: only the last range may have m_max null")
        elif isinstance(m_max, bool) or not isinstance(m_max, int) or m_max <= last:  # JSON true is no bound
            raise ValueError(
                f"dispatch table {origin}: m_max values must be increasing positive integers (range {i} has {m_max!r})"
            )
        else:
            last = m_max
    if ranges[-1].get("m_max") is not None:
        raise ValueError(f"dispatch table {origin}: the last range must have m_max null (covers every larger m)")
    layouts = t.get("layouts", [])
    if not isinstance(layouts, list) or any(x not in _LAYOUT_IDS or x == "generic" for x in layouts):
        raise ValueError(
            f"dispatch table {origin}: 'layouts' lists fast layouts by name, in order of preference "
            f"({', '.join(n for n in _LAYOUT_IDS if n != 'generic')}); got {layouts!r}"
        )
    t.setdefault("name", origin)
    t.setdefault("match", {})
    return t


def _builtin_tables() -> list[dict]:
    tables = []
    for p in sorted(_TABLE_DIR.glob("*.json")):
        tables.append(_validate_table(json.loads(p.read_text()), p.name))
    tables.sort(key=lambda t: t["name"] == "default")  # default last
    return tables


_BUILTIN = _builtin_tables()


def load_table(table: str | os.PathLike | dict) -> dict:
    """Put a table (a dict or a JSON file) in front of the built-in ones; returns it."""
    global _epoch
    if isinstance(table, dict):
        t = _validate_table(dict(table), "<dict>")
    else:
        path = pathlib.Path(table)
        if not path.is_file():
            raise FileNotFoundError(f"dispatch table file {path} does not exist")
        t = _validate_table(json.loads(path.read_text()), str(path))
    _user_tables.insert(0, t)
    _cache.clear()
    _candidates.clear()
    _epoch += 1
    return t


def reset() -> None:
    """Forget loaded tables, a forced instance, cached choices and which formats were warned about."""
    global _forced, _epoch
    _user_tables.clear()
    _forced = None
    _cache.clear()
    _candidates.clear()
    _warned.clear()
    _epoch += 1


def force(name: str | None) -> None:
    """Use instance ``name`` for every call whose format it computes (None: back to the tables)."""
    global _forced, _epoch
    if name is not None:
        registry.find(name)  # raises KeyError naming the problem
    _forced = name
    _cache.clear()
    _candidates.clear()
    _epoch += 1


if os.environ.get("HUMMING_AOT_TABLE"):
    load_table(os.environ["HUMMING_AOT_TABLE"])


def _device_facts(device) -> tuple[int, int, str]:
    import torch

    dev = torch.device(device) if device is not None else torch.device("cuda", torch.cuda.current_device())
    if dev.type != "cuda":
        raise ValueError(f"instances run on CUDA devices; {dev} uses the CPU reference (no choice to make)")
    props = torch.cuda.get_device_properties(dev)
    return props.major * 10 + props.minor, props.multi_processor_count, props.name


def _table_for(cc: int, sms: int, name: str) -> dict:
    for t in _user_tables + _BUILTIN:
        m = t["match"]
        if "cc" in m and cc not in m["cc"]:
            continue
        if "sms" in m and sms != m["sms"]:
            continue
        if "name_contains" in m and m["name_contains"].lower() not in name.lower():
            continue
        return t
    raise AssertionError("the default table matches every device")


def _applies(r: dict, n: int, k: int) -> bool:
    return n >= r.get("n_min", 0) and ("k_max" not in r or k <= r["k_max"])


def _range_index(table: dict, m: int, n: int, k: int) -> int:
    """Index of the first range with m <= m_max (null: any m), n >= n_min and k <= k_max (absent:
    any n, any k)."""
    for i, r in enumerate(table["ranges"]):
        if _applies(r, n, k) and (r["m_max"] is None or m <= r["m_max"]):
            return i
    raise AssertionError("the last range covers every m and n")


def _bounds_for(table: dict, n: int, k: int) -> tuple[list, list]:
    """For layers of n channels and k inputs: the m_max bounds of the ranges that apply (for
    bisect) and their indices in the table."""
    idx = [i for i, r in enumerate(table["ranges"]) if _applies(r, n, k)]
    ends = [j for j, i in enumerate(idx) if table["ranges"][i]["m_max"] is None]
    idx = idx[: ends[0] + 1]  # the first that applies with m_max null covers every larger m
    return [table["ranges"][i]["m_max"] for i in idx[:-1]], idx


def _evaluate(g: F.GemmFormat, n: int, k: int, m: int, cc: int, layout: int):
    """Every instance with the reason it is or is not a candidate."""
    rows = []
    for inst in registry.instances():
        ok, why = C.check_instance(inst.name, str(g), layout, n, k, m)
        if ok:
            ok, why = registry.runs_on(inst.name, cc)
        rows.append((inst, bool(ok), why))
    return rows


def estimated_us(cost, backend: str, tile, fmt, n: int, k: int, m: int, sms: int, layout: int) -> float | None:
    """A tile cost's estimate (microseconds) of the launch of a ``backend`` kernel with this tile
    shape, or None where the cost model does not cover the kernel or the estimate is not positive
    (a fit extrapolated past its points): humming::estimated_us itself, so that both dispatchers
    apply one rule."""
    us = C.estimated_us(list(cost), backend, *tile, str(fmt), layout, n, k, m, sms)
    return us if us > 0 else None


# Launches of more rows of tiles are outside what tile costs are fitted to (scripts/sweep_tiles.py
# times none by default), so estimates leave them out (registry.cpp: kEstimateMaxTileRows), except
# for the weight-only tiles of 128 tokens and more, which session 64's sweeps timed up to 128 rows
# (registry.cpp: estimate_max_tile_rows).
_ESTIMATE_MAX_TILE_ROWS = 16
_ESTIMATE_MAX_TALL_TILE_ROWS = 128
_ESTIMATE_TALL_TILE = 128


def _estimate_max_tile_rows(inst) -> int:
    """The most rows of tiles an estimate covers for ``inst`` (its activation width read from its
    name, as its tile cost's class is)."""
    found = _cost_class(inst.name)
    tall = found is not None and found[1] == 16 and inst.tile[0] >= _ESTIMATE_TALL_TILE
    return _ESTIMATE_MAX_TALL_TILE_ROWS if tall else _ESTIMATE_MAX_TILE_ROWS


# How much taller than the lowest tile that holds m an estimate's candidates may be
# (registry.cpp: kEstimateMaxPad).
_ESTIMATE_MAX_PAD = 2


def _estimates(table: dict, candidates: list, problem: tuple) -> list[tuple[float, object]]:
    """(estimated us, instance) of the candidates an estimate range chooses among: those the
    table's tile costs cover (the sm90 kernels' persistent launches, _cost_for) with a positive
    estimate and at most _estimate_max_tile_rows rows of tiles, none taller than
    _ESTIMATE_MAX_PAD times the lowest of their tile heights that holds m, in candidate (name)
    order. humming::select_instance applies the same rule (registry.cpp, estimated_choice, which
    says why)."""
    g, n, k, m, sms, layout = problem
    costs = _tile_costs(table)
    covered = []
    for inst in candidates:
        if -(-m // inst.tile[0]) > _estimate_max_tile_rows(inst):
            continue
        c = _cost_for(costs, inst)
        us = None if c is None else estimated_us(c, inst.backend, inst.tile, g, n, k, m, sms, layout)
        if us is not None:
            covered.append((us, inst))
    heights = [i.tile[0] for _, i in covered]
    cap = min([h for h in heights if h >= m], default=max(heights, default=0))
    return [(us, i) for us, i in covered if i.tile[0] <= _ESTIMATE_MAX_PAD * cap]


def _pick(table: dict, idx: int, candidates: list, problem: tuple | None = None) -> tuple[object, str]:
    """The range's choice among candidates. ``problem`` (format, n, k, m, sms, layout) is needed in
    ranges with "estimate"."""
    if table["ranges"][idx].get("estimate") and problem is not None:
        est = _estimates(table, candidates, problem)
        if est:
            us, inst = min(est, key=lambda e: e[0])  # min keeps the first of equal estimates
            others = ", ".join(f"{i.name.rsplit('_t', 1)[-1]} {u:.1f}" for u, i in est if i is not inst)
            return inst, f"lowest estimated time, {us:.1f} us (tile costs; others: {others or 'none'})"
    for pattern in table["ranges"][idx]["prefer"]:
        for inst in candidates:
            if fnmatch.fnmatchcase(inst.name, pattern):
                return inst, f"first candidate matching {pattern!r}"
    fallback = sorted(candidates, key=lambda i: (i.backend == "generic", i.name))
    return fallback[0], "no preferred pattern matched; fallback (fast backends before generic)"


def choose(fmt, n: int, k: int, m: int, *, device=None, layout: int = 1) -> str:
    """Name of the instance that runs this problem on ``device`` (a CUDA device)."""
    fmt = F.parse_gemm_format(fmt)  # a bad format is reported before anything about the device
    cc, sms, dev_name = _device_facts(device)
    name = choose_for(fmt, n, k, m, cc=cc, sms=sms, device_name=dev_name, layout=layout)
    if _forced is None and is_generic(name):
        _report_slow_path(fmt, n, k, m, cc, dev_name, layout, name)
    return name


def _check_problem(n, k, layout) -> tuple[int, int, int]:
    """The weight's extents and layout id as ints, or a ValueError naming the bad one (before any
    table lookup: a negative n would find no range, an out-of-range layout id no C++ overload)."""
    layout = layout_id(layout)
    n, k = operator.index(n), operator.index(k)
    if n <= 0 or k <= 0:
        raise ValueError(f"the weight's extents must be positive, got n={n}, k={k}")
    return n, k, layout


def choose_for(fmt, n: int, k: int, m: int, *, cc: int, sms: int, device_name: str = "", layout: int = 1) -> str:
    """``choose`` for a device described by its compute capability (major * 10 + minor) and
    multiprocessor count; needs no GPU. The C++ default choice (``humming::select_instance``)
    follows the same built-in tables and rules."""
    g = F.parse_gemm_format(fmt)
    n, k, layout = _check_problem(n, k, layout)
    table = _table_for(cc, sms, device_name)
    idx = _range_index(table, m, n, k)
    # An estimate range's choice depends on m itself, not only on its range.
    key = (str(g), n, k, idx, m if table["ranges"][idx].get("estimate") else None, cc, sms, layout, id(table), _forced)
    hit = _cache.get(key)
    if hit is not None:
        return hit
    candidates, rows = _range_candidates(table, idx, g, n, k, m, cc, layout)
    if _forced is not None:
        if _forced not in {i.name for i in candidates}:
            why = next((w for i, _, w in rows if i.name == _forced), "")
            raise DispatchError(f"forced instance {_forced} cannot run {g} with n={n}, k={k}, m={m}: {why}")
        name = _forced
    else:
        if not candidates:
            raise DispatchError(_no_candidate_message(g, n, k, m, cc, rows))
        if rows is None and table["ranges"][idx].get("estimate"):
            # Candidates found at another m of the range: the estimate's own ones must run this m.
            costs = _tile_costs(table)
            candidates = [
                i
                for i in candidates
                if _cost_for(costs, i) is None or C.check_instance(i.name, str(g), layout, n, k, m)[0]
            ]
        name = _pick(table, idx, candidates, (g, n, k, m, sms, layout))[0].name
    if len(_cache) >= 65536:  # bounded: estimate ranges keep one choice per m
        _cache.clear()
    _cache[key] = name
    return name


def two_blocks(inst) -> bool:
    """Whether sm90 weight-only instance ``inst`` gives each consumer warpgroup two 64-channel
    blocks (session 62): more channels than 64 a consumer warpgroup (its threads are a producer
    warpgroup and the consumers). As registry.cpp's two_blocks: a default choice only where the
    table has the tile's cost (t176x256x64 since session 64) or nothing else computes the format;
    ``instance=`` takes any of them."""
    return inst.backend == "sm90" and inst.act_type in ("bf16", "f16") and inst.tile[1] > 64 * (inst.threads // 128 - 1)


def _weighed(table: dict, candidates: list) -> list:
    """The candidates a default choice is made among: no two-block tile the table has no cost for,
    unless nothing else computes the problem (registry.cpp select_instance)."""
    costs = _tile_costs(table)
    weighed = [i for i in candidates if not two_blocks(i) or _cost_for(costs, i) is not None]
    return weighed or candidates


def _range_candidates(table: dict, idx: int, g, n: int, k: int, m: int, cc: int, layout: int):
    """(instances that run the problem, the evaluated rows or None where they came from the cache).
    A range's candidates are found once (checking every instance of a full build takes
    milliseconds), as the choice of a range without estimates always was; an estimate range's
    choice for a new m re-checks only the instances its estimate covers (choose_for)."""
    ckey = (str(g), n, k, idx, cc, layout, id(table))
    candidates = None if _forced is not None else _candidates.get(ckey)
    if candidates is not None:
        return candidates, None
    rows = _evaluate(g, n, k, m, cc, layout)
    candidates = [inst for inst, ok, _ in rows if ok]
    if _forced is None:
        candidates = _weighed(table, candidates)
    if candidates and _forced is None:
        if len(_candidates) >= 4096:
            _candidates.clear()
        _candidates[ckey] = candidates
    return candidates, rows


def _no_candidate_message(g, n, k, m, cc, rows) -> str:
    info = registry.build_info()
    archs = ", ".join(f"sm_{a}" for a in info["archs"])
    same_fmt = [(i, w) for i, ok, w in rows if "does not compute" not in w]
    detail = "; ".join(f"{i.name}: {w}" for i, w in same_fmt[:5])
    covered, why = registry.device_covered(cc)
    if not covered:  # nothing of this build runs here at all: say what would
        return f"no compiled instance runs on sm_{cc}: {why}"
    return (
        f"no compiled instance runs {g} with n={n}, k={k}, m={m} on sm_{cc}. This build ({info['profile']} "
        f"profile, {archs}) has {len(rows)} instances"
        + (f"; those for this format: {detail}" if detail else ", none for this format")
    )


# ---- no silent slow path -------------------------------------------------------------------------

_QUANTIZED_ACT = ("e4m3", "e5m2", "i8")
_generic_names: set | None = None


def is_generic(name: str) -> bool:
    """Whether the instance named ``name`` belongs to the generic backend (False for unknown names)."""
    global _generic_names
    if _generic_names is None:  # built on first use: choose() asks on every call
        _generic_names = {i.name for i in registry.instances() if i.backend == "generic"}
    return name in _generic_names


def _computes(inst, g: F.GemmFormat) -> bool:
    """Whether ``inst``'s key (types, zero point kind, group sizes; not the layout or the problem's
    extents) covers format ``g``."""
    scale = str(g.weight.scale) if g.weight.scale is not None else "none"
    if (inst.act_type, inst.code_type, inst.scale_type, inst.zero, inst.out_type) != (
        str(g.act.type),
        str(g.weight.code),
        scale,
        g.weight.zero,
        str(g.out),
    ):
        return False
    gran = {"none": 0, "token": 1, "group": 2}[g.act.granularity]
    return (
        inst.group_k in (-1, g.weight.group_k)
        and inst.group_n in (-1, g.weight.group_n)
        and getattr(inst, "act_granularity", -1) in (-1, gran)
    )


def instance_format(inst) -> str:
    """The GEMM format an instance computes, as text: ``g*`` where it takes any K group size, ``-*``
    after a quantized activation type (per-token and per-group scales)."""
    w = inst.code_type
    if inst.scale_type != "none":
        w += {-1: "g*", 0: "gc"}.get(inst.group_k, f"g{inst.group_k}")
        if inst.group_n not in (-1, 1):
            w += f"n{inst.group_n}"
        w += f"-s{inst.scale_type}" + {"none": "", "int": "-zi", "float": "-zf"}[inst.zero]
    act = inst.act_type + ("-*" if inst.act_type in _QUANTIZED_ACT else "")
    return f"a-{act}_w-{w}_c-{inst.out_type}"


def slow_path_note(fmt, chosen, device: str, instances, layout: int = 1, refused: dict | None = None) -> str | None:
    """What a user must be told when ``chosen`` (a registry.Instance) is to run ``fmt`` on a GPU:
    None for an instance of a fast backend; for the generic backend, a sentence naming the format,
    the device and the formats with fast kernels there. Pure (no GPU, no global state), so that it
    can be tested with hand-made instances.

    ``device``: the device in words (e.g. "NVIDIA H200 (sm_90)"); ``instances``: the instances of
    the build that run on it; ``layout``: the weight's layout id; ``refused``: instance name ->
    reason, for fast instances that compute the format but refused this problem (extents, alignment).
    """
    if chosen.backend != "generic":
        return None
    g = F.parse_gemm_format(fmt)
    fast = [i for i in instances if i.backend != "generic"]
    same = [i for i in fast if _computes(i, g)]
    text = f"{g} runs on the slow fallback (generic backend, {chosen.name}) on {device}"
    other_layout = sorted({i.layout for i in same if i.layout != layout})
    refused = {name: why for name, why in (refused or {}).items() if any(i.name == name for i in same)}
    if refused:
        text += "; the fast kernels for this format here cannot run this problem: " + "; ".join(
            f"{name}: {why}" for name, why in sorted(refused.items())
        )
    elif other_layout:
        names = " or ".join(repr(LAYOUT_NAMES.get(x, str(x))) for x in other_layout)
        text += (
            f"; its fast kernels here read another weight layout: pack the weight with layout={names} "
            "(QuantLinear.from_linear(..., layout='auto') picks it)"
        )
    else:
        text += "; this build has no fast kernel for it on this device"
    formats = sorted({instance_format(i) for i in fast})
    text += (
        ". Formats with fast kernels on this device: " + ", ".join(formats)
        if formats
        else ". This build has no fast kernel for any format on this device"
    )
    return text + "."


def strict() -> bool:
    """Whether env HUMMING_STRICT asks for an error instead of a slow-path warning."""
    return os.environ.get("HUMMING_STRICT", "0") not in ("", "0")


def note_slow_path(key, note: str | None) -> None:
    """Act on a :func:`slow_path_note`: nothing for None; with HUMMING_STRICT=1 raise
    :class:`SlowPathError`; otherwise warn once per ``key`` (format and device class)."""
    if note is None:
        return
    if strict():
        raise SlowPathError(note + " HUMMING_STRICT=1 makes this an error; unset it to accept the fallback.")
    if key in _warned:
        return
    _warned.add(key)
    # stacklevel: points at the caller of choose() / the layer, not at this module
    warnings.warn(note + " Set HUMMING_STRICT=1 to make this an error.", SlowPathWarning, stacklevel=4)


def _slow_path_facts(g, n, k, m, cc, dev_name, layout, name):
    """slow_path_note's arguments for a real choice (evaluates every instance: only on the first
    generic choice of a format, or under HUMMING_STRICT=1)."""
    rows = _evaluate(g, n, k, m, cc, layout)
    here = [i for i in registry.instances() if registry.runs_on(i.name, cc)[0]]
    refused = {
        i.name: why
        for i, ok, why in rows
        if not ok
        and i.backend != "generic"
        and "does not compute" not in why
        and i.layout == layout
        and registry.runs_on(i.name, cc)[0]
    }
    device = f"{dev_name} (sm_{cc})" if dev_name else f"sm_{cc}"
    return registry.find(name), device, here, refused


def _report_slow_path(g, n, k, m, cc, dev_name, layout, name) -> None:
    key = (str(g), cc)
    if key in _warned and not strict():
        return  # the per-call cost of a warned format: one set lookup
    chosen, device, here, refused = _slow_path_facts(g, n, k, m, cc, dev_name, layout, name)
    note_slow_path(key, slow_path_note(g, chosen, device, here, layout, refused))


def explain(fmt, n: int, k: int, m: int, *, device=None, layout: int = 1) -> str:
    """Why ``choose`` picks what it picks: device, table, M range and every relevant instance."""
    g = F.parse_gemm_format(fmt)
    cc, sms, dev_name = _device_facts(device)
    table = _table_for(cc, sms, dev_name)
    idx = _range_index(table, m, n, k)
    r = table["ranges"][idx]
    bounds, applying = _bounds_for(table, n, k)
    pos = applying.index(idx)
    lo = bounds[pos - 1] + 1 if pos else 1
    hi = "inf" if r["m_max"] is None else r["m_max"]
    wide = (f", n >= {r['n_min']}" if "n_min" in r else "") + (f", k <= {r['k_max']}" if "k_max" in r else "")
    lines = [
        f"format {g}, n={n}, k={k}, m={m}, layout {layout}",
        f"device {dev_name} (sm_{cc}, {sms} SMs); table {table['name']!r}, range m in [{lo}, {hi}]{wide} "
        f"prefers {r['prefer']}",
    ]
    if "why" in r:  # the measurement behind the range's order, as the table records it
        lines.append(f"why this order: {r['why']}")
    rows = _evaluate(g, n, k, m, cc, layout)
    candidates = [i for i, ok, _ in rows if ok]
    for inst, ok, why in rows:
        if "does not compute" in why and not ok:
            continue  # other formats: not worth a line each
        lines.append(f"  {'candidate' if ok else 'rejected '} {inst.name}" + ("" if ok else f": {why}"))
    others = sum(1 for _, ok, why in rows if not ok and "does not compute" in why)
    lines.append(f"  ({others} instances compute other formats)")
    if _forced is not None:
        lines.append(f"forced instance: {_forced}")
    if candidates:
        chooses_among = candidates if _forced is not None else _weighed(table, candidates)
        left_out = len(candidates) - len(chooses_among)
        if left_out:
            lines.append(f"  ({left_out} two-block tiles without a cost in this table: only by name)")
        inst, reason = _pick(table, idx, chooses_among, (g, n, k, m, sms, layout))
        lines.append(f"choice: {_forced or inst.name} ({'forced' if _forced else reason})")
        if _forced is None and inst.backend == "generic":
            chosen, device_text, here, refused = _slow_path_facts(g, n, k, m, cc, dev_name, layout, inst.name)
            lines.append(f"slow path: {slow_path_note(g, chosen, device_text, here, layout, refused)}")
            lines.append(
                "HUMMING_STRICT=1 is set: this call raises SlowPathError"
                if strict()
                else "(warned once, on the first call of this format on this device class; HUMMING_STRICT=1 "
                "makes it an error)"
            )
    else:
        lines.append("choice: none; " + _no_candidate_message(g, n, k, m, cc, rows))
    return "\n".join(lines)


class LayerPlan:
    """Per-layer cache of choices: one dictionary lookup per call after the first call of an M range."""

    def __init__(self, fmt, n: int, k: int, layout: int = 1):
        self.fmt = F.parse_gemm_format(fmt)
        self.fmt_str = str(self.fmt)
        self.n, self.k, self.layout = _check_problem(n, k, layout)
        self._per_device: dict = {}

    def instance_at(self, m: int, index: int) -> str:
        """``instance`` for CUDA device number ``index``: the per-call path of QuantLinear, which
        builds no torch.device when the choice for this M range is cached."""
        state = self._per_device.get(index)
        if state is not None and state[2] == _epoch:
            name = state[1].get(bisect.bisect_left(state[0], m))
            if type(name) is dict:  # an estimate range: one choice per m
                name = name.get(m)
            if name is not None:
                return name
        import torch

        return self.instance(m, torch.device("cuda", index))

    def instance(self, m: int, device) -> str:
        state = self._per_device.get(device.index)
        if state is None or state[2] != _epoch:
            cc, sms, name = _device_facts(device)
            table = _table_for(cc, sms, name)
            bounds, idx = _bounds_for(table, self.n, self.k)
            by_m = {j for j, i in enumerate(idx) if table["ranges"][i].get("estimate")}
            state = (bounds, {}, _epoch, by_m)
            self._per_device[device.index] = state
        bounds, chosen, _, by_m = state
        b = bisect.bisect_left(bounds, m)
        name = chosen.get(b)
        if type(name) is dict:
            name = name.get(m)
        if name is None:
            name = choose(self.fmt, self.n, self.k, m, device=device, layout=self.layout)
            if b in by_m:
                per_m = chosen.setdefault(b, {})
                if len(per_m) >= 4096:  # bounded: a server sees far fewer distinct batch sizes
                    per_m.clear()
                per_m[m] = name
            else:
                chosen[b] = name
        return name

    def preload(self, device) -> list[str]:
        """Chooses this layer's instance for every M range of ``device``'s table and loads their
        kernels there (CUDA loads a kernel's module on its first launch, 2 to 5 ms each), and
        allocates the current stream's stream-K scratch, so that no call pays either later. Ranges whose choice fails (no instance, or HUMMING_STRICT refusing the
        generic backend) are left to the call, which reports them. Returns the instances loaded."""
        import torch

        device = torch.device(device)
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        cc, sms, dev_name = _device_facts(device)
        table = _table_for(cc, sms, dev_name)
        bounds, idx = _bounds_for(table, self.n, self.k)
        names: list[str] = []
        for m, i in zip(list(bounds) + [(bounds[-1] + 1) if bounds else 1], idx):
            try:
                name = self.instance(m, device)
            except DispatchError:
                continue
            found = [name]
            if table["ranges"][i].get("estimate") and _forced is None:
                # Any instance the estimate may take at some m of the range (up to its largest m).
                cands = _range_candidates(table, i, self.fmt, self.n, self.k, m, cc, self.layout)[0]
                est = _estimates(table, cands, (self.fmt, self.n, self.k, m, sms, self.layout))
                found += [inst.name for _, inst in est]
            for x in found:
                if x not in names:
                    names.append(x)
        for name in names:
            if (name, device.index) in _prepared:
                continue
            ok, why = C.prepare_instance(name, device.index)
            if not ok:
                raise DispatchError(f"loading {name} on {device} failed: {why}")
            _prepared.add((name, device.index))
        # The stream-K scratch of the current stream too (allocated and zeroed once per stream; a
        # lookup after that), where the build has the op.
        warm = getattr(C, "warm_workspace", None)
        if warm is not None:
            warm(device.index)
        return names


_prepared: set = set()  # (instance name, device index) whose kernels LayerPlan.preload loaded


def layer_plan(fmt, n: int, k: int, layout: int = 1) -> LayerPlan:
    """The LayerPlan of a weight of this format and shape: QuantLinear's eager calls and
    torch.ops.humming.auto_gemm (what compiled graphs call) share it, so both make one choice."""
    key = (str(fmt), int(n), int(k), int(layout))
    plan = _plans.get(key)
    if plan is None:
        if len(_plans) >= 4096:  # bounded: a model has far fewer distinct layer shapes
            _plans.clear()
        plan = _plans[key] = LayerPlan(fmt, n, k, layout)
    return plan


def preferred_layout(fmt, device=None, n: int | None = None, k: int | None = None) -> int:
    """The layout to pack a weight in for ``fmt`` on ``device``: the first layout of the device's
    table (its optional ``layouts`` list, by name, in order of preference; without one, the order
    of the registry) that a fast instance computing the format there reads, else the generic
    layout (1). CPU devices get the generic one. Given the layer's ``n`` and ``k``, a layout counts
    only where such an instance can run that shape (a layer of 77 inputs, say, gets the generic
    layout, which the generic backend runs for any shape, instead of one no kernel can run)."""
    import torch

    g = F.parse_gemm_format(fmt)
    dev = torch.device(device) if device is not None else None
    if dev is None or dev.type != "cuda":
        return 1
    cc, sms, name = _device_facts(dev)
    return _preferred_layout_for(g, cc, sms, name, n, k)


def fast_layouts(fmt, device=None, n: int | None = None, k: int | None = None) -> list[int]:
    """The layout ids that a fast (not generic) instance computing ``fmt`` on ``device`` reads, in
    registry order (given ``n`` and ``k``, only where such an instance can run that shape); empty
    on the CPU, or where only the generic backend computes the format."""
    import torch

    g = F.parse_gemm_format(fmt)
    dev = torch.device(device) if device is not None else None
    if dev is None or dev.type != "cuda":
        return []
    return _fast_layouts_for(g, _device_facts(dev)[0], n, k)


def _fast_layouts_for(g: F.GemmFormat, cc: int, n: int | None, k: int | None) -> list[int]:
    return list(_fast_layouts_cached(g, cc, n, k))


# The registry is fixed for the process, so the scan is made once per (format, device, shape):
# replace_linears asks it up to three times per layer (scale rounding, then the layout), and a
# model's layers share a few shapes.
@functools.lru_cache(maxsize=4096)
def _fast_layouts_cached(g: F.GemmFormat, cc: int, n: int | None, k: int | None) -> tuple[int, ...]:
    found = []
    text = str(g)
    for inst in registry.instances():
        if inst.layout == 1 or inst.layout in found or not _computes(inst, g):
            continue
        if not registry.runs_on(inst.name, cc)[0]:
            continue
        if n is not None and k is not None and not C.check_instance(inst.name, text, inst.layout, n, k, 1)[0]:
            continue
        found.append(inst.layout)
    return tuple(found)


def _preferred_layout_for(g: F.GemmFormat, cc: int, sms: int, name: str, n: int | None, k: int | None) -> int:
    """preferred_layout for a device described by its facts (needs no GPU)."""
    found = _fast_layouts_for(g, cc, n, k)
    order = [_LAYOUT_IDS[lay] for lay in _table_for(cc, sms, name).get("layouts", [])]
    for lid in order + found:
        if lid in found:
            return lid
    return 1
