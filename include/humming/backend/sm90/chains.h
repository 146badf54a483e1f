// Independent WGMMA accumulation chains for the sm90 weight-only kernel (kernel/sm90_dense.cuh):
// which chain each K step of a stage adds into, and where a chain's sum starts afresh.
//
// A WGMMA that adds into the sums of the one before waits for it. With the few tokens of a decode
// tile (N = 8 or 16) each WGMMA is short, and that wait may set the pace: the timeline probe
// (backend/sm90/probe.h; H100, t8x256, m = 1) saw the consumers take 0.86 us a stage of eight K
// steps in one chain while the producer waited on a full ring. K step s of a stage goes into chain
// s % chains; the chains' sums are added together once the stage has retired (with group sums), or
// at the end of the segment (without).
//
// With group sums (the kernel's kSumScales: each scale group of a stage summed apart, then scaled),
// every chain must start afresh in every group, so a group of g K steps takes at most g chains.
#pragma once

#include "humming/humming.h"

namespace humming {
namespace sm90 {

// The chains a tile takes: `wanted`, at most `group_steps` (the K steps of one scale group inside
// a stage) with group sums, and at most as many as keep the extra chains' sums within `spare`
// registers per thread (`sets` scale groups a stage with group sums, `acc` sums per chain and
// group; the first chain's are the tile's own).
HUMMING_HD constexpr int accumulation_chains(int wanted, bool group_sums, int group_steps, int sets, int acc,
                                             int spare) {
  int c = wanted < 1 ? 1 : wanted;
  if (group_sums && c > group_steps) c = group_steps;
  while (c > 1 && (c - 1) * (group_sums ? sets : 1) * acc > spare) --c;
  return c;
}

// The chain of K step `step` of a stage.
HUMMING_HD constexpr int chain_of_step(int step, int chains) { return step % chains; }

// With group sums: whether K step `step` starts its chain's sum of its group afresh (its chain's
// first step in the group; groups of `group_steps` K steps tile the stage).
HUMMING_HD constexpr bool chain_starts(int step, int chains, int group_steps) { return step % group_steps < chains; }

} // namespace sm90
} // namespace humming
