import torch, humming_aot as ha
from humming_aot import moe, registry
from humming_aot import reference as R

torch.manual_seed(0)
wfmt, act = "e4m3g128n128-sf32", "e4m3-g128"
fmt = f"a-{act}_w-{wfmt}_c-bf16"
names = [i.name for i in registry.instances() if i.name.startswith(f"sm90_wgmma_moe_{fmt}_")]
n, k = 256, 512
qs = [R.quantize_weight(torch.randn(n, k) * 0.05, wfmt) for _ in range(2)]
packed = [ha.pack_weight(q, layout="generic").to("cuda") for q in qs]
st = moe.stack_experts(packed)
for counts in ([0, 200], [1, 199], [4, 196], [5, 195], [200, 0]):
    off = torch.tensor([0, counts[0], 200], dtype=torch.int32)
    x = torch.randn(200, k).to(torch.bfloat16)
    codes, scales = ha.quantize_act(x.cuda(), act)
    c, s = codes.cpu().float().double(), scales.cpu().double()
    a = c * s.repeat_interleave(128, 1)[:, :k]
    ref = torch.cat([a[off[e] : off[e + 1]] @ R.dequantize_weight(q).double().T for e, q in enumerate(qs)])
    for name in names:
        y = moe.moe_gemm(codes, st, off.cuda(), fmt, instance=name, a_scales=scales).cpu().double()
        err = (y - ref).norm(dim=1) / ref.norm(dim=1)
        bad = (err > 0.01).nonzero().flatten().tolist()
        print(counts, name.split("_c-bf16_")[1], "max row err %.3f" % err.max().item(), "bad rows", bad[:8], len(bad))
