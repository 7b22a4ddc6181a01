// lastmile — reductions over a row, one SIMD pass each (Highway; STYLE §5).
#include <algorithm>
#include <limits>

#include "cpu/kernels.hpp"
#include "float_keys.hpp"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/reduce.cpp"  // this file, re-included once per target
#include <hwy/foreach_target.h>              // must come before highway.h
#include <hwy/highway.h>

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

// The k-th largest of x[0, n): the orderable() bits of the answer set from
// the top, each kept where at least k entries are >= the value so far. Every pass counts with
// float compares (so -0 equals +0, as orderable() has it); a key at or below -inf's stands for
// -inf, which every entry is >= (orderable bits below it are NaN patterns).
float kth_largest_value(const float* HWY_RESTRICT x, size_t n, size_t k) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  constexpr uint32_t kNegInfKey = 0x007fffffu;  // orderable(-inf)
  const auto value_of = [](uint32_t key) {
    return key <= kNegInfKey ? -std::numeric_limits<float>::infinity()
                             : detail::from_orderable(key);
  };
  uint32_t key = 0;  // the answer's bits so far: always at least k entries >= value_of(key)
  for (uint32_t bit = 0x80000000u; bit != 0; bit >>= 1) {
    const uint32_t candidate = key | bit;
    const float value = value_of(candidate);
    const auto threshold = hn::Set(d, value);
    size_t at_least = 0;
    size_t i = 0;
    for (; i + lanes <= n; i += lanes)
      at_least += hn::CountTrue(d, hn::Ge(hn::LoadU(d, x + i), threshold));
    for (; i < n; ++i) at_least += x[i] >= value;  // tail: never read past n
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
