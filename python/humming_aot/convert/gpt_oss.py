"""gpt-oss MXFP4 checkpoints (OpenAI's ``original/`` weights and the Hugging Face ones) into the
unified format.

The mixture-of-experts weights are stored as two tensors per projection:

* ``blocks`` uint8 [..., N, K / 32, 16]: for every output ``n`` and every group of 32 inputs, 16 bytes
  holding two e2m1 codes each. Input ``32 g + 2 j`` is the low nibble of byte ``j`` of group ``g``,
  input ``32 g + 2 j + 1`` the high nibble (openai/gpt-oss ``gpt_oss/torch/weights.py``,
  ``_get_mxfp4_tensor``: low nibbles go to the even positions, high nibbles to the odd ones, and the
  groups are then flattened along the last dim, giving [..., N, K]). The nibble is the e2m1 bit
  pattern (the table there is +0, 0.5, .. 6, -0, .. -6, index = code).
* ``scales`` uint8 [..., N, K / 32]: e8m0 exponents with bias 127 (the loader takes
  ``ldexp(value, scale - 127)``).

The leading dims are the experts: ``mlp1_weight`` / ``gate_up_proj`` is [E, 2 I, H / 32, 16]
(outputs first, the gate and up rows interleaved: even rows gate, odd rows up, as gpt-oss's SwiGLU
reads them), ``mlp2_weight`` / ``down_proj`` [E, H, I / 32, 16]. Each expert becomes one
``e2m1g32-se8m0`` weight [N, K], bytes and exponents kept as they are; keeping the interleaved
gate/up order (or splitting it) is the model loader's concern.

Names: OpenAI's checkpoint ``block.{i}.mlp.mlp1_weight.blocks`` / ``.scales``; Hugging Face's
``model.layers.{i}.mlp.experts.gate_up_proj_blocks`` / ``_scales``. ``convert_layer`` accepts both
(``prefix`` without the suffix).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from ..reference import QuantizedWeight
from ._common import ConversionError, ConvertedWeight, e8m0_scales, need_tensor, unpack_fp4

__all__ = ["convert", "convert_layer"]


def _one(blocks: torch.Tensor, scales: torch.Tensor) -> QuantizedWeight:
    N, G, _ = blocks.shape
    codes = unpack_fp4(blocks, "", "blocks").reshape(N, G * 32)
    return QuantizedWeight("e2m1g32-se8m0", codes, scales.contiguous())


def convert(blocks: torch.Tensor, scales: torch.Tensor, *, layer: str = ""):
    """One ``ConvertedWeight`` for blocks [N, G, 16], or a list of them, one per expert, for
    [E, N, G, 16] (see the module doc)."""
    need_tensor(blocks, layer, "blocks", dtypes=(torch.uint8,))
    e8m0_scales(scales, layer, "scales")
    if blocks.dim() not in (3, 4) or blocks.shape[-1] != 16:
        raise ConversionError(
            layer,
            "blocks.shape",
            list(blocks.shape),
            "expected [N, K / 32, 16] or [experts, N, K / 32, 16] (16 bytes per 32 inputs)",
        )
    if list(scales.shape) != list(blocks.shape[:-1]):
        raise ConversionError(
            layer,
            "scales.shape",
            list(scales.shape),
            f"expected {list(blocks.shape[:-1])} (one exponent per block of 32 inputs)",
        )
    if blocks.dim() == 3:
        return ConvertedWeight(_one(blocks, scales), None, "gpt_oss_mxfp4")
    return [ConvertedWeight(_one(blocks[e], scales[e]), None, "gpt_oss_mxfp4") for e in range(blocks.shape[0])]


def convert_layer(tensors: Mapping[str, torch.Tensor], prefix: str, config=None, *, layer: str | None = None):
    """Convert ``{prefix}.blocks`` + ``{prefix}.scales`` (OpenAI) or ``{prefix}_blocks`` +
    ``{prefix}_scales`` (Hugging Face). ``config`` is accepted for symmetry with the other importers;
    a ``quant_method`` other than ``mxfp4`` is refused."""
    layer = prefix if layer is None else layer
    method = None
    if isinstance(config, Mapping):
        method = config.get("quant_method")
    if method is not None and str(method).lower() != "mxfp4":
        raise ConversionError(layer, "quant_method", method, "this is the gpt-oss MXFP4 importer")
    for sep in (".", "_"):
        b, s = f"{prefix}{sep}blocks", f"{prefix}{sep}scales"
        if b in tensors:
            if s not in tensors:
                raise ConversionError(layer, s, None, "the tensor is missing from the checkpoint")
            return convert(tensors[b], tensors[s], layer=layer)
    raise ConversionError(
        layer, f"{prefix}.blocks", None, f"the tensor is missing from the checkpoint (also looked for {prefix}_blocks)"
    )
