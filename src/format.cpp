// Format strings: the same grammar as python/humming_aot/formats.py (tests keep the two equal).
#include <cctype>
#include <cstdlib>
#include <string>

#include "humming/humming.h"

namespace humming {
namespace {

const char *kDTypeHelp = "accepted data types: i1..i8, u1..u8, eXmY with 1+X+Y <= 8 and X >= 1 (e.g. e2m1, e4m3, "
                         "e5m2), e8m0, f16, bf16, f32";
const char *kWeightHelp = "weight formats look like {code}[{granularity}-s{scale}][-z{i|f}][-gs], e.g. "
                          "u4g128-sbf16, u4g128-sf16-zi, e2m1g32-se8m0, e2m1g16-se4m3-gs, e4m3g128n128-sf32, e4m3";
const char *kActHelp = "activation formats look like bf16, f16, e4m3-pt, e4m3-g128, e5m2-pt, i8-pt";

std::string lower(const std::string &s) {
  std::string r;
  for (char c : s)
    if (!std::isspace(static_cast<unsigned char>(c)))
      r += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

// Reads a decimal number at s[*pos]; false if there is none.
bool read_int(const std::string &s, size_t *pos, long *value) {
  size_t p = *pos;
  while (p < s.size() && std::isdigit(static_cast<unsigned char>(s[p]))) ++p;
  if (p == *pos || p - *pos > 6) return false;
  *value = std::strtol(s.substr(*pos, p - *pos).c_str(), nullptr, 10);
  *pos = p;
  return true;
}

bool is_pow2_group(long v) { return v >= 8 && v <= 4096 && (v & (v - 1)) == 0; }

// Parses the data type name at the front of s[*pos..] ending at a '-' , '_' or 'g' for codes.
Status parse_dtype_prefix(const std::string &s, size_t *pos, DType *out) {
  static const struct {
    const char *name;
    DType t;
  } named[] = {{"bf16", dtypes::bf16}, {"f16", dtypes::f16}, {"f32", dtypes::f32}, {"e8m0", dtypes::e8m0}};
  for (const auto &n : named) {
    const size_t len = std::char_traits<char>::length(n.name);
    if (s.compare(*pos, len, n.name) == 0) {
      *pos += len;
      *out = n.t;
      return Status::Ok();
    }
  }
  const size_t start = *pos;
  if (*pos < s.size() && (s[*pos] == 'i' || s[*pos] == 'u')) {
    const bool is_signed = s[*pos] == 'i';
    size_t p = *pos + 1;
    long bits;
    if (!read_int(s, &p, &bits)) return Status::Error("unknown data type in '" + s + "'; " + kDTypeHelp);
    if (bits < 1 || bits > 8)
      return Status::Error("integer type '" + s.substr(start, p - start) + "' has " + std::to_string(bits) +
                           " bits; integer codes have 1 to 8 bits");
    *pos = p;
    *out = is_signed ? dtypes::int_type(bits) : dtypes::uint_type(bits);
    return Status::Ok();
  }
  if (*pos < s.size() && s[*pos] == 'e') {
    size_t p = *pos + 1;
    long e, m;
    if (!read_int(s, &p, &e) || p >= s.size() || s[p] != 'm' || (++p, !read_int(s, &p, &m)))
      return Status::Error("unknown data type in '" + s + "'; " + kDTypeHelp);
    if (e < 1 || 1 + e + m > 8)
      return Status::Error("floating point type '" + s.substr(start, p - start) + "' needs 1 + " + std::to_string(e) +
                           " + " + std::to_string(m) +
                           " bits; eXmY types have X >= 1 and 1 + X + Y <= 8 (plus e8m0, f16, bf16, f32)");
    *pos = p;
    *out = DType{kFloat, static_cast<uint32_t>(1 + e + m), static_cast<uint32_t>(e), static_cast<uint32_t>(m)};
    return Status::Ok();
  }
  return Status::Error("unknown data type in '" + s + "'; " + kDTypeHelp);
}

bool one_of(DType t, std::initializer_list<DType> list) {
  for (DType x : list)
    if (x == t) return true;
  return false;
}

} // namespace

std::string to_string(DType t) {
  if (t.id() == 0) return "none";
  if (t.kind == kInt) return "i" + std::to_string(t.bits);
  if (t.kind == kUInt) return "u" + std::to_string(t.bits);
  if (t.kind == kE8M0) return "e8m0";
  if (t == dtypes::f16) return "f16";
  if (t == dtypes::bf16) return "bf16";
  if (t == dtypes::f32) return "f32";
  return "e" + std::to_string(t.exp) + "m" + std::to_string(t.man);
}

Status parse_dtype(const std::string &text, DType *out) {
  const std::string s = lower(text);
  size_t pos = 0;
  Status st = parse_dtype_prefix(s, &pos, out);
  if (!st) return st;
  if (pos != s.size()) return Status::Error("unknown data type '" + text + "'; " + kDTypeHelp);
  return Status::Ok();
}

std::string to_string(const WeightFormat &f) {
  std::string s = to_string(f.code);
  if (f.has_scale()) {
    if (f.group_k == 0)
      s += "gc";
    else
      s += "g" + std::to_string(f.group_k) + (f.group_n != 1 ? "n" + std::to_string(f.group_n) : "");
    s += "-s" + to_string(f.scale);
  }
  if (f.zero == ZeroKind::kInt) s += "-zi";
  if (f.zero == ZeroKind::kFloat) s += "-zf";
  if (f.global_scale) s += "-gs";
  return s;
}

Status parse_weight_format(const std::string &text, WeightFormat *out) {
  const std::string s = lower(text);
  WeightFormat f;
  size_t pos = 0;
  if (s.empty() || (s[0] != 'i' && s[0] != 'u' && s[0] != 'e'))
    return Status::Error("cannot parse weight format '" + text + "'; " + kWeightHelp);
  Status st = parse_dtype_prefix(s, &pos, &f.code);
  if (!st) return st;
  if (f.code.bits > 8 || f.code.kind == kE8M0)
    return Status::Error("weight code type " + to_string(f.code) +
                         " is not a quantized code; weight codes are i1..i8, u1..u8 or eXmY with at most 8 bits");
  if (pos < s.size() && s[pos] == 'g') {
    ++pos;
    if (pos < s.size() && s[pos] == 'c') {
      ++pos;
    } else {
      long gk;
      if (!read_int(s, &pos, &gk)) return Status::Error("cannot parse weight format '" + text + "'; " + kWeightHelp);
      if (gk == 0) return Status::Error("K group size 0 in '" + text + "'; write gc for one scale per output channel");
      if (!is_pow2_group(gk))
        return Status::Error("the K group size is " + std::to_string(gk) +
                             "; group sizes are powers of two from 8 to 4096");
      f.group_k = static_cast<int>(gk);
      if (pos < s.size() && s[pos] == 'n') {
        ++pos;
        long gn;
        if (!read_int(s, &pos, &gn)) return Status::Error("cannot parse weight format '" + text + "'; " + kWeightHelp);
        if (!is_pow2_group(gn))
          return Status::Error("the N group size is " + std::to_string(gn) +
                               "; group sizes are powers of two from 8 to 4096");
        f.group_n = static_cast<int>(gn);
      }
    }
    if (s.compare(pos, 2, "-s") != 0)
      return Status::Error("cannot parse weight format '" + text + "' (a granularity is followed by -s{scale}); " +
                           kWeightHelp);
    pos += 2;
    st = parse_dtype_prefix(s, &pos, &f.scale);
    if (!st) return st;
    if (!one_of(f.scale, {dtypes::f16, dtypes::bf16, dtypes::f32, dtypes::e8m0, dtypes::e4m3}))
      return Status::Error("scale type " + to_string(f.scale) +
                           " is not accepted; scale types: f16, bf16, f32, e8m0, e4m3");
  }
  if (s.compare(pos, 3, "-zi") == 0) {
    f.zero = ZeroKind::kInt;
    pos += 3;
  } else if (s.compare(pos, 3, "-zf") == 0) {
    f.zero = ZeroKind::kFloat;
    pos += 3;
  }
  if (s.compare(pos, 3, "-gs") == 0) {
    f.global_scale = true;
    pos += 3;
  }
  if (pos != s.size()) return Status::Error("cannot parse weight format '" + text + "'; " + kWeightHelp);
  if (!f.has_scale()) {
    if (f.zero != ZeroKind::kNone || f.global_scale)
      return Status::Error("zero points and a global scale need a scale type (-s{type})");
    if (f.code.is_int())
      return Status::Error("integer codes (" + to_string(f.code) + ") need a scale (e.g. " + to_string(f.code) +
                           "g128-sbf16)");
  }
  if (f.zero != ZeroKind::kNone && f.code.kind != kUInt)
    return Status::Error("zero points are for unsigned integer codes; " + to_string(f.code) + " is not one");
  if (f.zero == ZeroKind::kFloat && f.scale.kind == kE8M0)
    return Status::Error("float zero points are stored in the scale type, which cannot be e8m0");
  *out = f;
  return Status::Ok();
}

std::string to_string(const ActFormat &f) {
  std::string s = to_string(f.type);
  if (f.granularity == ActScale::kToken) s += "-pt";
  if (f.granularity == ActScale::kGroup) s += "-g" + std::to_string(f.group_k);
  return s;
}

Status parse_act_format(const std::string &text, ActFormat *out) {
  const std::string s = lower(text);
  ActFormat f;
  size_t pos = 0;
  Status st = parse_dtype_prefix(s, &pos, &f.type);
  if (!st) return Status::Error("cannot parse activation format '" + text + "'; " + kActHelp);
  if (s.compare(pos, 3, "-pt") == 0) {
    f.granularity = ActScale::kToken;
    pos += 3;
  } else if (s.compare(pos, 2, "-g") == 0) {
    pos += 2;
    long g;
    if (!read_int(s, &pos, &g)) return Status::Error("cannot parse activation format '" + text + "'; " + kActHelp);
    if (!is_pow2_group(g))
      return Status::Error("the activation K group size is " + std::to_string(g) +
                           "; group sizes are powers of two from 8 to 4096");
    f.granularity = ActScale::kGroup;
    f.group_k = static_cast<int>(g);
  }
  if (pos != s.size()) return Status::Error("cannot parse activation format '" + text + "'; " + kActHelp);
  const bool quantized = one_of(f.type, {dtypes::e4m3, dtypes::e5m2, dtypes::i8});
  if (!quantized && !one_of(f.type, {dtypes::f16, dtypes::bf16}))
    return Status::Error("activation type " + to_string(f.type) +
                         " is not accepted; activation types: f16, bf16, e4m3, e5m2, i8");
  if (quantized && f.granularity == ActScale::kNone)
    return Status::Error("quantized activations (" + to_string(f.type) + ") need scales: per token (" +
                         to_string(f.type) + "-pt) or per K group (" + to_string(f.type) + "-g128)");
  if (!quantized && f.granularity != ActScale::kNone)
    return Status::Error(to_string(f.type) + " activations are not quantized and take no scales; write " +
                         to_string(f.type));
  *out = f;
  return Status::Ok();
}

std::string to_string(const GemmFormat &f) {
  return "a-" + to_string(f.act) + "_w-" + to_string(f.weight) + "_c-" + to_string(f.out);
}

Status parse_gemm_format(const std::string &text, GemmFormat *out) {
  const std::string s = lower(text);
  const size_t w = s.find("_w-"), c = s.find("_c-");
  if (s.compare(0, 2, "a-") != 0 || w == std::string::npos || c == std::string::npos || c < w)
    return Status::Error("cannot parse GEMM format '" + text +
                         "'; GEMM formats look like a-bf16_w-u4g128-sbf16_c-bf16");
  GemmFormat f;
  Status st = parse_act_format(s.substr(2, w - 2), &f.act);
  if (!st) return st;
  st = parse_weight_format(s.substr(w + 3, c - w - 3), &f.weight);
  if (!st) return st;
  st = parse_dtype(s.substr(c + 3), &f.out);
  if (!st) return st;
  if (!one_of(f.out, {dtypes::f16, dtypes::bf16, dtypes::f32}))
    return Status::Error("output type " + to_string(f.out) + " is not accepted; output types: f16, bf16, f32");
  if (f.act.granularity == ActScale::kGroup && f.weight.group_k != 0 && f.weight.group_k % f.act.group_k != 0 &&
      f.act.group_k % f.weight.group_k != 0)
    return Status::Error("activation group " + std::to_string(f.act.group_k) + " and weight group " +
                         std::to_string(f.weight.group_k) + " do not nest; one must divide the other");
  *out = f;
  return Status::Ok();
}

} // namespace humming
