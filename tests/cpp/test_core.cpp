// C++ tests of libhumming that need no GPU: format strings, packing round trips, the CPU reference
// against a direct computation, registry contents and error statuses. Run by ctest.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "humming/backend/sm80/a8_addressing.h"
#include "humming/backend/sm90/operand_convert.h"
#include "humming/backend/sm90/stage_convert.h"
#include "humming/humming.h"
#include "humming/layout/sm90.h"
#include "humming/layout/sm90_a8.h"
#include "humming/numeric/nibble_lut.h"
#include "humming/scheduler/moe.h"
#include "humming/scheduler/raster.h"
#include "humming/scheduler/streamk.h"

using namespace humming;

namespace {
int failures = 0;
#define EXPECT(cond, ...)                                                                                              \
  do {                                                                                                                 \
    if (!(cond)) {                                                                                                     \
      ++failures;                                                                                                      \
      std::printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                                                      \
      std::printf(__VA_ARGS__);                                                                                        \
      std::printf("\n");                                                                                               \
    }                                                                                                                  \
  } while (0)

void test_format_round_trip() {
  const char *weights[] = {"u4g128-sbf16",  "u4g128-sf16-zi",   "u3g64-sbf16-zf",    "i4gc-sbf16",
                           "e2m1g32-se8m0", "e2m1g16-se4m3-gs", "e4m3g128n128-sf32", "e4m3",
                           "e5m2",          "u8g32-sf32-zi",    "i1g128-sf16"};
  for (const char *s : weights) {
    WeightFormat f;
    Status st = parse_weight_format(s, &f);
    EXPECT(st.ok, "%s: %s", s, st.message.c_str());
    EXPECT(to_string(f) == s, "%s printed as %s", s, to_string(f).c_str());
  }
  const char *bad[] = {"u4", "u9g128-sbf16", "u4g100-sbf16",  "i4g128-sbf16-zi", "u4g128-su4",
                       "x4", "e4m3-gs",      "e5m3g32-sbf16", "u4g128-sbf16-zq", "e2m1g32-se8m0-zf"};
  for (const char *s : bad) {
    WeightFormat f;
    Status st = parse_weight_format(s, &f);
    EXPECT(!st.ok && !st.message.empty(), "%s should be rejected", s);
  }
  GemmFormat g;
  EXPECT(parse_gemm_format("a-e4m3-pt_w-e2m1g16-se4m3-gs_c-bf16", &g).ok, "gemm format");
  EXPECT(to_string(g) == "a-e4m3-pt_w-e2m1g16-se4m3-gs_c-bf16", "%s", to_string(g).c_str());
  EXPECT(!parse_gemm_format("a-e4m3_w-u4g128-sbf16_c-bf16", &g).ok, "quantized activation without scales");
  EXPECT(!parse_gemm_format("a-bf16_w-u4g128-sbf16_c-e4m3", &g).ok, "fp8 output");
}

// Pack then unpack every code width with a K that needs padding: the codes come back unchanged.
void test_pack_round_trip() {
  std::mt19937 rng(1);
  for (int bits = 1; bits <= 8; ++bits) {
    WeightFormat f;
    f.code = dtypes::uint_type(bits);
    f.group_k = 32;
    f.scale = dtypes::bf16;
    const int64_t n = 13, k = 100;
    PackedDims d;
    Status st = packed_dims(kLayoutGeneric, f, n, k, &d);
    EXPECT(st.ok, "%s", st.message.c_str());
    EXPECT(d.k_pad % 32 == 0 && d.k_pad >= k && d.n_pad % 8 == 0 && d.n_pad >= n, "padding");
    std::vector<uint8_t> codes(n * k), back(n * k);
    for (auto &c : codes) c = static_cast<uint8_t>(rng() & ((1u << bits) - 1u));
    std::vector<uint32_t> packed(d.code_words, 0xFFFFFFFFu);
    pack_codes_cpu(kLayoutGeneric, f, d, codes.data(), packed.data());
    unpack_codes_cpu(kLayoutGeneric, f, d, packed.data(), back.data());
    EXPECT(codes == back, "bits=%d round trip", bits);
    // Bit k*bits of row r holds code (r, k): check one straddling position directly.
    const int64_t r = 5, kk = 37;
    const int64_t bit = kk * bits;
    uint64_t window = packed[r * d.words_per_row + bit / 32];
    if (bit / 32 + 1 < d.words_per_row)
      window |= static_cast<uint64_t>(packed[r * d.words_per_row + bit / 32 + 1]) << 32;
    EXPECT(((window >> (bit % 32)) & ((1u << bits) - 1u)) == codes[r * k + kk], "bits=%d bit position", bits);
  }
}

// Layout 4 (layout/sm90_a8.h) stores its 128-input chunks K tile by K tile: word_place (which the
// GPU packer runs) inverts word_index over every word of the codes, the 16 words of chunk c of
// channel r are the 64 bytes at (c n_pad + r) x 64 and hold that chunk's pack_word words, and
// unpacking gives the codes back.
void test_sm90a8_chunk_order() {
  std::mt19937 rng(5);
  for (const bool fp4 : {false, true}) {
    WeightFormat f;
    f.code = fp4 ? dtypes::e2m1 : dtypes::uint_type(4);
    f.scale = dtypes::bf16;
    const int64_t n = 21, k = 300; // both padded: n_pad 24, k_pad 384 (three chunks)
    PackedDims d;
    Status st = packed_dims(kLayoutSm90A8, f, n, k, &d);
    EXPECT(st.ok, "%s", st.message.c_str());
    EXPECT(d.n_pad == 24 && d.k_pad == 384 && d.words_per_row == 48, "layout 4 pads 21 x 300 to %lld x %lld",
           static_cast<long long>(d.n_pad), static_cast<long long>(d.k_pad));
    std::vector<int> hits(d.code_words, 0);
    for (int64_t r = 0; r < d.n_pad; ++r)
      for (int64_t w = 0; w < d.words_per_row; ++w) {
        const int64_t i = layout_sm90_a8::word_index(d.n_pad, r, w);
        EXPECT(i >= 0 && i < d.code_words, "word %lld of channel %lld outside the codes", static_cast<long long>(w),
               static_cast<long long>(r));
        if (i < 0 || i >= d.code_words) continue;
        ++hits[i];
        int64_t r2 = -1, w2 = -1;
        layout_sm90_a8::word_place(d.n_pad, i, r2, w2);
        EXPECT(r2 == r && w2 == w, "word_place(%lld) = (%lld, %lld), not (%lld, %lld)", static_cast<long long>(i),
               static_cast<long long>(r2), static_cast<long long>(w2), static_cast<long long>(r),
               static_cast<long long>(w));
      }
    EXPECT(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }), "word_index is not one to one");
    std::vector<uint8_t> codes(n * k), back(n * k);
    for (auto &c : codes) c = static_cast<uint8_t>(rng() & 0xFu);
    std::vector<uint32_t> packed(d.code_words, 0xFFFFFFFFu);
    pack_codes_cpu(kLayoutSm90A8, f, d, codes.data(), packed.data());
    int bad = 0;
    for (int64_t c = 0; c < d.k_pad / 128; ++c)
      for (int64_t r = 0; r < d.n_pad; ++r)
        for (int64_t j = 0; j < 16; ++j) {
          const uint32_t want = r < n ? layout_sm90_a8::pack_word(codes.data() + r * k, k, 16 * c + j, fp4) : 0u;
          bad += packed[(c * d.n_pad + r) * 16 + j] != want;
        }
    EXPECT(bad == 0, "%s: %d words of layout 4 out of their chunk's place", fp4 ? "e2m1" : "u4", bad);
    unpack_codes_cpu(kLayoutSm90A8, f, d, packed.data(), back.data());
    EXPECT(codes == back, "%s: layout 4 round trip", fp4 ? "e2m1" : "u4");
  }
}

// No silent slow path: a choice of the generic backend on a GPU comes with a note naming the
// format, the device and the formats with fast kernels there; HUMMING_STRICT=1 refuses it; a fast
// choice has no note.
void test_slow_path_note() {
  const auto described = [](const char *fmt, int layout, int64_t n, int64_t k) {
    GemmArgs a;
    Status st = parse_gemm_format(fmt, &a.fmt);
    if (st) st = packed_dims(layout, a.fmt.weight, n, k, &a.dims);
    EXPECT(st.ok, "%s", st.message.c_str());
    a.layout = layout, a.m = 5, a.lda = k, a.ldo = n;
    return a;
  };
  // Zero points with 64-input groups: the generic backend alone in the ci build.
  const GemmArgs slow = described("a-bf16_w-u4g64-sbf16-zi_c-bf16", kLayoutGeneric, 384, 512);
  std::string why, note;
  const InstanceInfo *i = select_instance(slow, 90, 132, &why, &note);
  // (No fast kernel reads weight-only formats in the generic layout: the choice is generic.)
  EXPECT(i != nullptr && std::string(i->backend) == "generic", "%s", i ? i->name : why.c_str());
  if (i != nullptr && std::string(i->backend) == "generic") {
    EXPECT(note.find("a-bf16_w-u4g64-sbf16-zi_c-bf16 runs on the slow fallback") == 0 &&
               note.find("sm_90") != std::string::npos && note.find(i->name) != std::string::npos,
           "note: %s", note.c_str());
    EXPECT(note == slow_path_note(*i, slow, 90), "the same note both ways");
    setenv("HUMMING_STRICT", "1", 1);
    EXPECT(select_instance(slow, 90, 132, &why, &note) == nullptr && why.find("HUMMING_STRICT") != std::string::npos,
           "strict: %s", why.c_str());
    setenv("HUMMING_STRICT", "0", 1);
    EXPECT(select_instance(slow, 90, 132, &why, &note) == i, "HUMMING_STRICT=0 is off");
    unsetenv("HUMMING_STRICT");
    // The note lists the fast formats of this build on the device, e.g. the sm90 ones.
    for (size_t j = 0; j < instance_count(); ++j) {
      const InstanceInfo *f = instance_at(j);
      if (std::string(f->backend) == "sm90" && f->act_type == dtypes::bf16.id() && f->zero == 0 && f->group_k == 128)
        EXPECT(note.find("a-bf16_w-u4g128-sbf16_c-bf16") != std::string::npos, "note lists %s: %s", f->name,
               note.c_str());
    }
  }
  for (size_t j = 0; j < instance_count(); ++j) {
    const InstanceInfo *f = instance_at(j);
    if (std::string(f->backend) == "generic") continue;
    EXPECT(slow_path_note(*f, slow, 90).empty(), "a fast instance has no note (%s)", f->name);
  }
}

// The CPU reference against a direct evaluation of the format's definition.
void test_gemm_cpu() {
  GemmFormat g;
  Status st = parse_gemm_format("a-f16_w-u4g32-sf32-zi_c-f32", &g);
  EXPECT(st.ok, "%s", st.message.c_str());
  const int64_t m = 3, n = 10, k = 70;
  PackedDims d;
  packed_dims(kLayoutGeneric, g.weight, n, k, &d);
  std::mt19937 rng(2);
  std::vector<uint8_t> codes(n * k);
  for (auto &c : codes) c = rng() & 15u;
  std::vector<float> scales(d.n_groups_logical * d.k_groups_logical);
  std::vector<uint8_t> zeros(scales.size());
  for (size_t i = 0; i < scales.size(); ++i) {
    scales[i] = 0.01f * static_cast<float>(1 + rng() % 50);
    zeros[i] = rng() & 15u;
  }
  std::vector<uint16_t> a(m * k);
  std::vector<float> af(m * k);
  for (int64_t i = 0; i < m * k; ++i) {
    const float v = static_cast<float>(static_cast<int>(rng() % 200) - 100) / 64.0f; // exact in f16
    a[i] = static_cast<uint16_t>(encode(dtypes::f16, v));
    af[i] = v;
  }
  std::vector<uint32_t> packed(d.code_words);
  std::vector<float> ps(d.k_groups * d.n_groups);
  std::vector<uint8_t> pz(ps.size());
  pack_codes_cpu(kLayoutGeneric, g.weight, d, codes.data(), packed.data());
  pack_groups_cpu(d, 4, scales.data(), ps.data());
  pack_groups_cpu(d, 1, zeros.data(), pz.data());
  std::vector<float> out(m * n);
  GemmArgs args;
  args.fmt = g;
  args.dims = d;
  args.m = m;
  args.a = a.data();
  args.lda = k;
  args.codes = packed.data();
  args.scales = ps.data();
  args.zeros = pz.data();
  args.out = out.data();
  args.ldo = n;
  st = gemm_cpu(args);
  EXPECT(st.ok, "%s", st.message.c_str());
  double max_err = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const size_t gi = j * d.k_groups_logical + kk / 32;
        ref += static_cast<double>(af[i * k + kk]) * (static_cast<double>(codes[j * k + kk]) - zeros[gi]) * scales[gi];
      }
      max_err = std::fmax(max_err, std::fabs(ref - out[i * n + j]) / (1.0 + std::fabs(ref)));
    }
  EXPECT(max_err < 1e-5, "max relative error %g", max_err);
  // Missing zero points are a status, not a crash.
  args.zeros = nullptr;
  st = gemm_cpu(args);
  EXPECT(!st.ok && st.message.find("zero points") != std::string::npos, "%s", st.message.c_str());
}

void test_registry() {
  EXPECT(instance_count() > 0, "the build has instances");
  for (size_t i = 0; i < instance_count(); ++i) {
    const InstanceInfo *info = instance_at(i);
    EXPECT(find_instance(info->name) == info, "find %s", info->name);
    EXPECT(info->launch != nullptr && info->can_implement != nullptr, "%s has functions", info->name);
  }
  EXPECT(find_instance("no_such_instance") == nullptr, "unknown name");
  const InstanceInfo *first = instance_at(0);
  std::string why;
  EXPECT(!instance_runs_on(*first, 75, &why) && why.find("sm_75") != std::string::npos, "%s", why.c_str());

  // Machine code for sm_XY runs on the same major version with minor >= Y; "a"/"f" targets only on
  // exactly their compute capability.
  InstanceInfo synthetic{};
  synthetic.name = "synthetic";
  synthetic.archs = "80;86;90a";
  for (int cc : {80, 86, 87, 89, 90}) EXPECT(instance_runs_on(synthetic, cc), "runs on sm_%d", cc);
  for (int cc : {75, 100, 120}) EXPECT(!instance_runs_on(synthetic, cc), "does not run on sm_%d", cc);
  synthetic.archs = "90;100f";
  EXPECT(instance_runs_on(synthetic, 90) && instance_runs_on(synthetic, 100), "90 and 100f");
  EXPECT(!instance_runs_on(synthetic, 103) && !instance_runs_on(synthetic, 89), "not 103, not 89");
  // A block needing more shared memory than the device gives cannot run there, whatever its code.
  synthetic.archs = "80;86;90a";
  synthetic.smem_bytes = 120000;
  EXPECT(instance_runs_on(synthetic, 80) && instance_runs_on(synthetic, 90), "fits sm_80 and sm_90");
  EXPECT(!instance_runs_on(synthetic, 86, &why) && why.find("shared memory") != std::string::npos, "%s", why.c_str());
  synthetic.smem_bytes = 0;
  synthetic.archs = "";
  EXPECT(!instance_runs_on(synthetic, 90, &why) && why.find("no architectures") != std::string::npos, "%s",
         why.c_str());
}
// Stream-K plans: every K tile of every output tile is computed exactly once; a block's share is
// at most kMaxSegments segments of whole units (a scale group never straddles two blocks); the
// partial slots of a tile's contributors are distinct; only few tiles on a long K are spread.
void test_stream_k_plans() {
  for (int64_t k_tiles : {1, 7, 28, 57, 113, 226, 448}) {
    for (int64_t tile_k : {64, 128, 256}) {
      for (int64_t group_tiles : {1, 2, 4}) {
        for (int64_t tiles : {1, 3, 20, 33, 64, 132, 200, 264, 400, 1100}) {
          for (bool decode : {false, true}) {
            const StreamKPlan p = plan_stream_k(tiles, k_tiles, tile_k, group_tiles, 132, 2, decode);
            EXPECT(p.blocks >= 1 && p.blocks <= (tiles > 264 ? tiles : 264), "blocks %lld",
                   static_cast<long long>(p.blocks));
            EXPECT(p.dp_tiles() + p.sk_tiles == tiles, "tiles %lld: dp %lld + sk %lld", static_cast<long long>(tiles),
                   static_cast<long long>(p.dp_tiles()), static_cast<long long>(p.sk_tiles));
            const int64_t units = (k_tiles + group_tiles - 1) / group_tiles;
            // Decode tiles split every tile into the same number (at least 2) of blocks.
            const int64_t unit_k = (group_tiles > 1 ? group_tiles : 1) * tile_k;
            const int64_t min_units = (min_slice_k() + unit_k - 1) / unit_k;
            const int64_t splits =
                std::min<int64_t>(264 / tiles, tiles * units / std::max<int64_t>(min_units, 1) / tiles);
            const bool spread = tiles * (decode ? kStreamKSlotsPerDecodeTile : kStreamKSlotsPerTile) <= 264 &&
                                units > 1 && k_tiles * tile_k >= 2 * min_slice_k() && (!decode || splits >= 2);
            if (spread && decode)
              EXPECT(p.blocks == tiles * splits, "decode: %lld tiles x %lld splits, got %lld blocks",
                     static_cast<long long>(tiles), static_cast<long long>(splits), static_cast<long long>(p.blocks));
            EXPECT(spread == (p.sk_tiles > 0), "tiles %lld k_tiles %lld: spread %d", static_cast<long long>(tiles),
                   static_cast<long long>(k_tiles), static_cast<int>(spread));
            if (!spread) EXPECT(p.blocks == tiles && p.dp_waves == 1, "a plain launch: one block per tile");
            std::vector<int> seen(static_cast<size_t>(tiles * k_tiles), 0);
            for (int64_t b = 0; b < p.blocks; ++b) {
              Segment segs[kMaxSegments];
              const int n = block_segments(p, b, segs);
              EXPECT(n >= 1 && n <= kMaxSegments, "block %lld: %d segments", static_cast<long long>(b), n);
              if (decode) EXPECT(n == 1, "decode: block %lld has %d segments, not one", static_cast<long long>(b), n);
              for (int i = 0; i < n; ++i) {
                const Segment &s = segs[i];
                EXPECT(s.tile >= 0 && s.tile < tiles && s.kt_begin < s.kt_end && s.kt_end <= k_tiles,
                       "segment %d of block %lld", i, static_cast<long long>(b));
                EXPECT(s.kt_begin % p.unit_tiles == 0 && (s.kt_end % p.unit_tiles == 0 || s.kt_end == k_tiles),
                       "segment of whole units");
                for (int kt = s.kt_begin; kt < s.kt_end; ++kt) ++seen[static_cast<size_t>(s.tile * k_tiles + kt)];
                const bool whole = s.kt_begin == 0 && s.kt_end == k_tiles;
                if (!whole) {
                  // This block is among the tile's contributors, and their slots are distinct.
                  const int64_t t = s.tile - p.dp_tiles();
                  const int64_t first = p.sk_owner(t * p.units), last = p.sk_owner(t * p.units + p.units - 1);
                  EXPECT(t >= 0 && first <= b && b <= last && first < last, "contributors of tile %lld",
                         static_cast<long long>(t));
                  for (int64_t c = first; c < last; ++c)
                    EXPECT(p.partial_slot(c, t) != p.partial_slot(c + 1, t) && p.partial_slot(c, t) < 2 * p.blocks,
                           "slots of tile %lld", static_cast<long long>(t));
                  // The fix-up reads every contributor after the first from slot 2c.
                  for (int64_t c = first + 1; c <= last; ++c)
                    EXPECT(p.partial_slot(c, t) == 2 * c, "slot of block %lld", static_cast<long long>(c));
                }
              }
            }
            for (size_t i = 0; i < seen.size(); ++i)
              EXPECT(seen[i] == 1, "tiles %lld k_tiles %lld: K tile %zu computed %d times",
                     static_cast<long long>(tiles), static_cast<long long>(k_tiles), i, seen[i]);
          }
        }
      }
    }
  }
}
// Persistent plans (the sm90 backend): every K tile of every output tile is computed exactly once,
// never more blocks than multiprocessors, and a launch that is only a spread part gives every tile
// the same number of blocks, each owning one segment of one tile, whenever each tile gets two.
void test_persistent_plans() {
  const int sms = 132;
  for (int64_t k_tiles : {1, 2, 7, 22, 56, 64, 224}) {
    for (int64_t tile_k : {64, 128}) {
      for (int64_t tiles : {1, 5, 12, 32, 100, 131, 132, 160, 264, 300, 1500}) {
        const StreamKPlan p = plan_persistent(tiles, k_tiles, tile_k, sms);
        EXPECT(p.blocks >= 1 && p.blocks <= sms, "tiles %lld k_tiles %lld: %lld blocks", static_cast<long long>(tiles),
               static_cast<long long>(k_tiles), static_cast<long long>(p.blocks));
        std::vector<int> seen(static_cast<size_t>(tiles * k_tiles), 0);
        for (int64_t b = 0; b < p.blocks; ++b) {
          int sk_segments = 0;
          for_each_segment(p, b, [&](int64_t t, int64_t kb, int64_t ke) {
            if (t >= p.dp_tiles()) ++sk_segments;
            EXPECT(t >= 0 && t < tiles && kb < ke && ke <= k_tiles, "segment of block %lld", static_cast<long long>(b));
            for (int64_t kt = kb; kt < ke; ++kt) ++seen[static_cast<size_t>(t * k_tiles + kt)];
          });
          const int64_t min_units = (persistent_min_slice_k() + tile_k - 1) / tile_k;
          const int64_t splits = std::min<int64_t>(sms / tiles, k_tiles / std::max<int64_t>(min_units, 1));
          if (p.dp_waves == 0 && p.sk_tiles == tiles && splits >= 2)
            EXPECT(p.blocks == tiles * splits && sk_segments == 1,
                   "tiles %lld k_tiles %lld: %lld blocks (want %lld x %lld), block %lld has %d segments",
                   static_cast<long long>(tiles), static_cast<long long>(k_tiles), static_cast<long long>(p.blocks),
                   static_cast<long long>(tiles), static_cast<long long>(splits), static_cast<long long>(b),
                   sk_segments);
        }
        for (size_t i = 0; i < seen.size(); ++i)
          EXPECT(seen[i] == 1, "tiles %lld k_tiles %lld: K tile %zu computed %d times", static_cast<long long>(tiles),
                 static_cast<long long>(k_tiles), i, seen[i]);
      }
    }
  }
  // Measured cases (scheduler/streamk.h): 5 tiles of 576 x 7168 (56 K tiles of 128) spread over
  // many blocks; a whole wave of 132 tiles stays one wave.
  const StreamKPlan small = plan_persistent(5, 56, 128, sms);
  EXPECT(small.sk_tiles == 5 && small.blocks > 5 && small.blocks % 5 == 0, "576 x 7168: %lld blocks",
         static_cast<long long>(small.blocks));
  // A tail of 12 tiles after a whole wave (36864 x 7168, t8x256) stays apart from the wave.
  const StreamKPlan tail = plan_persistent(144, 56, 128, sms);
  EXPECT(tail.dp_waves == 1 && tail.sk_tiles == 12 && tail.blocks == sms, "36864 x 7168: %lld waves, %lld spread",
         static_cast<long long>(tail.dp_waves), static_cast<long long>(tail.sk_tiles));
  // Tiles of 128 tokens or more spread only while each has four multiprocessors: 56 tiles of
  // 3584 x 3584 at m = 256 stay one block each, 24 tiles of 1536 x 7168 spread, and 56 tiles of 64
  // tokens still spread.
  const StreamKPlan crowded = plan_persistent(56, 28, 128, sms, 128);
  EXPECT(crowded.sk_tiles == 0 && crowded.blocks == 56 && crowded.dp_waves == 1, "56 tiles of 128 tokens: %lld blocks",
         static_cast<long long>(crowded.blocks));
  EXPECT(plan_persistent(24, 56, 128, sms, 128).sk_tiles == 24, "24 tiles of 128 tokens spread");
  // Where the weight-only kernels ask (HeavySpread::kWide): one row of 64 tiles of 8192 x 28672
  // (224 K tiles) spreads, two per tile; 80 tiles spread over K = 8192 but not over 5120; 96 tiles,
  // K below 4096, tiles of 256 tokens and callers that do not ask keep one block per tile.
  const HeavySpread wide = HeavySpread::kWide, half = HeavySpread::kHalf;
  const StreamKPlan deep = plan_persistent(64, 224, 128, sms, 128, 1, wide);
  EXPECT(deep.sk_tiles == 64 && deep.blocks == 128 && deep.dp_waves == 0, "64 deep tiles of 128 tokens: %lld blocks",
         static_cast<long long>(deep.blocks));
  EXPECT(plan_persistent(64, 224, 128, sms, 128, 1).sk_tiles == 0, "not asked: one block per tile");
  EXPECT(plan_persistent(80, 64, 128, sms, 128, 2, wide).sk_tiles == 80, "80 tiles over K = 8192 spread");
  EXPECT(plan_persistent(80, 40, 128, sms, 128, 2, wide).sk_tiles == 0, "80 tiles over K = 5120 stay plain");
  EXPECT(plan_persistent(96, 224, 128, sms, 128, 2, wide).sk_tiles == 0, "96 tiles stay plain");
  EXPECT(plan_persistent(56, 28, 128, sms, 128, 2, wide).sk_tiles == 0, "K = 3584 stays plain");
  EXPECT(plan_persistent(64, 224, 64, sms, 256, 1, wide).sk_tiles == 0, "tiles of 256 tokens stay plain");
  // The W4A8 kernels (kHalf): launches of at most half as many tiles as multiprocessors over
  // K >= 4096 spread as with kWide (64 tiles of 8192 x 8192, 40 of 5120 x 5120 at m = 128: the
  // same plan), while 80 tiles over K = 8192 or 13824 keep one block per tile.
  for (const auto &[tiles, k_tiles] : {std::pair<int64_t, int64_t>{64, 64}, {40, 40}, {56, 148}}) {
    const StreamKPlan h = plan_persistent(tiles, k_tiles, 128, sms, 128, 2, half);
    const StreamKPlan w = plan_persistent(tiles, k_tiles, 128, sms, 128, 2, wide);
    EXPECT(h.sk_tiles == tiles && h.blocks == w.blocks && h.units == w.units, "kHalf: %lld tiles over %lld K tiles",
           static_cast<long long>(tiles), static_cast<long long>(k_tiles));
  }
  EXPECT(plan_persistent(80, 64, 128, sms, 128, 2, half).sk_tiles == 0, "kHalf: 80 tiles over K = 8192 stay plain");
  EXPECT(plan_persistent(80, 108, 128, sms, 128, 2, half).sk_tiles == 0, "kHalf: 80 tiles over K = 13824 stay plain");
  EXPECT(plan_persistent(64, 28, 128, sms, 128, 2, half).sk_tiles == 0, "kHalf: K = 3584 stays plain");
  EXPECT(plan_persistent(56, 28, 128, sms, 64).sk_tiles == 56, "56 tiles of 64 tokens spread");
  // Tiles of 32 and 64 tokens in two or more rows spread only while each has two multiprocessors:
  // 112 tiles of 3584 x 3584 (t64 at m = 256, t32 at m = 128: four rows) stay one block each, 64
  // tiles of 4096 x 4096 spread; one row of tiles, decode tiles and K = 14336 spread 112 tiles too.
  for (const int64_t tile_m : {int64_t(32), int64_t(64)}) {
    const StreamKPlan mid = plan_persistent(112, 28, 128, sms, tile_m, 4);
    EXPECT(mid.sk_tiles == 0 && mid.blocks == 112 && mid.dp_waves == 1, "112 tiles of %lld tokens: %lld blocks",
           static_cast<long long>(tile_m), static_cast<long long>(mid.blocks));
    EXPECT(plan_persistent(64, 32, 128, sms, tile_m, 2).sk_tiles == 64, "64 tiles of %lld tokens spread",
           static_cast<long long>(tile_m));
    EXPECT(plan_persistent(112, 28, 128, sms, tile_m, 1).sk_tiles == 112, "one row of 112 tiles of %lld tokens spread",
           static_cast<long long>(tile_m));
  }
  // Decode tiles keep whole tiles while the last wave keeps two thirds of the multiprocessors busy
  // (112 tiles of 28672 x 8192, 224 = 132 + 92), and spread fewer (64 tiles, or a tail of 80).
  EXPECT(plan_persistent(112, 64, 128, sms, 8, 1).sk_tiles == 0, "112 decode tiles stay whole");
  EXPECT(plan_persistent(112, 28, 128, sms, 8, 1).blocks == 112, "112 decode tiles: one block each");
  const StreamKPlan two = plan_persistent(224, 64, 128, sms, 8, 1);
  EXPECT(two.sk_tiles == 0 && two.dp_waves == 2, "224 decode tiles: two whole waves");
  EXPECT(plan_persistent(64, 64, 128, sms, 8, 1).sk_tiles == 64, "64 decode tiles spread");
  EXPECT(plan_persistent(212, 64, 128, sms, 16, 1).sk_tiles == 80, "a decode tail of 80 tiles spread");
  EXPECT(plan_persistent(112, 112, 128, sms, 64, 4).sk_tiles == 112, "112 tiles of 64 tokens over K = 14336 spread");
  // The W8A8 kernels (MidSpread::kDeep) take the rule for two rows of 64-token tiles at any depth
  // and for the tail after whole waves: over K = 16384, 112 and 76 tiles stay whole and 64 spread;
  // 896 tiles (57344 x 8192 at m = 128) are seven whole waves, 180 (a tail of 48) spread their
  // tail; four rows, one row, tiles of 32 tokens, decode tiles and t128 are as without it.
  const MidSpread deep8 = MidSpread::kDeep;
  const HeavySpread none = HeavySpread::kNone;
  const StreamKPlan w8 = plan_persistent(112, 128, 128, sms, 64, 2, none, deep8);
  EXPECT(w8.sk_tiles == 0 && w8.blocks == 112 && w8.dp_waves == 1, "kDeep: 112 tiles over K = 16384: %lld blocks",
         static_cast<long long>(w8.blocks));
  EXPECT(plan_persistent(76, 128, 128, sms, 64, 2, none, deep8).sk_tiles == 0, "kDeep: 76 tiles stay whole");
  EXPECT(plan_persistent(64, 112, 128, sms, 64, 2, none, deep8).sk_tiles == 64, "kDeep: 64 tiles spread");
  const StreamKPlan waves = plan_persistent(896, 64, 128, sms, 64, 2, none, deep8);
  EXPECT(waves.sk_tiles == 0 && waves.dp_waves == 7, "kDeep: 896 tiles: %lld whole waves, %lld spread",
         static_cast<long long>(waves.dp_waves), static_cast<long long>(waves.sk_tiles));
  const StreamKPlan tail48 = plan_persistent(180, 64, 128, sms, 64, 2, none, deep8);
  EXPECT(tail48.dp_waves == 1 && tail48.sk_tiles == 48, "kDeep: a tail of 48 tiles spread");
  EXPECT(plan_persistent(112, 112, 128, sms, 64, 4, none, deep8).sk_tiles == 112, "kDeep: four rows spread");
  EXPECT(plan_persistent(112, 112, 128, sms, 64, 1, none, deep8).sk_tiles == 112, "kDeep: one row of tiles spreads");
  EXPECT(plan_persistent(112, 128, 128, sms, 32, 2, none, deep8).sk_tiles == 112, "kDeep: t32 spreads");
  EXPECT(plan_persistent(212, 64, 128, sms, 16, 1, none, deep8).sk_tiles == 80, "kDeep: decode tiles as before");
  EXPECT(plan_persistent(56, 28, 128, sms, 128, 1, none, deep8).sk_tiles == 0, "kDeep: t128 as before");
  const StreamKPlan wave = plan_persistent(132, 64, 128, sms);
  EXPECT(wave.sk_tiles == 0 && wave.blocks == 132 && wave.dp_waves == 1, "a whole wave stays plain");
}
// The policy on the launches it was measured on (scheduler/streamk.h).
void test_stream_k_policy() {
  // 16 x 64 decode tiles, two blocks per SM: 1024 x 8192 spreads, 8192 x 8192 does not.
  const StreamKPlan few = plan_stream_k(16, 16, 512, 1, 132, 2, true);
  EXPECT(few.sk_tiles == 16 && few.blocks == 64, "few decode tiles: 4 blocks each (each keeps 2048 inputs), got %lld",
         static_cast<long long>(few.blocks));
  EXPECT(plan_stream_k(128, 16, 512, 1, 132, 2, true).sk_tiles == 0, "a wave of decode tiles stays plain");
  // 128 x 256 tiles, one block per SM, g128: 8192 x 28672 at m = 256 (64 tiles) spreads.
  const StreamKPlan big = plan_stream_k(64, 448, 64, 2, 132, 1, false);
  EXPECT(big.sk_tiles == 64 && big.blocks == 132, "64 large tiles over 132 blocks, got %lld blocks",
         static_cast<long long>(big.blocks));
  // 64 x 128 tiles on 28672 x 8192 (224 tiles, 264 slots) stay plain.
  EXPECT(plan_stream_k(224, 64, 128, 1, 132, 2, false).sk_tiles == 0, "most slots busy: plain");
  // A short K gives nothing to split.
  EXPECT(plan_stream_k(8, 4, 512, 1, 132, 2, false).sk_tiles == 0, "K below two slices: plain");
}

// An uneven spread of several rows of tiles walks them in step (StreamKPlan::step_rows, the
// default): a whole number of blocks a row, and block j of every row owns the same K tiles of the
// same columns as block j of the first (row-major tiles). Even spreads, one row and whole tiles
// keep the grouped order, as does every plan with HUMMING_LOCKSTEP_ROWS=0.
void test_rows_in_step() {
  const int sms = 132;
  setenv("HUMMING_LOCKSTEP_ROWS", "0", 1);
  EXPECT(plan_persistent(76, 128, 128, sms, 64, 2).step_rows == 0, "rows in step with HUMMING_LOCKSTEP_ROWS=0");
  unsetenv("HUMMING_LOCKSTEP_ROWS");
  EXPECT(plan_persistent(76, 128, 128, sms, 64, 2).step_rows == 2, "rows not in step by default");
  struct Case {
    int64_t rows, cols, k_tiles, tile_m, step_rows;
  };
  const Case cases[] = {
      {2, 38, 128, 64, 2}, // 7168 x 16384, t64x192 at m = 128: 76 tiles, 66 blocks a row
      {4, 22, 112, 64, 4}, // 4096 x 14336, t64x192 at m = 256: 88 tiles, 33 blocks a row
      {2, 40, 108, 64, 2}, // 5120 x 13824, t64x128 at m = 128
      {3, 33, 65, 32, 3},  // 99 tiles of 32 tokens over K = 8320
      {5, 20, 128, 64, 5}, // 100 tiles in 5 rows: 130 blocks
      {2, 19, 148, 64, 0}, // 38 tiles: three blocks each (an even spread)
      {1, 80, 128, 64, 0}, // one row
      {2, 38, 64, 64, 0},  // K = 8192 and 76 tiles of 64 tokens: whole tiles (crowded)
      {2, 80, 128, 64, 0}, // 160 tiles: more than one wave
  };
  for (const Case &c : cases) {
    const StreamKPlan p = plan_persistent(c.rows * c.cols, c.k_tiles, 128, sms, c.tile_m, c.rows);
    EXPECT(p.step_rows == c.step_rows, "%lld x %lld tiles over %lld K tiles: %lld rows in step, want %lld",
           static_cast<long long>(c.rows), static_cast<long long>(c.cols), static_cast<long long>(c.k_tiles),
           static_cast<long long>(p.step_rows), static_cast<long long>(c.step_rows));
    if (p.step_rows == 0) continue;
    EXPECT(p.blocks % p.step_rows == 0 && p.blocks <= sms && p.dp_waves == 0, "%lld blocks",
           static_cast<long long>(p.blocks));
    const int64_t per_row = p.blocks / p.step_rows;
    for (int64_t b = 0; b < p.blocks; ++b) {
      std::vector<std::array<int64_t, 3>> mine, first;
      for_each_segment(p, b, [&](int64_t t, int64_t kb, int64_t ke) {
        const TileCoord tc = row_major_tile(t, c.cols);
        EXPECT(tc.row == b / per_row, "block %lld left its row", static_cast<long long>(b));
        mine.push_back({tc.col, kb, ke});
      });
      for_each_segment(p, b % per_row, [&](int64_t t, int64_t kb, int64_t ke) {
        first.push_back({row_major_tile(t, c.cols).col, kb, ke});
      });
      EXPECT(mine == first, "block %lld does not walk in step with block %lld", static_cast<long long>(b),
             static_cast<long long>(b % per_row));
    }
  }
}
} // namespace

// Grouped tile order: a bijection of the grid; a grid of at most kRasterRows rows is walked column
// by column (row fastest), and each group of rows holds consecutive tile indices.
void test_grouped_raster() {
  for (int64_t rows : {1, 2, 7, 8, 9, 64, 65}) {
    for (int64_t cols : {1, 3, 43, 150}) {
      std::vector<int> seen(static_cast<size_t>(rows * cols), 0);
      for (int64_t t = 0; t < rows * cols; ++t) {
        const TileCoord c = grouped_tile(t, rows, cols);
        EXPECT(c.row >= 0 && c.row < rows && c.col >= 0 && c.col < cols,
               "rows %lld cols %lld: tile %lld out of the grid", static_cast<long long>(rows),
               static_cast<long long>(cols), static_cast<long long>(t));
        if (c.row >= 0 && c.row < rows && c.col >= 0 && c.col < cols) ++seen[static_cast<size_t>(c.row * cols + c.col)];
        EXPECT(c.row / kRasterRows == t / (kRasterRows * cols), "tile %lld left its group", static_cast<long long>(t));
        if (rows <= kRasterRows)
          EXPECT(c.row == t % rows && c.col == t / rows, "rows %lld: tile %lld not row fastest",
                 static_cast<long long>(rows), static_cast<long long>(t));
      }
      for (size_t i = 0; i < seen.size(); ++i)
        EXPECT(seen[i] == 1, "rows %lld cols %lld: tile %zu visited %d times", static_cast<long long>(rows),
               static_cast<long long>(cols), i, seen[i]);
    }
  }
}

// Mixture-of-experts tiles (scheduler/moe.h), contiguous and masked rows, with empty experts, one
// expert holding every row, and counts that are not multiples of the tile: every row of every
// expert is in exactly one tile per n tile, no tile straddles two experts or passes tile_m rows,
// the tile count is what the counts imply and never above expert_tiles_at_most, and blocks of a
// persistent grid that each walk every G-th tile with their own cursor see the same tiles.
void test_expert_tiles() {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 60; ++trial) {
    const int experts = 1 + static_cast<int>(rng() % 40);
    const int tile_m = (trial % 3 == 0) ? 16 : (trial % 3 == 1 ? 64 : 128);
    const int64_t n_tiles = 1 + rng() % 5;
    std::vector<int32_t> counts(static_cast<size_t>(experts));
    for (auto &c : counts) c = (rng() % 4 == 0) ? 0 : static_cast<int32_t>(rng() % 300);
    if (trial % 10 == 0) std::fill(counts.begin(), counts.end(), 0), counts[rng() % experts] = 517;
    std::vector<int32_t> offsets(static_cast<size_t>(experts) + 1, 0);
    for (int e = 0; e < experts; ++e) offsets[e + 1] = offsets[e] + counts[e];
    const int64_t capacity = *std::max_element(counts.begin(), counts.end()) + 3;
    for (bool masked : {false, true}) {
      ExpertRows g;
      g.experts = experts;
      if (masked)
        g.counts = counts.data(), g.capacity = capacity;
      else
        g.offsets = offsets.data();
      const int64_t rows = masked ? experts * capacity : offsets[experts];
      int64_t want = 0;
      for (int32_t c : counts) want += (c + tile_m - 1) / tile_m * n_tiles;
      std::vector<int> covered(static_cast<size_t>(rows * n_tiles), 0);
      ExpertCursor cur;
      ExpertTile tile{};
      int64_t t = 0;
      for (; expert_tile(g, tile_m, n_tiles, t, &cur, &tile); ++t) {
        int64_t begin, end;
        g.rows(tile.expert, &begin, &end);
        EXPECT(tile.m0 >= begin && tile.m_end <= end && tile.m0 < tile.m_end && tile.m_end - tile.m0 <= tile_m,
               "trial %d tile %lld: rows [%lld, %lld) outside expert %d's [%lld, %lld)", trial,
               static_cast<long long>(t), static_cast<long long>(tile.m0), static_cast<long long>(tile.m_end),
               tile.expert, static_cast<long long>(begin), static_cast<long long>(end));
        EXPECT(tile.n_tile >= 0 && tile.n_tile < n_tiles, "trial %d: n tile %lld", trial,
               static_cast<long long>(tile.n_tile));
        for (int64_t r = tile.m0; r < tile.m_end && r < rows; ++r)
          ++covered[static_cast<size_t>(r * n_tiles + tile.n_tile)];
      }
      EXPECT(t == want, "trial %d (%s): %lld tiles, the counts give %lld", trial, masked ? "masked" : "contiguous",
             static_cast<long long>(t), static_cast<long long>(want));
      EXPECT(t <= expert_tiles_at_most(rows, experts, tile_m, n_tiles), "trial %d: %lld tiles above the bound %lld",
             trial, static_cast<long long>(t),
             static_cast<long long>(expert_tiles_at_most(rows, experts, tile_m, n_tiles)));
      for (int e = 0; e < experts; ++e) {
        int64_t begin, end;
        g.rows(e, &begin, &end);
        for (int64_t r = begin; r < end; ++r)
          for (int64_t nt = 0; nt < n_tiles; ++nt)
            EXPECT(covered[static_cast<size_t>(r * n_tiles + nt)] == 1,
                   "trial %d: row %lld n tile %lld covered %d times", trial, static_cast<long long>(r),
                   static_cast<long long>(nt), covered[static_cast<size_t>(r * n_tiles + nt)]);
        if (masked)
          for (int64_t r = end; r < begin + capacity; ++r)
            EXPECT(covered[static_cast<size_t>(r * n_tiles)] == 0, "trial %d: padding row %lld read", trial,
                   static_cast<long long>(r));
      }
      // A persistent grid of G blocks: block b takes tiles b, b + G, ... with its own cursor.
      const int64_t blocks = 1 + rng() % 9;
      int64_t seen = 0;
      for (int64_t b = 0; b < blocks; ++b) {
        ExpertCursor c;
        ExpertTile a{}, r{};
        for (int64_t u = b; expert_tile(g, tile_m, n_tiles, u, &c, &a); u += blocks) {
          ExpertCursor fresh;
          EXPECT(expert_tile(g, tile_m, n_tiles, u, &fresh, &r) && r.expert == a.expert && r.m0 == a.m0 &&
                     r.m_end == a.m_end && r.n_tile == a.n_tile,
                 "trial %d: block %lld tile %lld differs from a fresh walk", trial, static_cast<long long>(b),
                 static_cast<long long>(u));
          ++seen;
        }
      }
      EXPECT(seen == want, "trial %d: the blocks saw %lld tiles of %lld", trial, static_cast<long long>(seen),
             static_cast<long long>(want));
    }
  }
}

// 4-bit codes to 8-bit operands (numeric/nibble_lut.h): for every code type and every word of
// eight codes built from random codes, each output byte decodes (format/dtype.h decode, as e4m3 or
// as s8) to the code's own value, also of the sign-extended top-bit codes.
void test_nibble_operands() {
  std::mt19937 rng(5);
  const DType types[] = {dtypes::uint_type(4), dtypes::int_type(4), dtypes::e2m1};
  for (const DType code : types) {
    for (const bool is_int : {false, true}) {
      if (is_int && code.kind == kFloat) continue; // FP4 runs on the FP8 tensor cores only
      const numeric::NibbleTable t = numeric::nibble_table(code, is_int);
      for (int trial = 0; trial < 400; ++trial) {
        uint32_t w = static_cast<uint32_t>(rng());
        if (trial < 16) w = 0x11111111u * static_cast<uint32_t>(trial); // all eight codes alike
        uint32_t out[2];
        numeric::nibbles_to_bytes(w, t, out[0], out[1]);
        for (int i = 0; i < 8; ++i) {
          const uint32_t c = (w >> (4 * i)) & 0xFu;
          const uint32_t byte = (out[i / 4] >> (8 * (i % 4))) & 0xFFu;
          const float want = decode(code, c) - (code.kind == kUInt ? 8.0f : 0.0f);
          const float got = decode(is_int ? dtypes::i8 : dtypes::e4m3, byte);
          EXPECT(got == want, "code type %u.%u, %s operands: code %u (word %08x, place %d) gave %g, not %g", code.kind,
                 code.bits, is_int ? "s8" : "e4m3", c, w, i, got, want);
        }
      }
    }
  }
  // e2m1 by bit moves: each byte is the e4m3 code of 2^-6 times the code's value.
  for (int trial = 0; trial < 400; ++trial) {
    uint32_t w = static_cast<uint32_t>(rng());
    if (trial < 16) w = 0x11111111u * static_cast<uint32_t>(trial);
    uint32_t out[2];
    numeric::e2m1_to_shifted_e4m3(w, out[0], out[1]);
    for (int i = 0; i < 8; ++i) {
      const uint32_t c = (w >> (4 * i)) & 0xFu;
      const float got = decode(dtypes::e4m3, (out[i / 4] >> (8 * (i % 4))) & 0xFFu) * numeric::kE2m1ShiftScale;
      EXPECT(got == decode(dtypes::e2m1, c), "shifted e2m1: code %u (word %08x, place %d) gave %g x 64, not %g", c, w,
             i, got, decode(dtypes::e2m1, c));
    }
  }
  // The same from layout 4's spread order (layout_sm90_a8::fp4_bit): code i of a word read bit by
  // bit where fp4_bit places it, against e2m1_a8_to_shifted_e4m3's byte i % 4 of register i / 4.
  for (int trial = 0; trial < 400; ++trial) {
    uint32_t w = static_cast<uint32_t>(rng());
    if (trial < 2) w = trial == 0 ? 0u : 0xFFFFFFFFu;
    uint32_t out[2];
    numeric::e2m1_a8_to_shifted_e4m3(w, out[0], out[1]);
    for (int i = 0; i < 8; ++i) {
      uint32_t c = 0;
      for (int b = 0; b < 4; ++b) c |= ((w >> layout_sm90_a8::fp4_bit(i, b)) & 1u) << b;
      const float got = decode(dtypes::e4m3, (out[i / 4] >> (8 * (i % 4))) & 0xFFu) * numeric::kE2m1ShiftScale;
      EXPECT(got == decode(dtypes::e2m1, c), "layout 4's e2m1: code %u (word %08x, place %d) gave %g x 64, not %g", c,
             w, i, got, decode(dtypes::e2m1, c));
    }
  }
  // fp4_bit places the 32 bits of a word's eight codes on the 32 bits of the word, once each.
  uint32_t seen = 0;
  for (int i = 0; i < 8; ++i)
    for (int b = 0; b < 4; ++b) seen |= 1u << layout_sm90_a8::fp4_bit(i, b);
  EXPECT(seen == 0xFFFFFFFFu, "layout 4's e2m1 order leaves bits %08x unused", ~seen);
}

// Layout 3's spread e2m1 order (layout/sm90.h) read the way the sm90 weight-only kernels read it:
// a 64 x 64 block of random codes packed by pack_word, each thread's words found by word_in_block,
// each register pair made by e2m1_operand_bits (numeric/nibble_lut.h). Register r of K step s of
// thread t (warp w, lane l) must hold the bf16 bits of 2^-126 x the values of channel
// 16 w + l / 4 + 8 (r % 2), inputs 16 s + 2 (l % 4) + 8 (r / 2) + {0, 1} (the PTX ISA's m64nNk16 A
// fragment), computed here from the codes' values in float; likewise the f16 bits of 2^-14 x the
// values. take_code must give every code back.
template <bool Bf16, int P> uint32_t fp4_bits_of(uint32_t w) { return numeric::e2m1_operand_bits<Bf16, P>(w); }

// The f16 bits of `v` (a float that f16 holds exactly: no rounding here).
uint32_t f16_bits_exact(float v) {
  uint32_t f;
  std::memcpy(&f, &v, 4);
  const uint32_t sign = (f >> 16) & 0x8000u;
  const float a = std::fabs(v);
  if (a == 0.0f) return sign;
  int e = 0;
  const float m = std::frexp(a, &e); // a = m 2^e, m in [0.5, 1)
  if (e - 1 >= -14)                  // normal: exponent e - 1, biased by 15; ten mantissa bits
    return sign | static_cast<uint32_t>(e - 1 + 15) << 10 | static_cast<uint32_t>((m * 2.0f - 1.0f) * 1024.0f);
  return sign | static_cast<uint32_t>(std::ldexp(a, 24)); // subnormal: multiples of 2^-24
}

void test_sm90_fp4_operands() {
  std::mt19937 rng(5);
  constexpr int kN = 64, kK = 64;
  std::vector<uint8_t> codes(kN * kK);
  for (auto &c : codes) c = static_cast<uint8_t>(rng() & 0xFu);
  std::vector<uint32_t> block(layout_sm90::words_per_block(4));
  for (size_t w = 0; w < block.size(); ++w) block[w] = layout_sm90::pack_word(codes.data(), kN, kK, 4, 1, w, true);
  int bad = 0;
  for (int t = 0; t < 128; ++t)
    for (int pair = 0; pair < 16; ++pair) {
      const uint32_t word = block[layout_sm90::word_in_block(t, pair / 4)];
      const uint32_t got[2] = {pair % 4 == 0   ? fp4_bits_of<true, 0>(word)
                               : pair % 4 == 1 ? fp4_bits_of<true, 1>(word)
                               : pair % 4 == 2 ? fp4_bits_of<true, 2>(word)
                                               : fp4_bits_of<true, 3>(word),
                               pair % 4 == 0   ? fp4_bits_of<false, 0>(word)
                               : pair % 4 == 1 ? fp4_bits_of<false, 1>(word)
                               : pair % 4 == 2 ? fp4_bits_of<false, 2>(word)
                                               : fp4_bits_of<false, 3>(word)};
      const int s = pair / 4, r = pair % 4, lane = t % 32;
      const int n = 16 * (t / 32) + lane / 4 + 8 * (r % 2);
      for (int h = 0; h < 2; ++h) {
        const int k = 16 * s + 2 * (lane % 4) + 8 * (r / 2) + h;
        const float value = decode(dtypes::e2m1, codes[n * kK + k]);
        const float v = std::ldexp(value, -126);
        uint32_t f;
        std::memcpy(&f, &v, 4);
        // The values have two significant bits: bf16 and f16 hold them exactly.
        const uint32_t want[2] = {f >> 16, f16_bits_exact(std::ldexp(value, -14))};
        for (int ty = 0; ty < 2; ++ty)
          if (((got[ty] >> (16 * h)) & 0xFFFFu) != want[ty] && bad++ < 5)
            EXPECT(false, "%s: thread %d pair %d element %d (channel %d, input %d): %04x, not %04x",
                   ty == 0 ? "bf16" : "f16", t, pair, h, n, k, (got[ty] >> (16 * h)) & 0xFFFFu, want[ty]);
      }
    }
  for (int n = 0; n < kN; ++n)
    for (int k = 0; k < kK; ++k)
      if (layout_sm90::code_at(block.data(), n, k, 4, 1, true) != codes[n * kK + k] && bad++ < 5)
        EXPECT(false, "code (%d, %d) read back as %u, not %u", n, k,
               layout_sm90::code_at(block.data(), n, k, 4, 1, true), codes[n * kK + k]);
  EXPECT(bad == 0, "layout 3's e2m1 operands: %d wrong", bad);
}

// The W4A8 register fragments (backend/sm90/operand_convert.h): a box of random codes, laid out as
// the TMA's 64-byte swizzle leaves it (16-byte unit u of 64-byte row r at unit u ^ ((r / 2) % 4)),
// read by every thread of both warpgroups of a 128-row box; register r of k32 step s of thread t
// must hold the operands of channel 16 (t / 32) + (t % 32) / 4 + 8 (r % 2) and inputs
// 32 s + 4 (t % 4) + 16 (r / 2) + {0 .. 3} (the PTX ISA's m64nNk32 A fragment of 8-bit types).
// Both conversions run: u4 by lookup, e2m1 by bit moves (operands of 2^-6 the values).
// The same for a box in layout 4 (layout/sm90_a8.h: rows packed by its pack_word, then swizzled as
// the TMA leaves them), read by layout_fragments<kLayoutSm90A8>.
void test_nibble_fragments() {
  for (const bool chunked : {false, true})
    for (const bool shifted : {false, true}) {
      std::mt19937 rng(11);
      const DType code = shifted ? dtypes::e2m1 : dtypes::uint_type(4);
      const numeric::NibbleTable table = numeric::nibble_table(code, false);
      // Layout 4 spreads e2m1 codes' bits (layout_sm90_a8::fp4_order) for its own conversion.
      const auto convert = [&](uint32_t w, uint32_t &lo, uint32_t &hi) {
        if (shifted && chunked)
          numeric::e2m1_a8_to_shifted_e4m3(w, lo, hi);
        else if (shifted)
          numeric::e2m1_to_shifted_e4m3(w, lo, hi);
        else
          numeric::nibbles_to_bytes(w, table, lo, hi);
      };
      constexpr int kRows = 128, kCodes = 128;
      std::vector<uint8_t> codes(kRows * kCodes);
      for (auto &c : codes) c = static_cast<uint8_t>(rng() & 0xFu);
      alignas(16) static uint8_t box[kRows * 64];
      std::memset(box, 0, sizeof(box));
      for (int r = 0; r < kRows; ++r) {
        if (chunked) {
          for (int w = 0; w < 16; ++w) {
            const uint32_t word =
                layout_sm90_a8::pack_word(codes.data() + r * kCodes, kCodes, w, layout_sm90_a8::fp4_order(code));
            std::memcpy(box + r * 64 + 16 * ((w / 4) ^ ((r / 2) % 4)) + 4 * (w % 4), &word, 4);
          }
          continue;
        }
        for (int k = 0; k < kCodes; ++k) {
          const int byte = k / 2, unit = byte / 16, swizzled = unit ^ ((r / 2) % 4);
          box[r * 64 + swizzled * 16 + byte % 16] |= static_cast<uint8_t>(codes[r * kCodes + k] << (4 * (k % 2)));
        }
      }
      int bad = 0;
      for (int row0 = 0; row0 < kRows; row0 += 64)
        for (int t = 0; t < 128; ++t) {
          uint32_t af[4][4];
          if (chunked)
            sm90::layout_fragments<kLayoutSm90A8>(reinterpret_cast<const char *>(box), row0, t, convert, af);
          else
            sm90::layout_fragments<kLayoutGeneric>(reinterpret_cast<const char *>(box), row0, t, convert, af);
          for (int s = 0; s < 4; ++s)
            for (int r = 0; r < 4; ++r)
              for (int i = 0; i < 4; ++i) {
                const int row = row0 + 16 * (t / 32) + (t % 32) / 4 + 8 * (r % 2);
                const int k = 32 * s + 4 * (t % 4) + 16 * (r / 2) + i;
                const float want = decode(code, codes[row * kCodes + k]) - (shifted ? 0.0f : 8.0f);
                const float got =
                    decode(dtypes::e4m3, (af[s][r] >> (8 * i)) & 0xFFu) * (shifted ? numeric::kE2m1ShiftScale : 1.0f);
                if (got != want && bad++ < 5)
                  EXPECT(false, "thread %d of rows %d.., step %d register %d byte %d: %g, not %g (row %d, input %d)", t,
                         row0, s, r, i, got, want, row, k);
              }
        }
      EXPECT(bad == 0, "%s, layout %d: %d fragment bytes wrong", shifted ? "shifted e2m1" : "u4 lookup",
             chunked ? 4 : 1, bad);
    }
}

// ---- the sm80 family's 8-bit activation kernel: fragments emulated on the host ----------------
// A stage's tiles written as the kernel's copies write them (chunk c of row r at a8::offset), then
// read back as its warps read them: ldmatrix emulated per the PTX ISA (matrix q's eight row
// addresses come from lanes 8q..8q + 7; lane T receives of matrix q the 4 bytes at 4 (T % 4) of
// row T / 4), 4- and 8-byte loads as plain reads. The fragments feed an emulated mma.sync
// m16n8k32 on s8 values, laid out as the PTX ISA gives the m16n8k32 fragments of 8-bit types:
// A (16 x 32): register r of lane l, byte i is row l / 4 + 8 (r % 2), input 4 (l % 4) + i + 16 (r / 2);
// B (32 x 8): register r of lane l, byte i is input 4 (l % 4) + i + 16 r, column l / 4;
// and each tile of sums must be the dot products of its rows and columns over the step's 32
// inputs (4-bit codes: in any order of the inputs, which the fragments permute alike).
namespace a8emu {
uint32_t read32(const uint8_t *p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// ldmatrix of `mats` matrices with row addresses addr(lane) (byte offsets into tile).
template <class Addr> void ldsm(const uint8_t *tile, int mats, Addr addr, uint32_t (&out)[32][4]) {
  for (int t = 0; t < 32; ++t)
    for (int q = 0; q < mats; ++q) out[t][q] = read32(tile + addr(8 * q + t / 4) + 4 * (t % 4));
}

int s8(uint32_t w, int i) { return static_cast<int8_t>(static_cast<uint8_t>(w >> (8 * i))); }

// d[row][col] = sum over the 32 inputs of A[row][k] B[k][col], from the lanes' fragments.
void mma(const uint32_t (&a)[32][4], const uint32_t (&b)[32][2], long (&d)[16][8]) {
  int A[16][32] = {}, B[32][8] = {};
  for (int l = 0; l < 32; ++l)
    for (int i = 0; i < 4; ++i) {
      for (int r = 0; r < 4; ++r) A[l / 4 + 8 * (r % 2)][4 * (l % 4) + i + 16 * (r / 2)] = s8(a[l][r], i);
      for (int r = 0; r < 2; ++r) B[4 * (l % 4) + i + 16 * r][l / 4] = s8(b[l][r], i);
    }
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 8; ++c) {
      d[r][c] = 0;
      for (int k = 0; k < 32; ++k) d[r][c] += static_cast<long>(A[r][k]) * B[k][c];
    }
}
} // namespace a8emu

void test_sm80_a8_fragments() {
  using namespace a8emu;
  constexpr int BK = 128, kRows = 64; // a stage of 128 inputs; 64 activation rows, 64 channels
  std::mt19937 rng(5);
  int act[kRows][BK], w8[kRows][BK], w4[kRows][BK]; // values: s8, and the 4-bit codes' (u4: code - 8)
  static uint8_t at[kRows * BK], wt8[kRows * BK], wt4[kRows * BK / 2];
  uint8_t codes[kRows][BK];
  for (int r = 0; r < kRows; ++r)
    for (int k = 0; k < BK; ++k) {
      act[r][k] = static_cast<int>(rng() % 255) - 127;
      w8[r][k] = static_cast<int>(rng() % 255) - 127;
      codes[r][k] = static_cast<uint8_t>(rng() & 0xF);
      w4[r][k] = codes[r][k] - 8;
    }
  // The tiles as the copies leave them: 16-byte chunk c of row r at a8::offset (4-bit rows: code
  // k at bits 4 (k % 8) of word k / 8, the generic layout).
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < BK / 16; ++c)
      for (int b = 0; b < 16; ++b) {
        at[sm80::a8::offset<BK>(r, c) + b] = static_cast<uint8_t>(act[r][c * 16 + b]);
        wt8[sm80::a8::offset<BK>(r, c) + b] = static_cast<uint8_t>(w8[r][c * 16 + b]);
      }
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < BK / 32; ++c)
      for (int b = 0; b < 16; ++b)
        wt4[sm80::a8::offset<BK / 2>(r, c) + b] =
            static_cast<uint8_t>(codes[r][c * 32 + 2 * b] | (codes[r][c * 32 + 2 * b + 1] << 4));
  const numeric::NibbleTable table = numeric::nibble_table(dtypes::uint_type(4), true);
  // The s8 operands of lane l's code word of 4-bit row `row` at step kk.
  const auto word_ops = [&](int row, int kk, int l, uint32_t &lo, uint32_t &hi) {
    numeric::nibbles_to_bytes(read32(wt4 + sm80::a8::code_word<BK / 2>(row, kk, l)), table, lo, hi);
  };
  int bad = 0;
  const auto check = [&](const long (&d)[16][8], auto want, const char *what, int kk, int r0, int c0) {
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 8; ++c) {
        long ref = 0;
        for (int k = kk; k < kk + 32; ++k) ref += want(r0 + r, c0 + c, k);
        if (d[r][c] != ref && bad++ < 5)
          EXPECT(false, "%s: step %d, rows %d.., columns %d..: sum (%d, %d) %ld, not %ld", what, kk, r0, c0, r, c,
                 d[r][c], ref);
      }
  };
  for (int kk = 0; kk < BK; kk += 32)
    for (int r0 = 0; r0 < kRows; r0 += 16)
      for (int c0 = 0; c0 < kRows; c0 += 16) {
        uint32_t a[32][4], f[32][4], b0[32][2], b1[32][2];
        long d[16][8];
        // 8-bit, wide: activation rows r0.. as A, channel tiles c0.. and c0 + 8.. as B.
        ldsm(at, 4, [&](int l) { return sm80::a8::rows16<BK>(r0, kk, l); }, a);
        ldsm(wt8, 4, [&](int l) { return sm80::a8::rows8_pair<BK>(c0, kk, l); }, f);
        for (int l = 0; l < 32; ++l) b0[l][0] = f[l][0], b0[l][1] = f[l][1], b1[l][0] = f[l][2], b1[l][1] = f[l][3];
        const auto wide8 = [&](int m, int n, int k) { return static_cast<long>(act[m][k]) * w8[n][k]; };
        mma(a, b0, d);
        check(d, wide8, "8-bit wide", kk, r0, c0);
        mma(a, b1, d);
        check(d, wide8, "8-bit wide", kk, r0, c0 + 8);
        // 8-bit, narrow: channels c0.. as A, activation rows r0..r0 + 7 as B.
        ldsm(wt8, 4, [&](int l) { return sm80::a8::rows16<BK>(c0, kk, l); }, a);
        ldsm(at, 2, [&](int l) { return sm80::a8::rows8<BK>(r0, kk, l); }, f);
        for (int l = 0; l < 32; ++l) b0[l][0] = f[l][0], b0[l][1] = f[l][1];
        mma(a, b0, d);
        check(
            d, [&](int n, int m, int k) { return static_cast<long>(w8[n][k]) * act[m][k]; }, "8-bit narrow", kk, c0,
            r0);
        // 4-bit, wide: the activations by 8-byte loads, each channel's code word converted.
        for (int l = 0; l < 32; ++l) {
          const int g = l / 4;
          const uint8_t *lo = at + sm80::a8::act_bytes8<BK>(r0 + g, kk, l);
          const uint8_t *hi = at + sm80::a8::act_bytes8<BK>(r0 + g + 8, kk, l);
          sm80::a8::wide4_a(read32(lo), read32(lo + 4), read32(hi), read32(hi + 4), a[l]);
          word_ops(c0 + g, kk, l, b0[l][0], b0[l][1]);
          word_ops(c0 + 8 + g, kk, l, b1[l][0], b1[l][1]);
        }
        const auto wide4 = [&](int m, int n, int k) { return static_cast<long>(act[m][k]) * w4[n][k]; };
        mma(a, b0, d);
        check(d, wide4, "4-bit wide", kk, r0, c0);
        mma(a, b1, d);
        check(d, wide4, "4-bit wide", kk, r0, c0 + 8);
        // 4-bit, narrow: channels c0.. as A (two converted words a lane), activation rows r0.. as B.
        for (int l = 0; l < 32; ++l) {
          const int g = l / 4;
          uint32_t lo0, hi0, lo1, hi1;
          word_ops(c0 + g, kk, l, lo0, hi0);
          word_ops(c0 + g + 8, kk, l, lo1, hi1);
          sm80::a8::narrow4_a(lo0, hi0, lo1, hi1, a[l]);
          const uint8_t *p = at + sm80::a8::act_bytes8<BK>(r0 + g, kk, l);
          b0[l][0] = read32(p), b0[l][1] = read32(p + 4);
        }
        mma(a, b0, d);
        check(
            d, [&](int n, int m, int k) { return static_cast<long>(w4[n][k]) * act[m][k]; }, "4-bit narrow", kk, c0,
            r0);
      }
  EXPECT(bad == 0, "%d sm80 8-bit activation sums wrong", bad);
  // The swizzles put the eight rows one ldmatrix matrix reads (and one quarter warp's code words)
  // in distinct 16-byte bank groups.
  for (int kk = 0; kk < BK; kk += 32) {
    bool seen[8] = {};
    for (int l = 0; l < 8; ++l) seen[(sm80::a8::rows16<BK>(0, kk, l) / 16) % 8] = true;
    EXPECT(std::count(seen, seen + 8, true) == 8, "ldmatrix rows of step %d share banks", kk);
    int banks[32] = {};
    for (int l = 0; l < 32; ++l) ++banks[(sm80::a8::code_word<BK / 2>(l / 4, kk, l) / 4) % 32];
    EXPECT(std::count(banks, banks + 32, 1) == 32, "code words of step %d share banks", kk);
  }
}

// The W4A8 stage conversion of the producer's converter warps (backend/sm90/stage_convert.h): a box
// of random codes in the TMA's 64-byte swizzle, converted by three threads' shares (a count that
// does not divide the units, as the three converter warps' 96 threads do not divide a 128-row box's
// 512), must give every code's operand byte at its place in the 128-byte swizzle the WGMMA
// descriptors read (input k of row r at byte (k % 16) of unit (k / 16) ^ (r % 8) of the row's 128).
void test_stage_conversion() {
  std::mt19937 rng(12);
  for (const DType code : {dtypes::e2m1, dtypes::int_type(4), dtypes::uint_type(4)}) {
    const numeric::NibbleTable table = numeric::nibble_table(code, false);
    constexpr int kRows = 128, kCodes = 128;
    std::vector<uint8_t> codes(kRows * kCodes);
    for (auto &c : codes) c = static_cast<uint8_t>(rng() & 0xFu);
    alignas(16) static uint8_t box[kRows * 64], out[kRows * 128];
    std::memset(box, 0, sizeof(box));
    std::memset(out, 0xAB, sizeof(out));
    for (int r = 0; r < kRows; ++r)
      for (int k = 0; k < kCodes; ++k) {
        const int byte = k / 2, unit = byte / 16, swizzled = unit ^ ((r / 2) % 4);
        box[r * 64 + swizzled * 16 + byte % 16] |= static_cast<uint8_t>(codes[r * kCodes + k] << (4 * (k % 2)));
      }
    for (int i = 0; i < 3; ++i)
      sm90::convert_stage_codes<kRows, 3>(reinterpret_cast<const char *>(box), reinterpret_cast<char *>(out), i, table);
    int bad = 0;
    for (int r = 0; r < kRows; ++r)
      for (int k = 0; k < kCodes; ++k) {
        const float want = decode(code, codes[r * kCodes + k]) - (code.kind == kUInt ? 8.0f : 0.0f);
        const float got = decode(dtypes::e4m3, out[r * 128 + 16 * ((k / 16) ^ (r % 8)) + k % 16]);
        if (got != want && bad++ < 5)
          EXPECT(false, "code type %u.%u, row %d input %d: %g, not %g", code.kind, code.bits, r, k, got, want);
      }
    EXPECT(bad == 0, "%d converted bytes wrong", bad);
  }
}

// The producer's walk over a grouped GEMM's expert tiles (humming.h, grouped_walk_alone) on the
// H200 points measured in session 19 (132 multiprocessors, 128-channel tiles; the tile heights the
// dispatcher chose): one thread where the lone walk was faster, the warp where it was slower.
void test_grouped_walk_rule() {
  struct Point {
    int64_t assignments;
    int32_t experts;
    int64_t n;
    int tile_m;
    bool lone_faster;
  };
  const Point points[] = {
      {8, 128, 1536, 8, false},    // Qwen3-30B-A3B gate-up, 1 token: 44.8 vs 23.1 us (both GEMMs)
      {64, 128, 1536, 8, false},   // 8 tokens: gate-up 51.4 vs 49.9
      {64, 128, 2048, 8, false},   // 8 tokens, down: 40.5 vs 36.2
      {512, 128, 1536, 8, true},   // 64 tokens: gate-up 95.6 vs 109.8
      {512, 128, 2048, 8, true},   // down: 68.4 vs 75.0
      {2048, 128, 1536, 16, true}, // 256 tokens: 133.3 vs 159.9
      {8, 256, 4096, 8, false},    // DeepSeek-V3 gate-up, 1 token: 72.9 vs 59.1
      {8, 256, 7168, 8, false},    // down: 57.6 vs 41.3
      {64, 256, 4096, 8, true},    // 8 tokens: gate-up 325.9 vs 396.1
      {64, 256, 7168, 8, true},    // down: 196.1 vs 230.9
      {8192, 256, 4096, 32, true}, // 1024 tokens: 2015.2 vs 2666.4
  };
  for (const Point &p : points)
    EXPECT(grouped_walk_alone(p.assignments, p.experts, p.n, p.tile_m, 128, 132) == p.lone_faster,
           "%lld rows over %d experts, n=%lld, tile %d: the %s walk was faster", static_cast<long long>(p.assignments),
           p.experts, static_cast<long long>(p.n), p.tile_m, p.lone_faster ? "lone" : "warp");
  // Few experts (session 28, Mixtral-8x7B, 256-channel tiles): the lone walk from fewer tiles.
  EXPECT(grouped_walk_alone(8, 8, 4096, 8, 256, 132), "Mixtral down at 4 tokens: 65.4 vs 75.5 us");
  EXPECT(grouped_walk_alone(128, 8, 4096, 16, 128, 132), "Mixtral down at 64 tokens: 172.0 vs 222.5 us");
  EXPECT(!grouped_walk_alone(-1, 256, 7168, 8, 128, 132), "an unknown count keeps the warp's walk");
  EXPECT(!grouped_walk_alone(0, 256, 7168, 8, 128, 132) && !grouped_walk_alone(100000, 0, 7168, 8, 128, 132),
         "no rows or no experts: the warp's walk");
}

// A grouped GEMM's measured points for a twin rule of humming.h: its rows over its experts, its n,
// and whether the twin (the wider tile) was the faster one.
struct TwinPoint {
  int64_t assignments;
  int32_t experts;
  int64_t n;
  bool twin_faster;
};

// Checks `rule` (grouped_tiles_wide or grouped_tiles_mid) for tiles of tile_m x tile_n on 132
// multiprocessors at each point.
template <size_t N, class Rule>
void expect_twin_rule(Rule rule, const TwinPoint (&points)[N], int tile_m, int tile_n, const char *twin) {
  for (const TwinPoint &p : points)
    EXPECT(rule(p.assignments, p.experts, p.n, tile_m, tile_n, 132) == p.twin_faster,
           "%lld rows over %d experts, n=%lld: the %s tile was faster", static_cast<long long>(p.assignments),
           p.experts, static_cast<long long>(p.n), p.twin_faster ? twin : "narrow");
}

// The wide decode tile of a grouped GEMM (humming.h, grouped_tiles_wide) on the H200 points
// measured in session 27 (132 multiprocessors, u4g128 bf16, t8x128 against t8x256 per GEMM): the
// 256-channel tile where it was faster, the 128-channel one where it was slower.
void test_grouped_wide_rule() {
  const TwinPoint points[] = {
      {8, 128, 1536, false}, // Qwen3-30B-A3B gate-up, 1 token: 17.6 vs 15.0 us
      {8, 128, 2048, false}, // down: 11.8 vs 10.6
      {64, 128, 1536, true}, // 8 tokens: gate-up 42.1 vs 49.7
      {64, 128, 2048, true}, // down: 30.0 vs 36.7
      {8, 256, 4096, true},  // DeepSeek-V3 gate-up, 1 token: 43.6 vs 58.8
      {8, 256, 7168, true},  // down: 30.3 vs 41.6
  };
  expect_twin_rule(grouped_tiles_wide, points, 8, 128, "wide");
  EXPECT(!grouped_tiles_wide(-1, 256, 7168, 8, 128, 132), "an unknown count keeps the narrow tile");
  EXPECT(!grouped_tiles_wide(8, 256, 7168, 8, 128, 0), "no multiprocessors: the narrow tile");
}

// The mid tile of a grouped GEMM (humming.h, grouped_tiles_mid) at the points measured on an H100 in
// session 61 (132 multiprocessors, W4A8 e2m1gc, t80x192 against t80x128, GEMM alone, us): the
// 192-channel tile where it was faster, the 128-channel one where it was slower.
void test_grouped_mid_rule() {
  const TwinPoint points[] = {
      {8192, 128, 1536, true},  // Qwen3-30B-A3B gate-up, 1024 tokens: 100.5 vs 113.1
      {8192, 128, 2048, true},  // down: 73.6 vs 90.1
      {8192, 128, 5760, true},  // gpt-oss-120b gate-up, 2048 tokens: 441.9 vs 496.0
      {8192, 128, 2880, true},  // down: 234.2 vs 258.2
      {16384, 256, 7168, true}, // DeepSeek-V3 down, 2048 tokens: 806.1 vs 990.4
      {512, 8, 28672, true},    // Mixtral-8x7B gate-up, 256 tokens: 201.7 vs 210.1
      {512, 8, 4096, false},    // down: 116.4 vs 92.6 (two rounds of tiles either way)
  };
  expect_twin_rule(grouped_tiles_mid, points, 80, 128, "mid");
  EXPECT(!grouped_tiles_mid(-1, 128, 1536, 80, 128, 132), "an unknown count keeps the narrow tile");
  EXPECT(!grouped_tiles_mid(8192, 128, 1536, 80, 128, 0), "no multiprocessors: the narrow tile");
}

// The K-split twin of a grouped GEMM (humming.h, grouped_split_k) at the points measured on an H100
// in session 37 (132 multiprocessors, u4g128 bf16, the 256-channel split tile t8x256x128 against the
// default choice, graph us per GEMM): split where it was faster, whole tiles where it gained nothing.
void test_grouped_split_rule() {
  struct Point {
    int64_t assignments;
    int32_t experts;
    int64_t n, k;
    bool split_faster;
  };
  const Point points[] = {
      {2, 8, 4096, 14336, true},   // Mixtral-8x7B down, 1 token: 31.6 vs 57.0 us (4 shares)
      {4, 8, 4096, 14336, false},  // 2 tokens: 44.0 vs 44.6 (a bound of 4 experts: 2 shares)
      {2, 8, 28672, 4096, false},  // gate-up, 1 token: 51.7 vs 54.9 (224 tiles: no split)
      {8, 128, 1536, 2048, false}, // Qwen3-30B-A3B gate-up, 1 token: 15.8 vs 14.4
      {8, 128, 2048, 768, false},  // down: 11.3 vs 9.9
      {4, 128, 2880, 2944, false}, // gpt-oss-120b down (K 2880 padded to 2944), 1 token: 17.9 vs 17.4
  };
  for (const Point &p : points)
    EXPECT(grouped_split_k(p.assignments, p.experts, p.n, p.k, 8, 256, 128, 132) == p.split_faster,
           "%lld rows over %d experts, %lldx%lld: the %s tiles were faster", static_cast<long long>(p.assignments),
           p.experts, static_cast<long long>(p.n), static_cast<long long>(p.k), p.split_faster ? "split" : "whole");
  EXPECT(!grouped_split_k(-1, 8, 4096, 14336, 8, 256, 128, 132), "an unknown count keeps whole tiles");
  EXPECT(!grouped_split_k(2, 8, 4096, 14336, 8, 256, 128, 0), "no multiprocessors: whole tiles");
  EXPECT(!grouped_split_k(2, 8, 4096, 3072, 8, 256, 128, 132), "K of 24 tiles: too shallow for 4 shares of 8");
}

// The expected row tiles of a Poisson count (humming.h, expected_row_tiles) where they have closed
// forms: tiles of one row hold the mean; tiles taller than any likely count are one exactly when
// the expert has a row (1 - e^-mean); and the grouped height rule's measured case: at 16 rows per
// expert, 16-row tiles run about 1.43 tiles per expert (half the experts spill), 32-row ones one.
void test_expected_row_tiles() {
  for (double mean : {0.05, 1.0, 16.0, 64.0, 250.0})
    EXPECT(std::fabs(expected_row_tiles(mean, 1) - mean) <= 1e-9 * mean, "height 1 at mean %g: %g", mean,
           expected_row_tiles(mean, 1));
  for (double mean : {0.05, 1.0, 3.0})
    EXPECT(std::fabs(expected_row_tiles(mean, 4096) - (1 - std::exp(-mean))) <= 1e-12, "a tall tile at mean %g: %g",
           mean, expected_row_tiles(mean, 4096));
  const double t16 = expected_row_tiles(16, 16), t32 = expected_row_tiles(16, 32);
  EXPECT(t16 > 1.4 && t16 < 1.5 && t32 > 0.99 && t32 < 1.001, "16 rows per expert: %g tiles of 16, %g of 32", t16, t32);
  EXPECT(expected_row_tiles(0, 8) == 0 && expected_row_tiles(-1, 8) == 0, "no rows: no tiles");
}

// The K shares of a grouped launch's tiles (scheduler/moe.h, grouped_k_shares): a block per share of
// every tile where the tiles leave multiprocessors idle, none shallower than kGroupedSplitMinKTiles,
// whole tiles where the tiles fill the GPU; and the shares cover K once, in order.
void test_grouped_k_shares() {
  // Mixtral-8x7B's down GEMM at one token: 2 rows over 8 experts in 8-row tiles, 32 channel tiles.
  const int64_t bound = expert_tiles_at_most(2, 8, 8, 32);
  EXPECT(bound == 64 && grouped_k_shares(bound, 14336 / 128, 132) == 2, "bound %lld, %lld shares",
         static_cast<long long>(bound), static_cast<long long>(grouped_k_shares(bound, 112, 132)));
  EXPECT(grouped_k_shares(10, 64, 132) == 8, "K of 64 tiles: at most 8 shares of 8");
  EXPECT(grouped_k_shares(10, 200, 132) == 13, "a share per block: 13 x 10 tiles on 132");
  EXPECT(grouped_k_shares(200, 112, 132) == 1 && grouped_k_shares(132, 112, 132) == 1, "tiles that fill the GPU");
  EXPECT(grouped_k_shares(4, 15, 132) == 1, "K too shallow to split");
  EXPECT(grouped_k_shares(0, 112, 132) == 1 && grouped_k_shares(4, 112, 0) == 1, "no tiles or no multiprocessors");
  for (int64_t shares : {1, 2, 3, 7, 8}) {
    int64_t next = 0;
    for (int64_t s = 0; s < shares; ++s) {
      int64_t kt0, kt1;
      grouped_k_share(61, s, shares, &kt0, &kt1);
      EXPECT(kt0 == next && kt1 > kt0, "share %lld of %lld starts at %lld", static_cast<long long>(s),
             static_cast<long long>(shares), static_cast<long long>(kt0));
      next = kt1;
    }
    EXPECT(next == 61, "%lld shares end at %lld, not 61", static_cast<long long>(shares), static_cast<long long>(next));
  }
}

// Tile costs cover the kernels of their class: a key without one the 16-bit activation
// (weight-only) kernels of any code width, a class its activation and code widths, a batch only
// the tiles of that batch (their names end with _b<batch>).
void test_tile_cost_classes() {
  const auto inst = [](const char *name, DType act, DType code) {
    InstanceInfo i{};
    i.name = name;
    i.backend = "sm90";
    i.scheduler = "dense";
    i.act_type = act.id();
    i.code_type = code.id();
    i.tile_m = 16, i.tile_n = 128, i.tile_k = 128;
    return i;
  };
  const InstanceInfo wo4 = inst("sm90_x_t16x128x128_w1x2x1_s8", dtypes::bf16, dtypes::uint_type(4));
  const InstanceInfo wo8 = inst("sm90_x_t16x128x128_w1x2x1_s8", dtypes::f16, dtypes::uint_type(8));
  const InstanceInfo a8w4 = inst("sm90_x_t16x128x128_w1x2x1_s8", dtypes::e4m3, dtypes::uint_type(4));
  const InstanceInfo a8w4b2 = inst("sm90_x_t16x128x128_w1x2x1_s8_b2", dtypes::e4m3, dtypes::uint_type(4));
  // Layout-4 tiles name their batch before the layout ("_b2_l4").
  const InstanceInfo a8w4b2l4 = inst("sm90_x_t16x128x128_w1x2x1_s8_b2_l4", dtypes::e4m3, dtypes::uint_type(4));
  const InstanceInfo a8w4l4 = inst("sm90_x_t16x128x128_w1x2x1_s8_l4", dtypes::e4m3, dtypes::uint_type(4));
  const InstanceInfo a8w8 = inst("sm90_x_t16x128x128_w1x2x1_s8", dtypes::e4m3, dtypes::e4m3);
  TileCost plain{16, 128, 128, {1, 0, 0, 0}};
  TileCost of_a8w4{16, 128, 128, {1, 0, 0, 0}, 8, 4, 1};
  TileCost of_a8w4b2{16, 128, 128, {1, 0, 0, 0}, 8, 4, 2};
  TileCost other_shape{16, 256, 128, {1, 0, 0, 0}};
  EXPECT(tile_cost_covers(plain, wo4) && tile_cost_covers(plain, wo8), "a plain key covers the weight-only kernels");
  EXPECT(!tile_cost_covers(plain, a8w4) && !tile_cost_covers(plain, a8w8), "but no 8-bit activation kernel");
  EXPECT(tile_cost_covers(of_a8w4, a8w4) && !tile_cost_covers(of_a8w4, a8w8) && !tile_cost_covers(of_a8w4, wo4),
         "a class covers its activation and code widths only");
  EXPECT(!tile_cost_covers(of_a8w4, a8w4b2) && tile_cost_covers(of_a8w4b2, a8w4b2) &&
             !tile_cost_covers(of_a8w4b2, a8w4),
         "a batch covers the tiles of that batch only");
  EXPECT(tile_cost_covers(of_a8w4b2, a8w4b2l4) && !tile_cost_covers(of_a8w4, a8w4b2l4) &&
             tile_cost_covers(of_a8w4, a8w4l4) && !tile_cost_covers(of_a8w4b2, a8w4l4),
         "the batch is read where later parts of the name follow it");
  EXPECT(!tile_cost_covers(other_shape, wo4), "the tile shape must match");
}

// decode / encode of f16 and bf16 (their bit-arithmetic paths) against the generic arithmetic, bit
// for bit: every code decoded; encoded, every float whose bits are a stride apart over the whole
// range, and around each one the floats next to the two types' rounding boundaries (halfway cases
// both ways, with even and odd kept parts), the overflow edges, subnormals, zeros, infinities
// and NaNs.
void test_half_conversions() {
  for (const DType t : {dtypes::bf16, dtypes::f16}) {
    const char *name = t == dtypes::bf16 ? "bf16" : "f16";
    for (uint32_t c = 0; c < 65536u; ++c) {
      const uint32_t got = float_bits(decode(t, c)), want = float_bits(decode_generic(t, c));
      EXPECT(got == want, "%s decode %04x: %08x, generic %08x", name, c, got, want);
    }
    // The dropped bits: 16 of them in bf16, 13 in a normal f16.
    const uint32_t half = t == dtypes::bf16 ? 0x8000u : 0x1000u;
    std::vector<uint32_t> probes = {0u,          0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u,
                                    0xFFC00001u, 0x7F7FFFFFu, 0x477FEFFFu, 0x477FF000u, 0x477FE000u,
                                    0x38800000u, 0x387FFFFFu, 0x33800000u, 0x33000000u, 0x33000001u,
                                    0x00000001u, 0x807FFFFFu, 0x3F7FFFFFu, 0x3F808000u, 0x3F818000u};
    for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 65521u) {
      const uint32_t base = static_cast<uint32_t>(u) & ~(2 * half - 1u);
      for (uint32_t low : {0u, 1u, half - 1u, half, half + 1u, 2 * half - 1u})
        for (uint32_t odd : {0u, 2 * half}) probes.push_back(base + low + odd);
      probes.push_back(static_cast<uint32_t>(u));
    }
    int bad = 0;
    for (const uint32_t u : probes) {
      const float v = bits_float(u);
      const uint32_t got = encode(t, v), want = encode_generic(t, v);
      if (got != want && ++bad <= 5) EXPECT(got == want, "%s encode %08x: %04x, generic %04x", name, u, got, want);
    }
    EXPECT(bad == 0, "%s encode: %d of %zu floats differ from the generic rounding", name, bad, probes.size());
  }
}

int main() {
  test_half_conversions();
  test_nibble_operands();
  test_nibble_fragments();
  test_sm90_fp4_operands();
  test_sm80_a8_fragments();
  test_stage_conversion();
  test_grouped_walk_rule();
  test_grouped_wide_rule();
  test_grouped_mid_rule();
  test_grouped_split_rule();
  test_expected_row_tiles();
  test_grouped_k_shares();
  test_stream_k_policy();
  test_persistent_plans();
  test_rows_in_step();
  test_grouped_raster();
  test_expert_tiles();
  test_stream_k_plans();
  test_format_round_trip();
  test_pack_round_trip();
  test_sm90a8_chunk_order();
  test_gemm_cpu();
  test_slow_path_note();
  test_registry();
  test_tile_cost_classes();
  std::printf("%s (%d failures)\n", failures ? "FAILED" : "OK", failures);
  return failures ? 1 : 0;
}
