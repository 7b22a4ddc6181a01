// The selection paths' key sort (cpu::sort_keys: Highway's vqsort with a fixed pivot seed, and
// merged runs of its networks) against std::sort, on the dispatched target (the unit_on_<target>
// runs cover the narrower ones).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "cpu/kernels.hpp"

namespace {

// Keys as the selection paths make them (a value's orderable bits above a distinct id), over every
// bit, over few values (duplicates), all equal, already ascending, descending, or from the ends of
// the range: 0 and UINT64_MAX, which vqsort's padding must not confuse with the keys.
std::vector<uint64_t> keys_of_kind(std::mt19937_64& rng, size_t n, int kind) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  std::vector<uint64_t> keys(n);
  for (size_t i = 0; i < n; ++i) {
    switch (kind) {
      case 0:
        keys[i] = (rng() >> 32 << 32) | i;
        break;
      case 1:
        keys[i] = rng();
        break;
      case 2:
        keys[i] = rng() % 5;
        break;
      case 3:
        keys[i] = 42;
        break;
      case 4:
        keys[i] = i * 3;
        break;
      case 5:
        keys[i] = kMax - i;
        break;
      default:
        keys[i] = rng() % 2 == 0 ? 0 : kMax - rng() % 2;
        break;
    }
  }
  return keys;
}

// sort_keys against std::sort at every size in [from, to], each kind of keys.
void expect_sorted_at_every_size(uint64_t seed, size_t from, size_t to) {
  std::mt19937_64 rng(seed);
  for (size_t n = from; n <= to; ++n) {
    for (int kind = 0; kind < 7; ++kind) {
      std::vector<uint64_t> keys = keys_of_kind(rng, n, kind);
      std::vector<uint64_t> expected = keys;
      std::sort(expected.begin(), expected.end());
      lastmile::cpu::sort_keys(keys.data(), n);
      ASSERT_EQ(keys, expected) << "n " << n << " kind " << kind;
    }
  }
}

TEST(CpuSortKeys, SortsAsStdSortDoesAtEverySizeUpToThreeHundred) {
  expect_sorted_at_every_size(61, 0, 300);
}

// Runs of one network each (128 keys on AVX-512, 64 on AVX2, 32 on SSE4), merged pairwise up to
// 1024 keys: odd and even counts of runs, a short last run, each merge's odd key left for last,
// and the sizes either side of 1024, past which vqsort partitions.
TEST(CpuSortKeys, SortsAsStdSortDoesAtEverySizeTheMergedRunsTake) {
  expect_sorted_at_every_size(73, 301, 1100);
}

// Past the sorting networks: the partitions, and a fixed pivot seed on any input.
TEST(CpuSortKeys, SortsAsStdSortDoesOnLongLists) {
  std::mt19937_64 rng(67);
  for (int trial = 0; trial < 60; ++trial) {
    const size_t n = 300 + rng() % 40000;
    const int kind = trial % 7;
    std::vector<uint64_t> keys = keys_of_kind(rng, n, kind);
    std::vector<uint64_t> expected = keys;
    std::sort(expected.begin(), expected.end());
    lastmile::cpu::sort_keys(keys.data(), n);
    ASSERT_EQ(keys, expected) << "trial " << trial << " n " << n << " kind " << kind;
  }
}

// Sorting touches keys[0, n) only: the entries either side keep their bits.
TEST(CpuSortKeys, WritesNothingOutsideTheKeys) {
  std::mt19937_64 rng(71);
  for (const size_t n :
       {size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{129}, size_t{1000}, size_t{1025}}) {
    std::vector<uint64_t> storage(n + 32);
    for (uint64_t& k : storage) k = rng();
    const std::vector<uint64_t> before = storage;
    lastmile::cpu::sort_keys(storage.data() + 16, n);
    EXPECT_TRUE(std::equal(storage.begin(), storage.begin() + 16, before.begin())) << "n " << n;
    EXPECT_TRUE(std::equal(storage.end() - 16, storage.end(), before.end() - 16)) << "n " << n;
    EXPECT_TRUE(std::is_sorted(storage.begin() + 16, storage.end() - 16)) << "n " << n;
  }
}

}  // namespace
