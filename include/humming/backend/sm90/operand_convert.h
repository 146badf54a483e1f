// 4-bit weight codes in shared memory -> the 8-bit operand box the FP8 / integer WGMMAs read through
// a descriptor (the sm90 8-bit activation kernel's W4A8 path).
//
// The codes of a stage land by TMA unswizzled, one 64-byte row (128 codes of the generic layout)
// per channel; the operands are 128-byte rows (128 e4m3 or s8 bytes) in the 128-byte swizzle:
// 16-byte unit u of row r sits at unit u ^ (r % 8) (rows relative to a 1024-byte aligned box).
#pragma once

#include <cstdint>

#include "humming/numeric/nibble_lut.h"

namespace humming {
namespace sm90 {

// One warpgroup (thread t of 128) writes rows [row0, row0 + 64) of the operand box `operands` from
// the same rows of `codes`, by `table` (numeric/nibble_lut.h). Thread t converts two 16-byte units of
// codes (32 inputs of one row each) into four of operands; a quarter warp's stores cover two whole
// rows, so they do not conflict. Both units are loaded before anything is stored (the compiler may
// not move a shared load past a shared store), so their conversions interleave: with two consumer
// warps per scheduler the conversion is latency-bound (ncu, session 10: 0.5 instructions issued
// per cycle). The caller makes the stores visible to the WGMMAs (fence_proxy_async, then a barrier
// of the warpgroup).
__device__ __forceinline__ void nibble_rows_to_operands(const char *codes, char *operands, int row0, int t,
                                                        const numeric::NibbleTable &table) {
  uint4 q[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int unit = t + 128 * i, row = row0 + unit / 4;
    q[i] = *reinterpret_cast<const uint4 *>(codes + row * 64 + 16 * (unit % 4));
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int unit = t + 128 * i, row = row0 + unit / 4, j = unit % 4;
    char *dst = operands + row * 128;
    // Half the unit's codes (16 inputs, two words) at a time: few live registers, which the
    // three-consumer tiles do not have to spare.
    uint4 o;
    numeric::nibbles_to_bytes(q[i].x, table, o.x, o.y);
    numeric::nibbles_to_bytes(q[i].y, table, o.z, o.w);
    *reinterpret_cast<uint4 *>(dst + (((2 * j) ^ (row % 8)) << 4)) = o;
    numeric::nibbles_to_bytes(q[i].z, table, o.x, o.y);
    numeric::nibbles_to_bytes(q[i].w, table, o.z, o.w);
    *reinterpret_cast<uint4 *>(dst + (((2 * j + 1) ^ (row % 8)) << 4)) = o;
  }
}

} // namespace sm90
} // namespace humming
