// The CPU reference of mixture-of-experts routing (humming.h): plain loops in the order the
// definitions give, with the arithmetic of scheduler/moe_route.h.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "humming/humming.h"
#include "humming/scheduler/moe_route.h"

namespace humming {

Status moe_topk_check_groups(const MoeTopk &a) {
  if (a.n_group < 0 || (a.n_group > 0 && (a.experts % a.n_group != 0 || a.topk_group < 1 || a.topk_group > a.n_group)))
    return Status::Error("group-limited routing needs n_group dividing the " + std::to_string(a.experts) +
                         " experts and topk_group in [1, n_group], got n_group=" + std::to_string(a.n_group) +
                         ", topk_group=" + std::to_string(a.topk_group));
  return Status::Ok();
}

Status moe_topk_cpu(const MoeTopk &a) {
  if (a.top_k < 1 || a.top_k > a.experts)
    return Status::Error("top_k must lie in [1, experts=" + std::to_string(a.experts) + "], got " +
                         std::to_string(a.top_k));
  std::vector<float> logit(static_cast<size_t>(a.experts)), sc(logit.size()), rank(logit.size());
  std::vector<int32_t> order(logit.size());
  if (Status st = moe_topk_check_groups(a); !st) return st;
  const size_t groups = static_cast<size_t>(a.n_group > 0 ? a.n_group : 0);
  std::vector<float> group_value(groups);
  std::vector<int32_t> group_order(groups);
  std::vector<char> allowed(groups);
  for (int64_t t = 0; t < a.tokens; ++t) {
    const void *row = static_cast<const char *>(a.logits) + t * a.ld * a.logits_type.storage_bytes();
    float row_max = -INFINITY, sum = 0.0f;
    for (int32_t e = 0; e < a.experts; ++e) logit[e] = load_element(a.logits_type, row, e);
    for (int32_t e = 0; e < a.experts; ++e) row_max = std::max(row_max, logit[e]);
    for (int32_t e = 0; e < a.experts; ++e) {
      sc[e] = moe_route::score(logit[e], row_max, a.sigmoid);
      sum += sc[e];
    }
    if (!a.sigmoid)
      for (int32_t e = 0; e < a.experts; ++e) sc[e] /= sum;
    if (a.n_group > 0) {
      // Group-limited: each group's two best choice values, the topk_group best groups by their
      // sum (ties to the lower group), the other groups' experts at 0.
      const int32_t size = a.experts / a.n_group;
      for (int32_t e = 0; e < a.experts; ++e) rank[e] = moe_route::group_choice(sc[e], a.bias, e);
      for (int32_t g = 0; g < a.n_group; ++g) {
        float best = -INFINITY, second = -INFINITY;
        for (int32_t e = g * size; e < (g + 1) * size; ++e) {
          second = std::max(second, std::min(best, rank[e]));
          best = std::max(best, rank[e]);
        }
        group_value[g] = moe_route::group_rank(best, second, size);
        group_order[g] = g;
      }
      std::partial_sort(
          group_order.begin(), group_order.begin() + a.topk_group, group_order.end(),
          [&](int32_t x, int32_t y) { return moe_route::ranks_before(group_value[x], x, group_value[y], y); });
      std::fill(allowed.begin(), allowed.end(), 0);
      for (int32_t j = 0; j < a.topk_group; ++j) allowed[group_order[j]] = 1;
      for (int32_t e = 0; e < a.experts; ++e) rank[e] = moe_route::group_masked(rank[e], allowed[e / size] != 0);
    } else {
      for (int32_t e = 0; e < a.experts; ++e) rank[e] = moe_route::rank_value(logit[e], sc[e], a.bias, e);
    }
    for (int32_t e = 0; e < a.experts; ++e) order[e] = e;
    std::partial_sort(order.begin(), order.begin() + a.top_k, order.end(),
                      [&](int32_t x, int32_t y) { return moe_route::ranks_before(rank[x], x, rank[y], y); });
    float chosen = 0.0f;
    for (int32_t j = 0; j < a.top_k; ++j) chosen += sc[order[j]];
    const float denom = a.renormalize ? std::max(chosen, 1.17549435e-38f) : 1.0f;
    for (int32_t j = 0; j < a.top_k; ++j) {
      a.ids[t * a.top_k + j] = order[j];
      a.weights[t * a.top_k + j] = moe_route::routed_weight(sc[order[j]], denom, a.scaling);
    }
  }
  return Status::Ok();
}

size_t moe_align_workspace_bytes(int64_t assignments, int32_t experts) {
  // Per chunk of kAlignChunk assignments (src/moe_route.cu) a count per expert, then the experts'
  // running totals.
  constexpr int64_t kAlignChunk = 1024;
  const int64_t chunks = (assignments + kAlignChunk - 1) / kAlignChunk;
  return static_cast<size_t>((chunks + 1) * experts) * sizeof(int32_t);
}

Status moe_align_cpu(const MoeAlign &a) {
  if (a.experts < 1 || a.block_m < 1)
    return Status::Error("moe_align needs at least one expert and a block of at least one row");
  const int64_t capacity = moe_route::align_capacity(a.assignments, a.experts, a.block_m);
  const auto expert_of = [&](int64_t i) { return std::min(std::max(a.ids[i], 0), a.experts - 1); };
  std::fill(a.counts, a.counts + a.experts, 0);
  for (int64_t i = 0; i < a.assignments; ++i) ++a.counts[expert_of(i)];
  a.offsets[0] = 0;
  for (int32_t e = 0; e < a.experts; ++e)
    a.offsets[e + 1] = a.offsets[e] + static_cast<int32_t>(moe_route::padded_rows(a.counts[e], a.block_m));
  a.num_padded[0] = a.offsets[a.experts];
  std::fill(a.sorted_ids, a.sorted_ids + capacity, static_cast<int32_t>(a.assignments));
  std::vector<int32_t> next(a.offsets, a.offsets + a.experts);
  for (int64_t i = 0; i < a.assignments; ++i) {
    const int32_t row = next[expert_of(i)]++;
    a.sorted_ids[row] = static_cast<int32_t>(i);
    a.positions[i] = row;
  }
  for (int64_t b = 0; b < capacity / a.block_m; ++b) {
    const int64_t first = b * a.block_m;
    // The expert whose padded rows hold the block's first row (none past the rows in use).
    a.block_expert[b] =
        first < a.offsets[a.experts]
            ? static_cast<int32_t>(std::upper_bound(a.offsets + 1, a.offsets + a.experts + 1, first) - (a.offsets + 1))
            : -1;
  }
  return Status::Ok();
}

Status moe_permute_cpu(DType type, const void *x, int64_t hidden, int64_t ldx, const int32_t *sorted_ids,
                       int64_t capacity, int64_t assignments, int32_t top_k, void *out) {
  const int64_t bytes = type.storage_bytes();
  for (int64_t r = 0; r < capacity; ++r) {
    char *dst = static_cast<char *>(out) + r * hidden * bytes;
    const int64_t a = sorted_ids[r];
    if (a < 0 || a >= assignments)
      std::fill(dst, dst + hidden * bytes, 0);
    else
      std::copy_n(static_cast<const char *>(x) + (a / top_k) * ldx * bytes, hidden * bytes, dst);
  }
  return Status::Ok();
}

Status moe_combine_cpu(DType type, const void *y, int64_t rows, int64_t hidden, const int32_t *positions,
                       const float *weights, int64_t tokens, int32_t top_k, void *out, const float *bias,
                       const int32_t *ids, int32_t experts) {
  for (int64_t i = 0; i < tokens * top_k; ++i) {
    if (positions[i] < 0 || positions[i] >= rows)
      return Status::Error("position " + std::to_string(i) + " is " + std::to_string(positions[i]) +
                           "; the expert outputs have " + std::to_string(rows) + " rows");
    if (bias != nullptr && (ids[i] < 0 || ids[i] >= experts))
      return Status::Error("expert id " + std::to_string(i) + " is " + std::to_string(ids[i]) + "; the bias has " +
                           std::to_string(experts) + " experts");
  }
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < hidden; ++h) {
      float sum = 0.0f;
      for (int32_t j = 0; j < top_k; ++j) {
        // One rounding per add and per product, as the GPU (no contraction into an fma).
        volatile float v = load_element(type, y, positions[t * top_k + j] * hidden + h);
        if (bias != nullptr) v = v + bias[ids[t * top_k + j] * hidden + h];
        const volatile float product = weights[t * top_k + j] * v;
        sum = j == 0 ? product : sum + product;
      }
      store_element(type, out, t * hidden + h, sum);
    }
  return Status::Ok();
}

Status moe_activation_cpu(const MoeActivation &a) {
  if (a.experts < 1) return Status::Error("moe_activation needs at least one expert");
  for (int64_t r = 0; r < a.rows; ++r) {
    const int32_t e = a.offsets != nullptr ? moe_route::expert_of_row(a.offsets, a.experts, r) : 0;
    const float *bias = a.bias != nullptr ? a.bias + e * 2 * a.inter : nullptr;
    for (int64_t c = 0; c < a.inter; ++c) {
      float gate = load_element(a.h_type, a.h, r * a.ldh + c),
            up = load_element(a.h_type, a.h, r * a.ldh + a.inter + c);
      if (bias != nullptr) gate += bias[c], up += bias[a.inter + c];
      store_element(a.out_type, a.out, r * a.inter + c, moe_route::activate(gate, up, a.kind, a.limit, a.alpha));
    }
  }
  return Status::Ok();
}

} // namespace humming
