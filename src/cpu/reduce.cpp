// lastmile — reductions over a row, one SIMD pass each (Highway; STYLE §5).
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <optional>

#include "cpu/kernels.hpp"
#include "float_keys.hpp"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/reduce.cpp"  // this file, re-included once per target
#include <hwy/foreach_target.h>              // must come before highway.h
#include <hwy/highway.h>
// clang-format off: re-included per target, after highway.h
#include "cpu/compress-inl.hpp"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace lastmile::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

float row_max(const float* HWY_RESTRICT x, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  auto best0 = hn::Set(d, -std::numeric_limits<float>::infinity());
  auto best1 = best0;  // two accumulators: the loop is load-bound, not latency-bound
  size_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    best0 = hn::Max(best0, hn::LoadU(d, x + i));
    best1 = hn::Max(best1, hn::LoadU(d, x + i + lanes));
  }
  float result = hn::GetLane(hn::MaxOfLanes(d, hn::Max(best0, best1)));
  for (; i < n; ++i) result = std::max(result, x[i]);  // tail: never read past n
  return result;
}

// The smallest finite entry (-inf ignored), +inf when there is none.
float finite_min(const float* HWY_RESTRICT x, size_t n) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const auto inf = hn::Set(d, kInf), neg_inf = hn::Set(d, -kInf);
  auto best = inf;
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto v = hn::LoadU(d, x + i);
    best = hn::Min(best, hn::IfThenElse(hn::Eq(v, neg_inf), inf, v));
  }
  float result = hn::GetLane(hn::MinOfLanes(d, best));
  for (; i < n; ++i)
    if (x[i] != -kInf) result = std::min(result, x[i]);
  return result;
}

uint16_t row_max_bits16(const uint16_t* HWY_RESTRICT x, size_t n) {
  const hn::ScalableTag<uint16_t> d;
  const size_t lanes = hn::Lanes(d);
  auto best = hn::Zero(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) best = hn::Max(best, hn::LoadU(d, x + i));
  uint16_t result = hn::GetLane(hn::MaxOfLanes(d, best));
  for (; i < n; ++i) result = std::max(result, x[i]);
  return result;
}

// The k-th largest of x[0, n), 1 < k < n, for n <= kPartitionedAtMost: a quickselect whose
// partitions are vector compresses into a buffer on the stack. A level reads its entries twice:
// it counts those above and equal to a pivot (the median of three), then keeps the side that
// holds the k-th (about 4n entries read in all with good pivots). The bit search below takes 32
// passes over every entry where the row's range spans a sign (an LLM row's group maxima do), each
// pass a chain of a few vectors: 0.38 of a 32k top-k row's 7 us went to it (three selections of 60
// to 500 maxima and candidates). nullopt where it gives up, and the bit search decides: a NaN
// pivot, NaN entries (which neither side keeps) leaving fewer than k, or 64 levels of bad pivots.
// NaN is outside the contract: with NaN among the entries the two methods may answer differently.
constexpr size_t kPartitionedAtMost = 1024;
std::optional<float> kth_by_partition(const float* HWY_RESTRICT x, size_t n, size_t k) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  HWY_ALIGN float buffer[kPartitionedAtMost + hn::MaxLanes(d)];
  const float* from = x;
  for (int level = 0; level < 64; ++level) {
    if (k > n) return std::nullopt;  // NaN entries, which neither side keeps
    const float a = from[0], b = from[n / 2], c = from[n - 1];
    const float pivot = std::max(std::min(a, b), std::min(std::max(a, b), c));
    if (std::isnan(pivot)) return std::nullopt;
    const auto vpivot = hn::Set(d, pivot);
    size_t above = 0, equal = 0, i = 0;
    for (; i + lanes <= n; i += lanes) {
      const auto v = hn::LoadU(d, from + i);
      above += hn::CountTrue(d, hn::Gt(v, vpivot));
      equal += hn::CountTrue(d, hn::Eq(v, vpivot));
    }
    for (; i < n; ++i) above += from[i] > pivot, equal += from[i] == pivot;
    if (k > above && k <= above + equal) return pivot + 0.0f;  // -0 + 0 is +0
    const bool keep_above = k <= above;
    if (!keep_above) k -= above + equal;
    // In place from the second level on: each store lands at or before the vector just read.
    size_t kept = 0;
    for (i = 0; i + lanes <= n; i += lanes) {
      const auto v = hn::LoadU(d, from + i);
      const auto keep = keep_above ? hn::Gt(v, vpivot) : hn::Lt(v, vpivot);
      hn::StoreU(CompressKept(d, v, keep), d, buffer + kept);
      kept += hn::CountTrue(d, keep);
    }
    for (; i < n; ++i)
      if (keep_above ? from[i] > pivot : from[i] < pivot) buffer[kept++] = from[i];
    from = buffer;
    n = kept;
  }
  return std::nullopt;
}

// How many of x[0, n) are >= value.
template <class D>
HWY_INLINE size_t CountAtLeast(D d, const float* HWY_RESTRICT x, size_t n, float value) {
  const size_t lanes = hn::Lanes(d);
  const auto threshold = hn::Set(d, value);
  size_t count = 0, i = 0;
  for (; i + lanes <= n; i += lanes)
    count += hn::CountTrue(d, hn::Ge(hn::LoadU(d, x + i), threshold));
  for (; i < n; ++i) count += x[i] >= value;  // tail: never read past n
  return count;
}

// The k-th largest of x[0, n): the orderable() bits of the answer set from the top, each kept
// where at least k entries are >= the value so far. Every pass counts with float compares (so -0
// equals +0, as orderable() has it); a key at or below -inf's stands for -inf, which every entry
// is >= (orderable bits below it are NaN patterns). Two shortcuts, the same answer: the answer
// lies in [min, max], so its key shares the bits above the first where those two keys differ and
// the passes start below them; and a pass that finds exactly k entries >= its value has found the
// k largest, whose min is the answer (one more pass). On a cached 32k top-k/top-p row this
// function's share of the time went from 15% to 7% (perf, one thread).
float kth_largest_value(const float* HWY_RESTRICT x, size_t n, size_t k) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  if (k > 1 && k < n && n <= kPartitionedAtMost) {
    if (const std::optional<float> kth = kth_by_partition(x, n, k)) return *kth;
  }
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  constexpr uint32_t kNegInfKey = 0x007fffffu;  // orderable(-inf)
  const auto value_of = [](uint32_t key) {
    return key <= kNegInfKey ? -kInf : detail::from_orderable(key);
  };
  auto lo = hn::Set(d, kInf), hi = hn::Set(d, -kInf);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto v = hn::LoadU(d, x + i);
    lo = hn::Min(lo, v);
    hi = hn::Max(hi, v);
  }
  float min = hn::GetLane(hn::MinOfLanes(d, lo)), max = hn::GetLane(hn::MaxOfLanes(d, hi));
  for (; i < n; ++i) min = std::min(min, x[i]), max = std::max(max, x[i]);
  if (k > n) return -kInf;        // outside the contract: no k-th, as the search from the top finds
  if (k == 1) return max + 0.0f;  // -0 + 0 is +0
  if (k == n) return min + 0.0f;
  const uint32_t low_key = detail::orderable(min), differ = low_key ^ detail::orderable(max);
  if (differ == 0) return value_of(low_key);  // every entry equal
  // A masked row with fewer than k finite entries: the k-th is -inf at once.
  if (min == -kInf && CountAtLeast(d, x, n, std::numeric_limits<float>::lowest()) < k) return -kInf;
  const uint32_t top = std::bit_floor(differ);
  uint32_t key = low_key & ~(top | (top - 1));  // at least k entries >= value_of(key): all n
  for (uint32_t bit = top; bit != 0; bit >>= 1) {
    const uint32_t candidate = key | bit;
    const float value = value_of(candidate);
    const auto threshold = hn::Set(d, value);
    const size_t at_least = CountAtLeast(d, x, n, value);
    // Exactly k entries >= value: the k largest, whose min is the answer.
    if (at_least == k) {
      auto least = hn::Set(d, kInf);
      for (i = 0; i + lanes <= n; i += lanes) {
        const auto v = hn::LoadU(d, x + i);
        least = hn::Min(least, hn::IfThenElse(hn::Ge(v, threshold), v, hn::Set(d, kInf)));
      }
      float kth = hn::GetLane(hn::MinOfLanes(d, least));
      for (; i < n; ++i)
        if (x[i] >= value) kth = std::min(kth, x[i]);
      return kth + 0.0f;  // -0 + 0 is +0
    }
    key = at_least >= k ? candidate : key;
  }
  return value_of(key);
}

}  // namespace lastmile::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lastmile::cpu {
HWY_EXPORT(row_max);
HWY_EXPORT(row_max_bits16);
HWY_EXPORT(finite_min);
HWY_EXPORT(kth_largest_value);
float row_max(const float* x, size_t n) { return HWY_DYNAMIC_DISPATCH(row_max)(x, n); }
float finite_min(const float* x, size_t n) { return HWY_DYNAMIC_DISPATCH(finite_min)(x, n); }
float kth_largest_value(const float* x, size_t n, size_t k) {
  return HWY_DYNAMIC_DISPATCH(kth_largest_value)(x, n, k);
}
uint16_t row_max_bits16(const uint16_t* x, size_t n) {
  return HWY_DYNAMIC_DISPATCH(row_max_bits16)(x, n);
}
const char* dispatch_target_name() {
  return hwy::TargetName(hwy::SupportedAndGeneratedTargets()[0]);
}
}  // namespace lastmile::cpu
#endif
