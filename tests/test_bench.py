"""CPU tests of the benchmark harness (humming_aot.bench, benchmarks/bench_gemm.py, humming-aot bench).

The timings themselves need a GPU; what is checked here is everything around them: argument
parsing, the shape corpus (against the models' published configs), the arithmetic, the JSON /
Markdown writers, the operand builders of the peers (against torch's CPU kernels and the reference
quantizer), the measurement loop driven by a fake timer on the CPU, and that a run without a GPU
stops with a message instead of a traceback.
"""

import importlib.util
import json
import math
import os
import pathlib
import subprocess
import sys

import pytest
import torch

import humming_aot
from humming_aot import bench as B
from humming_aot import reference as R


def _cpu_rowwise_fp8() -> bool:
    """Whether this torch's CPU _scaled_mm takes row-wise scales (2.14 does; 2.11 asserts)."""
    try:
        a = torch.ones(16, 16).to(torch.float8_e4m3fn)
        b = torch.ones(16, 16).to(torch.float8_e4m3fn).t()
        torch._scaled_mm(a, b, scale_a=torch.ones(16, 1), scale_b=torch.ones(1, 16), out_dtype=torch.bfloat16)
        return True
    except RuntimeError:
        return False


FP8_ON_CPU = _cpu_rowwise_fp8()


REPO = pathlib.Path(__file__).resolve().parent.parent
PKG_PARENT = pathlib.Path(humming_aot.__file__).resolve().parent.parent


# ---- arguments -----------------------------------------------------------------------------------


def test_defaults_are_the_design_shapes_and_ms():
    a = B.parse_args([])
    assert a.shapes == [(8192, 8192), (28672, 8192), (8192, 28672)]
    assert a.ms == [1, 16, 64, 256, 1024, 4096, 8192]
    assert [(f.label, f.weight, f.act) for f in a.formats] == [
        ("w4a16", "u4g128-sbf16", "bf16"),
        ("w8a16", "u8gc-sbf16", "bf16"),
    ]
    assert a.impls == list(B.IMPLS)
    assert (a.iters, a.warmup, a.graph_max_m, a.layout) == (20, 3, 256, "auto")
    assert a.jit_timeout_s == a.time_budget_s / 2


def test_quick_fills_only_what_is_not_given():
    q = B.parse_args(["--quick"])
    assert q.shapes == [(8192, 8192)] and q.ms == [1, 256, 4096] and q.iters == 5
    q = B.parse_args(["--quick", "--ms", "2, 1,2", "--shapes", "64x128,32x256", "--iters", "7"])
    assert q.ms == [1, 2] and q.shapes == [(64, 128), (32, 256)] and q.iters == 7


@pytest.mark.parametrize(
    "argv",
    [
        ["--shapes", "8192"],
        ["--shapes", "0x16"],
        ["--ms", "0"],
        ["--ms", "a"],
        ["--formats", "u4g100-sbf16"],
        ["--formats", "w4a16,u4g128-sbf16:q8"],
        ["--impls", "cublas-bf16,nope"],
        ["--jit-formats", "w2a16"],
        ["--iters", "0"],
        ["--max-ms-per-point", "-1"],
        ["--suite", "llama"],
        ["--flush", "zero"],
    ],
)
def test_bad_arguments_are_argparse_errors(argv, capsys):
    with pytest.raises(SystemExit) as e:
        B.parse_args(argv)
    assert e.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_format_strings_and_aliases():
    f = B.parse_format("I4G128-sbf16:e4m3-pt")
    assert (f.label, f.weight, f.act, f.gemm) == (
        "i4g128-sbf16:e4m3-pt",
        "i4g128-sbf16",
        "e4m3-pt",
        "a-e4m3-pt_w-i4g128-sbf16_c-bf16",
    )
    assert B.parse_format("u4g128-sbf16").gemm == "a-bf16_w-u4g128-sbf16_c-bf16"
    assert B.parse_format("w8a16").gemm == "a-bf16_w-u8gc-sbf16_c-bf16"


def test_worker_arguments_round_trip(tmp_path):
    a = B.parse_args(
        [
            "--shapes",
            "64x128",
            "--ms",
            "1,8",
            "--iters",
            "4",
            "--flush-mib",
            "32",
            "--jit-formats",
            "w4a16,w8a16",
            "--flush",
            "write",
        ]
    )
    w = B.parse_args(B.worker_argv(a, tmp_path / "o.json", 12.5))
    assert (w.shapes, w.ms, w.iters, w.flush_mib, w.jit_formats) == (a.shapes, a.ms, 4, 32, ["w4a16", "w8a16"])
    assert (w.worker, w.worker_out, w.time_budget_s) == ("humming-jit", tmp_path / "o.json", 12.5)
    assert w.flush == "write"  # not the default: only forwarding gets it there


def test_the_suite_picks_the_shapes_and_explicit_shapes_win():
    corpus = list(dict.fromkeys((e["n"], e["k"]) for e in json.loads(B.CORPUS_PATH.read_text())["shapes"]))
    headline = [(8192, 8192), (28672, 8192), (8192, 28672)]
    a = B.parse_args([])
    assert (a.suite, a.shapes) == ("headline", headline)
    a = B.parse_args(["--suite", "models"])
    assert (a.suite, a.shapes) == ("models", corpus) and a.ms == [1, 16, 64, 256, 1024, 4096, 8192]
    a = B.parse_args(["--suite", "all"])
    assert a.suite == "all" and a.shapes[:3] == headline and len(set(a.shapes)) == len(a.shapes)
    assert set(a.shapes) == set(headline) | set(corpus) and len(a.shapes) < len(headline) + len(corpus)
    # --quick fills in what was not given: an explicit suite keeps its shapes, --shapes beats both.
    q = B.parse_args(["--quick", "--suite", "models"])
    assert (q.suite, q.shapes, q.ms, q.iters) == ("models", corpus, [1, 256, 4096], 5)
    q = B.parse_args(["--quick"])
    assert (q.suite, q.shapes) == (None, [(8192, 8192)])
    for argv in (["--suite", "models", "--shapes", "64x128"], ["--shapes", "64x128", "--suite", "all", "--quick"]):
        a = B.parse_args(argv)
        assert (a.suite, a.shapes) == (None, [(64, 128)])


def test_flush_method_defaults_to_read():
    assert B.parse_args([]).flush == "read"
    assert B.parse_args(["--flush", "write"]).flush == "write"
    assert "--flush" in B.worker_argv(B.parse_args([]), pathlib.Path("o.json"), 1.0)


def test_read_flush_leaves_the_buffer_alone_and_write_flush_zeroes_it():
    buf = torch.arange(-500, 1500, dtype=torch.int32)
    sink = torch.zeros(1, dtype=torch.int32)
    B.flush_l2(buf, "read", sink)
    assert torch.equal(buf, torch.arange(-500, 1500, dtype=torch.int32)) and sink.tolist() == [1499]
    B.flush_l2(buf, "write", sink)
    assert not buf.any() and sink.tolist() == [1499]
    with pytest.raises(ValueError, match="flush method"):
        B.flush_l2(buf, "zero", sink)


# ---- shape corpus (bench_corpus.json) -------------------------------------------------------------


# The published config.json values of each model (field names as there; head_dim is hidden_size /
# num_attention_heads where the file has no such field), written out independently of the corpus file.
MODEL_CONFIGS = {
    "Llama-3-8B": {
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
    },
    "Llama-3-70B": {
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 128,
    },
    "Qwen2.5-7B": {
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "head_dim": 128,
    },
    "Qwen2.5-14B": {
        "hidden_size": 5120,
        "intermediate_size": 13824,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "head_dim": 128,
    },
    "Qwen2.5-72B": {
        "hidden_size": 8192,
        "intermediate_size": 29568,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 128,
    },
    "Mistral-7B": {
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
    },
    "Mixtral-8x7B": {
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
    },
    "DeepSeek-V3": {
        "hidden_size": 7168,
        "intermediate_size": 18432,
        "num_attention_heads": 128,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
    },
    "gpt-oss-120b": {"hidden_size": 2880, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64},
}
STANDARD_ROLES = {"qkv", "o", "gate_up", "down"}
MODEL_ROLES = dict(
    {m: STANDARD_ROLES for m in MODEL_CONFIGS},
    **{"DeepSeek-V3": {"q_a_proj", "kv_a_proj_with_mqa", "o", "gate_up", "down"}, "gpt-oss-120b": {"qkv", "o"}},
)


def _expected_nk(cfg: dict, role: str) -> tuple[int, int]:
    """(N, K) of a layer by the fused-projection rules of the corpus' _doc."""
    h = cfg["hidden_size"]
    if role == "qkv":
        return (cfg["num_attention_heads"] + 2 * cfg["num_key_value_heads"]) * cfg["head_dim"], h
    if role == "o":
        return h, cfg["num_attention_heads"] * cfg.get("v_head_dim", cfg.get("head_dim"))
    if role == "gate_up":
        return 2 * cfg["intermediate_size"], h
    if role == "down":
        return h, cfg["intermediate_size"]
    if role == "q_a_proj":
        return cfg["q_lora_rank"], h
    if role == "kv_a_proj_with_mqa":
        return cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"], h
    raise AssertionError(f"role {role!r} has no rule")


def test_corpus_file_is_valid_and_follows_the_head_arithmetic():
    data = json.loads(B.CORPUS_PATH.read_text())  # the installed package's copy: it must ship
    assert "config.json" in data["_doc"] and "num_key_value_heads" in data["_doc"]
    entries = data["shapes"]
    for e in entries:
        assert {"model", "role", "n", "k"} <= set(e), e
        assert all(type(e[key]) is int and e[key] > 0 for key in ("n", "k")), e
        assert e["model"] in MODEL_CONFIGS, e
        assert (e["n"], e["k"]) == _expected_nk(MODEL_CONFIGS[e["model"]], e["role"]), e
    assert len({(e["n"], e["k"]) for e in entries}) >= 24
    pairs = [(e["model"], e["role"]) for e in entries]
    assert len(pairs) == len(set(pairs))
    assert set(pairs) == {(m, r) for m, roles in MODEL_ROLES.items() for r in roles}
    # The config values the file documents are the published ones.
    for model, cfg in MODEL_CONFIGS.items():
        assert {key: data["models"][model].get(key) for key in cfg} == cfg, model
    # Anchors given as numbers rather than derived (gpt-oss states its head_dim; DeepSeek-V3 uses MLA).
    nk = {(e["model"], e["role"]): (e["n"], e["k"]) for e in entries}
    assert nk[("gpt-oss-120b", "qkv")] == (5120, 2880) and nk[("gpt-oss-120b", "o")] == (2880, 4096)
    assert nk[("DeepSeek-V3", "q_a_proj")] == (1536, 7168)
    assert nk[("DeepSeek-V3", "kv_a_proj_with_mqa")] == (576, 7168)
    assert nk[("DeepSeek-V3", "o")] == (7168, 16384)
    assert nk[("Llama-3-70B", "gate_up")] == (57344, 8192) and nk[("Qwen2.5-7B", "qkv")] == (4608, 3584)
    assert B.load_corpus() == entries


@pytest.mark.parametrize(
    "bad",
    [
        {"model": "A", "role": "o", "n": 0, "k": 64},
        {"model": "A", "role": "o", "n": "4096", "k": 64},
        {"model": "A", "role": "o", "n": True, "k": 64},
        {"model": "A", "n": 64, "k": 64},
    ],
)
def test_broken_corpus_entries_are_rejected(tmp_path, bad):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"shapes": [{"model": "A", "role": "qkv", "n": 64, "k": 64}, bad]}))
    with pytest.raises(ValueError, match=r"shapes\[1\]"):
        B.load_corpus(path)


def test_shape_labels_name_every_model_and_role():
    labels = B.shape_labels(B.load_corpus())
    assert labels[(6144, 4096)] == "Llama-3-8B, Mistral-7B, Mixtral-8x7B qkv"
    assert labels[(8192, 8192)] == "Llama-3-70B, Qwen2.5-72B o"
    assert labels[(576, 7168)] == "DeepSeek-V3 kv_a_proj_with_mqa"
    assert (28672, 8192) not in labels  # a headline shape that is no fused layer of these models
    mixed = [
        {"model": "A", "role": "o", "n": 64, "k": 64},
        {"model": "B", "role": "down", "n": 64, "k": 64},
        {"model": "C", "role": "o", "n": 64, "k": 64},
        {"model": "A", "role": "o", "n": 64, "k": 64},
    ]
    assert B.shape_labels(mixed) == {(64, 64): "A, C o; B down"}


# ---- arithmetic ----------------------------------------------------------------------------------


def test_tflops_and_best_time():
    assert B.tflops(1, 8192, 8192, 10.0) == pytest.approx(2 * 8192 * 8192 / 10e-6 / 1e12)
    assert B.tflops(8192, 28672, 8192, 5422.0) == pytest.approx(710, abs=0.5)  # ANCHORS: 5422.0 us, 710 TFLOP/s
    assert B.tflops(1, 1, 1, None) is None and B.tflops(1, 1, 1, 0.0) is None
    assert B.best_us({"us": 55.3, "us_graph": 19.9}) == 19.9
    assert B.best_us({"us": 55.3, "us_graph": None}) == 55.3
    assert B.best_us({"us": None, "us_graph": None}) is None


def test_device_slug():
    assert B.device_slug("NVIDIA H200") == "h200"
    assert B.device_slug("NVIDIA H100 80GB HBM3") == "h100-80gb-hbm3"
    assert B.device_slug("NVIDIA") == "gpu"


# ---- writers -------------------------------------------------------------------------------------


def _row(impl, fmt, n, k, m, us, us_graph=None, host=None, **kw):
    r = {
        "impl": impl,
        "format": fmt,
        "n": n,
        "k": k,
        "m": m,
        "us": us,
        "us_graph": us_graph,
        "host_overhead_us": host,
        "eager_minus_graph_us": None if us_graph is None else us - us_graph,
        "instance": None,
    }
    r.update(kw)
    r["tflops"] = B.tflops(m, n, k, B.best_us(r))
    return r


def _result(rows, skipped=()):
    return {
        "device": {"name": "NVIDIA H200", "driver": "580.159.04"},
        "torch": "2.11.0+cu130",
        "cuda": "13.0",
        "date": "2026-11-29T12:00:00Z",
        "git_sha": "abc123",
        "git_dirty": False,
        "method": dict(B.METHOD),
        "humming_aot": {"build_info": {"version": "0.1.0", "profile": "dev", "archs": ["90a"]}},
        "settings": {"graph_max_m": 256, "check_m": 16},
        "peers": {"humming-kernels": "0.1.20"},
        "rows": list(rows),
        "skipped": list(skipped),
        "host_overhead": B.summarize_host(list(rows)),
    }


SYNTHETIC = [
    _row("cublas-bf16", "bf16", 8192, 8192, 1, 42.8, 20.1, 6.0, rel_err=0.0),
    _row("humming-aot", "w4a16", 8192, 8192, 1, 30.0, 12.0, 5.0, instance="sm80_x_t16x64", layout="sm80", rel_err=0.1),
    _row("humming-jit", "w4a16", 8192, 8192, 1, 55.3, 19.9, 35.0, rel_err=0.1),
    _row("cublas-bf16", "bf16", 8192, 8192, 4096, 800.0),
    _row(
        "humming-aot", "w4a16", 8192, 8192, 4096, 790.0, instance="sm80_x_t128x128", layout="sm80", rel_err=float("nan")
    ),
    _row("cublaslt-fp8", "w8a8-fp8", 28672, 8192, 4096, 1600.0),
]


def test_json_has_the_required_fields(tmp_path):
    path = B.write_json(
        _result(SYNTHETIC, [{"impl": "torch-int4", "format": "w4a16", "reason": "x"}]), tmp_path / "sub" / "r.json"
    )
    data = json.loads(path.read_text())
    for key in (
        "device",
        "torch",
        "cuda",
        "humming_aot",
        "git_sha",
        "date",
        "method",
        "rows",
        "skipped",
        "host_overhead",
    ):
        assert key in data, key
    assert data["device"]["driver"] == "580.159.04" and data["humming_aot"]["build_info"]["archs"] == ["90a"]
    assert len(data["rows"]) == len(SYNTHETIC)
    for row in data["rows"]:
        for key in ("impl", "format", "n", "k", "m", "us", "us_graph", "tflops", "instance", "host_overhead_us"):
            assert key in row, key
    assert data["rows"][4]["rel_err"] is None  # NaN is not JSON
    assert data["rows"][0]["tflops"] == pytest.approx(2 * 8192 * 8192 / 20.1e-6 / 1e12)
    host = {(h["impl"], h["format"]): h for h in data["host_overhead"]}
    assert host[("humming-jit", "w4a16")]["host_overhead_us"] == 35.0
    assert host[("humming-jit", "w4a16")]["eager_minus_graph_us"] == pytest.approx(55.3 - 19.9)
    assert ("cublaslt-fp8", "w8a8-fp8") not in host  # no host measurement at m = 4096


def test_markdown_shows_the_layer_label_where_rows_have_one():
    rows = [dict(r, label="Llama-3-70B, Qwen2.5-72B o") if (r["n"], r["k"]) == (8192, 8192) else r for r in SYNTHETIC]
    md = B.markdown(_result(rows))
    lines = md.splitlines()
    header = next(line for line in lines if line.startswith("| N x K |"))
    assert header.startswith("| N x K | layer | M | ")
    assert any(line.startswith("| 8192 x 8192 | Llama-3-70B, Qwen2.5-72B o | 1 |") for line in lines)
    assert any(line.startswith("|  |  | 4096 |") for line in lines)
    assert any(line.startswith("| 28672 x 8192 |  | 4096 |") for line in lines)  # no label: empty cell
    assert "| layer |" not in B.markdown(_result(SYNTHETIC))  # no labels: no column


def test_markdown_lists_every_implementation_and_m():
    md = B.markdown(
        _result(
            SYNTHETIC, [{"impl": "torch-int4", "format": "w4a16", "n": 8192, "k": 8192, "reason": "rejected the codes"}]
        )
    )
    for r in SYNTHETIC:
        assert B.impl_label(r["impl"], r["format"]) in md
    lines = md.splitlines()
    assert any(line.startswith("| 8192 x 8192 | 1 |") for line in lines)
    assert any(line.startswith("|  | 4096 |") for line in lines)
    assert any(line.startswith("| 28672 x 8192 | 4096 |") for line in lines)
    assert "12.0 g" in md and "790.0 e" in md  # graph where measured, else eager
    assert "`sm80_x_t16x64`" in md and "rejected the codes" in md and "580.159.04" in md
    header = next(line for line in lines if line.startswith("| N x K | M |"))
    # Columns in implementation order: humming-aot first, humming-jit last.
    assert header.index("humming-aot") < header.index("cublas-bf16") < header.index("humming-jit")


def test_plot_is_skipped_with_a_note_without_matplotlib(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    notes = []
    assert B.write_plot(_result(SYNTHETIC), tmp_path / "p.png", notes.append) is None
    assert not (tmp_path / "p.png").exists()
    assert "matplotlib" in notes[0]


def test_plot_is_written_where_matplotlib_exists(tmp_path):
    notes = []
    path = B.write_plot(_result(SYNTHETIC), tmp_path / "p.png", notes.append)
    if importlib.util.find_spec("matplotlib") is None:
        assert path is None and "matplotlib" in notes[0]
    else:
        assert path == tmp_path / "p.png" and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_write_outputs_copies_to_a_second_directory(tmp_path):
    log = B.Log(stream=open(os.devnull, "w"))
    log("hello")
    files = B.write_outputs(_result(SYNTHETIC), tmp_path / "a", "run1", log, plot=False, extra_dir=tmp_path / "out")
    assert sorted(f.name for f in files) == ["run1.json", "run1.log", "run1.md"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["run1.json", "run1.log", "run1.md"]
    assert (tmp_path / "out" / "run1.log").read_text() == "hello\n"


# ---- operands of the implementations --------------------------------------------------------------


def _weight(n, k, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g)
    w[3, :64] = 0.0  # an all-zero group: scale 1 by the reference rule
    return w.to(torch.bfloat16)


@pytest.mark.parametrize("fmt", ["u4g128-sbf16", "u8gc-sbf16", "u4g64-sf16", "u2g32-sf32", "u8g128-sbf16"])
def test_fast_quantizer_matches_the_reference(fmt):
    w = _weight(48, 256)
    q = B.quantize_symmetric_uint(w, fmt)
    ref = R.quantize_weight(w.float(), fmt)
    assert q is not None
    assert torch.equal(q.codes, ref.codes)
    assert q.scales.dtype == ref.scales.dtype and torch.equal(q.scales, ref.scales)
    assert q.zeros is None and q.global_scale is None


@pytest.mark.parametrize("fmt", ["u4g128-sbf16-zi", "i4g128-sbf16", "e2m1g32-se8m0", "e4m3g128n128-sf32"])
def test_fast_quantizer_declines_other_formats(fmt):
    assert B.quantize_symmetric_uint(_weight(128, 256), fmt) is None


def test_int4_operands_follow_torchs_kernel():
    w = _weight(64, 256).float()
    q, sz = B.int4pack_operands(w)
    assert q.dtype == torch.int32 and sz.shape == (2, 64, 2) and sz.dtype == torch.bfloat16
    # torch's rule w = (q - 8) * scale + zero, scales and zeros [K / 128, N, 2]
    s = sz[..., 0].t().float().repeat_interleave(128, dim=1)
    z = sz[..., 1].t().float().repeat_interleave(128, dim=1)
    deq = (q.float() - 8) * s + z
    assert (deq - w).abs().max() <= s.max() * 0.6  # within half a step, plus bf16 rounding of scale and zero
    x = torch.randn(5, 256).to(torch.bfloat16)
    y = torch._weight_int4pack_mm_for_cpu(x, torch._convert_weight_to_int4pack_for_cpu(q, 8), 128, sz)
    ref = x.float() @ deq.t()
    assert ((y.float() - ref).norm() / ref.norm()) < 1e-2
    nib = B.int4_nibbles(q)
    assert nib.shape == (64, 128) and nib.dtype == torch.uint8
    assert torch.equal((nib >> 4).int(), q[:, 0::2]) and torch.equal((nib & 15).int(), q[:, 1::2])


@pytest.mark.skipif(not FP8_ON_CPU, reason="this torch's CPU _scaled_mm has no row-wise scales (the peer runs on GPUs)")
def test_fp8_peer_pads_m_and_approximates_the_product():
    w = _weight(32, 128)
    impl = B.ScaledMmFp8("w8a8-fp8")
    impl.setup(w)
    assert impl.b.shape == (128, 32) and impl.b.stride() == (1, 128)  # column-major second operand
    x = torch.randn(5, 128).to(torch.bfloat16)
    y = impl.call(x)()
    assert y.shape == (16, 32) and y.dtype == torch.bfloat16
    ref = x.float() @ w.float().t()
    assert ((y[:5].float() - ref).norm() / ref.norm()) < 0.1
    assert y[5:].abs().max() == 0  # the padding rows are zero


# ---- the measurement loop, on the CPU with a fake timer --------------------------------------------


class FakeTimer:
    """Stands in for bench.Timer: runs each callable once and reports fixed times."""

    device = "cpu"

    def __init__(self):
        self.graphed = []

    def flush(self):
        pass

    def sync(self):
        pass

    def eager(self, fn, iters, budget_s):
        fn()
        return [30.0, 10.0, 20.0]

    def graph(self, fn, iters):
        fn()
        self.graphed.append(iters)
        return [5.0, 7.0, 6.0]

    def host(self, fn, calls=20):
        fn()
        return 4.0


def _has_extension():
    try:
        import humming_aot._ext  # noqa: F401

        return True
    except ImportError:
        return False


def test_measurement_loop_on_the_cpu(tmp_path):
    args = B.parse_args(["--shapes", "64x256", "--ms", "1,3,300", "--graph-max-m", "4", "--check-m", "4"])
    impls = [B.CublasBf16("bf16"), B.ScaledMmFp8("w8a8-fp8"), B.TorchInt4("w4a16")]
    with_aot = _has_extension()
    if with_aot:  # the installed package: humming-aot runs its CPU reference kernel here
        impls.insert(0, B.HummingAot(B.parse_format("w4a16")))
    log = B.Log(stream=open(os.devnull, "w"))
    seen = []
    rows, skipped = B.measure_impls(
        impls, args, FakeTimer(), log, deadline=float("inf"), on_shape=lambda r, s: seen.append((len(r), len(s)))
    )
    measured = {(r["impl"], r["m"]) for r in rows}
    fp8 = ("cublaslt-fp8",) if FP8_ON_CPU else ()
    for impl in ("cublas-bf16",) + fp8 + (("humming-aot",) if with_aot else ()):
        assert {(impl, m) for m in (1, 3, 300)} <= measured
    # torch's int4 kernel has no CPU implementation (nor, on older torch, row-wise fp8): listed as
    # skipped with torch's message, no crash.
    assert sorted(s["impl"] for s in skipped) == sorted(["torch-int4"] + ([] if FP8_ON_CPU else ["cublaslt-fp8"]))
    assert "int4pack" in next(s["reason"] for s in skipped if s["impl"] == "torch-int4")
    assert seen == [(len(rows), len(skipped))]
    for r in rows:
        assert r["us"] == 20.0 and r["us_min"] == 10.0 and r["iters"] == 3
        if r["m"] <= 4:
            assert (r["us_graph"], r["host_overhead_us"], r["eager_minus_graph_us"]) == (6.0, 4.0, 14.0)
            assert r["tflops"] == pytest.approx(2 * r["m"] * 64 * 256 / 6e-6 / 1e12)
        else:
            assert r["us_graph"] is None and r["host_overhead_us"] is None
            assert r["tflops"] == pytest.approx(2 * 300 * 64 * 256 / 20e-6 / 1e12)
        assert math.isfinite(r["rel_err"]) and r["rel_err"] < (0.2 if r["impl"] != "cublas-bf16" else 1e-2)
    if with_aot:
        aot = [r for r in rows if r["impl"] == "humming-aot"]
        assert all(r["instance"] == "cpu-reference" and r["layout"] == "generic" for r in aot)
    result = B._finish(_result([]), rows, skipped, args.shapes)
    B.write_json(result, tmp_path / "r.json")
    md = B.markdown(result)
    assert "cublaslt-fp8 w8a8-fp8" in md and "| 64 x 256 | 1 |" in md


def test_main_end_to_end_with_a_stand_in_gpu(tmp_path, monkeypatch, capsys):
    # main() and run() as on the GPU machine, with the GPU facts and the timer replaced: output
    # directory from the device name, copies in $OUT, skipped peers listed, every M in the table.
    class Props:
        name, major, minor, multi_processor_count, total_memory, L2_cache_size = "NVIDIA H200", 9, 0, 132, 2**37, 2**25

    flushes = []

    class StandInTimer(FakeTimer):
        flush_bytes = 256 << 20

        def __init__(self, flush_mib, flush="read"):
            super().__init__()
            flushes.append(flush)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda idx=None: Props)
    monkeypatch.setattr(B, "Timer", StandInTimer)
    monkeypatch.setattr(B, "_driver", lambda: "580.159.04")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "humming" else real(name, *a))
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    rc = B.main(
        [
            "--shapes",
            "64x256,32x128",
            "--ms",
            "1,3,300",
            "--graph-max-m",
            "4",
            "--check-m",
            "4",
            "--name",
            "run1",
            "--no-plot",
            "--flush",
            "write",
        ],
        results_root=tmp_path / "results",
        repo_root=REPO,
    )
    assert rc == 0, capsys.readouterr().err
    res = tmp_path / "results" / "h200"
    assert sorted(p.name for p in res.iterdir()) == ["run1.json", "run1.log", "run1.md"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["run1.json", "run1.log", "run1.md"]
    data = json.loads((res / "run1.json").read_text())
    assert "partial" not in data and data["device"]["name"] == "NVIDIA H200" and data["device"]["driver"]
    assert data["settings"]["ms"] == [1, 3, 300] and set(data["method"]) == set(B.METHOD)
    assert (data["settings"]["flush"], data["settings"]["suite"], flushes) == ("write", None, ["write"])
    assert data["git_sha"]  # from git here, or HUMMING_GIT_SHA where the checkout has no .git
    impls = {(r["impl"], r["n"], r["m"]) for r in data["rows"]}
    assert {("cublas-bf16", n, m) for n in (64, 32) for m in (1, 3, 300)} <= impls
    if FP8_ON_CPU:
        assert {("cublaslt-fp8", n, m) for n in (64, 32) for m in (1, 3, 300)} <= impls
    skipped = {s["impl"] for s in data["skipped"]}
    assert {"torch-int4", "humming-jit"} <= skipped  # no CPU kernel; not installed
    assert ("humming-aot" in skipped) != any(r["impl"] == "humming-aot" for r in data["rows"])
    md = (res / "run1.md").read_text()
    assert "| 64 x 256 | 1 |" in md and "| 32 x 128 | 1 |" in md and "|  | 300 |" in md
    assert "wrote " in capsys.readouterr().out


def test_corpus_shapes_no_peer_can_run_are_skipped_with_a_reason():
    # K = 2880 (gpt-oss-120b qkv) is not a multiple of 128 and N = 576 (DeepSeek-V3 kv_a_proj_with_mqa)
    # not of 64: every implementation either measures them or lists them as skipped, and the rows and
    # the table carry the layer names.
    args = B.parse_args(["--shapes", "5120x2880,576x7168", "--ms", "1,3", "--graph-max-m", "4", "--check-m", "2"])
    impls = [B.CublasBf16("bf16"), B.TorchInt4("w4a16")]
    if _has_extension():
        impls.insert(0, B.HummingAot(B.parse_format("w4a16")))
    rows, skipped = B.measure_impls(
        impls, args, FakeTimer(), B.Log(stream=open(os.devnull, "w")), deadline=float("inf")
    )
    for impl in impls:
        for n, k in args.shapes:
            ms = {r["m"] for r in rows if (r["impl"], r["n"], r["k"]) == (impl.name, n, k)}
            why = [s["reason"] for s in skipped if (s["impl"], s["n"], s["k"]) == (impl.name, n, k)]
            assert ms == {1, 3} or (why and all(why)), (impl.name, n, k, ms, why)
    int4 = next(s for s in skipped if (s["impl"], s["k"]) == ("torch-int4", 2880))
    assert "multiple of 128" in int4["reason"]
    assert {(r["n"], r["k"]) for r in rows if r["impl"] == "cublas-bf16"} == {(5120, 2880), (576, 7168)}
    result = B._finish(_result([]), rows, skipped, args.shapes)
    assert {(r["n"], r["label"]) for r in result["rows"]} == {
        (5120, "gpt-oss-120b qkv"),
        (576, "DeepSeek-V3 kv_a_proj_with_mqa"),
    }
    stripped = [{key: v for key, v in r.items() if key != "label"} for r in result["rows"]]
    assert len(stripped) == len(rows) and all(r in rows for r in stripped)  # the other fields as measured
    md = B.markdown(result)
    assert "| 5120 x 2880 | gpt-oss-120b qkv | 1 |" in md
    assert "| 576 x 7168 | DeepSeek-V3 kv_a_proj_with_mqa | 1 |" in md
    assert "k=2880, gpt-oss-120b qkv): ValueError: torch-int4 needs K a multiple of 128" in md


def test_time_budget_skips_instead_of_running():
    args = B.parse_args(["--shapes", "64x256", "--ms", "1,2"])
    rows, skipped = B.measure_impls(
        [B.CublasBf16("bf16")], args, FakeTimer(), B.Log(stream=open(os.devnull, "w")), deadline=0.0
    )
    assert rows == [] and "time budget" in skipped[0]["reason"]


def test_jit_peer_missing_is_recorded_as_skipped(monkeypatch):
    args = B.parse_args(["--jit-formats", "w4a16,w8a16"])
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "humming" else real(name, *a))
    rows, skipped = B.run_jit_worker(args, B.Log(stream=open(os.devnull, "w")), 10.0)
    assert rows == [] and [s["format"] for s in skipped] == ["w4a16", "w8a16"]
    assert all("humming-kernels" in s["reason"] for s in skipped)


def test_jit_child_process_reports_back(tmp_path, monkeypatch):
    # A stand-in `humming` whose import fails as the real one does without a dependency: the child
    # process must write its skip reason to the file the parent reads (the whole round trip).
    (tmp_path / "humming").mkdir()
    (tmp_path / "humming" / "__init__.py").write_text("raise ImportError('stand-in: cuda.bindings is missing')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + os.pathsep + str(PKG_PARENT))
    args = B.parse_args(["--quick", "--jit-timeout-s", "120"])
    log = B.Log(stream=open(os.devnull, "w"))
    rows, skipped = B.run_jit_worker(args, log, 60.0)
    assert rows == []
    assert [(s["impl"], s["format"]) for s in skipped] == [("humming-jit", "w4a16")]
    assert "stand-in: cuda.bindings is missing" in skipped[0]["reason"]
    assert any(line.startswith("  [jit] ") for line in log.lines)  # the child's output is kept in the log


def test_jit_child_process_is_killed_at_its_budget(tmp_path, monkeypatch):
    (tmp_path / "humming").mkdir()
    (tmp_path / "humming" / "__init__.py").write_text("import time\ntime.sleep(600)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + os.pathsep + str(PKG_PARENT))
    args = B.parse_args(["--quick"])
    rows, skipped = B.run_jit_worker(args, B.Log(stream=open(os.devnull, "w")), 5.0)
    assert rows == [] and len(skipped) == 1
    assert "killed after 5 s" in skipped[0]["reason"]


# ---- entry points without a GPU -------------------------------------------------------------------


def _run(cmd):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    env["PYTHONPATH"] = str(PKG_PARENT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=120)


@pytest.mark.parametrize(
    "cmd",
    [
        [sys.executable, str(REPO / "benchmarks" / "bench_gemm.py"), "--quick"],
        [sys.executable, "-m", "humming_aot.cli", "bench", "--ms", "1"],
    ],
)
def test_without_a_gpu_it_exits_with_a_message(cmd):
    p = _run(cmd)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "no CUDA GPU is visible" in p.stderr
    assert "Traceback" not in p.stderr


def test_cli_lists_and_forwards_bench(capsys):
    from humming_aot import cli

    with pytest.raises(SystemExit) as e:
        cli.main(["--help"])
    assert e.value.code == 0 and "bench" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        cli.main(["bench", "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and "--formats" in out and "--max-ms-per-point" in out


def test_gpu_state_is_read_from_nvidia_smi_and_summarized():
    calls = []

    def fake_run(cmd, **kw):
        calls.append(cmd)
        query = next(a for a in cmd if a.startswith("--query-gpu="))
        if "clocks_event_reasons" in query:  # an older driver: unknown field
            return subprocess.CompletedProcess(cmd, 2, stdout="", stderr="invalid field")
        return subprocess.CompletedProcess(cmd, 0, stdout="1755, 3201, 61, 512.34, 0x0000000000000004\n")

    state = B.read_gpu_state("00000000:19:00.0", run=fake_run)
    assert state == {
        "gpu_sm_mhz": 1755.0,
        "gpu_mem_mhz": 3201.0,
        "gpu_temp_c": 61.0,
        "gpu_power_w": 512.34,
        "gpu_clock_reasons": "0x0000000000000004",
    }
    assert len(calls) == 2 and calls[0][1:3] == ["-i", "00000000:19:00.0"]

    def missing(cmd, **kw):
        raise FileNotFoundError("nvidia-smi")

    assert B.read_gpu_state("0", run=missing) is None
    na = B.read_gpu_state(
        "0", run=lambda cmd, **kw: subprocess.CompletedProcess(cmd, 0, "1980, 3201, 40, [N/A], 0x0\n")
    )
    assert na["gpu_power_w"] is None and na["gpu_sm_mhz"] == 1980.0

    rows = [
        _row("humming-aot", "w4a16", 8192, 8192, m, 30.0, gpu_sm_mhz=sm, gpu_temp_c=50.0 + m, gpu_power_w=300.0)
        for m, sm in ((1, 1980.0), (16, 1700.0), (64, 1980.0))
    ]
    rows.append(_row("cublas-bf16", "bf16", 8192, 8192, 1, 42.8))  # no state: not in the section
    md = B.markdown(_result(rows))
    assert "Highest SM clock seen in the run: 1980 MHz." in md
    line = next(x for x in md.splitlines() if x.startswith("| humming-aot w4a16 | 3 |"))
    assert "1700 / 1980 / 1980" in line and "| 1 | 114 | 300 |" in line
    assert not any(x.startswith("| cublas-bf16 bf16 | ") and "MHz" in x for x in md.splitlines())
    assert "GPU state" not in B.markdown(_result(SYNTHETIC))
