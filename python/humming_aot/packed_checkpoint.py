"""Pack once, load many times: checkpoints of weights already packed for one layout.

:func:`save_packed` (the ``humming-aot convert`` command) packs imported weights for one layout
and writes them as safetensors; :func:`load_packed` reads them back as :class:`PackedLayer`
objects, which ``replace_linears`` wraps in ``QuantLinear`` without calling ``pack_weight``.
``load_quantized(directory)`` does the same when the directory holds a packed checkpoint.

A packed checkpoint directory holds

* ``humming_aot_packed.json``, the manifest: ``format`` (``"humming-aot-packed"``),
  ``schema_version``, ``humming_aot_version``, ``layout`` (id) and ``layout_name``, and
  ``layers``: ``{layer_prefix: {"file": shard, "parts": None | count}}``. Its presence is what
  marks the directory as packed.
* ``packed-NNNNN.safetensors`` shards. For a layer ``P`` (or part ``i`` of a list-valued layer,
  gpt-oss experts: ``P[i]``) the tensors are ``P.hm_codes`` (int32 [n_pad, words_per_row]),
  ``P.hm_scales`` and ``P.hm_zeros`` ([k_groups, n_groups], when the format has them),
  ``P.hm_global_scale`` (fp32 [1], when it has one) and ``P.hm_perm`` (int64 [k], act-order
  layers only): ``PackedWeight``'s fields and ``ConvertedWeight.perm`` as they are. The header
  metadata repeats the manifest's ``humming_aot.*`` keys (schema, version, layout id and name) and
  has ``humming_aot.layers``: JSON ``{P: {"fmt", "n", "k", "n_pad", "k_pad", "perm", "source"}}``.

Loading checks, before anything is returned, that the manifest and every header agree on the
schema version and the layout, that the layout is the one asked for, and that each tensor has the
shape and dtype that the format and the recorded shapes give (``packed_dims``): a file edited or
written by another version fails naming the file and tensor instead of giving wrong results.
Only quantized layers are stored; the model's other tensors stay in the source checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from . import formats as F
from .convert import ConvertedWeight

__all__ = [
    "FORMAT",
    "MANIFEST",
    "SCHEMA_VERSION",
    "PackedCheckpointError",
    "PackedLayer",
    "is_packed_checkpoint",
    "load_packed",
    "save_packed",
]

MANIFEST = "humming_aot_packed.json"
FORMAT = "humming-aot-packed"
# Bump when the stored tensors or their meaning change (names, packing of a layout, metadata keys);
# a loader accepts only the schema versions it reads right, since an old file would be misread, not
# just slow. Schema 2 (session 39) spreads the bits of e2m1 codes in layout 3 (layout/sm90.h); a
# schema-1 file reads the same in every other layout and format, so it stays readable but for its
# e2m1 weights in layout 3, which are refused (_check_codes). Schema 3 spreads them in layout 4 too
# (layout/sm90_a8.h fp4_order): earlier files' e2m1 weights in layout 4 are refused likewise.
# Schema 4 (session 48) stores layout 4's 128-input chunks K tile by K tile instead of channel by
# channel (layout/sm90_a8.h word_index): every weight in layout 4 from an earlier schema is refused.
SCHEMA_VERSION = 4
_READABLE_SCHEMAS = ("1", "2", "3", "4")
_SUFFIXES = ("hm_codes", "hm_scales", "hm_zeros", "hm_global_scale", "hm_perm")


class PackedCheckpointError(ValueError):
    """A packed checkpoint that cannot be used as asked: another layout, another schema version,
    or tensors that disagree with the recorded format and shapes."""


@dataclasses.dataclass
class PackedLayer:
    """One layer of a packed checkpoint: ``packed`` for ``QuantLinear.from_packed`` and ``perm``
    (``ConvertedWeight.perm``: the input permutation of act-order layers, else None)."""

    packed: Any  # pack.PackedWeight (imported lazily: pack needs the compiled extension)
    perm: torch.Tensor | None = None
    source: str = ""

    @property
    def fmt(self) -> F.WeightFormat:
        return self.packed.fmt


def _version() -> str:
    from . import __version__

    return __version__


def is_packed_checkpoint(directory: str | os.PathLike) -> bool:
    return os.path.isfile(os.path.join(os.fspath(directory), MANIFEST))


def _header_meta(layout: int, layers: Mapping[str, dict]) -> dict[str, str]:
    from .pack import LAYOUT_NAMES

    return {
        "format": "pt",  # what safetensors / transformers expect of a torch file
        "humming_aot.format": FORMAT,
        "humming_aot.schema_version": str(SCHEMA_VERSION),
        "humming_aot.version": _version(),
        "humming_aot.layout": str(layout),
        "humming_aot.layout_name": LAYOUT_NAMES[layout],
        "humming_aot.layers": json.dumps(layers, sort_keys=True),
    }


def _pack_one(cw: ConvertedWeight, lid: int, key: str):
    from .pack import pack_weight

    if not isinstance(cw, ConvertedWeight):
        raise TypeError(f"{key}: save_packed takes ConvertedWeight values, got {type(cw).__name__}")
    q = cw.weight
    # packing runs where the tensors are; a checkpoint is written from the CPU
    mv = lambda t: None if t is None else t.cpu()
    q = dataclasses.replace(
        q, codes=q.codes.cpu(), scales=mv(q.scales), zeros=mv(q.zeros), global_scale=mv(q.global_scale)
    )
    try:
        p = pack_weight(q, layout=lid)
    except (ValueError, RuntimeError) as e:
        raise ValueError(f"{key}: cannot pack weight {q.fmt} for this layout: {e}") from e
    tensors = {f"{key}.hm_codes": p.codes}
    for name, t in (("hm_scales", p.scales), ("hm_zeros", p.zeros), ("hm_global_scale", p.global_scale)):
        if t is not None:
            tensors[f"{key}.{name}"] = t
    if cw.perm is not None:
        tensors[f"{key}.hm_perm"] = cw.perm.to(device="cpu", dtype=torch.int64)
    meta = {
        "fmt": str(p.fmt),
        "n": p.n,
        "k": p.k,
        "n_pad": p.n_pad,
        "k_pad": p.k_pad,
        "perm": cw.perm is not None,
        "source": cw.source,
    }
    return tensors, meta


def save_packed(
    converted: Mapping[str, Any] | Iterable[tuple[str, Any]],
    out_dir: str | os.PathLike,
    *,
    layout: str | int,
    max_shard_bytes: int = 4 << 30,
    progress: bool = True,
) -> dict:
    """Pack every layer of ``converted`` (``load_quantized``'s result, or ``iter_quantized`` to hold
    one unpacked layer at a time) for ``layout`` on the CPU and write a packed checkpoint to
    ``out_dir`` (created; an existing manifest there is replaced). Returns the manifest."""
    from .loading import _progress
    from .pack import LAYOUT_NAMES, layout_id

    lid = layout_id(layout)
    out_dir = os.fspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    save_file = _save_file()
    items = converted.items() if isinstance(converted, Mapping) else converted
    total = len(converted) if isinstance(converted, Mapping) else None
    manifest_layers: dict[str, dict] = {}
    shard: dict[str, torch.Tensor] = {}
    shard_meta: dict[str, dict] = {}
    shard_bytes, files = 0, []

    def flush():
        nonlocal shard, shard_meta, shard_bytes
        if not shard:
            return
        name = f"packed-{len(files):05d}.safetensors"
        save_file(
            {k: v.contiguous() for k, v in shard.items()}, os.path.join(out_dir, name), _header_meta(lid, shard_meta)
        )
        files.append(name)
        shard, shard_meta, shard_bytes = {}, {}, 0

    for prefix, value in _progress(items, total, "packing", progress):
        parts = list(value) if isinstance(value, (list, tuple)) else None
        layer_tensors, layer_meta = {}, {}
        for i, cw in enumerate(parts if parts is not None else [value]):
            key = prefix if parts is None else f"{prefix}[{i}]"
            t, m = _pack_one(cw, lid, key)
            layer_tensors.update(t)
            layer_meta[key] = m
        size = sum(t.numel() * t.element_size() for t in layer_tensors.values())
        # a layer never straddles two shards, so its tensors and metadata are in one header
        if shard and shard_bytes + size > max_shard_bytes:
            flush()
        shard.update(layer_tensors)
        shard_meta.update(layer_meta)
        shard_bytes += size
        manifest_layers[prefix] = {
            "file": f"packed-{len(files):05d}.safetensors",
            "parts": None if parts is None else len(parts),
        }
    flush()
    manifest = {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "humming_aot_version": _version(),
        "layout": lid,
        "layout_name": LAYOUT_NAMES[lid],
        "files": files,
        "layers": manifest_layers,
    }
    # the manifest last: a convert that fails half-way leaves no directory that claims to be packed
    path = os.path.join(out_dir, MANIFEST)
    with open(path + ".tmp", "w") as f:
        json.dump(manifest, f, indent=1)
    os.replace(path + ".tmp", path)
    return manifest


def _save_file():
    try:
        from safetensors.torch import save_file
    except ImportError as e:
        raise ImportError(
            "packed checkpoints are safetensors files: pip install 'humming-aot[convert]' (or pip install safetensors)"
        ) from e
    return save_file


def _check_schema(where: str, fmt, schema, want_layout: int | None, layout) -> int:
    """The file's schema version, once its format, schema and layout are ones this version reads."""
    from .pack import LAYOUT_NAMES

    if fmt != FORMAT:
        raise PackedCheckpointError(f"{where}: format is {fmt!r}, not {FORMAT!r}: not a humming-aot packed checkpoint")
    if str(schema) not in _READABLE_SCHEMAS:
        raise PackedCheckpointError(
            f"{where}: packed with schema version {schema}; this humming-aot ({_version()}) reads schema "
            f"versions {', '.join(_READABLE_SCHEMAS)}: convert the source checkpoint again with this version"
        )
    if want_layout is not None and int(layout) != want_layout:
        have = LAYOUT_NAMES.get(int(layout), "unknown")
        raise PackedCheckpointError(
            f"{where}: packed for layout {layout} ({have}), but layout {want_layout} "
            f"({LAYOUT_NAMES[want_layout]}) was asked for: convert the source checkpoint with "
            f"--arch {LAYOUT_NAMES[want_layout]} (packed weights are not converted between layouts)"
        )
    return int(schema)


# The schema from which each layout stores e2m1 codes with their bits spread (see SCHEMA_VERSION).
_E2M1_SPREAD_FROM = {3: 2, 4: 3}
# The schema from which each layout stores its words where this version reads them (layout 4's
# chunks K tile by K tile, see SCHEMA_VERSION).
_ORDER_FROM = {4: 4}


def _check_codes(where: str, key: str, meta: dict, schema: int, layout: int) -> None:
    """Refuse a weight whose stored codes this version would misread: any weight in layout 4 from
    schemas 1 to 3, whose chunks were stored channel by channel; e2m1 codes in layout 3 from schema
    1, packed as contiguous nibbles before their bits were spread (see SCHEMA_VERSION)."""
    from . import formats as F
    from .pack import LAYOUT_NAMES

    if schema < _ORDER_FROM.get(layout, 0):
        raise PackedCheckpointError(
            f"{where}: layer {key!r} holds {meta['fmt']} codes in layout {layout} ({LAYOUT_NAMES[layout]}) packed "
            f"with schema version {schema}, whose order of the codes this humming-aot ({_version()}) no longer "
            f"reads (schema {SCHEMA_VERSION} stores each 128-input chunk of the channels K tile by K tile, so that "
            f"the kernels read contiguous bytes): convert the source checkpoint again with this version"
        )
    if schema >= _E2M1_SPREAD_FROM.get(layout, 0):
        return
    code = F.parse_weight_format(str(meta["fmt"])).code
    if code.kind == F.KIND_FLOAT and code.bits == 4:
        raise PackedCheckpointError(
            f"{where}: layer {key!r} holds {meta['fmt']} codes in layout {layout} ({LAYOUT_NAMES[layout]}) packed "
            f"with schema version {schema}, whose e2m1 bit order this humming-aot ({_version()}) no longer reads "
            f"(schema {SCHEMA_VERSION} spreads each code's bits for a faster conversion): convert the source "
            f"checkpoint again with this version"
        )


def _expected(meta: dict, layout: int) -> dict[str, tuple[tuple[int, ...], torch.dtype] | None]:
    """{suffix: (shape, dtype) or None when the format has no such tensor} for one stored weight."""
    from ._ext import C

    w = F.parse_weight_format(meta["fmt"])
    d = C.packed_dims(str(w), layout, int(meta["n"]), int(meta["k"]))
    if (d["n_pad"], d["k_pad"]) != (meta["n_pad"], meta["k_pad"]):
        raise PackedCheckpointError(
            f"padded shape [{meta['n_pad']}, {meta['k_pad']}] recorded, but {w} in this layout pads "
            f"[{meta['n']}, {meta['k']}] to [{d['n_pad']}, {d['k_pad']}]"
        )
    grid = (d["k_groups"], d["n_groups"])
    return {
        "hm_codes": ((d["n_pad"], d["words_per_row"]), torch.int32),
        "hm_scales": None if w.scale is None else (grid, None),  # the scale's storage dtype: checked by shape
        "hm_zeros": None if w.zero == "none" else (grid, None),
        "hm_global_scale": ((1,), torch.float32) if w.global_scale else None,
        "hm_perm": ((int(meta["k"]),), torch.int64) if meta.get("perm") else None,
    }


def load_packed(
    directory: str | os.PathLike, *, layout: str | int | None = None, device=None, progress: bool = True
) -> dict[str, PackedLayer | list[PackedLayer]]:
    """Read a packed checkpoint written by :func:`save_packed` (``humming-aot convert``).

    ``layout``: the layout the caller will run (name or id); a checkpoint packed for another one
    raises :class:`PackedCheckpointError` (None accepts the stored layout). ``device``: where the
    tensors go (default the CPU); nothing is repacked. Returns ``{layer_prefix: PackedLayer}`` in
    the manifest's order (a list for list-valued layers such as gpt-oss experts), every tensor
    checked against the recorded format and shapes before anything is returned.
    """
    from .loading import _progress, _Shards
    from .pack import PackedWeight, layout_id

    directory = os.fspath(directory)
    want = None if layout is None else layout_id(layout)
    mpath = os.path.join(directory, MANIFEST)
    try:
        with open(mpath) as f:
            manifest = json.load(f)
    except (OSError, ValueError) as e:
        raise PackedCheckpointError(f"{mpath}: cannot read the packed checkpoint's manifest ({e})") from e
    _check_schema(mpath, manifest.get("format"), manifest.get("schema_version"), want, manifest.get("layout"))
    lid = int(manifest["layout"])
    schemas: dict[str, int] = {}
    dev = torch.device(device) if device is not None else torch.device("cpu")
    shards = _Shards(directory)
    out: dict[str, PackedLayer | list[PackedLayer]] = {}
    headers: dict[str, dict] = {}
    try:
        layers = manifest.get("layers") or {}
        for prefix in _progress(layers, len(layers), "loading packed", progress):
            entry = layers[prefix]
            file = entry["file"]
            path = os.path.join(directory, file)
            if file not in headers:
                h = shards._open(file)
                md = h.metadata() or {}
                schemas[file] = _check_schema(
                    path,
                    md.get("humming_aot.format"),
                    md.get("humming_aot.schema_version"),
                    lid,  # every shard must be in the manifest's layout, whatever was asked
                    md.get("humming_aot.layout", -1),
                )
                headers[file] = json.loads(md.get("humming_aot.layers", "{}"))
            parts = entry.get("parts")
            keys = [prefix] if parts is None else [f"{prefix}[{i}]" for i in range(int(parts))]
            got = []
            for key in keys:
                meta = headers[file].get(key)
                if meta is None:
                    raise PackedCheckpointError(f"{path}: its header has no metadata for layer {key!r}")
                _check_codes(path, key, meta, schemas[file], lid)
                got.append(_read_weight(shards, file, path, key, meta, lid, dev, PackedWeight))
            out[prefix] = got[0] if parts is None else got
    finally:
        shards.close()
    return out


def _read_weight(shards, file, path, key, meta, lid, dev, PackedWeight) -> PackedLayer:
    try:
        expected = _expected(meta, lid)
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, PackedCheckpointError):
            raise PackedCheckpointError(f"{path}: layer {key!r}: {e}") from e
        raise PackedCheckpointError(f"{path}: layer {key!r}: bad metadata {meta!r} ({e})") from e
    present = shards._names[file]
    t: dict[str, torch.Tensor | None] = {}
    for suffix in _SUFFIXES:
        name = f"{key}.{suffix}"
        want = expected[suffix]
        if want is None:
            if name in present:
                raise PackedCheckpointError(f"{path}: tensor {name!r} is there, but format {meta['fmt']} has none")
            t[suffix] = None
            continue
        if name not in present:
            raise PackedCheckpointError(f"{path}: tensor {name!r} is missing (format {meta['fmt']} needs it)")
        shards.where.setdefault(name, file)  # _Shards reads by name: this shard holds it
        x = shards[name]
        shape, dtype = want
        if tuple(x.shape) != tuple(shape) or (dtype is not None and x.dtype != dtype):
            raise PackedCheckpointError(
                f"{path}: tensor {name!r} is {x.dtype} {list(x.shape)}, but {meta['fmt']} "
                f"[n={meta['n']}, k={meta['k']}] in layout {lid} needs "
                f"{dtype if dtype is not None else 'the scale dtype'} {list(shape)}"
            )
        t[suffix] = x
    perm = t["hm_perm"]
    if perm is not None and not torch.equal(torch.sort(perm).values, torch.arange(perm.numel())):
        raise PackedCheckpointError(f"{path}: tensor {key + '.hm_perm'!r} is not a permutation of 0..{meta['k'] - 1}")
    mv = lambda x: None if x is None else x.to(dev)
    packed = PackedWeight(
        mv(t["hm_codes"]),
        mv(t["hm_scales"]),
        mv(t["hm_zeros"]),
        mv(t["hm_global_scale"]),
        F.parse_weight_format(meta["fmt"]),
        int(meta["n"]),
        int(meta["k"]),
        int(meta["n_pad"]),
        int(meta["k_pad"]),
        lid,
    )
    return PackedLayer(packed, mv(perm), str(meta.get("source", "")))
