"""Choosing a compiled instance for (format, device, n, k, m).

The built-in tables are also compiled into libhumming (tools/gen_instances.py), whose
``humming::select_instance`` applies the same rules; tests keep the two choices equal.

Choices come from M-range tables kept as data (``humming_aot/tables/*.json``; the first table
whose ``match`` fits the device wins, ``default.json`` last). A range lists instance-name patterns
in order of preference; a range with ``n_min`` applies only to layers of at least that many output
channels and is followed by the range of the same ``m_max`` that the other layers take. The choice for one (format, n, k, device, M range) is cached, so a layer
pays a dictionary lookup per call. Overrides:

* ``load_table(path_or_dict)`` puts a tuned table in front of the built-in ones;
* ``force(name)`` (or env ``HUMMING_AOT_INSTANCE``) makes every matching call use one instance;
* env ``HUMMING_AOT_TABLE`` names a table file loaded at import.

``explain(...)`` returns the reasoning behind a choice as text.
"""

from __future__ import annotations

import bisect
import fnmatch
import json
import os
import pathlib

from . import formats as F
from . import registry
from ._ext import C
from .pack import LAYOUTS as _LAYOUT_IDS  # the layouts a table's optional "layouts" list names

_TABLE_DIR = pathlib.Path(__file__).resolve().parent / "tables"
_user_tables: list[dict] = []
_forced: str | None = os.environ.get("HUMMING_AOT_INSTANCE") or None
_cache: dict = {}


class DispatchError(ValueError):
    """No compiled instance can run the problem; the message says why for each candidate."""


def _validate_table(t: dict, origin: str) -> dict:
    if not isinstance(t, dict) or not isinstance(t.get("ranges"), list) or not t["ranges"]:
        raise ValueError(f"dispatch table {origin} needs a non-empty list 'ranges' of "
                         "{{'m_max': int|null, 'n_min': int (optional), 'prefer': [patterns]}}")
    last = 0  # m_max of the last range without n_min
    ranges = t["ranges"]
    for i, r in enumerate(ranges):
        m_max = r.get("m_max")
        if not isinstance(r.get("prefer"), list) or not all(isinstance(p, str) for p in r["prefer"]):
            raise ValueError(f"dispatch table {origin}: range {i} needs 'prefer', a list of name patterns")
        for p in r["prefer"]:
            # The C++ dispatcher matches '*' and '?' only; keep both sides reading patterns alike.
            if any(c in p for c in "[]|"):
                raise ValueError(f"dispatch table {origin}: pattern {p!r} in range {i} may use the wildcards '*' "
                                 "and '?' only")
        n_min = r.get("n_min")
        if n_min is not None:
            if isinstance(n_min, bool) or not isinstance(n_min, int) or n_min < 1:
                raise ValueError(f"dispatch table {origin}: n_min must be a positive integer (range {i} has "
                                 f"{n_min!r})")
            # A range for wide layers only is followed by the one the other layers of its M range take.
            if i + 1 == len(ranges) or ranges[i + 1].get("m_max") != m_max:
                raise ValueError(f"dispatch table {origin}: range {i} has n_min, so the next range must have the "
                                 f"same m_max ({m_max!r}) for the narrower layers")
            continue
        if m_max is None:
            if i != len(ranges) - 1:
                raise ValueError(f"dispatch table {origin}: only the last range may have m_max null")
        elif isinstance(m_max, bool) or not isinstance(m_max, int) or m_max <= last:  # JSON true is no bound
            raise ValueError(f"dispatch table {origin}: m_max values must be increasing positive integers "
                             f"(range {i} has {m_max!r})")
        else:
            last = m_max
    if ranges[-1].get("m_max") is not None:
        raise ValueError(f"dispatch table {origin}: the last range must have m_max null (covers every larger m)")
    layouts = t.get("layouts", [])
    if not isinstance(layouts, list) or any(x not in _LAYOUT_IDS or x == "generic" for x in layouts):
        raise ValueError(f"dispatch table {origin}: 'layouts' lists fast layouts by name, in order of preference "
                         f"({', '.join(n for n in _LAYOUT_IDS if n != 'generic')}); got {layouts!r}")
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
    if isinstance(table, dict):
        t = _validate_table(dict(table), "<dict>")
    else:
        path = pathlib.Path(table)
        if not path.is_file():
            raise FileNotFoundError(f"dispatch table file {path} does not exist")
        t = _validate_table(json.loads(path.read_text()), str(path))
    _user_tables.insert(0, t)
    _cache.clear()
    return t


def reset() -> None:
    """Forget loaded tables, a forced instance and cached choices."""
    global _forced
    _user_tables.clear()
    _forced = None
    _cache.clear()


def force(name: str | None) -> None:
    """Use instance ``name`` for every call whose format it computes (None: back to the tables)."""
    global _forced
    if name is not None:
        registry.find(name)  # raises KeyError naming the problem
    _forced = name
    _cache.clear()


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


def _applies(r: dict, n: int) -> bool:
    return n >= r.get("n_min", 0)


def _range_index(table: dict, m: int, n: int) -> int:
    """Index of the first range with m <= m_max (null: any m) and n >= n_min (absent: any n)."""
    for i, r in enumerate(table["ranges"]):
        if _applies(r, n) and (r["m_max"] is None or m <= r["m_max"]):
            return i
    raise AssertionError("the last range covers every m and n")


def _bounds_for(table: dict, n: int) -> tuple[list, list]:
    """For layers of n channels: the m_max bounds of the ranges that apply (for bisect) and their
    indices in the table."""
    idx = [i for i, r in enumerate(table["ranges"]) if _applies(r, n)]
    ends = [j for j, i in enumerate(idx) if table["ranges"][i]["m_max"] is None]
    idx = idx[:ends[0] + 1]  # the first that applies with m_max null covers every larger m
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


def _pick(table: dict, idx: int, candidates: list) -> tuple[object, str]:
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
    return choose_for(fmt, n, k, m, cc=cc, sms=sms, device_name=dev_name, layout=layout)


def choose_for(fmt, n: int, k: int, m: int, *, cc: int, sms: int, device_name: str = "", layout: int = 1) -> str:
    """``choose`` for a device described by its compute capability (major * 10 + minor) and
    multiprocessor count; needs no GPU. The C++ default choice (``humming::select_instance``)
    follows the same built-in tables and rules."""
    g = F.parse_gemm_format(fmt)
    table = _table_for(cc, sms, device_name)
    idx = _range_index(table, m, n)
    key = (str(g), n, k, idx, cc, sms, layout, id(table), _forced)
    hit = _cache.get(key)
    if hit is not None:
        return hit
    rows = _evaluate(g, n, k, m, cc, layout)
    candidates = [inst for inst, ok, _ in rows if ok]
    if _forced is not None:
        if _forced not in {i.name for i in candidates}:
            why = next((w for i, _, w in rows if i.name == _forced), "")
            raise DispatchError(f"forced instance {_forced} cannot run {g} with n={n}, k={k}, m={m}: {why}")
        name = _forced
    else:
        if not candidates:
            raise DispatchError(_no_candidate_message(g, n, k, m, cc, rows))
        name = _pick(table, idx, candidates)[0].name
    _cache[key] = name
    return name


def _no_candidate_message(g, n, k, m, cc, rows) -> str:
    info = registry.build_info()
    archs = ", ".join(f"sm_{a}" for a in info["archs"])
    same_fmt = [(i, w) for i, ok, w in rows if "does not compute" not in w]
    detail = "; ".join(f"{i.name}: {w}" for i, w in same_fmt[:5])
    return (f"no compiled instance runs {g} with n={n}, k={k}, m={m} on sm_{cc}. This build ({info['profile']} "
            f"profile, {archs}) has {len(rows)} instances" + (f"; those for this format: {detail}" if detail else
                                                              ", none for this format"))


def explain(fmt, n: int, k: int, m: int, *, device=None, layout: int = 1) -> str:
    """Why ``choose`` picks what it picks: device, table, M range and every relevant instance."""
    g = F.parse_gemm_format(fmt)
    cc, sms, dev_name = _device_facts(device)
    table = _table_for(cc, sms, dev_name)
    idx = _range_index(table, m, n)
    r = table["ranges"][idx]
    bounds, applying = _bounds_for(table, n)
    pos = applying.index(idx)
    lo = bounds[pos - 1] + 1 if pos else 1
    hi = "inf" if r["m_max"] is None else r["m_max"]
    wide = f", n >= {r['n_min']}" if "n_min" in r else ""
    lines = [f"format {g}, n={n}, k={k}, m={m}, layout {layout}",
             f"device {dev_name} (sm_{cc}, {sms} SMs); table {table['name']!r}, range m in [{lo}, {hi}]{wide} "
             f"prefers {r['prefer']}"]
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
        inst, reason = _pick(table, idx, candidates)
        lines.append(f"choice: {_forced or inst.name} ({'forced' if _forced else reason})")
    else:
        lines.append("choice: none; " + _no_candidate_message(g, n, k, m, cc, rows))
    return "\n".join(lines)


class LayerPlan:
    """Per-layer cache of choices: one dictionary lookup per call after the first call of an M range."""

    def __init__(self, fmt, n: int, k: int, layout: int = 1):
        self.fmt = F.parse_gemm_format(fmt)
        self.fmt_str = str(self.fmt)
        self.n, self.k, self.layout = int(n), int(k), int(layout)
        self._per_device: dict = {}

    def instance_at(self, m: int, index: int) -> str:
        """``instance`` for CUDA device number ``index``: the per-call path of QuantLinear, which
        builds no torch.device when the choice for this M range is cached."""
        state = self._per_device.get(index)
        if state is not None and state[2] is _forced and state[3] == len(_user_tables):
            name = state[1].get(bisect.bisect_left(state[0], m))
            if name is not None:
                return name
        import torch

        return self.instance(m, torch.device("cuda", index))

    def instance(self, m: int, device) -> str:
        state = self._per_device.get(device.index)
        if state is None or state[2] != _forced or state[3] != len(_user_tables):
            cc, sms, name = _device_facts(device)
            table = _table_for(cc, sms, name)
            state = (_bounds_for(table, self.n)[0], {}, _forced, len(_user_tables))
            self._per_device[device.index] = state
        bounds, chosen, _, _ = state
        b = bisect.bisect_left(bounds, m)
        name = chosen.get(b)
        if name is None:
            name = choose(self.fmt, self.n, self.k, m, device=device, layout=self.layout)
            chosen[b] = name
        return name



def preferred_layout(fmt, device=None) -> int:
    """The layout to pack a weight in for ``fmt`` on ``device``: the first layout of the device's
    table (its optional ``layouts`` list, by name, in order of preference; without one, the order
    of the registry) that a fast instance computing the format there reads, else the generic
    layout (1). CPU devices get the generic one."""
    import torch

    g = F.parse_gemm_format(fmt)
    dev = torch.device(device) if device is not None else None
    if dev is None or dev.type != "cuda":
        return 1
    cc, sms, name = _device_facts(dev)
    scale = str(g.weight.scale) if g.weight.scale is not None else "none"
    found = []
    for inst in registry.instances():
        if inst.layout == 1 or inst.layout in found:
            continue
        if (inst.act_type, inst.code_type, inst.scale_type, inst.zero, inst.out_type) != (
                str(g.act.type), str(g.weight.code), scale, g.weight.zero, str(g.out)):
            continue
        if inst.group_k not in (-1, g.weight.group_k) or inst.group_n not in (-1, g.weight.group_n):
            continue
        if g.act.quantized or not registry.runs_on(inst.name, cc)[0]:
            continue
        found.append(inst.layout)
    order = [_LAYOUT_IDS[n] for n in _table_for(cc, sms, name).get("layouts", [])]
    for lid in order + found:
        if lid in found:
            return lid
    return 1
