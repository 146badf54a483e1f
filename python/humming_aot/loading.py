"""Whole quantized checkpoints in, ``QuantLinear`` modules out.

* :func:`load_quantized` reads a checkpoint directory (``config.json`` with its
  ``quantization_config``, safetensors shards) or a state dict, finds every quantized linear layer
  by its tensor names and imports it with the ``convert`` module of its tool. It returns
  ``{layer_prefix: ConvertedWeight}``: weights in the unified format, not yet packed, because
  packing depends on the target (layout, device, activation format), which is the model's business.
* :func:`replace_linears` packs those weights for a target and swaps the model's ``nn.Linear``
  modules of the same names for ``QuantLinear``, keeping their biases.
* A directory written by ``humming-aot convert`` (``packed_checkpoint``: weights already packed for
  one layout, marked by its manifest) loads through :func:`load_quantized` as
  ``{layer_prefix: PackedLayer}``, which :func:`replace_linears` wraps without repacking.

Shards are read with ``safetensors.safe_open``, one tensor at a time, and only the tensors of the
layer being converted are held, so a shard is never all in memory. Only quantized layers are
loaded here; everything else in the checkpoint (embeddings, norms, biases, ignored layers) is the
caller's to load into the model as usual (e.g. ``model.load_state_dict(rest, strict=False)``).

Layer-name patterns (``ignore``, ``modules_to_not_convert``, ``exclude_modules``, compressed-tensors
``targets``, GPTQ ``dynamic``) match as their tools define them: ``re:`` prefixes a regular
expression (``re.match`` from the start of the name), ``*`` / ``?`` make a shell wildcard, and a
plain name matches whole dotted parts of the layer name (``lm_head``, ``mlp.gate``; so ``gate``
does not match ``gate_proj``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import json
import os
import re
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Callable

import torch

from .convert import (
    ConversionError,
    ConvertedWeight,
    awq,
    bitnet,
    compressed_tensors,
    fp8_block,
    gpt_oss,
    gptq,
    modelopt,
)
from .packed_checkpoint import PackedCheckpointError, PackedLayer, is_packed_checkpoint, load_packed

__all__ = [
    "load_quantized",
    "iter_quantized",
    "load_experts",
    "CheckpointExperts",
    "replace_linears",
    "CheckpointError",
    "QUANT_METHODS",
    "FUSED_PROJECTIONS",
    "EXPERT_PROJECTIONS",
]

_EXTRA = "pip install 'humming-aot[convert]'"

# quant_method (lower case) -> the tensor-name suffixes that mark one of its quantized layers.
QUANT_METHODS = {
    "gptq": (".qweight",),
    "awq": (".qweight",),
    "compressed-tensors": (".weight_packed", ".weight_scale"),
    "modelopt": (".weight_scale",),
    "modelopt_fp4": (".weight_scale",),
    "fp8": (".weight_scale_inv", ".weight_scale"),
    "mxfp4": ("_blocks", ".blocks"),
    "bitnet": (".weight_scale",),
}


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read as it claims to be (a missing or truncated shard, a
    tensor the index lists but the shard lacks); the message names the file and the tensor."""


# ---- reading checkpoints ----------------------------------------------------------------------------


def _safe_open():
    try:
        from safetensors import safe_open
    except ImportError as e:
        raise ImportError(
            "humming_aot.load_quantized reads safetensors checkpoints with the `safetensors` "
            f"package, which is not installed: {_EXTRA} (or pip install safetensors)"
        ) from e
    return safe_open


class _Shards:
    """Tensor names of a safetensors checkpoint directory and their reading, one tensor at a time.

    Sharded checkpoints name each tensor's file in ``model.safetensors.index.json``; otherwise the
    names come from the headers of ``model.safetensors`` (or every ``*.safetensors`` file). Files
    are opened on first use and stay open (memory-mapped, nothing read) until :meth:`close`.
    """

    def __init__(self, directory: str):
        self._safe_open = _safe_open()
        self.directory = directory
        self._handles: dict[str, Any] = {}
        self._names: dict[str, set[str]] = {}
        self._stack = contextlib.ExitStack()
        index = os.path.join(directory, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as f:
                weight_map = json.load(f).get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise CheckpointError(f"{index}: no weight_map (tensor name -> shard file)")
            self.where = dict(weight_map)
            return
        single = os.path.join(directory, "model.safetensors")
        files = (
            ["model.safetensors"]
            if os.path.exists(single)
            else sorted(f for f in os.listdir(directory) if f.endswith(".safetensors"))
        )
        if not files:
            raise FileNotFoundError(f"{directory}: no model.safetensors.index.json and no *.safetensors files")
        self.where = {}
        for f in files:
            for name in self._keys(f):
                self.where.setdefault(name, f)

    def _open(self, file: str):
        if file not in self._handles:
            path = os.path.join(self.directory, file)
            if not os.path.exists(path):
                raise CheckpointError(f"{path}: the shard is missing (named by the checkpoint's index)")
            try:
                h = self._stack.enter_context(self._safe_open(path, framework="pt", device="cpu"))
            except Exception as e:  # safetensors raises its own error type for a bad header
                raise CheckpointError(f"{path}: not a readable safetensors file ({e})") from e
            self._handles[file] = h
            self._names[file] = set(h.keys())
        return self._handles[file]

    def _keys(self, file: str) -> set[str]:
        self._open(file)
        return self._names[file]

    def keys(self):
        return self.where.keys()

    def __getitem__(self, name: str) -> torch.Tensor:
        file = self.where[name]
        h = self._open(file)
        path = os.path.join(self.directory, file)
        if name not in self._names[file]:
            raise CheckpointError(f"{path}: has no tensor {name!r} (the index says it is there)")
        try:
            return h.get_tensor(name)
        except Exception as e:  # a header that promises more bytes than the file has
            raise CheckpointError(f"{path}: cannot read tensor {name!r} ({e})") from e

    def close(self) -> None:
        self._stack.close()
        self._handles.clear()


class _LayerTensors(Mapping):
    """The tensors of one layer, read from the checkpoint when an importer asks for them."""

    def __init__(self, source, names: Iterable[str]):
        self._source, self._names, self._cache = source, set(names), {}

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self._names:
            raise KeyError(name)
        if name not in self._cache:
            self._cache[name] = self._source[name]
        return self._cache[name]

    def __contains__(self, name) -> bool:
        return name in self._names

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def _read_config(directory: str) -> dict:
    """The quantization settings of a checkpoint directory: ``config.json``'s ``quantization_config``,
    else AutoGPTQ's ``quantize_config.json`` or ModelOpt's ``hf_quant_config.json``."""
    path = os.path.join(directory, "config.json")
    if os.path.exists(path):
        with open(path) as f:
            cfg = json.load(f)
        if cfg.get("quantization_config"):
            return _quant_config(cfg)
    path = os.path.join(directory, "quantize_config.json")
    if os.path.exists(path):  # AutoGPTQ writes no quant_method: the file itself says GPTQ
        with open(path) as f:
            return {"quant_method": "gptq", **json.load(f)}
    path = os.path.join(directory, "hf_quant_config.json")
    if os.path.exists(path):
        with open(path) as f:
            return {"quant_method": "modelopt", **json.load(f)}
    raise FileNotFoundError(
        f"{directory}: no quantization_config in config.json, and no quantize_config.json "
        "or hf_quant_config.json: this is not a quantized checkpoint this package knows"
    )


def _quant_config(config: Any) -> dict:
    """A whole model config (a dict or a transformers config object) or its quantization_config."""
    if not isinstance(config, Mapping):
        config = config.to_dict() if hasattr(config, "to_dict") else vars(config)
    if "quantization_config" in config:
        config = config["quantization_config"]
        if not isinstance(config, Mapping):
            config = config.to_dict() if hasattr(config, "to_dict") else vars(config)
    return dict(config)


# ---- which layers, with which settings ----------------------------------------------------------------


def _matches(name: str, pattern: str) -> bool:
    if pattern.startswith("re:"):
        return re.match(pattern[3:], name) is not None
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(name, pattern + ".*")
    return f".{pattern}." in f".{name}."


def _ignore_list(qcfg: Mapping) -> list[str]:
    out = []
    inner = qcfg.get("quantization") if isinstance(qcfg.get("quantization"), Mapping) else {}
    for cfg in (qcfg, inner):
        for key in ("ignore", "modules_to_not_convert", "exclude_modules"):
            out += [str(p) for p in cfg.get(key) or ()]
    return out


def _gptq_settings(qcfg: Mapping, prefix: str) -> Mapping:
    """The layer's GPTQ settings with GPTQModel's ``dynamic`` overrides applied: the first pattern
    matching the layer wins (``+:`` or no sign: its keys replace the config's; ``-:``: the layer is
    not quantized)."""
    for pattern, override in (qcfg.get("dynamic") or {}).items():
        sign, pat = (pattern[:2], pattern[2:]) if pattern[:2] in ("+:", "-:") else ("+:", pattern)
        if re.match(pat, prefix):
            if sign == "-:":
                raise ConversionError(
                    prefix,
                    "dynamic",
                    pattern,
                    "excludes this layer from quantization, yet the checkpoint has its qweight",
                )
            return {**qcfg, **(override or {})}
    return qcfg


def _ct_group(qcfg: Mapping, prefix: str) -> Mapping:
    """The compressed-tensors config group of a layer. As compressed-tensors ranks them, a target
    naming the layer (exactly, then by ``re:``) beats a class target; the only class whose layers
    carry these tensors is ``Linear``."""
    groups = qcfg.get("config_groups") or {}
    ranked = []
    for key, group in groups.items():
        for t in group.get("targets") or ():
            t = str(t)
            rank = (
                0 if t == prefix else 1 if t.startswith("re:") and _matches(prefix, t) else 2 if t == "Linear" else None
            )
            if rank is not None:
                ranked.append((rank, key, group))
    if not ranked:
        raise ConversionError(
            prefix,
            "config_groups",
            sorted(groups),
            "no config group targets this layer, though the checkpoint has quantized tensors for it",
        )
    return min(ranked, key=lambda r: r[0])[2]


def _importer(method: str, qcfg: Mapping) -> Callable[[Mapping, str], Any]:
    if method == "gptq":
        return lambda t, p: gptq.convert_layer(t, p, _gptq_settings(qcfg, p))
    if method == "awq":
        return lambda t, p: awq.convert_layer(t, p, qcfg)
    if method == "compressed-tensors":

        def ct(t, p):
            group = _ct_group(qcfg, p)
            # a group's own format wins over the config's (mixed-precision checkpoints)
            fmt = group.get("format") or qcfg.get("format")
            return compressed_tensors.convert_layer(t, p, group, compression_format=fmt)

        return ct
    if method in ("modelopt", "modelopt_fp4"):
        return lambda t, p: modelopt.convert_layer(t, p, qcfg)
    if method == "fp8":
        return lambda t, p: fp8_block.convert_layer(t, p, qcfg)
    if method == "mxfp4":
        return lambda t, p: gpt_oss.convert_layer(t, p, qcfg)
    if method == "bitnet":
        return lambda t, p: bitnet.convert_layer(t, p, qcfg)
    raise ConversionError(
        "", "quant_method", qcfg.get("quant_method"), f"load_quantized knows {', '.join(QUANT_METHODS)}"
    )


def _layers(names: Iterable[str], suffixes: tuple[str, ...]) -> dict[str, list[str]]:
    """{layer prefix: its tensor names} for the layers that have a tensor ending in one of
    ``suffixes``, in checkpoint order."""
    by_prefix: dict[str, list[str]] = {}
    for name in names:
        if "." in name:
            by_prefix.setdefault(name.rsplit(".", 1)[0], []).append(name)
        for s in ("_blocks", "_scales"):  # gpt-oss (Hugging Face): gate_up_proj_blocks, no dot
            if name.endswith(s):
                by_prefix.setdefault(name[: -len(s)], []).append(name)
    marked = {}  # a dict: ordered and deduplicated (a layer may have several marking tensors)
    for name in names:
        for s in suffixes:
            if name.endswith(s):
                marked.setdefault(name[: -len(s)], None)
    return {p: by_prefix.get(p, []) for p in marked}


def _progress(items, total: int | None, desc: str, enabled: bool):
    if not enabled:
        return items
    try:
        from tqdm.auto import tqdm
    except ImportError:  # an optional nicety: no tqdm, no bar
        return items
    return tqdm(items, total=total, desc=desc, unit="layer")


def _open_source(source, config, caller: str):
    """(quantization settings, tensors by name) of a checkpoint directory or a state dict."""
    if isinstance(source, (str, os.PathLike)):
        directory = os.fspath(source)
        return (_quant_config(config) if config is not None else _read_config(directory)), _Shards(directory)
    if isinstance(source, Mapping):
        if config is None:
            raise ValueError(f"{caller} of a state dict needs config= (the model config or its quantization_config)")
        return _quant_config(config), source
    raise TypeError(f"{caller} takes a checkpoint directory or a state dict, got {type(source).__name__}")


def _quantized_layers(qcfg: Mapping, names: list[str]) -> tuple[Callable[[Mapping, str], Any], dict[str, list[str]]]:
    """The importer of the checkpoint's method and {layer prefix: its tensor names} of the layers
    it imports (those its method marks, less the ignored ones), in checkpoint order."""
    method = str(qcfg.get("quant_method") or qcfg.get("method") or "").lower()
    convert = _importer(method, qcfg)  # first: it refuses a method that QUANT_METHODS lacks
    ignore = _ignore_list(qcfg)
    layers = {
        p: layer_names
        for p, layer_names in _layers(names, QUANT_METHODS[method]).items()
        if not any(_matches(p, pat) for pat in ignore)
    }
    return convert, layers


# ---- the public API -----------------------------------------------------------------------------------


def iter_quantized(
    source: str | os.PathLike | Mapping[str, torch.Tensor],
    config: Any = None,
    *,
    progress: bool = True,
    layout: str | int | None = None,
    device=None,
) -> Iterator[tuple[str, ConvertedWeight | PackedLayer | list]]:
    """:func:`load_quantized` one layer at a time: yields ``(layer_prefix, converted)`` and keeps
    only the current layer's checkpoint tensors, so ``replace_linears(model, iter_quantized(d))``
    holds at most one unpacked layer besides the packed model."""
    if isinstance(source, (str, os.PathLike)) and is_packed_checkpoint(source):
        # already packed (humming-aot convert): nothing to import; load_packed checks it
        yield from load_packed(source, layout=layout, device=device, progress=progress).items()
        return
    if layout is not None or device is not None:
        raise ValueError(
            "load_quantized: layout= and device= are for packed checkpoints (humming-aot convert); "
            f"{source if isinstance(source, (str, os.PathLike)) else 'a state dict'} is not one "
            "(replace_linears packs for the layout and device)"
        )
    qcfg, tensors = _open_source(source, config, "load_quantized")
    try:
        convert, layers = _quantized_layers(qcfg, list(tensors.keys()))
        for prefix in _progress(layers, len(layers), "importing", progress):
            yield prefix, convert(_LayerTensors(tensors, layers[prefix]), prefix)
    finally:
        if isinstance(tensors, _Shards):
            tensors.close()


def load_quantized(
    source: str | os.PathLike | Mapping[str, torch.Tensor],
    config: Any = None,
    *,
    progress: bool = True,
    layout: str | int | None = None,
    device=None,
) -> dict[str, ConvertedWeight | PackedLayer | list]:
    """Import every quantized linear layer of a checkpoint into the unified format.

    ``source``: a checkpoint directory (``config.json`` + ``model.safetensors`` or shards with
    ``model.safetensors.index.json``; needs the ``safetensors`` package, the ``convert`` extra) or
    a state dict of tensors. ``config``: the model config (dict or transformers config) or its
    ``quantization_config``; read from the directory when not given, required for a state dict.

    ``quant_method`` picks the importer (``QUANT_METHODS``: gptq, awq, compressed-tensors,
    modelopt, fp8 with ``weight_block_size``, mxfp4 for gpt-oss, bitnet); layers named by
    ``ignore`` / ``modules_to_not_convert`` / ``exclude_modules`` are skipped, GPTQ ``dynamic``
    overrides and compressed-tensors ``config_groups`` are applied per layer.

    Returns ``{layer_prefix: ConvertedWeight}`` in checkpoint order (``convert.ConvertedWeight``:
    ``.weight``, and ``.perm`` for act-order layers); gpt-oss expert tensors give a list, one per
    expert. Raises ``convert.ConversionError`` or :class:`CheckpointError` naming the layer or the
    file and tensor; nothing is returned half-way.

    A packed checkpoint directory (``humming-aot convert``, found by its manifest
    ``humming_aot_packed.json``) gives ``{layer_prefix: packed_checkpoint.PackedLayer}`` instead
    (``.packed``: the ``PackedWeight``, ``.perm``), read with no repacking onto ``device`` (default
    the CPU). ``layout`` (name or id, default: the stored one) is the layout the caller will run;
    a checkpoint packed for another layout or with another schema version raises
    ``packed_checkpoint.PackedCheckpointError``. Both keywords are for packed checkpoints only.
    """
    return dict(iter_quantized(source, config, progress=progress, layout=layout, device=device))


# The names a mixture-of-experts layer's experts give their projections in checkpoints, as (gate,
# up, down): Qwen2/3-MoE, DeepSeek-V2/V3 and OLMoE, and Mixtral's w1 / w3 / w2.
EXPERT_PROJECTIONS: tuple[tuple[str, str, str], ...] = (("gate_proj", "up_proj", "down_proj"), ("w1", "w3", "w2"))


@dataclasses.dataclass
class CheckpointExperts:
    """The experts of one mixture-of-experts layer of a checkpoint (:func:`load_experts`).

    ``gate_up`` / ``down``: one ``ConvertedWeight`` per expert, [2F, H] (the F gate rows first,
    then the F up rows) and [H, F]. ``gate_up_bias`` [E, 2F] (gate first too) and ``down_bias``
    [E, H]: the experts' biases where the checkpoint has them (gpt-oss), else None.
    ``activation``: the activation between the GEMMs the model applies (``QuantMoE``'s names:
    "silu", or gpt-oss's "swiglu-oai"). ``correction_bias`` [E]: the router's score correction
    (DeepSeek-V3's ``{prefix}.gate.e_score_correction_bias``) where the checkpoint has one.
    """

    gate_up: list
    down: list
    gate_up_bias: torch.Tensor | None = None
    down_bias: torch.Tensor | None = None
    activation: str = "silu"
    correction_bias: torch.Tensor | None = None


def load_experts(
    source: str | os.PathLike | Mapping[str, torch.Tensor],
    prefix: str,
    config: Any = None,
    *,
    progress: bool = False,
) -> CheckpointExperts:
    """Import the quantized experts of one mixture-of-experts layer of a checkpoint, for
    :meth:`humming_aot.moe.QuantMoE.from_checkpoint` (:class:`CheckpointExperts`: each expert's
    gate and up projections stacked exactly into one [2F, H] weight, :func:`humming_aot.convert.fuse`,
    gate rows first; its down projection [H, F]; biases; the activation).

    ``prefix``: the layer's module, e.g. ``model.layers.3.mlp`` (Qwen-MoE, DeepSeek, gpt-oss) or
    ``model.layers.3.block_sparse_moe`` (Mixtral). Its experts are either
    ``{prefix}.experts.{e}.{gate, up, down}`` under one of the :data:`EXPERT_PROJECTIONS` spellings,
    or gpt-oss's tensors of all experts at once (``{prefix}.experts.gate_up_proj`` with its gate and
    up rows interleaved, which are put in order here, ``down_proj``, and their ``_bias``
    tensors; activation "swiglu-oai"). Only that layer's tensors are read. ``source`` / ``config``
    as :func:`load_quantized`, whose importers these are (GPTQ, AWQ, compressed-tensors, FP8
    blocks, MXFP4, ...).

    Errors (``CheckpointError``) name the expert and projection: no experts under the prefix, an
    expert without one of its three projections (e.g. left unquantized by the quantization config's
    ignore list), and act-order weights (each expert would need its own permutation of the layer's
    input: re-quantize without act-order). A packed checkpoint is refused (its projections are
    packed one by one).
    """
    from .convert import fuse

    if isinstance(source, (str, os.PathLike)) and is_packed_checkpoint(source):
        raise CheckpointError(
            f"{os.fspath(source)}: a packed checkpoint (humming-aot convert) holds its experts' projections "
            "packed one by one, which cannot be stacked into gate-up weights without unpacking; read the "
            "experts from the source checkpoint it was converted from"
        )
    base = prefix.rstrip(".") + ".experts."
    qcfg, tensors = _open_source(source, config, "load_experts")
    where = os.fspath(source) if isinstance(source, (str, os.PathLike)) else "the state dict"
    try:
        names = [n for n in tensors.keys() if n.startswith(base)]
        if not names:
            raise CheckpointError(f"{where}: no tensor starts with {base!r} (prefix: the mixture-of-experts module)")
        convert, layers = _quantized_layers(qcfg, names)
        if f"{base}gate_up_proj" in layers or f"{base}down_proj" in layers:
            return _gpt_oss_experts(where, base, tensors, convert, layers)
        found: dict[tuple[int, str], str] = {}
        for lp in layers:
            index, _, proj = lp[len(base) :].partition(".")
            if not index.isdigit():
                raise CheckpointError(
                    f"{where}: {lp} is neither an expert's projection ({base}{{e}}.{{proj}}) nor gpt-oss's "
                    f"fused {base}gate_up_proj / down_proj"
                )
            found[(int(index), proj)] = lp
        have = {proj for _, proj in found}
        spelled = next((p for p in EXPERT_PROJECTIONS if set(p) <= have), None)
        if spelled is None:
            raise CheckpointError(
                f"{where}: the quantized experts under {base!r} have projections {sorted(have) or 'none'}; "
                f"expected one of {', '.join('/'.join(p) for p in EXPERT_PROJECTIONS)} (gate/up/down)"
            )
        experts = 1 + max(e for e, _ in found)
        missing = [f"{base}{e}.{proj}" for e in range(experts) for proj in spelled if (e, proj) not in found]
        if missing:
            raise CheckpointError(
                f"{where}: {len(missing)} expert projection(s) are missing or not quantized (first: {missing[0]}); "
                f"every expert 0..{experts - 1} needs quantized {', '.join(spelled)}"
            )
        gate_up, down = [], []
        for e in _progress(range(experts), experts, "importing experts", progress):
            parts = []
            for proj in spelled:
                lp = found[(e, proj)]
                cw = convert(_LayerTensors(tensors, layers[lp]), lp)
                if cw.perm is not None:
                    raise CheckpointError(
                        f"{where}: {lp} is act-order (its inputs are permuted); QuantMoE's experts share the "
                        "layer's input, so each would need its own permutation of it: quantize without act-order"
                    )
                parts.append(cw)
            gate_up.append(fuse(parts[:2], f"{base}{e}.gate_up"))
            down.append(parts[2])
        bias_name = prefix.rstrip(".") + ".gate.e_score_correction_bias"
        bias = tensors[bias_name] if bias_name in tensors.keys() else None
        if bias is not None and tuple(bias.shape) != (experts,):
            raise CheckpointError(f"{where}: {bias_name} has shape {list(bias.shape)}, expected [{experts}]")
        return CheckpointExperts(gate_up, down, correction_bias=bias)
    finally:
        if isinstance(tensors, _Shards):
            tensors.close()


def _gpt_oss_experts(where: str, base: str, tensors, convert, layers) -> CheckpointExperts:
    """gpt-oss's experts (load_experts): one tensor set per projection for all experts, the gate
    and up rows of gate_up_proj interleaved (even rows gate, odd rows up, as its SwiGLU reads them),
    put here in QuantMoE's order (the F gate rows, then the F up rows: a permutation of whole rows,
    exact), with their biases."""
    out = {}
    for proj in ("gate_up_proj", "down_proj"):
        lp = base + proj
        if lp not in layers:
            raise CheckpointError(
                f"{where}: {lp} is missing or not quantized; gpt-oss experts need gate_up_proj and down_proj"
            )
        got = convert(_LayerTensors(tensors, layers[lp]), lp)
        out[proj] = got if isinstance(got, list) else [got]
    gate_up, down = out["gate_up_proj"], out["down_proj"]
    if len(gate_up) != len(down):
        raise CheckpointError(f"{where}: {base}gate_up_proj has {len(gate_up)} experts, down_proj {len(down)}")
    n2 = gate_up[0].weight.codes.shape[0]
    if gate_up[0].weight.group_shape()[0] != 1:  # scales shared by rows would not follow the rows
        raise CheckpointError(f"{where}: {base}gate_up_proj has scales shared along N; its rows cannot be reordered")
    order = torch.cat([torch.arange(0, n2, 2), torch.arange(1, n2, 2)])

    def rows(cw):
        w = cw.weight
        pick = lambda t: None if t is None else t.index_select(0, order)  # noqa: E731
        return ConvertedWeight(
            dataclasses.replace(w, codes=pick(w.codes), scales=pick(w.scales), zeros=pick(w.zeros)), cw.perm, cw.source
        )

    def bias(name, shape):
        t = tensors[name] if name in tensors.keys() else None
        if t is not None and tuple(t.shape) != shape:
            raise CheckpointError(f"{where}: {name} has shape {list(t.shape)}, expected {list(shape)}")
        return t

    e, h = len(gate_up), down[0].weight.codes.shape[0]
    gu_bias = bias(f"{base}gate_up_proj_bias", (e, n2))
    return CheckpointExperts(
        [rows(cw) for cw in gate_up],
        down,
        None if gu_bias is None else gu_bias.index_select(1, order),
        bias(f"{base}down_proj_bias", (e, h)),
        "swiglu-oai",
    )


def _pack_converted(q, a, out: str, layout, dev: torch.device):
    """A converted weight packed for ``layout`` ("auto": the preferred one for the format with
    activations ``a`` and output ``out`` on ``dev``) on ``dev``, and whether its scales were
    rounded to the activation type for lack of a fast kernel taking them as stored (a GPU only,
    :func:`_act_type_scale_format`; MXFP4 / NVFP4 scales converted exactly do not count)."""
    from . import formats as F
    from .dispatch import preferred_layout
    from .pack import layout_id, pack_weight
    from .reference import torch_dtype

    fmt = _act_type_scale_format(q.fmt, a, out, dev, *q.codes.shape) if dev.type == "cuda" else None
    rounded = _scales_rounded(q.fmt, fmt)
    if fmt is not None:
        q = dataclasses.replace(q, fmt=fmt, scales=_scales_in(q.scales, q.fmt, torch_dtype(a.type)))
    lid = layout
    if layout == "auto":
        lid = preferred_layout(F.GemmFormat(a, q.fmt, out), dev, n=q.codes.shape[0], k=q.codes.shape[1])
    # pack where the layer will run: packing runs on the tensors' device
    mv = lambda t: None if t is None else t.to(dev)  # noqa: E731
    q = dataclasses.replace(
        q, codes=q.codes.to(dev), scales=mv(q.scales), zeros=mv(q.zeros), global_scale=mv(q.global_scale)
    )
    return pack_weight(q, layout=layout_id(lid)), rounded


def _warn_rounded(caller: str, rounded: list[str]) -> None:
    warnings.warn(
        f"{caller}: {len(rounded)} layer(s) (first: {rounded[0]}) store their scales in another "
        "floating type than the activations (e.g. GPTQ / AWQ f16 scales in a bf16 model), and no "
        "compiled kernel on this GPU takes that pair, so their scales were rounded to the activation "
        "type (relative error at most 2^-9 for f16 to bf16). Run the model in the scales' type "
        "(act_format='f16' or a float16 model) to keep them exact.",
        stacklevel=3,
    )


def load_unquantized(
    source: str | os.PathLike | Mapping[str, torch.Tensor], config: Any = None, *, dtype: torch.dtype | None = None
) -> dict[str, torch.Tensor]:
    """Every tensor of a checkpoint that :func:`load_quantized` does not import: embeddings, norms,
    the biases of the quantized linears (``replace_linears`` keeps the linear's bias, so it must be
    in the model first), ignored layers such as ``lm_head``, and other float tensors, for
    ``model.load_state_dict(load_unquantized(d), strict=False)``. The quantized layers' own tensors
    (codes, scales, zero points, act-order indices, their tools' extra fields) are left out.

    ``source`` and ``config`` as for :func:`load_quantized` (a directory is read one tensor at a
    time; the result holds these tensors, which are the small part of a quantized model).
    ``dtype``: cast floating-point tensors to it (e.g. the model's bf16); others stay as stored.
    A packed checkpoint (``humming-aot convert``) holds only the quantized layers: it is refused,
    pointing at the source checkpoint.
    """
    if isinstance(source, (str, os.PathLike)) and is_packed_checkpoint(source):
        raise CheckpointError(
            f"{os.fspath(source)}: a packed checkpoint (humming-aot convert) holds only the quantized "
            "layers; read the model's other tensors from the source checkpoint it was converted from"
        )
    qcfg, tensors = _open_source(source, config, "load_unquantized")
    try:
        names = list(tensors.keys())
        _, layers = _quantized_layers(qcfg, names)
        quantized = {n for p, layer_names in layers.items() for n in layer_names if n != p + ".bias"}
        out = {}
        for name in names:
            if name in quantized:
                continue
            t = tensors[name]
            out[name] = t.to(dtype) if dtype is not None and t.is_floating_point() else t
        return out
    finally:
        if isinstance(tensors, _Shards):
            tensors.close()


# The usual fused projections of serving stacks (vLLM's Llama / Qwen / Mistral modules): q, k, v
# as one qkv_proj, gate and up as one gate_up_proj, stacked in this order.
FUSED_PROJECTIONS: dict[str, tuple[str, ...]] = {
    "qkv_proj": ("q_proj", "k_proj", "v_proj"),
    "gate_up_proj": ("gate_proj", "up_proj"),
}


def _fused_items(model: torch.nn.Module, items: Iterable, fuse: Mapping[str, Sequence[str]], problems: list):
    """replace_linears' ``fuse``: ``items`` with the parts of each fused module of ``model``
    replaced by their stacked weight (yielded once its last part arrives; parts are held until
    then). Fused modules left incomplete, or with packed parts, are added to ``problems``."""
    from .convert import fuse as stack

    part_of = {}  # part child name -> (fused child name, its index)
    for fused, parts in fuse.items():
        if not parts or len(set(parts)) != len(parts):
            raise ValueError(f"replace_linears: fuse[{fused!r}] must list distinct part names, got {parts!r}")
        for i, part in enumerate(parts):
            if part in part_of:
                raise ValueError(f"replace_linears: {part!r} is a part of both {part_of[part][0]!r} and {fused!r}")
            part_of[part] = (fused, i)

    def module(name):
        try:
            return model.get_submodule(name)
        except AttributeError:
            return None

    pending: dict[str, dict[int, object]] = {}  # fused module name -> {part index: converted}
    for name, cw in items:
        parent, _, child = name.rpartition(".")
        if child not in part_of or module(name) is not None:
            yield name, cw
            continue
        fused_child, index = part_of[child]
        target = f"{parent}.{fused_child}" if parent else fused_child
        if not isinstance(module(target), torch.nn.Linear):
            yield name, cw  # neither the part nor its fused module: the usual "no module" problem
            continue
        got = pending.setdefault(target, {})
        got[index] = cw
        parts = fuse[fused_child]
        if len(got) < len(parts):
            continue
        del pending[target]
        if any(not isinstance(c, ConvertedWeight) for c in got.values()):
            problems.append(f"{target} (its parts {', '.join(parts)} arrive packed; only converted weights fuse)")
            continue
        try:
            yield target, stack([got[i] for i in range(len(parts))], target)
        except ConversionError as e:
            problems.append(f"{target} ({e})")
    for target, got in pending.items():
        parts = fuse[target.rpartition(".")[2]]
        have = [parts[i] for i in sorted(got)]
        problems.append(f"{target} (fuses {', '.join(parts)}; the checkpoint has only {', '.join(have)})")


def _act_type_scale_format(wfmt, a, out, dev, n: int, k: int, layout: int | None = None):
    """The weight format with the scales in the activation type, where the GPU ``dev`` has no fast
    kernel for ``wfmt``'s own scale type with these activations but has one for the activation type
    (the sm90 and sm80 kernels read scales in the activations' type); None where nothing is to be
    converted. f16 and bf16 scales are rounded to the other type (:func:`_scales_rounded` says so);
    MXFP4's e8m0 scales (powers of two from 2^-127) go to bf16 and NVFP4's e4m3 ones to bf16 or
    f16 exactly, as values (:func:`_scales_in`). ``layout``: only kernels reading this layout count
    (a weight packed already); None: any. Float zero points (``-zf``, stored in the scale type) are
    left alone."""
    from . import formats as F
    from .dispatch import fast_layouts

    sc = wfmt.scale
    if a.quantized or sc is None or sc == a.type or wfmt.zero == "float":
        return None
    exact = {"e8m0": ("bf16",), "e4m3": ("bf16", "f16")}
    if str(sc) not in ("f16", "bf16") and str(a.type) not in exact.get(str(sc), ()):
        return None

    def runs(f):
        found = fast_layouts(F.GemmFormat(a, f, out), dev, n=n, k=k)
        return bool(found) if layout is None else layout in found

    rounded = dataclasses.replace(wfmt, scale=a.type)
    return rounded if not runs(wfmt) and runs(rounded) else None


def _scales_rounded(old_fmt, new_fmt) -> bool:
    """Whether converting the scales of ``old_fmt`` to ``new_fmt``'s type rounds them (f16 <->
    bf16); e8m0 and e4m3 scales convert exactly."""
    return new_fmt is not None and str(old_fmt.scale) in ("f16", "bf16")


def _scales_in(scales: torch.Tensor, fmt, dtype: torch.dtype) -> torch.Tensor:
    """Stored scales of weight format ``fmt`` as values of ``dtype`` (e8m0 exponent bytes decoded,
    not cast), element by element: the layout's order stays. A NaN scale byte (e8m0 0xFF, e4m3
    0x7F / 0xFF) is refused as packing refuses it (it would otherwise pass as a bf16 NaN)."""
    from .pack import _refuse_nan_scales
    from .reference import scale_value

    _refuse_nan_scales(scales, fmt)
    return scale_value(scales, fmt).to(dtype)


def replace_linears(
    model: torch.nn.Module,
    converted: Mapping[str, ConvertedWeight] | Iterable,
    *,
    act_format=None,
    out_dtype=None,
    layout="auto",
    device=None,
    strict: bool = True,
    progress: bool = True,
    fuse: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, torch.nn.Module]:
    """Swap ``model``'s ``nn.Linear`` modules named by ``converted`` (:func:`load_quantized`'s
    result, or :func:`iter_quantized`) for ``QuantLinear`` modules holding those weights.

    ``fuse``: for models whose projections that share an input are one module while the
    checkpoint has them apart (vLLM-style ``qkv_proj`` / ``gate_up_proj``), ``{fused child name:
    (part child names, in the order the fused module stacks them)}``, e.g. :data:`FUSED_PROJECTIONS`.
    Where a converted layer ``P.q_proj`` names a part and the model has no module ``P.q_proj`` but
    an ``nn.Linear`` ``P.qkv_proj``, the parts are stacked exactly (:func:`humming_aot.convert.fuse`:
    codes, scales and zero points concatenated, each part keeping its own scales) once all of them
    have arrived, and the result replaces ``P.qkv_proj``. A fused module whose parts do not all
    arrive, or arrive already packed, is an error (listed with the others under ``strict``).

    Each weight is packed for ``layout`` ("auto": the fastest layout for the format on the device,
    the generic one on the CPU) on ``device`` (default: where the linear's weight is; a ``meta``
    model packs on the CPU). ``act_format`` defaults to the linear's weight dtype (bf16 / f16; bf16
    otherwise). The linear's bias is kept; act-order weights get ``QuantLinear.in_perm``.

    On a GPU, a weight whose scales are f16 while the activations are bf16 (or the reverse), as GPTQ
    and AWQ checkpoints in a bf16 model, has no fast kernel (the tensor-core kernels read scales in
    the activations' type): its scales are rounded to the activation type where a fast kernel then
    takes it, with one ``UserWarning`` per call; a model in the scales' type keeps them exact.

    ``PackedLayer`` values (a packed checkpoint through :func:`load_quantized`) are used as they
    are, moved to ``device`` if given, never repacked; ``layout`` must then be "auto" or their
    layout (else ``PackedCheckpointError``), ``act_format`` / ``out_dtype`` apply as above.

    ``strict``: every converted layer must name an ``nn.Linear`` of the model with the same shape
    (else ``ValueError`` listing them all); with ``strict=False`` the others are left out (e.g.
    gpt-oss experts, which are not ``nn.Linear``). Every module is built before any is swapped, so
    an error leaves the model as it was. Returns ``{name: QuantLinear}`` of the swapped modules.
    """
    from . import formats as F
    from .layers import _FLOAT_ACT, QuantLinear
    from .pack import layout_id
    from .reference import torch_dtype

    items = converted.items() if isinstance(converted, Mapping) else converted
    total = len(converted) if isinstance(converted, Mapping) and not fuse else None
    built, problems, rounded = {}, [], []
    if fuse:
        items = _fused_items(model, items, fuse, problems)
    for name, cw in _progress(items, total, "packing", progress):
        try:
            linear = model.get_submodule(name)
        except AttributeError:
            linear = None
        if not isinstance(linear, torch.nn.Linear) or not isinstance(cw, (ConvertedWeight, PackedLayer)):
            what = "no module" if linear is None else type(linear).__name__
            problems.append(f"{name} ({what}; converted: {type(cw).__name__})")
            continue
        nk = (cw.packed.n, cw.packed.k) if isinstance(cw, PackedLayer) else tuple(cw.weight.codes.shape)
        if nk != (linear.out_features, linear.in_features):
            problems.append(
                f"{name} (nn.Linear({linear.in_features}, {linear.out_features}); the checkpoint's "
                f"weight is [{nk[0]}, {nk[1]}] = [out, in])"
            )
            continue
        dev = torch.device(device) if device is not None else linear.weight.device
        if dev.type == "meta":
            dev = torch.device("cpu")
        act = act_format if act_format is not None else _FLOAT_ACT.get(linear.weight.dtype, "bf16")
        bias = linear.bias
        if bias is not None:
            if bias.device.type == "meta":
                raise ValueError(
                    f"{name}: the bias is on the meta device; load the model's float tensors "
                    "(biases included) before replace_linears"
                )
            bias = bias.detach().to(dev)
        a = F.parse_activation_format(act)
        out = out_dtype or ("bf16" if a.quantized else str(a.type))
        if isinstance(cw, PackedLayer):
            # packed once by humming-aot convert: use as stored; a layout mismatch is an error,
            # since converting between layouts would mean unpacking and repacking
            if layout != "auto" and layout_id(layout) != cw.packed.layout:
                raise PackedCheckpointError(
                    f"{name}: packed for layout {cw.packed.layout} ({cw.packed.layout_name}), "
                    f"but replace_linears was asked for layout {layout!r}"
                )
            packed = cw.packed.to(dev)
            fmt = None
            if dev.type == "cuda":
                fmt = _act_type_scale_format(packed.fmt, a, out, dev, packed.n, packed.k, packed.layout)
            if fmt is not None:  # element-wise: the scales' places in the layout stay
                scales = _scales_in(packed.scales, packed.fmt, torch_dtype(a.type))
                if _scales_rounded(packed.fmt, fmt):
                    rounded.append(name)
                packed = dataclasses.replace(packed, fmt=fmt, scales=scales)
            perm = None if cw.perm is None else cw.perm.to(dev)
            built[name] = QuantLinear.from_packed(packed, act, out_dtype, bias, in_perm=perm)
            continue
        packed, was_rounded = _pack_converted(cw.weight, a, out, layout, dev)
        if was_rounded:
            rounded.append(name)
        built[name] = QuantLinear.from_packed(packed, act, out_dtype, bias, in_perm=cw.perm)
    if problems and strict:
        raise ValueError(
            "replace_linears: these converted layers are not nn.Linear modules of the model of "
            "the same shape: " + "; ".join(problems) + " (strict=False leaves them out)"
        )
    if rounded:
        _warn_rounded("replace_linears", rounded)
    for name, module in built.items():
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, module)
    return built


def quantize_model(
    model: torch.nn.Module,
    weight_format,
    act_format=None,
    *,
    out_dtype=None,
    layout="auto",
    device=None,
    skip: Iterable[str] = ("lm_head",),
    strict: bool = True,
    progress: bool = True,
) -> dict[str, torch.nn.Module]:
    """Quantize every ``nn.Linear`` of a float ``model`` with the reference quantizer (as
    :meth:`QuantLinear.from_linear`) and swap it for the ``QuantLinear``: for models that arrive
    unquantized; checkpoints made by a quantization tool go through :func:`load_quantized` and
    :func:`replace_linears` instead, which never re-quantize.

    ``skip``: module names or patterns left in float (a name matches itself and its submodules;
    ``*`` / ``?`` globs; ``re:`` a regular expression); by default the output head, whose
    quantization costs the most accuracy. ``act_format`` defaults to each linear's weight dtype
    (bf16 / f16; bf16 otherwise); ``layout`` and ``device`` as in :func:`replace_linears` (default
    device: where each linear's weight is). Fused projections (a single qkv or gate-up linear) are
    one weight, quantized as such.

    ``strict``: a linear the format cannot take (e.g. its inputs do not fill the format's
    128-input groups: any FormatError or ValueError of ``from_linear``) is an error naming every
    such module, raised before anything is swapped; with ``strict=False`` those stay in float.
    Returns ``{name: QuantLinear}`` of the swapped modules.
    """
    from .layers import _FLOAT_ACT, QuantLinear

    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"quantize_model takes a torch.nn.Module, got {type(model).__name__}")
    from . import formats as F

    F.parse_weight_format(weight_format)  # a bad format is one error, before any layer
    if act_format is not None:
        F.parse_activation_format(act_format)
    if isinstance(skip, str):
        skip = (skip,)
    skip = tuple(skip)
    names = [
        name
        for name, mod in model.named_modules()
        if type(mod) is torch.nn.Linear and name and not any(_matches(name, p) for p in skip)
    ]
    built, problems = {}, []
    for name in _progress(names, len(names), "quantizing", progress):
        linear = model.get_submodule(name)
        if linear.weight.device.type == "meta":
            problems.append(f"{name} (its weight is on the meta device: load the model's weights first)")
            continue
        dev = torch.device(device) if device is not None else linear.weight.device
        act = act_format if act_format is not None else _FLOAT_ACT.get(linear.weight.dtype, "bf16")
        try:
            built[name] = QuantLinear.from_linear(linear, weight_format, act, out_dtype, layout=layout, device=dev)
        except (ValueError, TypeError) as e:  # FormatError is a ValueError
            problems.append(f"{name} (nn.Linear({linear.in_features}, {linear.out_features}): {e})")
    if problems and strict:
        raise ValueError(
            f"quantize_model: these linears cannot be quantized to {weight_format}: "
            + "; ".join(problems)
            + " (strict=False leaves them in float; skip=... names modules to leave out)"
        )
    for name, module in built.items():
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, module)
    return built
