// The arithmetic of mixture-of-experts routing that the CPU reference (src/moe_route_cpu.cpp) and
// the GPU kernels (src/moe_route.cu) share, so that both choose the same experts and place the
// same rows: scores, the order of choices, block padding and the combine's summation order; and
// the experts' activation between their two GEMMs.
#pragma once

#include <cmath>
#include <cstdint>

#include "humming/format/dtype.h"

namespace humming {
namespace moe_route {

// A router score: softmax numerator exp(logit - row max) (divided by the row's sum later), or
// sigmoid(logit). fp32, as the torch references compute them.
HUMMING_HD float score(float logit, float row_max, bool sigmoid) {
  return sigmoid ? 1.0f / (1.0f + expf(-logit)) : expf(logit - row_max);
}

// The value experts are ranked by. Without a correction bias: the logit itself, which orders
// softmax and sigmoid scores alike (both rise with it) without their rounding, so that the CPU and
// the GPU, whose expf differ in the last bit, never rank two experts differently. With one (the
// scores then matter, as DeepSeek-V3 adds the bias to sigmoid scores): the score plus the bias.
HUMMING_HD float rank_value(float logit, float score_value, const float *bias, int32_t e) {
  return bias == nullptr ? logit : score_value + bias[e];
}

// The value an expert is chosen by under group-limited routing (MoeTopk::n_group > 0), as DeepSeek-V3
// computes it: its score plus its bias (the score alone without one), and 0 where its group is not
// among the chosen ones (`allowed`). Groups are ranked by the sum of their two best unmasked
// values (group_rank).
HUMMING_HD float group_choice(float score_value, const float *bias, int32_t e) {
  return bias == nullptr ? score_value : score_value + bias[e];
}
HUMMING_HD float group_masked(float choice, bool allowed) { return allowed ? choice : 0.0f; }
// A group's rank from its best and second best choice values (a group of one expert: its value).
HUMMING_HD float group_rank(float best, float second, int32_t group_size) {
  return group_size >= 2 ? best + second : best;
}

// A chosen expert's weight: its score over the chosen scores' sum (denom, 1 without
// renormalization), then times the routing's scaling, rounded after each step as torch does.
HUMMING_HD float routed_weight(float score_value, float denom, float scaling) {
  const float w = score_value / denom;
  return scaling == 1.0f ? w : w * scaling;
}

// Whether expert a (rank value va) ranks before expert b (vb): the higher value, then the lower id.
HUMMING_HD bool ranks_before(float va, int32_t a, float vb, int32_t b) { return va > vb || (va == vb && a < b); }

// Rows an expert's assignments take once padded to whole blocks of block_m.
HUMMING_HD int64_t padded_rows(int64_t count, int32_t block_m) { return (count + block_m - 1) / block_m * block_m; }

// The most rows any routing of `assignments` over `experts` can take (every expert's partial
// block full of padding), rounded up to a block: the alignment's fixed extent.
HUMMING_HD int64_t align_capacity(int64_t assignments, int32_t experts, int32_t block_m) {
  return padded_rows(assignments + static_cast<int64_t>(experts) * (block_m - 1), block_m);
}

// The experts' activations between their GEMMs (MoeActivation::kind).
enum MoeActivationKind : int32_t {
  kActSilu = 0,      // silu(gate) x up (Mixtral, Qwen-MoE, DeepSeek)
  kActSwigluOai = 1, // gpt-oss: gate clamped to at most limit, up to [-limit, limit], then
                     // gate x sigmoid(alpha x gate) x (up + 1)
};

// One output of the activation from its gate and up values (fp32, biases added), in the order of
// the torch reference's operations: silu(g) = g / (1 + exp(-g)), sigmoid(x) = 1 / (1 + exp(-x)).
HUMMING_HD float activate(float gate, float up, int32_t kind, float limit, float alpha) {
  if (kind == kActSilu) return gate / (1.0f + expf(-gate)) * up;
  const float g = fminf(gate, limit);
  const float u = fminf(fmaxf(up, -limit), limit);
  return g * (1.0f / (1.0f + expf(-(alpha * g)))) * (u + 1.0f);
}

// The expert of row r of the expert-sorted layout with `experts` experts from their first rows
// offsets [experts + 1] (rising): the last e with offsets[e] <= r, at most experts - 1 (rows past
// the last expert's, the layout's padding, count as the last expert's).
HUMMING_HD int32_t expert_of_row(const int32_t *offsets, int32_t experts, int64_t r) {
  int32_t lo = 0, hi = experts - 1; // the answer lies in [lo, hi]
  while (lo < hi) {
    const int32_t mid = (lo + hi + 1) / 2;
    if (offsets[mid] <= r)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

} // namespace moe_route
} // namespace humming
