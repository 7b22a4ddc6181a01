// lastmile — sorting a list's 64-bit keys by Highway's vectorised quicksort (vqsort): sorting
// networks for up to 16 vectors of keys (128 on AVX-512), vector partitions past them, where
// std::sort mispredicted a branch a comparison. A list past one network and of up to 1024 keys is
// sorted as runs of one network each, merged, where Highway 1.0.3's partitions cost more: on the
// Zen 4, 64 lists of random keys sorted in turn, 129 keys 0.91 -> 0.43 us, 256 keys 2.1 -> 0.84,
// 843 keys 12.0 -> 5.8 (std::sort 0.73, 5.6 and 23.4; BM_CpuSortKeys times sort_keys and it).
#include <algorithm>
#include <cstring>

#include "cpu/kernels.hpp"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/sort_keys.cpp"  // this file, re-included once per target
#include <hwy/foreach_target.h>                 // must come before highway.h
#include <hwy/highway.h>
// clang-format off
#include <hwy/contrib/sort/traits-inl.h>
#include <hwy/contrib/sort/vqsort-inl.h>
// clang-format on

// The steps below are hn::Sort's in Highway 1.0 (its detail:: functions, not a public API):
// another Highway sorts with std::sort until they are checked against its vqsort-inl.h.
#define LASTMILE_VQSORT_STEPS (HWY_MAJOR == 1 && HWY_MINOR == 0 && VQSORT_ENABLED)

HWY_BEFORE_NAMESPACE();
namespace lastmile::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// hn::Sort's steps, with its pivot generator seeded by a constant: hn::Sort seeds it from
// getrandom(2), a system call (some 250 ns) on every call, which cost more than sorting a
// 50-entry list. The pivots change only the time, never the sorted keys; a bad run of them ends
// in vqsort's heapsort, never in quadratic time. Vectors of 512 bits at most, as hn::Sort caps
// them (its networks assume no wider), so the buffer is sized for 8 lanes; left unwritten, as
// vqsort writes each part before it reads it (valgrind, on the narrower targets, agrees).
#if LASTMILE_VQSORT_STEPS
using Traits =
    hn::detail::SharedTraits<hn::detail::TraitsLane<hn::detail::OrderAscending<uint64_t>>>;
constexpr size_t kLanes = 64 / sizeof(uint64_t);
// The longest list sorted as merged runs: its buffer, 8 KB, is on the stack.
constexpr size_t kMostMergedKeys = 1024;

HWY_NOINLINE void sort_by_vqsort(uint64_t* HWY_RESTRICT keys, size_t n) {
  const hn::CappedTag<uint64_t, kLanes> d;
  HWY_ALIGN uint64_t buffer[hwy::SortConstants::BufNum<uint64_t>(kLanes)];
  static_assert(sizeof(buffer) <= 8192, "hn::Sort's bound on its stack buffer");
  if (hn::detail::HandleSpecialCases(d, Traits(), keys, n)) return;
  hn::detail::Generator rng(uint64_t{0x9e3779b97f4a7c15});
  const size_t max_levels = 2 * hwy::CeilLog2(n) + 4;
  hn::detail::Recurse(d, Traits(), keys, keys + n, n, buffer, rng, max_levels);
}

// The sorted runs a[0, na) and b[0, nb), na >= nb (the caller's runs: b is a later, never longer
// one), merged into out as a stable merge would (a's key first of two equal ones): the lower half
// from their fronts, the upper from their backs, two chains of dependent compares side by side.
// Neither chain can empty `a` (each takes total / 2 <= na keys), so only b's ends are tested; b's
// reads are clamped into it and the tests combined by `&` and `|`, so that no branch hangs on a
// key's compare (GCC's branches on them mispredicted random keys: 843 keys some 11 -> 8.7 us, and
// testing a's ends as well cost 8.7 against 5.8).
void merge_runs(const uint64_t* HWY_RESTRICT a, size_t na, const uint64_t* HWY_RESTRICT b,
                size_t nb, uint64_t* HWY_RESTRICT out) {
  HWY_DASSERT(na >= nb);
  if (nb == 0) {
    std::copy(a, a + na, out);
    return;
  }
  const size_t total = na + nb, half = total / 2;
  size_t i = 0, j = 0, back_a = na, back_b = nb;  // the fronts, and one past the backs
  // a if `pick` (0 or 1), else b, by a mask: GCC branched on the bools a ternary selects by.
  auto select = [](uint64_t pick, uint64_t a_key, uint64_t b_key) {
    return b_key ^ ((a_key ^ b_key) & (uint64_t{0} - pick));
  };
  for (size_t k = 0; k < half; ++k) {
    const uint64_t front_a_key = a[i], front_b_key = b[std::min(j, nb - 1)];
    const uint64_t from_b = static_cast<uint64_t>(j < nb) & (front_b_key < front_a_key);
    out[k] = select(from_b, front_b_key, front_a_key);
    j += from_b;
    i += 1 - from_b;
    const uint64_t back_a_key = a[back_a - 1], back_b_key = b[back_b - (back_b != 0)];
    const uint64_t from_a = static_cast<uint64_t>(back_b == 0) | (back_a_key > back_b_key);
    out[total - 1 - k] = select(from_a, back_a_key, back_b_key);
    back_a -= from_a;
    back_b -= 1 - from_a;
  }
  if (total % 2 != 0) out[half] = i < back_a ? a[i] : b[j];  // the one key left
}

// keys[0, n), n <= kMostMergedKeys, as runs of `run` sorted by vqsort's network, merged pairwise
// (a pass's last pair may hold a shorter run, or none). The frames peak at some 12 KB of stack
// (-fstack-usage), against 3.7 KB for vqsort alone.
void sort_as_merged_runs(uint64_t* HWY_RESTRICT keys, size_t n, size_t run) {
  uint64_t buffer[kMostMergedKeys];
  for (size_t start = 0; start < n; start += run)
    sort_by_vqsort(keys + start, std::min(run, n - start));
  uint64_t* from = keys;
  uint64_t* to = buffer;
  for (size_t width = run; width < n; width *= 2, std::swap(from, to)) {
    for (size_t start = 0; start < n; start += 2 * width) {
      const size_t middle = std::min(n, start + width), end = std::min(n, start + 2 * width);
      merge_runs(from + start, middle - start, from + middle, end - middle, to + start);
    }
  }
  if (from != keys) std::memcpy(keys, from, n * sizeof(uint64_t));
}
#endif

void sort_keys(uint64_t* HWY_RESTRICT keys, size_t n) {
#if LASTMILE_VQSORT_STEPS
  const size_t network =
      hwy::SortConstants::BaseCaseNum(hn::Lanes(hn::CappedTag<uint64_t, kLanes>()));
  if (n > network && n <= kMostMergedKeys) return sort_as_merged_runs(keys, n, network);
  sort_by_vqsort(keys, n);
#else
  std::sort(keys, keys + n);
#endif
}

}  // namespace lastmile::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lastmile::cpu {
HWY_EXPORT(sort_keys);
void sort_keys(uint64_t* keys, size_t n) {
  if (n < 16)
    return std::sort(keys, keys + n);  // fewer than a network's rows: the dispatch costs more
  HWY_DYNAMIC_DISPATCH(sort_keys)(keys, n);
}
}  // namespace lastmile::cpu
#endif
