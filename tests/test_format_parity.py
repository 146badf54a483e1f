"""The C++ format parser (src/format.cpp, used by the ops and the C++ API) and the Python one
(humming_aot.formats) accept the same strings, print them the same way, and reject the same ones."""

from __future__ import annotations

import itertools

import pytest

from humming_aot import formats as F
from humming_aot._ext import C

CODES = [f"{k}{b}" for k in "iu" for b in range(1, 9)] + ["e2m1", "e3m2", "e2m3", "e4m3", "e5m2", "e1m0", "e7m0"]
GRANS = ["g16", "g32", "g128", "gc", "g128n128"]
SCALES = ["f16", "bf16", "f32", "e8m0", "e4m3"]
SUFFIXES = ["", "-zi", "-zf", "-gs", "-zi-gs"]


def _weight_strings():
    for code in CODES:
        yield code
        for gran, scale, suffix in itertools.product(GRANS, SCALES, SUFFIXES):
            yield f"{code}{gran}-s{scale}{suffix}"


BAD = [
    "u4",
    "u9g128-sbf16",
    "u4g100-sbf16",
    "u4g128-su4",
    "x4",
    "e4m3-gs",
    "e5m3g32-sbf16",
    "u4g128-sbf16-zq",
    "u4g0-sbf16",
    "u4g128",
    "u4g128n-sbf16",
    "",
    "e8m0g32-sf16",
    "f16",
    "bf16g128-sbf16",
]


def _normalized(parse, text):
    """The canonical string of ``text`` by ``parse``, or None where it is rejected."""
    try:
        return str(parse(text))
    except ValueError:  # FormatError is a ValueError, as are the C++ parser's errors
        return None


def test_weight_formats_agree():
    checked = accepted = 0
    for text in list(_weight_strings()) + BAD:
        py, cpp = _normalized(F.parse_weight_format, text), _normalized(C.normalize_weight_format, text)
        assert py == cpp, (text, py, cpp)
        checked += 1
        accepted += py is not None
    assert accepted > 100 and checked - accepted > 100  # both sides of the rules were exercised


@pytest.mark.parametrize(
    "text",
    ["bf16", "f16", "e4m3-pt", "e5m2-g128", "i8-pt", "i8-g64", "e4m3", "bf16-pt", "u8-pt", "e4m3-g100", "f32", "i8-g7"],
)
def test_activation_formats_agree(text):
    assert _normalized(F.parse_activation_format, text) == _normalized(C.normalize_act_format, text)


@pytest.mark.parametrize(
    "text",
    [
        "a-bf16_w-u4g128-sbf16_c-bf16",
        "a-e4m3-pt_w-e2m1g16-se4m3-gs_c-f32",
        "a-bf16_w-u4g128-sbf16_c-e4m3",
        "a-e4m3-g32_w-u4g128-sbf16_c-bf16",
        "a-e4m3-g64_w-u4g96-sbf16_c-bf16",
        "bf16_u4",
    ],
)
def test_gemm_formats_agree(text):
    assert _normalized(F.parse_gemm_format, text) == _normalized(C.normalize_gemm_format, text)
