"""Pack-once checkpoints: ``humming-aot convert`` then ``load_quantized`` / ``load_packed``, on the CPU.

The source is test_load_quantized's synthetic GPTQ act-order checkpoint (two shards, a ``dynamic``
override). For each target layout the packed checkpoint must load without calling ``pack_weight``
and give QuantLinear outputs bitwise equal to the direct path (import, pack, wrap), with the
act-order permutation restored; the metadata must say what was packed; a checkpoint for another
layout, another schema version or with edited tensors / shapes must be refused naming the file.
"""

from __future__ import annotations

import copy
import json

import humming_aot as ha
import pytest
from humming_aot import cli, pack
from humming_aot import packed_checkpoint as pc
from humming_aot._ext import C
from humming_aot.layers import QuantLinear

import torch

safetensors = pytest.importorskip("safetensors", reason="the convert extra (safetensors) is not installed")
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from test_load_quantized import LAYERS, H, make_model_and_checkpoint

ARCHS = ["sm90", "sm80", "generic"]


def no_pack(*args, **kwargs):
    raise AssertionError("pack_weight was called while loading a packed checkpoint")


@pytest.fixture
def source(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    model, _, _ = make_model_and_checkpoint(src, "gptq")
    return src, model


def convert(src, out, arch):
    rc = cli.main(["convert", str(src), str(out), "--arch", arch, "--quiet"])
    assert rc == 0


def outputs(model, x):
    with torch.no_grad():
        return {name: model.get_submodule(name)(x if not name.endswith("down_proj") else x2) for name in LAYERS}


x = torch.randn(3, H, generator=torch.Generator().manual_seed(11)).to(torch.bfloat16)
x2 = torch.randn(3, 192, generator=torch.Generator().manual_seed(12)).to(torch.bfloat16)


@pytest.mark.parametrize("arch", ARCHS)
def test_convert_and_load_without_repacking(tmp_path, source, arch, monkeypatch, capsys):
    src, model = source
    out = tmp_path / f"packed-{arch}"
    convert(src, out, arch)
    assert "packed 6 layers for layout " + arch in capsys.readouterr().out

    # the direct path: import, pack for the same layout, wrap
    direct = copy.deepcopy(model)
    ha.replace_linears(direct, ha.load_quantized(src, progress=False), layout=arch, progress=False)

    monkeypatch.setattr(pack, "pack_weight", no_pack)  # replace_linears and pc import it from here
    loaded = ha.load_quantized(out, layout=arch, progress=False)
    assert list(loaded) == list(ha.load_quantized(src, progress=False))  # same layers, same order
    assert all(isinstance(v, ha.PackedLayer) and v.packed.layout == pack.LAYOUTS[arch] for v in loaded.values())
    assert list(ha.load_packed(out, layout=pack.LAYOUTS[arch], progress=False)) == list(loaded)
    packed_model = copy.deepcopy(model)
    swapped = ha.replace_linears(packed_model, loaded, progress=False)
    assert sorted(swapped) == sorted(LAYERS)
    for name in LAYERS:
        a, b = direct.get_submodule(name), packed_model.get_submodule(name)
        assert isinstance(b, QuantLinear) and b.layout == pack.LAYOUTS[arch]
        assert torch.equal(a.in_perm, b.in_perm)  # act-order permutation stored and restored
        for t in ("codes", "scales", "zeros"):
            assert torch.equal(getattr(a, t), getattr(b, t)), (name, t)
        assert torch.equal(a.bias, b.bias) if a.bias is not None else b.bias is None
    got, want = outputs(packed_model, x), outputs(direct, x)
    for name in LAYERS:
        assert torch.equal(got[name], want[name]), name  # bitwise


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_sm90_checkpoint_loads_straight_to_the_gpu(tmp_path, source, monkeypatch):
    """A checkpoint packed for sm90 (on the CPU, by the CLI) loads onto the GPU with no repack, and
    its layers give the outputs, bitwise, of the same weights imported and packed on the GPU (the
    GPU kernels' own results; test_load_quantized checks them against the float reference)."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU (the sm90 layout's kernels)")
    src, model = source
    out = tmp_path / "packed-sm90"
    convert(src, out, "sm90")
    direct = copy.deepcopy(model).cuda()
    ha.replace_linears(direct, ha.load_quantized(src, progress=False), layout="sm90", device="cuda", progress=False)
    monkeypatch.setattr(pack, "pack_weight", no_pack)
    loaded = ha.load_quantized(out, layout="sm90", device="cuda", progress=False)
    assert all(v.packed.codes.is_cuda for v in loaded.values())
    packed_model = copy.deepcopy(model).cuda()
    ha.replace_linears(packed_model, loaded, progress=False)
    with torch.no_grad():
        inputs = {name: (x2 if name.endswith("down_proj") else x).cuda() for name in LAYERS}
        got = {name: packed_model.get_submodule(name)(inputs[name]) for name in LAYERS}
        want = {name: direct.get_submodule(name)(inputs[name]) for name in LAYERS}
    for name in LAYERS:
        assert packed_model.get_submodule(name).codes.is_cuda, name
        assert torch.equal(got[name], want[name]), name  # bitwise


@pytest.mark.parametrize("arch", ARCHS)
def test_metadata(tmp_path, source, arch):
    src, _ = source
    out = tmp_path / "p"
    convert(src, out, arch)
    manifest = json.loads((out / pc.MANIFEST).read_text())
    assert manifest["format"] == "humming-aot-packed"
    assert manifest["schema_version"] == pc.SCHEMA_VERSION
    assert manifest["humming_aot_version"] == ha.__version__
    assert (manifest["layout"], manifest["layout_name"]) == (pack.LAYOUTS[arch], arch)
    assert list(manifest["layers"]) == sorted(LAYERS, key=list(ha.load_quantized(src, progress=False)).index)
    converted = ha.load_quantized(src, progress=False)
    (file,) = manifest["files"]
    with safe_open(str(out / file), framework="pt") as f:
        md = f.metadata()
        names = set(f.keys())
    assert md["format"] == "pt"
    assert md["humming_aot.format"] == "humming-aot-packed"
    assert md["humming_aot.schema_version"] == str(pc.SCHEMA_VERSION)
    assert md["humming_aot.version"] == ha.__version__
    assert (md["humming_aot.layout"], md["humming_aot.layout_name"]) == (str(pack.LAYOUTS[arch]), arch)
    layers = json.loads(md["humming_aot.layers"])
    for name in LAYERS:
        cw = converted[name]
        p = pack.pack_weight(cw.weight, layout=arch)
        m = layers[name]
        assert m["fmt"] == str(cw.weight.fmt)
        assert (m["n"], m["k"], m["n_pad"], m["k_pad"]) == (p.n, p.k, p.n_pad, p.k_pad)
        assert m["perm"] is True and m["source"] == cw.source
        # u4 asymmetric: codes, scales, zero points and the act-order permutation; no global scale
        assert {n for n in names if n.startswith(name + ".")} == {
            f"{name}.hm_codes",
            f"{name}.hm_scales",
            f"{name}.hm_zeros",
            f"{name}.hm_perm",
        }
    stored = load_file(str(out / file))
    assert torch.equal(stored["model.layers.0.mlp.up_proj.hm_perm"], converted["model.layers.0.mlp.up_proj"].perm)


def test_sharding_and_device(tmp_path, source):
    src, _ = source
    out = tmp_path / "p"
    manifest = pc.save_packed(ha.iter_quantized(src, progress=False), out, layout="generic", max_shard_bytes=1)
    assert len(manifest["files"]) == len(LAYERS)  # one layer per shard: a layer never straddles two
    one = pc.save_packed(ha.load_quantized(src, progress=False), tmp_path / "q", layout="generic", progress=False)
    a = ha.load_packed(out, device="cpu", progress=False)
    b = ha.load_packed(tmp_path / "q", progress=False)
    assert len(one["files"]) == 1
    for name in LAYERS:
        assert a[name].packed.codes.device.type == "cpu"
        assert torch.equal(a[name].packed.codes, b[name].packed.codes)


def test_list_valued_layers_round_trip(tmp_path):
    """gpt-oss style list values (one weight per expert) are stored as ``P[i]`` and come back as lists."""
    from humming_aot import reference as R
    from humming_aot.convert import ConvertedWeight

    g = torch.Generator().manual_seed(2)
    ws = [ConvertedWeight(R.quantize_weight(torch.randn(64, 96, generator=g), "e2m1g32-se8m0")) for _ in range(3)]
    pc.save_packed({"model.layers.0.mlp.experts.down": ws}, tmp_path, layout="sm90", progress=False)
    got = ha.load_packed(tmp_path, progress=False)["model.layers.0.mlp.experts.down"]
    assert isinstance(got, list) and len(got) == 3
    for cw, p in zip(ws, got):
        assert p.perm is None and p.packed.global_scale is None
        back = pack.unpack_weight(p.packed)
        assert torch.equal(back.codes, cw.weight.codes) and torch.equal(back.scales, cw.weight.scales)


# ---- refusals ------------------------------------------------------------------------------------------


@pytest.fixture
def packed(tmp_path, source):
    src, _ = source
    out = tmp_path / "p"
    convert(src, out, "sm90")
    (file,) = json.loads((out / pc.MANIFEST).read_text())["files"]
    return out, out / file


def rewrite(path, edit_tensors=None, edit_meta=None):
    with safe_open(str(path), framework="pt") as f:
        md = dict(f.metadata())
    tensors = load_file(str(path))
    if edit_tensors:
        edit_tensors(tensors)
    if edit_meta:
        edit_meta(md)
    save_file(tensors, str(path), md)


def test_wrong_layout_is_refused(packed, source):
    out, _ = packed
    for asked in ("sm80", "generic", 1):
        with pytest.raises(pc.PackedCheckpointError, match=r"packed for layout 3 \(sm90\).*--arch"):
            ha.load_quantized(out, layout=asked, progress=False)
    # replace_linears refuses a PackedLayer for another layout, and leaves the model as it was
    _, model = source
    before = copy.deepcopy(model)
    with pytest.raises(pc.PackedCheckpointError, match="asked for layout 'generic'"):
        ha.replace_linears(model, ha.load_quantized(out, progress=False), layout="generic", progress=False)
    assert all(type(model.get_submodule(n)) is torch.nn.Linear for n in LAYERS)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), before.state_dict().values()))


def test_shard_in_another_layout_than_the_manifest(packed):
    out, file = packed

    def meta(md):
        md["humming_aot.layout"] = "2"

    rewrite(file, edit_meta=meta)
    with pytest.raises(pc.PackedCheckpointError, match=str(file) + r".*layout 2 \(sm80\)"):
        ha.load_quantized(out, progress=False)


def test_wrong_schema_version_is_refused(packed):
    out, file = packed
    manifest = json.loads((out / pc.MANIFEST).read_text())
    (out / pc.MANIFEST).write_text(json.dumps({**manifest, "schema_version": pc.SCHEMA_VERSION + 1}))
    with pytest.raises(pc.PackedCheckpointError, match="schema version 5.*reads schema versions 1, 2, 3, 4"):
        ha.load_quantized(out, progress=False)
    (out / pc.MANIFEST).write_text(json.dumps(manifest))  # the manifest right, a shard's header not
    rewrite(file, edit_meta=lambda md: md.update({"humming_aot.schema_version": "0"}))
    with pytest.raises(pc.PackedCheckpointError, match=str(file) + ".*schema version 0"):
        ha.load_quantized(out, progress=False)


def _as_schema_1(out, schema=1):
    """Mark a packed checkpoint (manifest and shards) as written by an earlier schema: 1, before
    session 39, 2, before session 46, or 3, before session 48."""
    manifest = json.loads((out / pc.MANIFEST).read_text())
    (out / pc.MANIFEST).write_text(json.dumps({**manifest, "schema_version": schema}))
    for file in manifest["files"]:
        rewrite(out / file, edit_meta=lambda md: md.update({"humming_aot.schema_version": str(schema)}))


def _loads_or_refuses(d, weights, refusal):
    """The packed checkpoint at d refused with a PackedCheckpointError matching `refusal`, or (None)
    loaded with each weight's codes as saved."""
    if refusal is not None:
        with pytest.raises(pc.PackedCheckpointError, match=refusal):
            ha.load_packed(d, progress=False)
        return
    got = ha.load_packed(d, progress=False)
    for name, w in weights.items():
        assert torch.equal(pack.unpack_weight(got[name].packed).codes, w.weight.codes), name


def test_schema_1_reads_but_for_its_e2m1_codes_in_layout_3(tmp_path, packed):
    """Schema 2 changed only where e2m1 codes sit in a layout-3 word: a schema-1 checkpoint of other
    codes loads as before (the same tensors), and one with e2m1 codes in layout 3 is refused, naming
    the layer, rather than misread. In another layout the e2m1 codes of schema 1 still load."""
    out, _ = packed
    before = ha.load_packed(out, progress=False)
    _as_schema_1(out)
    after = ha.load_packed(out, progress=False)
    assert list(after) == list(before)
    assert all(torch.equal(after[n].packed.codes, before[n].packed.codes) for n in before)

    from humming_aot import reference as R
    from humming_aot.convert import ConvertedWeight

    g = torch.Generator().manual_seed(3)
    w = {
        "model.layers.0.mlp.down_proj": ConvertedWeight(
            R.quantize_weight(torch.randn(64, 96, generator=g), "e2m1g32-sbf16")
        )
    }
    for layout, refused in (("sm90", True), ("generic", False)):
        d = tmp_path / f"fp4-{layout}"
        pc.save_packed(w, d, layout=layout, progress=False)
        _as_schema_1(d)
        _loads_or_refuses(
            d, w, r"'model.layers.0.mlp.down_proj' holds e2m1g32-sbf16 codes in layout 3.*schema version 1.*convert"
            if refused else None,
        )  # fmt: skip


def test_schemas_before_4_are_refused_in_layout_4_only(tmp_path):
    """Schema 4 stores layout 4's (sm90a8) chunks K tile by K tile, and schema 3 spread its e2m1
    codes' bits: a checkpoint of schema 2 or 3 in layout 4 is refused whatever its codes, naming the
    layer and the layout, rather than misread; the same weights in layout 3 still load (e2m1 from
    schema 2, which spread their bits there)."""
    from humming_aot import reference as R
    from humming_aot.convert import ConvertedWeight

    g = torch.Generator().manual_seed(4)
    for schema in (2, 3):
        for fmt, layout, refused in (
            ("e2m1gc-sbf16", "sm90a8", True),
            ("u4gc-sbf16", "sm90a8", True),
            ("e2m1g32-sbf16", "sm90", False),
            ("u4g128-sbf16", "sm90", False),
        ):
            w = {
                "model.layers.0.mlp.up_proj": ConvertedWeight(R.quantize_weight(torch.randn(64, 256, generator=g), fmt))
            }
            d = tmp_path / f"{fmt}-{layout}-{schema}"
            pc.save_packed(w, d, layout=layout, progress=False)
            _as_schema_1(d, schema=schema)
            _loads_or_refuses(
                d, w, rf"'model.layers.0.mlp.up_proj' holds {fmt} codes in layout 4 \(sm90a8\).*schema version "
                rf"{schema}.*order of the codes.*convert" if refused else None,
            )  # fmt: skip


def test_tampered_shapes_are_refused(packed):
    out, file = packed
    name = "model.layers.0.mlp.up_proj"

    def shapes(md):  # a different logical K: the stored codes no longer fit
        layers = json.loads(md["humming_aot.layers"])
        layers[name]["k"] = 64  # up_proj is [192, 128]
        layers[name]["k_pad"] = C.packed_dims(layers[name]["fmt"], 3, 192, 64)["k_pad"]  # consistent padding
        md["humming_aot.layers"] = json.dumps(layers)

    rewrite(file, edit_meta=shapes)
    with pytest.raises(pc.PackedCheckpointError, match=f"{name}.hm_(codes|scales|zeros|perm).*needs"):
        ha.load_quantized(out, progress=False)


def test_tampered_padding_is_refused(packed):
    out, file = packed
    name = "model.layers.0.mlp.up_proj"

    def pad(md):
        layers = json.loads(md["humming_aot.layers"])
        layers[name]["n_pad"] += 64
        md["humming_aot.layers"] = json.dumps(layers)

    rewrite(file, edit_meta=pad)
    with pytest.raises(pc.PackedCheckpointError, match=f"{name}.*padded shape"):
        ha.load_quantized(out, progress=False)


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda t: t.update({"model.layers.0.mlp.up_proj.hm_scales": t["model.layers.0.mlp.up_proj.hm_scales"][:1]}),
            "hm_scales",
        ),
        (lambda t: t.pop("model.layers.0.mlp.up_proj.hm_zeros"), "hm_zeros' is missing"),
        (
            lambda t: t.update({"model.layers.0.mlp.up_proj.hm_perm": torch.zeros(H, dtype=torch.int64)}),
            "not a permutation",
        ),
        (
            lambda t: t.update(
                {"model.layers.0.mlp.up_proj.hm_codes": t["model.layers.0.mlp.up_proj.hm_codes"].float()}
            ),
            "float32",
        ),
    ],
)
def test_tampered_tensors_are_refused(packed, edit, message):
    out, file = packed
    rewrite(file, edit_tensors=edit)
    with pytest.raises(pc.PackedCheckpointError, match=message):
        ha.load_quantized(out, progress=False)


def test_cli_errors(tmp_path, packed, capsys):
    out, _ = packed
    assert cli.main(["convert", str(out), str(tmp_path / "again"), "--arch", "sm90", "--quiet"]) == 2
    assert "already a packed checkpoint" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["convert", str(out), str(tmp_path / "x"), "--arch", "sm100"])
    assert cli.main(["convert", str(tmp_path / "nothing"), str(tmp_path / "y"), "--arch", "sm80", "--quiet"]) == 2


def test_layout_and_device_only_for_packed_checkpoints(source):
    src, _ = source
    with pytest.raises(ValueError, match="for packed checkpoints"):
        ha.load_quantized(src, layout="sm90", progress=False)
