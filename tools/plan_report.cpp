// How the persistent stream-K plan (include/humming/scheduler/streamk.h, plan_persistent) splits a
// launch over its blocks: for each N x K given, the plan's blocks, whole-tile waves and spread
// tiles, how many segments (pieces of a tile's K) each block owns, how many blocks contribute to
// each spread tile (a tile of two or more takes a fix-up of partials), and the K tiles per block.
// Host only; it runs the same header the kernels and the registry's tile costs run, so it cannot
// drift from them. Session 48: at decode, a launch whose blocks' shares cross tiles (two segments
// a block, fix-ups on most tiles) is a suspect for the W4A8 GEMM's time beyond its copies' floor.
//   g++ -std=c++17 -O2 -I include tools/plan_report.cpp -o /tmp/plan_report
//   /tmp/plan_report [--bm 8] [--bn 256] [--bk 128] [--m 1] [--sms 132] [--heavy | --half | --w8] NxK [NxK ...]
// (--bm / --bn / --bk: the tile; --heavy: HeavySpread::kWide, which the weight-only kernels
// pass; --half: HeavySpread::kHalf, which the W4A8 kernels pass; --w8: MidSpread::kDeep, which the
// W8A8 ones pass; none: the integer-activation kernels with 4-bit codes.
// HUMMING_STREAM_K and HUMMING_MIN_SLICE_K in the environment act as they do in the library.)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "humming/scheduler/streamk.h"

namespace {

// "count x value" pairs of a histogram, in value order.
void print_histogram(const char *what, const std::map<int64_t, int64_t> &h) {
  std::printf("  %s:", what);
  for (const auto &kv : h)
    std::printf(" %lld x %lld", static_cast<long long>(kv.second), static_cast<long long>(kv.first));
  std::printf("\n");
}

} // namespace

int main(int argc, char **argv) {
  int64_t bm = 8, bn = 256, bk = 128, m = 1;
  int sms = 132;
  humming::HeavySpread heavy = humming::HeavySpread::kNone;
  humming::MidSpread mid = humming::MidSpread::kShallow;
  int first_shape = argc;
  for (int i = 1; i < argc; ++i) {
    const auto value = [&](const char *flag) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", flag);
        std::exit(2);
      }
      return std::atoll(argv[++i]);
    };
    if (!std::strcmp(argv[i], "--bm"))
      bm = value("--bm");
    else if (!std::strcmp(argv[i], "--bn"))
      bn = value("--bn");
    else if (!std::strcmp(argv[i], "--bk"))
      bk = value("--bk");
    else if (!std::strcmp(argv[i], "--m"))
      m = value("--m");
    else if (!std::strcmp(argv[i], "--sms"))
      sms = static_cast<int>(value("--sms"));
    else if (!std::strcmp(argv[i], "--heavy"))
      heavy = humming::HeavySpread::kWide;
    else if (!std::strcmp(argv[i], "--half"))
      heavy = humming::HeavySpread::kHalf;
    else if (!std::strcmp(argv[i], "--w8"))
      mid = humming::MidSpread::kDeep;
    else {
      first_shape = i;
      break;
    }
  }
  if (first_shape >= argc || bm <= 0 || bn <= 0 || bk <= 0 || m <= 0 || sms <= 0) {
    std::fprintf(
        stderr,
        "usage: %s [--bm 8] [--bn 256] [--bk 128] [--m 1] [--sms 132] [--heavy | --half | --w8] NxK [NxK ...]\n",
        argv[0]);
    return 2;
  }
  for (int i = first_shape; i < argc; ++i) {
    long long n = 0, k = 0;
    if (std::sscanf(argv[i], "%lldx%lld", &n, &k) != 2 || n <= 0 || k <= 0) {
      std::fprintf(stderr, "not an NxK shape: %s\n", argv[i]);
      return 2;
    }
    const int64_t m_tiles = (m + bm - 1) / bm, n_tiles = (n + bn - 1) / bn, k_tiles = (k + bk - 1) / bk;
    const humming::StreamKPlan p =
        humming::plan_persistent(m_tiles * n_tiles, k_tiles, bk, sms, bm, m_tiles, heavy, mid);
    std::printf("%lld x %lld, m = %lld, tile %lld x %lld x %lld: %lld tiles of %lld K tiles; %lld blocks, %lld whole "
                "waves, %lld spread tiles\n",
                n, k, static_cast<long long>(m), static_cast<long long>(bm), static_cast<long long>(bn),
                static_cast<long long>(bk), static_cast<long long>(p.tiles), static_cast<long long>(p.k_tiles),
                static_cast<long long>(p.blocks), static_cast<long long>(p.dp_waves),
                static_cast<long long>(p.sk_tiles));
    std::map<int64_t, int64_t> segments, contributors, depth;
    std::map<int64_t, int64_t> per_tile; // spread tile -> blocks contributing
    for (int64_t b = 0; b < p.blocks; ++b) {
      humming::Segment seg[humming::kMaxSegments];
      const int count = humming::block_segments(p, b, seg);
      int64_t kts = 0;
      for (int s = 0; s < count; ++s) {
        kts += seg[s].kt_end - seg[s].kt_begin;
        if (seg[s].tile >= p.dp_tiles()) ++per_tile[seg[s].tile];
      }
      ++segments[count];
      ++depth[kts];
    }
    for (const auto &kv : per_tile) ++contributors[kv.second];
    print_histogram("segments a block (blocks x segments)", segments);
    print_histogram("K tiles a block (blocks x K tiles)", depth);
    if (!per_tile.empty()) print_histogram("blocks a spread tile (tiles x blocks)", contributors);
    if (p.step_rows != 0)
      std::printf("  rows of tiles in step: %lld (row-major, %lld blocks a row)\n", static_cast<long long>(p.step_rows),
                  static_cast<long long>(p.blocks / p.step_rows));
  }
  return 0;
}
