"""Layer modules over torch.ops.humming."""

from __future__ import annotations

import os

import torch

from . import formats as F
from . import reference
from ._ext import C
from .dispatch import is_generic, layer_plan
from .ops import activation_operand
from .pack import PackedWeight, layout_id, pack_weight

_FLOAT_ACT = {torch.bfloat16: "bf16", torch.float16: "f16"}

# Eager calls skip the torch dispatcher (C.gemm_eager: humming_aot._eager, the same implementation as
# torch.ops.humming.gemm, present under the torch the package was built with) where it would add
# nothing; HUMMING_EAGER_OPS=1 always goes through torch.ops (for example so that torch.profiler
# lists humming::gemm).
_DIRECT = None if os.environ.get("HUMMING_EAGER_OPS", "0") not in ("", "0") else getattr(C, "gemm_eager", None)
# Quantized activations: quantize_act and the GEMM in one direct call (same switch).
_DIRECT_QUANTIZE = None if _DIRECT is None else getattr(C, "quantize_gemm_eager", None)


def _direct_call_ok(x: torch.Tensor) -> bool:
    """Whether the dispatcher would do nothing for this call but run the kernel: a plain tensor
    that needs no autograd, outside torch.compile tracing and outside dispatch / function modes
    (fake tensors, flop counters and the like must see the op)."""
    return (
        type(x) is torch.Tensor
        and not (x.requires_grad and torch.is_grad_enabled())
        and not torch.compiler.is_compiling()
        and torch._C._len_torch_dispatch_stack() == 0
        and not torch._C._is_torch_function_mode_enabled()
    )


class QuantLinear(torch.nn.Module):
    """A linear layer whose weight is quantized: ``y = x @ W.T + bias``.

    Build it from a float ``nn.Linear`` and a weight format (:meth:`from_linear`), or from an
    already packed weight (:meth:`from_packed`). ``forward`` takes x of shape [..., in_features]
    in the activation dtype (bf16 or f16; for e4m3 / e5m2 / i8 activation formats it quantizes x
    itself), runs on x's device (CUDA: a compiled instance chosen per M range; CPU: the reference
    path) and returns [..., out_features] in the output type. As ``nn.Linear``, it takes any view
    (transposed, strided, at any address; copied only where the kernel cannot read it) and zero rows.
    Under torch.compile the instance is chosen at run time inside ``torch.ops.humming.auto_gemm``,
    so graphs have no break and serve every M.
    """

    def __init__(
        self,
        packed: PackedWeight,
        act_format="bf16",
        out_dtype: str | None = None,
        bias=None,
        instance: str = "",
        in_perm: torch.Tensor | None = None,
    ):
        super().__init__()
        act = F.parse_activation_format(act_format)
        # "is None", not "or": an empty string is a bad output type, not the default one.
        out = out_dtype if out_dtype is not None else ("bf16" if act.quantized else str(act.type))
        self.fmt = F.GemmFormat(act, packed.fmt, F.dtype(out))
        self.in_features, self.out_features = packed.k, packed.n
        self.n_pad, self.k_pad, self.layout = packed.n_pad, packed.k_pad, packed.layout
        self.instance = instance
        self.register_buffer("codes", packed.codes)
        self.register_buffer("scales", packed.scales)
        self.register_buffer("zeros", packed.zeros)
        self.register_buffer("global_scale", packed.global_scale)
        if bias is not None:
            bias = bias.detach().to(reference.torch_dtype(self.fmt.out))
            if bias.shape != (packed.n,):
                raise ValueError(f"bias has shape {tuple(bias.shape)}; expected ({packed.n},)")
        self.register_buffer("bias", bias)
        # Act-order checkpoints (convert.ConvertedWeight.perm): the packed weight's input j is the
        # layer's input in_perm[j], so forward gathers x's features in that order first. A buffer,
        # so that .to(device) and state_dict carry it; None (no gather, no extra op) otherwise.
        if in_perm is not None:
            in_perm = torch.as_tensor(in_perm).detach().to(device=packed.codes.device, dtype=torch.int64)
            if in_perm.shape != (packed.k,):
                raise ValueError(f"in_perm has shape {tuple(in_perm.shape)}; expected ({packed.k},)")
            # Checked once here: index_select would only say "INDICES element is out of DATA bounds"
            # per call, and a repeated index would silently drop an input feature.
            if in_perm.device.type != "meta" and not torch.equal(
                in_perm.sort().values, torch.arange(packed.k, device=in_perm.device)
            ):
                raise ValueError(f"in_perm must be a permutation of 0..{packed.k - 1} (each input feature once)")
        self.register_buffer("in_perm", in_perm)
        self._plan = layer_plan(self.fmt, packed.n, packed.k, packed.layout)  # shared with auto_gemm
        # Strings and dtypes the op takes, computed once: formatting them costs microseconds per call.
        self._fmt_str = str(self.fmt)
        self._act_str = str(self.fmt.act)
        self._act_dtype = reference.torch_dtype(self.fmt.act.type)
        self._act_quantized = self.fmt.act.quantized
        self._out_dtype = reference.torch_dtype(self.fmt.out)
        # A layer built on a GPU, or moved to one, loads the kernels of its instances then, not on
        # its first calls (HUMMING_PRELOAD=0 leaves that to the calls).
        self._auto_preload()

    def _auto_preload(self) -> None:
        if self.codes.is_cuda and not self.instance and os.environ.get("HUMMING_PRELOAD", "1") != "0":
            self.preload()

    def _apply(self, fn, *args, **kwargs):
        # .to(device) / .cuda() of the layer or of a model holding it
        out = super()._apply(fn, *args, **kwargs)
        self._auto_preload()
        return out

    @classmethod
    def from_linear(
        cls, linear: torch.nn.Linear, weight_format, act_format=None, out_dtype=None, *, layout="auto", device=None
    ) -> "QuantLinear":
        """Quantize ``linear.weight`` with the reference quantizer and pack it.

        ``layout="auto"`` packs for the fastest backend that computes the format on ``device`` and
        can run this layer's shape (the device table's layout order; otherwise the generic one).
        """
        if not isinstance(linear, torch.nn.Linear):
            raise TypeError(f"from_linear takes a torch.nn.Linear, got {type(linear).__name__}")
        w = linear.weight.detach()
        if act_format is None:
            act_format = _FLOAT_ACT.get(w.dtype, "bf16")
        q = reference.quantize_weight(w.float(), weight_format)
        if layout == "auto":
            act = F.parse_activation_format(act_format)
            out = out_dtype if out_dtype is not None else ("bf16" if act.quantized else str(act.type))
            from .dispatch import preferred_layout

            target = device if device is not None else w.device
            layout = preferred_layout(F.GemmFormat(act, q.fmt, out), target, n=w.shape[0], k=w.shape[1])
        packed = pack_weight(q, layout=layout_id(layout))
        if device is not None:
            packed = packed.to(device)
        bias = linear.bias.detach() if linear.bias is not None else None
        if bias is not None and device is not None:
            bias = bias.to(device)
        return cls(packed, act_format, out_dtype, bias)

    @classmethod
    def from_packed(
        cls, packed: PackedWeight, act_format="bf16", out_dtype=None, bias=None, *, in_perm: torch.Tensor | None = None
    ) -> "QuantLinear":
        """Wrap an already packed weight; ``in_perm`` (int64 [in_features]) permutes the input's
        features before the GEMM, for act-order weights (see ``convert.ConvertedWeight.perm``)."""
        return cls(packed, act_format, out_dtype, bias, in_perm=in_perm)

    @property
    def packed(self) -> PackedWeight:
        return PackedWeight(
            self.codes,
            self.scales,
            self.zeros,
            self.global_scale,
            self.fmt.weight,
            self.out_features,
            self.in_features,
            self.n_pad,
            self.k_pad,
            self.layout,
        )

    def preload(self, device=None) -> list[str]:
        """Loads the kernels of the instances this layer uses on ``device`` (default: where its
        weight is), one per M range of the device's table, so that no call pays the module load
        (see :meth:`humming_aot.dispatch.LayerPlan.preload`). Nothing to do on the CPU. Returns the
        instances loaded."""
        device = torch.device(device) if device is not None else self.codes.device
        if device.type != "cuda":
            return []
        return self._plan.preload(device)

    def instance_for(self, m: int, device=None) -> str:
        """The compiled instance a call with ``m`` rows uses on ``device`` ("cpu-reference" on the CPU)."""
        device = torch.device(device) if device is not None else self.codes.device
        if device.type != "cuda":
            return "cpu-reference"
        if self.instance:
            return self.instance
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        return self._plan.instance(m, device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 0 or x.shape[-1] != self.in_features:  # (0-D: no features at all, not an IndexError)
            got = f"{x.shape[-1]} features" if x.dim() else "0 dimensions (a scalar)"
            raise ValueError(f"input has {got}; this layer takes {self.in_features} features [..., {self.in_features}]")
        # 2-D inputs (what a serving loop passes) skip the two reshapes: each is a torch call.
        flat = x.dim() == 2
        a = x if flat else x.reshape(-1, self.in_features)
        perm = self._buffers.get("in_perm")
        if perm is not None:
            # None or not is fixed per module, so traced graphs see one branch and no guard on data.
            a = a.index_select(-1, perm)
        a_scales = None
        if not self._act_quantized and a.dtype != self._act_dtype:
            raise TypeError(f"this layer takes {self._act_dtype} activations ({self.fmt.act}); got {a.dtype}")
        if a.is_cuda and a.shape[0] == 0:
            # As nn.Linear: no rows in, no rows out, with no instance to choose and nothing to launch.
            # (The CPU kernels take m = 0 as it is; traced graphs see m = 0 as a constant.)
            out = a.new_empty((0, self.out_features), dtype=self._out_dtype)
            return out if flat else out.reshape(*x.shape[:-1], self.out_features)
        # Buffers straight from the dict: nn.Module's attribute fallback costs about a microsecond
        # per buffer per call (7 us for these five on the CI machine).
        b = self._buffers
        instance = self.instance
        if self._act_quantized:
            # quantize_act reads rows of unit stride; its output is a fresh contiguous tensor
            if not a.is_contiguous():
                a = activation_operand(a, False)
            if _DIRECT_QUANTIZE is not None and _direct_call_ok(a):
                # Eager: quantize and GEMM in one call (the codes are fresh, contiguous and aligned).
                if a.is_cuda:
                    instance = instance or self._plan.instance_at(a.shape[0], a.get_device())
                out = _DIRECT_QUANTIZE(
                    a,
                    b["codes"],
                    b["scales"],
                    b["zeros"],
                    b["global_scale"],
                    b["bias"],
                    self._act_str,
                    self._fmt_str,
                    self.layout,
                    self.out_features,
                    self.in_features,
                    instance if a.is_cuda else "",
                )
                return out if flat else out.reshape(*x.shape[:-1], self.out_features)
            a, a_scales = torch.ops.humming.quantize_act(a, self._act_str)
        if torch.compiler.is_compiling():
            # Traced (torch.compile, export): the instance choice depends on M and is host-side
            # Python, so auto_gemm makes it inside the op at run time, on every device alike.
            op = torch.ops.humming.auto_gemm
        else:
            # Transposed / strided / unaligned activations are copied only where the kernel needs it
            # (the tests come first: the usual contiguous, aligned input pays two calls).
            if a.is_cuda:
                instance = instance or self._plan.instance_at(a.shape[0], a.get_device())
                if not a.is_contiguous() or a.data_ptr() % 16:
                    a = activation_operand(a, not is_generic(instance))
            else:
                instance = ""
                if not a.is_contiguous():
                    a = activation_operand(a, False)
            op = _DIRECT if _DIRECT is not None and _direct_call_ok(a) else torch.ops.humming.gemm
        out = op(
            a,
            b["codes"],
            b["scales"],
            b["zeros"],
            b["global_scale"],
            a_scales,
            b["bias"],
            self._fmt_str,
            self.layout,
            self.out_features,
            self.in_features,
            instance,
        )
        return out if flat else out.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        perm = ", in_perm" if self._buffers.get("in_perm") is not None else ""
        return f"in_features={self.in_features}, out_features={self.out_features}, format={self.fmt}{perm}"


def preload(module: torch.nn.Module, device=None) -> dict[str, list[str]]:
    """Loads the kernels every :class:`QuantLinear` of ``module`` uses on ``device`` (default:
    where each layer's weight is), so that a server's first requests pay no module loads. Layers
    built on a GPU or moved there with ``.to`` do this themselves (unless HUMMING_PRELOAD=0).
    Returns ``{layer name: instances loaded}``."""
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"preload takes a torch.nn.Module, got {type(module).__name__}")
    return {name: m.preload(device) for name, m in module.named_modules() if isinstance(m, QuantLinear)}
