"""CPU tests of "no silent slow path" (humming_aot.dispatch): a choice of the generic backend on a
GPU warns once per format and device class with a SlowPathWarning naming the formats that have fast
kernels there, explain() says the same, and HUMMING_STRICT=1 makes it a SlowPathError.

The decision is a pure function (``slow_path_note``), tested with hand-made registry.Instance
objects; the end-to-end tests describe a device instead of querying one (``_device_facts``
replaced by a stub returning an H200's facts), so the real registry, tables and instance checks of
this build run without a GPU.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from humming_aot import dispatch, registry
from humming_aot import formats as F

H200 = "NVIDIA H200 (sm_90)"


@pytest.fixture(autouse=True)
def clean_dispatch(monkeypatch):
    monkeypatch.delenv("HUMMING_STRICT", raising=False)
    dispatch.reset()
    yield
    dispatch.reset()


def inst(
    name,
    backend=None,
    *,
    act="bf16",
    code="u4",
    scale="bf16",
    zero="none",
    out="bf16",
    layout=1,
    group_k=-1,
    group_n=-1,
):
    """A registry.Instance built by hand; the backend defaults to the name's first word."""
    return registry.Instance(
        name=name,
        backend=backend or name.split("_")[0],
        scheduler="dense",
        archs=("90a",),
        act_type=act,
        code_type=code,
        scale_type=scale,
        zero=zero,
        out_type=out,
        layout=layout,
        group_k=group_k,
        group_n=group_n,
        tile=(32, 64, 32),
        stages=1,
        threads=256,
        smem_bytes=0,
    )


GENERIC = inst("generic_dense_u4_zi", zero="int")
FAST = [
    inst("sm90_u4g128", layout=3, group_k=128, group_n=1),
    inst("sm80_u8gc", act="f16", code="u8", scale="f16", zero="int", out="f16", layout=2, group_k=0, group_n=1),
    inst("sm89_fp8", act="e4m3", code="e4m3", scale="f32", layout=1, group_k=0, group_n=1),
]
DEVICE_INSTANCES = [GENERIC, *FAST]
ZI = "a-bf16_w-u4g64-sbf16-zi_c-bf16"


# ---- the pure decision --------------------------------------------------------------------------


def test_fast_choice_needs_no_note():
    assert dispatch.slow_path_note(ZI, FAST[0], H200, DEVICE_INSTANCES) is None


def test_generic_choice_names_format_device_and_fast_formats():
    note = dispatch.slow_path_note(ZI, GENERIC, H200, DEVICE_INSTANCES)
    assert note.startswith(f"{ZI} runs on the slow fallback (generic backend, generic_dense_u4_zi) on {H200}")
    assert "this build has no fast kernel for it on this device" in note
    assert note.endswith(
        "Formats with fast kernels on this device: a-bf16_w-u4g128-sbf16_c-bf16, "
        "a-e4m3-*_w-e4m3gc-sf32_c-bf16, a-f16_w-u8gc-sf16-zi_c-f16."
    )


def test_generic_choice_on_a_device_without_fast_kernels():
    note = dispatch.slow_path_note(ZI, GENERIC, "sm_75", [GENERIC])
    assert "on sm_75" in note and note.endswith("This build has no fast kernel for any format on this device.")


def test_fast_kernels_of_another_layout_are_named():
    """The format has fast kernels here, but the weight was packed in the generic layout."""
    note = dispatch.slow_path_note(
        "a-bf16_w-u4g128-sbf16_c-bf16", inst("generic_dense_u4"), H200, DEVICE_INSTANCES, layout=1
    )
    assert "its fast kernels here read another weight layout: pack the weight with layout='sm90'" in note


def test_fast_kernels_that_refused_the_problem_say_why():
    why = "the sm90 backend needs k to be a multiple of 8 (16-byte activation rows), got k=77"
    note = dispatch.slow_path_note(
        "a-bf16_w-u4g128-sbf16_c-bf16",
        inst("generic_dense_u4"),
        H200,
        DEVICE_INSTANCES,
        layout=3,
        refused={"sm90_u4g128": why, "sm80_u8gc": "not this format"},
    )
    assert f"the fast kernels for this format here cannot run this problem: sm90_u4g128: {why}" in note
    assert "not this format" not in note  # reasons of instances for other formats are left out


def test_instance_format_text():
    assert dispatch.instance_format(GENERIC) == "a-bf16_w-u4g*-sbf16-zi_c-bf16"
    assert dispatch.instance_format(FAST[1]) == "a-f16_w-u8gc-sf16-zi_c-f16"
    block = inst("sm90_blk", code="e4m3", scale="f32", group_k=128, group_n=128)
    assert dispatch.instance_format(block) == "a-bf16_w-e4m3g128n128-sf32_c-bf16"
    assert dispatch.instance_format(inst("sm89_raw", code="e4m3", scale="none")) == "a-bf16_w-e4m3_c-bf16"


# ---- once per format, HUMMING_STRICT ------------------------------------------------------------


def test_warning_once_per_format_and_device_class():
    assert issubclass(dispatch.SlowPathWarning, UserWarning)
    note = dispatch.slow_path_note(ZI, GENERIC, H200, DEVICE_INSTANCES)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(3):
            dispatch.note_slow_path((ZI, 90), note)
        dispatch.note_slow_path((ZI, 80), note)  # another device class
        dispatch.note_slow_path(("a-bf16_w-u4g32-sbf16-zi_c-bf16", 90), note)  # another format
        dispatch.note_slow_path((ZI, 90), None)  # a fast choice: nothing
    assert [w.category for w in seen] == [dispatch.SlowPathWarning] * 3
    assert str(seen[0].message) == note + " Set HUMMING_STRICT=1 to make this an error."
    dispatch.reset()  # forgets which formats were warned about
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        dispatch.note_slow_path((ZI, 90), note)
    assert len(again) == 1


@pytest.mark.parametrize("value,strict", [("1", True), ("yes", True), ("0", False), ("", False)])
def test_humming_strict_turns_the_warning_into_an_error(monkeypatch, value, strict):
    monkeypatch.setenv("HUMMING_STRICT", value)
    note = dispatch.slow_path_note(ZI, GENERIC, H200, DEVICE_INSTANCES)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(2):  # strict: every call raises, not just the first
            if strict:
                with pytest.raises(dispatch.SlowPathError) as e:
                    dispatch.note_slow_path((ZI, 90), note)
                msg = str(e.value)
                assert ZI in msg and H200 in msg and "a-bf16_w-u4g128-sbf16_c-bf16" in msg
                assert "HUMMING_STRICT=1 makes this an error" in msg
                assert isinstance(e.value, dispatch.DispatchError)
            else:
                dispatch.note_slow_path((ZI, 90), note)
    assert len(seen) == (0 if strict else 1)
    dispatch.note_slow_path((ZI, 90), None)  # a fast choice is fine either way


# ---- end to end over this build's registry, on a described device ------------------------------


@pytest.fixture
def h200(monkeypatch):
    """Device queries answered with an H200's facts (compute capability 9.0, 132 SMs)."""
    monkeypatch.setattr(dispatch, "_device_facts", lambda device=None: (90, 132, "NVIDIA H200"))


def test_choose_warns_once_for_a_generic_only_format(h200):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        names = {dispatch.choose(ZI, 384, 512, m, device="cuda:0") for m in (1, 5, 40, 300)}
    assert all(registry.find(n).backend == "generic" for n in names)
    slow = [w for w in seen if w.category is dispatch.SlowPathWarning]
    assert len(slow) == 1, [str(w.message) for w in seen]
    msg = str(slow[0].message)
    assert ZI in msg and "NVIDIA H200 (sm_90)" in msg and "slow fallback" in msg
    fast = sorted(
        {
            dispatch.instance_format(i)
            for i in registry.instances()
            if i.backend != "generic" and registry.runs_on(i.name, 90)[0]
        }
    )
    assert "Formats with fast kernels on this device: " + ", ".join(fast) in msg


def test_fast_choice_does_not_warn(h200):
    # A fast instance of this build for the device, with a concrete format (fixed group size,
    # unquantized activations: instance_format then writes no wildcard).
    fast = next(
        i
        for i in registry.instances()
        if i.backend != "generic"
        and registry.runs_on(i.name, 90)[0]
        and i.group_k >= 0
        and i.act_type in ("bf16", "f16")
    )
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        name = dispatch.choose(dispatch.instance_format(fast), 384 * 2, 1024, 64, device="cuda:0", layout=fast.layout)
    assert registry.find(name).backend != "generic"
    assert not [w for w in seen if w.category is dispatch.SlowPathWarning]


def test_strict_choose_and_layer_raise_every_call(h200, monkeypatch):
    from humming_aot.layers import QuantLinear

    monkeypatch.setenv("HUMMING_STRICT", "1")
    for _ in range(2):
        with pytest.raises(dispatch.SlowPathError, match=r"a-bf16_w-u4g64-sbf16-zi_c-bf16 runs on the slow fallback"):
            dispatch.choose(ZI, 384, 512, 5, device="cuda:0")
    layer = QuantLinear.from_linear(torch.nn.Linear(512, 384), "u4g64-sbf16-zi", layout="generic")
    for _ in range(2):  # a refused choice is not cached by the layer either
        with pytest.raises(dispatch.SlowPathError, match="NVIDIA H200"):
            layer.instance_for(5, "cuda:0")
    monkeypatch.delenv("HUMMING_STRICT")
    with pytest.warns(dispatch.SlowPathWarning):
        assert registry.find(layer.instance_for(5, "cuda:0")).backend == "generic"


def test_forced_generic_instance_is_not_reported(h200, monkeypatch):
    monkeypatch.setenv("HUMMING_STRICT", "1")
    name = dispatch.choose_for(ZI, 384, 512, 5, cc=90, sms=132)  # choose_for describes, never reports
    dispatch.force(name)
    assert dispatch.choose(ZI, 384, 512, 5, device="cuda:0") == name
    assert "slow path" not in dispatch.explain(ZI, 384, 512, 5, device="cuda:0")


def test_explain_says_the_same(h200, monkeypatch):
    text = dispatch.explain(ZI, 384, 512, 5, device="cuda:0")
    with pytest.warns(dispatch.SlowPathWarning) as rec:
        dispatch.choose(ZI, 384, 512, 5, device="cuda:0")
    warned = str(rec[0].message).removesuffix(" Set HUMMING_STRICT=1 to make this an error.")
    assert f"slow path: {warned}" in text
    assert "warned once" in text
    monkeypatch.setenv("HUMMING_STRICT", "1")
    assert "HUMMING_STRICT=1 is set: this call raises SlowPathError" in dispatch.explain(
        ZI, 384, 512, 5, device="cuda:0"
    )


# ---- preloading the kernels a layer uses -----------------------------------------------------------


class _RecordingC:
    """The extension with prepare_instance and warm_workspace recorded instead of run (no GPU here)."""

    def __init__(self, real):
        self._real, self.prepared, self.warmed = real, [], []

    def __getattr__(self, name):
        return getattr(self._real, name)

    def prepare_instance(self, name, device):
        self.prepared.append((name, device))
        return True, ""

    def warm_workspace(self, device):
        self.warmed.append(device)


def test_layer_plan_preload_loads_each_range_choice_once(h200, monkeypatch):
    """preload loads every instance a call of the layer can choose on the device (each M range's
    choice; in estimate ranges every instance the estimate may take) once per device, however often
    it is asked."""
    rec = _RecordingC(dispatch.C)
    monkeypatch.setattr(dispatch, "C", rec)
    monkeypatch.setattr(dispatch, "_prepared", set())
    fmt = "a-bf16_w-u4g128-sbf16_c-bf16"
    layout = dispatch._preferred_layout_for(F.parse_gemm_format(fmt), 90, 132, "NVIDIA H200", 8192, 4096)
    plan = dispatch.LayerPlan(fmt, 8192, 4096, layout)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dispatch.SlowPathWarning)
        names = plan.preload("cuda:0")
        table = dispatch._table_for(90, 132, "NVIDIA H200")
        bounds, _ = dispatch._bounds_for(table, 8192, 4096)
        chosen = set()
        for m in sorted({1, *bounds, bounds[-1] + 1, 10**6, *range(1, 5000, 3)}):
            chosen.add(dispatch.choose(fmt, 8192, 4096, m, device="cuda:0", layout=layout))
    assert chosen <= set(names), "a call would load a kernel preload left out"
    assert len(names) == len(set(names)) and all(fmt in n for n in names)
    assert rec.prepared == [(n, 0) for n in names]
    plan.preload("cuda:0")
    dispatch.LayerPlan(fmt, 8192, 4096, layout).preload("cuda:0")  # another layer of the same shape
    assert rec.prepared == [(n, 0) for n in names], "each instance is loaded once per device"
    plan.preload("cuda:1")
    assert rec.prepared[len(names) :] == [(n, 1) for n in names]
    # The current stream's stream-K scratch on each device a preload names (the extension keeps one
    # per device and stream: a repeat is a lookup).
    assert rec.warmed == [0, 0, 0, 1]


def test_layer_plan_preload_leaves_refused_choices_to_the_call(h200, monkeypatch):
    # HUMMING_STRICT refuses the generic backend: building (preloading) still works; the call raises.
    rec = _RecordingC(dispatch.C)
    monkeypatch.setattr(dispatch, "C", rec)
    monkeypatch.setattr(dispatch, "_prepared", set())
    monkeypatch.setenv("HUMMING_STRICT", "1")
    assert dispatch.LayerPlan(ZI, 384, 512, 1).preload("cuda:0") == [] and rec.prepared == []


def test_preload_on_the_cpu_and_bad_arguments():
    import torch

    import humming_aot as ha

    layer = ha.QuantLinear.from_linear(torch.nn.Linear(64, 32), "u4g32-sbf16")
    assert layer.preload() == []
    model = torch.nn.Sequential(layer, torch.nn.ReLU())
    assert ha.preload(model) == {"0": []}
    with pytest.raises(TypeError, match="torch.nn.Module"):
        ha.preload(layer.packed)
