// The fallback of the selection paths for lists longer than a worker's keys (capped_keys.hpp):
// the radix select against std::nth_element, and the chunked walk against one std::sort.
#include "cpu/capped_keys.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace {
using lastmile::detail::cpu_selection::for_each_ascending;
using lastmile::detail::cpu_selection::kNoKey;
using lastmile::detail::cpu_selection::nth_smallest_key;

// Keys over few values (many duplicates), over every bit (the top bytes decide), or 32-bit.
std::vector<uint64_t> random_keys(std::mt19937_64& rng, size_t n, int kind) {
  std::vector<uint64_t> keys(n);
  for (uint64_t& k : keys) k = kind == 0 ? rng() % 5 : kind == 1 ? rng() >> 1 : rng() >> 32;
  return keys;
}

TEST(CappedKeys, NthSmallestKeyIsNthElementsAboveAnyFloorSkippingNoKeys) {
  std::mt19937_64 rng(41);
  for (int trial = 0; trial < 300; ++trial) {
    const size_t n = 1 + rng() % 3000;
    std::vector<uint64_t> keys = random_keys(rng, n, trial % 3);
    for (size_t i = 0; i < n / 10; ++i) keys[rng() % n] = kNoKey;
    const bool above_floor = trial % 2 == 1;
    const uint64_t floor = above_floor ? keys[rng() % n] : 0;
    std::vector<uint64_t> kept;
    for (uint64_t k : keys)
      if (k != kNoKey && (!above_floor || k > floor)) kept.push_back(k);
    if (kept.empty()) continue;
    const size_t m = 1 + rng() % kept.size();
    std::nth_element(kept.begin(), kept.begin() + static_cast<ptrdiff_t>(m - 1), kept.end());
    const int from_shift = trial % 3 == 2 ? 24 : 56;  // 32-bit keys need only their low bytes
    EXPECT_EQ(nth_smallest_key(
                  n, [&](size_t i) { return keys[i]; }, above_floor, floor, m, from_shift),
              kept[m - 1])
        << "trial " << trial << " n " << n << " m " << m;
  }
}

TEST(CappedKeys, ForEachAscendingVisitsEveryKeyInOrderInChunksOfTheRoom) {
  std::mt19937_64 rng(43);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t n = 1 + rng() % 2000;
    std::vector<uint64_t> keys(n);
    for (size_t i = 0; i < n; ++i) keys[i] = (rng() % 4 << 32) | i;  // distinct: an index below
    for (size_t i = 0; i < n / 7; ++i) keys[rng() % n] = kNoKey;
    std::vector<uint64_t> expected;
    for (uint64_t k : keys)
      if (k != kNoKey) expected.push_back(k);
    std::sort(expected.begin(), expected.end());
    std::vector<uint64_t> room(1 + rng() % 300);
    // Every third trial stops at a random point: visit's false ends the walk there.
    const size_t stop_after = trial % 3 == 0 ? rng() % (n + 1) : SIZE_MAX;
    std::vector<uint64_t> seen;
    size_t chunks = 0;
    for_each_ascending(
        n, [&](size_t i) { return keys[i]; }, room,
        [&](const uint64_t* sorted, size_t m) {
          EXPECT_LE(m, room.size());
          ++chunks;
          seen.insert(seen.end(), sorted, sorted + m);
          return seen.size() < stop_after;
        });
    if (stop_after < expected.size()) {
      ASSERT_GE(seen.size(), stop_after);  // the chunk that reached it was the last
      ASSERT_LE(seen.size() - stop_after, room.size());
      expected.resize(seen.size());
    } else {
      EXPECT_EQ(chunks, (expected.size() + room.size() - 1) / room.size()) << "trial " << trial;
    }
    EXPECT_EQ(seen, expected) << "trial " << trial;
  }
}

}  // namespace
