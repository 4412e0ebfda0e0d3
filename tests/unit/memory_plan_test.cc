// The memory planner on hand-made allocation traces (offsets worked out by hand, and on random
// traces the one property that matters: tensors alive at once never share bytes), and the arena
// allocator catching runs that stray from their plan.
#include "runtime/memory_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "runtime/arena.h"

namespace kiln::runtime {
namespace {

// Births and deaths on one clock; the last one outlives the run.
std::vector<AllocationRecord> hand_trace() {
  return {
      {256, 0, 4},  // k0
      {100, 1, 2},  // k1: 128 once rounded
      {128, 3, 6},  // k2: alive with k0 and k3, not with k1
      {256, 5, 7},  // k3: born after k0 died
      {64, 8, -1},  // k4: an output
  };
}

TEST(MemoryPlan, GreedyBySizeOnAHandTrace) {
  const MemoryPlan p = plan_memory(hand_trace());
  // Largest first: k0 at 0; k3 after k0 died, also at 0; k1 beside k0 at 256; k2 beside k0 and k3,
  // in k1's bytes (k1 died before k2 was born).
  EXPECT_EQ(p.offsets, (std::vector<int64_t>{0, 256, 256, 0, -1}));
  EXPECT_EQ(p.bytes, (std::vector<int64_t>{256, 128, 128, 256, 64}));
  EXPECT_EQ(p.summary.arena_bytes, 384);
  EXPECT_EQ(p.summary.peak_live_bytes, 384);
  EXPECT_EQ(p.summary.total_bytes, 256 + 128 + 128 + 256);
  EXPECT_EQ(p.summary.allocations, 5);
  EXPECT_EQ(p.summary.heap_bytes, 64);
  EXPECT_EQ(p.summary.heap_allocations, 1);
  // Who must be released before whom.
  EXPECT_EQ(p.overlapped_begin, (std::vector<int32_t>{0, 0, 0, 1, 2, 2}));
  EXPECT_EQ(p.overlapped, (std::vector<int32_t>{1, 0}));
}

TEST(MemoryPlan, BestFitTakesTheSmallestGap) {
  // k0, k2 and k5 live throughout; k1 and k3 die early, leaving gaps of 512 and 192 bytes between
  // them; k4 (128 bytes, placed last) goes into the 192-byte gap, not the first gap that fits.
  const std::vector<AllocationRecord> t = {
      {1024, 0, 20}, {512, 1, 5}, {256, 2, 20}, {192, 3, 6}, {128, 10, 12}, {192, 4, 20},
  };
  const MemoryPlan p = plan_memory(t);
  EXPECT_EQ(p.offsets, (std::vector<int64_t>{0, 1024, 1536, 1792, 1792, 1984}));
  EXPECT_EQ(p.summary.arena_bytes, 2176);
}

TEST(MemoryPlan, RandomTracesNeverShareLiveBytes) {
  std::mt19937 rng(3);
  for (int round = 0; round < 50; ++round) {
    std::vector<AllocationRecord> t;
    int64_t clock = 0;
    std::vector<size_t> live;
    for (int i = 0; i < 60; ++i) {
      t.push_back({std::uniform_int_distribution<int64_t>(1, 5000)(rng), clock++, -1});
      live.push_back(t.size() - 1);
      while (!live.empty() && rng() % 2) {
        const size_t pick = rng() % live.size();
        t[live[pick]].death = clock++;
        live.erase(live.begin() + pick);
      }
    }
    for (size_t k : live)
      if (rng() % 4) t[k].death = clock++;  // the rest outlive the run
    const MemoryPlan p = plan_memory(t);
    int64_t total = 0;
    for (size_t a = 0; a < t.size(); ++a) {
      if (t[a].death < 0) {
        EXPECT_EQ(p.offsets[a], -1);
        continue;
      }
      total += p.bytes[a];
      EXPECT_GE(p.bytes[a], t[a].bytes);
      EXPECT_LE(p.offsets[a] + p.bytes[a], p.summary.arena_bytes);
      for (size_t b = a + 1; b < t.size(); ++b) {
        if (t[b].death < 0) continue;
        const bool together = t[a].birth < t[b].death && t[b].birth < t[a].death;
        const bool share =
            p.offsets[a] < p.offsets[b] + p.bytes[b] && p.offsets[b] < p.offsets[a] + p.bytes[a];
        ASSERT_FALSE(together && share) << "round " << round << ": " << a << " and " << b;
        // Sharing bytes is exactly what the overlapped lists tell the arena to check.
        const auto* begin = p.overlapped.data() + p.overlapped_begin[b];
        const auto* end = p.overlapped.data() + p.overlapped_begin[b + 1];
        EXPECT_EQ(share, std::find(begin, end, static_cast<int32_t>(a)) != end);
      }
    }
    EXPECT_EQ(p.summary.total_bytes, total);
    EXPECT_LE(p.summary.peak_live_bytes, p.summary.arena_bytes);
    EXPECT_LE(p.summary.arena_bytes, std::max<int64_t>(total, 0));
  }
}

TEST(ArenaAllocator, ServesThePlanAndRefusesWhatStrays) {
  const MemoryPlan p = plan_memory(hand_trace());
  ArenaBuffer* buffer = ArenaBuffer::create(p.summary.arena_bytes, p.offsets.size());
  ASSERT_NE(buffer, nullptr);
  ArenaAllocator arena;
  arena.start(&p, buffer);
  std::shared_ptr<void> k0 = arena.allocate(256);
  std::shared_ptr<void> k1 = arena.allocate(128);
  ASSERT_TRUE(k0 && k1);
  EXPECT_TRUE(buffer->contains(k0.get()));
  EXPECT_EQ(static_cast<char*>(k1.get()) - static_cast<char*>(k0.get()), 256);
  EXPECT_EQ(buffer->references(), 3);
  // k1 should have been released by now: k2 would share its bytes, so k2 goes to the heap.
  EXPECT_FALSE(arena.allocate(128));
  EXPECT_EQ(arena.strays(), 1);
  k1.reset();
  k0.reset();
  // A size the plan did not record goes to the heap too.
  EXPECT_FALSE(arena.allocate(64));
  EXPECT_EQ(arena.strays(), 2);
  // The output's allocation comes from the heap by plan, which is no stray.
  std::shared_ptr<void> k4 = arena.allocate(64);
  EXPECT_FALSE(k4);
  EXPECT_EQ(arena.strays(), 2);
  // Past the end of the plan: heap.
  EXPECT_FALSE(arena.allocate(64));
  EXPECT_EQ(arena.strays(), 3);

  // A tensor kept after the runtime lets go of the buffer keeps it (and its bytes) alive.
  arena.start(&p, buffer);
  std::shared_ptr<void> kept = arena.allocate(256);
  ASSERT_TRUE(kept);
  static_cast<char*>(kept.get())[255] = 7;
  EXPECT_EQ(buffer->references(), 2);
  buffer->release();
  EXPECT_EQ(static_cast<char*>(kept.get())[255], 7);
  kept.reset();  // frees the buffer (AddressSanitizer checks that nothing leaks or is read after)
}

}  // namespace
}  // namespace kiln::runtime
