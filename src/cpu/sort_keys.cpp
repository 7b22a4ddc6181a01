// lastmile — sorting a list's 64-bit keys by Highway's vectorised quicksort (vqsort): sorting
// networks for up to a few hundred keys, where std::sort mispredicted a branch a comparison.
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

HWY_BEFORE_NAMESPACE();
namespace lastmile::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// hn::Sort's steps, with its pivot generator seeded by a constant: hn::Sort seeds it from
// getrandom(2), a system call (some 250 ns) on every call, which cost more than sorting a
// 50-entry list. The keys are distinct (a value's bits and its id), so the pivots change only
// the time; a bad run of them ends in vqsort's heapsort, never in quadratic time.
void sort_keys(uint64_t* HWY_RESTRICT keys, size_t n) {
#if VQSORT_ENABLED
  using Traits =
      hn::detail::SharedTraits<hn::detail::TraitsLane<hn::detail::OrderAscending<uint64_t>>>;
  const hn::CappedTag<uint64_t, 64 / sizeof(uint64_t)> d;  // vqsort's networks stop at 512 bits
  HWY_ALIGN uint64_t buffer[hwy::SortConstants::BufNum<uint64_t>(HWY_LANES(uint64_t))];
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
