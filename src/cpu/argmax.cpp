// lastmile — the greedy argmax of a float32 row (Highway; STYLE §5), plain or checking a
// caller's row for NaN / +inf on the way. Exact: the lowest index of the largest value.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "cpu/kernels.hpp"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/argmax.cpp"  // this file, re-included once per target
#include <hwy/foreach_target.h>              // must come before highway.h
#include <hwy/highway.h>
// Per-target helpers, after highway.h: re-included once per target.
#include "cpu/lanes-inl.hpp"
#include "cpu/read_ahead-inl.hpp"

HWY_BEFORE_NAMESPACE();
namespace lastmile::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// One pass: each lane keeps its largest value and the first index holding it (strict >), then
// the lanes agree on the largest value and, among lanes holding it, the lowest index. With
// kCheck, also flags NaN / +inf; *first_bad gets the first such index (then the result is 0).
// Four such (value, index) pairs a lane, each taking every fourth vector: with one, its compare
// and blends made a chain of several cycles a vector, and a cached 128k row took 17 us on Zen 5
// (the block maxima's read of the same row, 4). The first index holding the row's max is some
// pair's first holding it, and no pair holding the max holds a lower one: the lowest index among
// the pairs that hold it is the row's.
template <bool kCheck>
int64_t argmax_pass(const float* HWY_RESTRICT x, size_t n, int64_t* first_bad_index) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  using V = hn::Vec<decltype(d)>;
  using VI = hn::Vec<decltype(di)>;
  const size_t lanes = hn::Lanes(d);
  constexpr size_t kPairs = 4;
  BadLanes bad(d);
  V best[kPairs];
  VI best_index[kPairs], index[kPairs];
  for (size_t p = 0; p < kPairs; ++p) {
    best[p] = hn::Set(d, -kInf);
    best_index[p] = hn::Zero(di);
    index[p] = hn::Add(hn::Iota(di, 0), hn::Set(di, static_cast<int32_t>(p * lanes)));
  }
  auto take = [&](size_t p, size_t i) {
    const auto v = hn::LoadU(d, x + i);
    if constexpr (kCheck) bad.Check(d, v);
    const auto better = hn::Gt(v, best[p]);
    best[p] = hn::IfThenElse(better, v, best[p]);
    best_index[p] = hn::IfThenElse(hn::RebindMask(di, better), index[p], best_index[p]);
  };
  const auto step = hn::Set(di, static_cast<int32_t>(kPairs * lanes));
  // A prefetch a vector, ReadAhead's distance ahead, while that stays in the row (unrolled with
  // the pairs, no bound checked a vector) where software_prefetch_pays(): a row streamed from
  // memory took 27.5 us with one pair (no prefetch), 29.1 with four, 25.3 with four and the
  // prefetch (medians of 8 alternations, 64 rows, one thread, Zen 5).
  constexpr size_t kAhead = ReadAhead::kDistance / sizeof(float);
  auto round = [&](size_t i, auto prefetch) {
    for (size_t p = 0; p < kPairs; ++p) {
      if constexpr (decltype(prefetch)::value)
        hwy::Prefetch(reinterpret_cast<const char*>(x + i + kAhead + p * lanes));
      take(p, i + p * lanes);
      index[p] = hn::Add(index[p], step);
    }
  };
  size_t i = 0;
  const bool prefetch = software_prefetch_pays();
  for (; prefetch && i + kAhead + kPairs * lanes <= n; i += kPairs * lanes)
    round(i, std::true_type());
  for (; i + kPairs * lanes <= n; i += kPairs * lanes) round(i, std::false_type());
  // Fewer than kPairs whole vectors left: vector p to pair p, whose index is already its own.
  for (size_t p = 0; i + lanes <= n; ++p, i += lanes) take(p, i);
  if constexpr (kCheck) {
    *first_bad_index = first_bad(x, !bad.Any(d) ? i : 0, n);
    if (*first_bad_index >= 0) return 0;
  }
  auto all_max = best[0];
  for (size_t p = 1; p < kPairs; ++p) all_max = hn::Max(all_max, best[p]);
  float max = hn::GetLane(hn::MaxOfLanes(d, all_max));
  auto lowest = hn::Set(di, std::numeric_limits<int32_t>::max());
  for (size_t p = 0; p < kPairs; ++p) {
    const auto holds_max = hn::RebindMask(di, hn::Eq(best[p], hn::Set(d, max)));
    lowest = hn::Min(lowest, hn::IfThenElse(holds_max, best_index[p], lowest));
  }
  int64_t at = i == 0 ? 0 : hn::GetLane(hn::MinOfLanes(di, lowest));
  for (; i < n; ++i)
    if (x[i] > max) {
      max = x[i];
      at = static_cast<int64_t>(i);
    }
  return at;
}

// Lowest index of the largest value (NaN-free; an all -inf row gives 0). Exact.
int64_t row_argmax(const float* HWY_RESTRICT x, size_t n) {
  return argmax_pass<false>(x, n, nullptr);
}

// row_argmax straight from a caller's row, checking it: the first NaN / +inf index goes to
// *first_bad_index (-1 when none).
int64_t argmax_checked(const float* HWY_RESTRICT x, size_t n, int64_t* first_bad_index) {
  return argmax_pass<true>(x, n, first_bad_index);
}

}  // namespace lastmile::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lastmile::cpu {
HWY_EXPORT(row_argmax);
HWY_EXPORT(argmax_checked);

int64_t row_argmax(const float* x, size_t n) { return HWY_DYNAMIC_DISPATCH(row_argmax)(x, n); }
int64_t argmax_checked(const float* x, size_t n, int64_t* first_bad_index) {
  return HWY_DYNAMIC_DISPATCH(argmax_checked)(x, n, first_bad_index);
}
}  // namespace lastmile::cpu
#endif
