// A per-block timeline of the sm90 kernels (weight-only and 8-bit activations), for diagnosis
// builds only. With
// HUMMING_PROBE defined (scripts/probe_sm90.sh builds the package so), one producer thread and one
// consumer thread of every block read the global timer at the points below and print one line
// each when they are done; scripts/probe_sm90.py turns the lines into a timeline. Without it, every
// member is empty and inlines to nothing, so release builds carry no trace of it. Every member is
// static (the record lives in shared memory), so a kernel calls them where it waits, as Probe::ring.
//
// Why: a decode launch (m = 1) of 8192 x 8192 took 19.6 us for 33.5 MB of weights, and 28672 x
// 8192 42.5 us for 121 MB (H200, graph time): a straight line through the two gives about 3.8 TB/s
// and 11 us that do not depend on the bytes. Whether those 11 us are the ring's first fill, the
// consumers' pace, the fix-up of split tiles or the blocks' start spread is what this shows.
#pragma once

#include <cstdint>
#ifdef HUMMING_PROBE
#include <cstdio>
#endif

namespace humming {
namespace sm90 {

#ifdef HUMMING_PROBE
struct Probe {
  // The one thread per role that records: the producer's first thread (slot 0) and the consumers'
  // first (slot 1); the others skip every read of the timer. The record lives in shared memory and
  // the slot is read from threadIdx each time, so that the consumers keep the registers a release
  // build has (a register held for the slot made ptxas spill at 96).
  static __device__ __forceinline__ int slot() { return threadIdx.x == 0 ? 0 : threadIdx.x == 128 ? 1 : -1; }
  // Marks (global timer, ns): the role's start, the start of its first segment (its share of the
  // work found), its first stage (data for the consumers, a free slot for the producer), the end
  // of its last segment's main loop, the end of its last fix-up.
  // Then the nanoseconds it spent waiting on the ring (consumers on "full", the producer on
  // "empty"), the stages that passed and the segments.
  enum Field { kStart, kSegment, kFirst, kLoopEnd, kFixEnd, kRingWait, kStages, kSegments, kFields };

  static __device__ __forceinline__ uint64_t *record(int slot) {
    __shared__ uint64_t records[2][kFields];
    return records[slot];
  }
  static __device__ __forceinline__ uint64_t now() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
  }
  static __device__ __forceinline__ void begin() {
    if (slot() < 0) return;
    uint64_t *r = record(slot());
    for (int i = 0; i < kFields; ++i) r[i] = 0;
    r[kStart] = now();
  }
  // A wait on the ring: its time, and the first that returns marks the first stage.
  template <class F> static __device__ __forceinline__ void ring(F wait) {
    if (slot() < 0) return wait();
    const uint64_t t0 = now();
    wait();
    const uint64_t t1 = now();
    uint64_t *r = record(slot());
    r[kRingWait] += t1 - t0;
    if (r[kFirst] == 0) r[kFirst] = t1;
    ++r[kStages];
  }
  static __device__ __forceinline__ void segment_begin() {
    if (slot() >= 0 && record(slot())[kSegment] == 0) record(slot())[kSegment] = now();
  }
  static __device__ __forceinline__ void segment_done() {
    if (slot() < 0) return;
    record(slot())[kLoopEnd] = now();
    ++record(slot())[kSegments];
  }
  static __device__ __forceinline__ void fixup_done() {
    if (slot() >= 0) record(slot())[kFixEnd] = now();
  }
  // One line: role, block, multiprocessor, the five marks, the end (now), the ring wait, stages and
  // segments.
  static __device__ __forceinline__ void report(char role) {
    if (slot() < 0) return;
    const uint64_t *r = record(slot());
    uint32_t sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    printf("HPROBE %c %d %u %llu %llu %llu %llu %llu %llu %llu %llu %llu\n", role, static_cast<int>(blockIdx.x), sm,
           static_cast<unsigned long long>(r[kStart]), static_cast<unsigned long long>(r[kSegment]),
           static_cast<unsigned long long>(r[kFirst]), static_cast<unsigned long long>(r[kLoopEnd]),
           static_cast<unsigned long long>(r[kFixEnd]), static_cast<unsigned long long>(now()),
           static_cast<unsigned long long>(r[kRingWait]), static_cast<unsigned long long>(r[kStages]),
           static_cast<unsigned long long>(r[kSegments]));
  }
};
#else
struct Probe {
  static __device__ __forceinline__ void begin() {}
  static __device__ __forceinline__ void segment_begin() {}
  template <class F> static __device__ __forceinline__ void ring(F wait) { wait(); }
  static __device__ __forceinline__ void segment_done() {}
  static __device__ __forceinline__ void fixup_done() {}
  static __device__ __forceinline__ void report(char) {}
};
#endif

} // namespace sm90
} // namespace humming
