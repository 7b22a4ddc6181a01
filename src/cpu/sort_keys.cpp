// lastmile — sorting a list's 64-bit keys by Highway's vectorised quicksort (vqsort): sorting
// networks for up to 16 vectors of keys (128 on AVX-512), vector partitions past them, where
// std::sort mispredicted a branch a comparison.
#include <algorithm>

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
void sort_keys(uint64_t* HWY_RESTRICT keys, size_t n) {
#if LASTMILE_VQSORT_STEPS
  using Traits =
      hn::detail::SharedTraits<hn::detail::TraitsLane<hn::detail::OrderAscending<uint64_t>>>;
  constexpr size_t kLanes = 64 / sizeof(uint64_t);
  const hn::CappedTag<uint64_t, kLanes> d;
  HWY_ALIGN uint64_t buffer[hwy::SortConstants::BufNum<uint64_t>(kLanes)];
  static_assert(sizeof(buffer) <= 8192, "hn::Sort's bound on its stack buffer");
  if (hn::detail::HandleSpecialCases(d, Traits(), keys, n)) return;
  hn::detail::Generator rng(uint64_t{0x9e3779b97f4a7c15});
  const size_t max_levels = 2 * hwy::CeilLog2(n) + 4;
  hn::detail::Recurse(d, Traits(), keys, keys + n, n, buffer, rng, max_levels);
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
