"""Session 41's check of the grouped 8-bit activation instances (GPU): per-row errors of each
built grouped FP8 block instance where an expert's rows start at rows that are and are not
multiples of 4, and for the rows that are off, the shift of the activation scales' rows that
explains them (the tokens-M tiles read a tile's scales from the 16-byte boundary at or before its
first row). Prints one line per instance and layout."""

import torch

import humming_aot as ha
from humming_aot import moe, registry
from humming_aot import reference as R

torch.manual_seed(0)
wfmt, act = "e4m3g128n128-sf32", "e4m3-g128"
fmt = f"a-{act}_w-{wfmt}_c-bf16"
names = [i.name for i in registry.instances() if i.name.startswith(f"sm90_wgmma_moe_{fmt}_")]
n, k = 256, 512
qs = [R.quantize_weight(torch.randn(n, k) * 0.05, wfmt) for _ in range(2)]
st = moe.stack_experts([ha.pack_weight(q, layout="generic").to("cuda") for q in qs])
ws = [R.dequantize_weight(q).double() for q in qs]
for first in (0, 1, 4, 5, 200):
    off = torch.tensor([0, first, 200], dtype=torch.int32)
    x = torch.randn(200, k).to(torch.bfloat16)
    codes, scales = ha.quantize_act(x.cuda(), act)
    c, s = codes.cpu().float().double(), scales.cpu().double()

    def ref_with(shift):
        rows = (torch.arange(200) + shift).clamp(0, 199)
        a = c * s[rows].repeat_interleave(128, 1)[:, :k]
        return torch.cat([a[off[e] : off[e + 1]] @ ws[e].T for e in range(2)])

    refs = {d: ref_with(d) for d in range(-4, 5)}
    for name in names:
        y = moe.moe_gemm(codes, st, off.cuda(), fmt, instance=name, a_scales=scales).cpu().double()
        err = {d: (y - r).norm(dim=1) / r.norm(dim=1) for d, r in refs.items()}
        bad = (err[0] > 0.01).nonzero().flatten().tolist()
        best = {r: min(range(-4, 5), key=lambda d: float(err[d][r])) for r in bad[:6]}
        tile = name.split("_c-bf16_")[1]
        print(
            f"first={first} {tile}: max row err {err[0].max().item():.3f}, {len(bad)} bad rows {bad[:6]} "
            f"best shifts {best}",
            flush=True,
        )
