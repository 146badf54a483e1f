"""Session 41's check of the grouped 8-bit activation instances (GPU): the errors of each built
grouped FP8 block instance against the fp64 product of the dequantized operands, where n or k is
not a multiple of 128 and an expert's rows start at a row that is not a multiple of 4: which rows
and which channels are off, and whether the reference without the last K group explains them.
Prints one line per shape, layout and instance."""

import torch

import humming_aot as ha
from humming_aot import moe, registry
from humming_aot import reference as R

torch.manual_seed(0)
wfmt, act = "e4m3g128n128-sf32", "e4m3-g128"
fmt = f"a-{act}_w-{wfmt}_c-bf16"
names = [i.name for i in registry.instances() if i.name.startswith(f"sm90_wgmma_moe_{fmt}_")]
# The dense tiles with the tokens on M (_w2x1x1, _w3x1x1), on each expert's rows alone.
dense = [i.name for i in registry.instances() if i.name.startswith(f"sm90_wgmma_dense_{fmt}_") and "x1x1_" in i.name]
for n, k in ((256, 512), (320, 512), (256, 2880), (320, 2880)):
    qs = [R.quantize_weight(torch.randn(n, k) * 0.05, wfmt) for _ in range(2)]
    st = moe.stack_experts([ha.pack_weight(q, layout="generic").to("cuda") for q in qs])
    ws = [R.dequantize_weight(q).double() for q in qs]
    for first in (0, 5):
        off = torch.tensor([0, first, 200], dtype=torch.int32)
        x = torch.randn(200, k).to(torch.bfloat16)
        codes, scales = ha.quantize_act(x.cuda(), act)
        a = codes.cpu().float().double() * scales.cpu().double().repeat_interleave(128, 1)[:, :k]
        ref = torch.cat([a[off[e] : off[e + 1]] @ ws[e].T for e in range(2)])
        cut = (k - 1) // 128 * 128  # without the last K group
        ref_cut = torch.cat([a[off[e] : off[e + 1], :cut] @ ws[e][:, :cut].T for e in range(2)])
        for name in names + dense:

            def run(name=name):
                if name in names:
                    return moe.moe_gemm(codes, st, off.cuda(), fmt, instance=name, a_scales=scales)
                return torch.cat([
                    ha.gemm(codes[off[e] : off[e + 1]], st.expert(e), fmt, a_scales=scales[off[e] : off[e + 1]],
                            instance=name)
                    for e in range(2)
                ])  # fmt: skip

            y = run().cpu().double()
            d = (y - ref).abs() > 0.02 * ref.abs().max()
            rows, cols = d.any(1).nonzero().flatten().tolist(), d.any(0).nonzero().flatten().tolist()
            err = ((y - ref).norm() / ref.norm()).item()
            err_cut = ((y - ref_cut).norm() / ref_cut.norm()).item()
            tile = name.split("_c-bf16_")[1] + (" dense" if name in dense else "")
            print(f"n={n} k={k} first={first} {tile}: err {err:.4f} (without the last K group {err_cut:.4f}); "
                  f"off rows {len(rows)} {rows[:4]}..{rows[-2:]}, channels {len(cols)} {cols[:4]}..{cols[-2:]}",
                  flush=True)  # fmt: skip
