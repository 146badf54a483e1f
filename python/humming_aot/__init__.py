"""humming-aot: quantized GEMM kernels for LLM inference, compiled ahead of time.

``humming_aot.formats`` is pure Python; everything else needs torch and the compiled extension
``humming_aot._C`` and is imported on first use, so ``import humming_aot`` stays cheap.
"""

from __future__ import annotations

import importlib

from .formats import (
    ActivationFormat,
    DType,
    FormatError,
    GemmFormat,
    WeightFormat,
    dtype,
    parse_activation_format,
    parse_gemm_format,
    parse_weight_format,
)

__version__ = "0.1.0"

_LAZY = {
    "PackedWeight": ("pack", "PackedWeight"),
    "pack_weight": ("pack", "pack_weight"),
    "unpack_weight": ("pack", "unpack_weight"),
    "QuantizedWeight": ("reference", "QuantizedWeight"),
    "QuantLinear": ("layers", "QuantLinear"),
    "gemm": ("ops", "gemm"),
    "quantize_act": ("ops", "quantize_act"),
    "explain": ("dispatch", "explain"),
    "choose": ("dispatch", "choose"),
    "load_quantized": ("loading", "load_quantized"),
    "iter_quantized": ("loading", "iter_quantized"),
    "load_unquantized": ("loading", "load_unquantized"),
    "replace_linears": ("loading", "replace_linears"),
    "FUSED_PROJECTIONS": ("loading", "FUSED_PROJECTIONS"),
    "quantize_model": ("loading", "quantize_model"),
    "preload": ("layers", "preload"),
    "QuantMoE": ("moe", "QuantMoE"),
    "load_packed": ("packed_checkpoint", "load_packed"),
    "save_packed": ("packed_checkpoint", "save_packed"),
    "PackedLayer": ("packed_checkpoint", "PackedLayer"),
}
_MODULES = (
    "reference",
    "pack",
    "ops",
    "dispatch",
    "registry",
    "layers",
    "cli",
    "convert",
    "loading",
    "packed_checkpoint",
    "moe",
)

__all__ = [
    "ActivationFormat",
    "DType",
    "FormatError",
    "GemmFormat",
    "WeightFormat",
    "dtype",
    "parse_activation_format",
    "parse_gemm_format",
    "parse_weight_format",
    *_LAZY,
    *_MODULES,
]


def __getattr__(name: str):
    if name in _LAZY:
        mod, attr = _LAZY[name]
        return getattr(importlib.import_module(f".{mod}", __name__), attr)
    if name in _MODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'humming_aot' has no attribute {name!r}")
