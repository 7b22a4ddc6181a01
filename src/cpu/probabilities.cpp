// lastmile — passes over a row's exp weights and probabilities (Highway; STYLE §5): exp(x - max)
// with fixed block sums, probabilities in place with their range, a probability band listed
// with the mass below it, and a row's sum below a threshold. Summation order fixed per target
// (lane-wise partial sums, then lanes in order).
#include <cstddef>
#include <cstdint>

#include "cpu/kernels.hpp"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/probabilities.cpp"  // this file, re-included once per target
#include <hwy/foreach_target.h>                     // must come before highway.h
#include <hwy/highway.h>
// Per-target helpers, after highway.h: re-included once per target.
#include "cpu/block_exp-inl.hpp"
#include "cpu/compress-inl.hpp"
#include "cpu/exp-inl.hpp"
#include "cpu/lanes-inl.hpp"

HWY_BEFORE_NAMESPACE();
namespace lastmile::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

double exp_with_block_sums(const float* HWY_RESTRICT x, float* HWY_RESTRICT w, size_t n, float max,
                           size_t block, double* HWY_RESTRICT block_sums) {
  return exp_block_sums_pass<true>(x, w, n, max, block, block_sums);
}

double exp_block_sums(const float* HWY_RESTRICT x, size_t n, float max, size_t block,
                      double* HWY_RESTRICT block_sums) {
  return exp_block_sums_pass<false>(x, nullptr, n, max, block, block_sums);
}

// With q = w * inv_sum: appends the ids with lo <= q < hi (id order) and returns how many; adds
// the q < lo to *mass_below and the q >= hi to *mass_above (float partial sums per 64 vectors,
// each added in double: calls over consecutive pieces of whole 64 vectors add the same terms in
// the same order as one call). ids needs room for n + kCompressSlack entries.
size_t probability_band(const float* HWY_RESTRICT w, size_t n, float inv_sum, float lo, float hi,
                        int32_t* HWY_RESTRICT ids, double* mass_below, double* mass_above) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const size_t lanes = hn::Lanes(d);
  const auto vinv = hn::Set(d, inv_sum), vlo = hn::Set(d, lo), vhi = hn::Set(d, hi);
  size_t count = 0, i = 0;
  double below_sum = *mass_below, above_sum = *mass_above;
  using Sums = PartialSums<decltype(d)>;
  auto take = [&](size_t at, hn::Vec<decltype(d)> q, hn::Mask<decltype(d)> valid, Sums& sum,
                  Sums& above) {
    const auto below = hn::And(valid, hn::Lt(q, vlo));
    sum.Add(hn::IfThenElseZero(below, q));
    const auto under_hi = hn::Lt(q, vhi);
    above.Add(hn::IfThenElseZero(hn::AndNot(under_hi, valid), q));
    // No branch on an empty band: a third of the vectors hold band tokens, and mispredicting
    // them cost more than compressing every vector.
    const auto band = hn::And(valid, hn::AndNot(below, under_hi));
    hn::StoreU(CompressKeptIds(d, band, at), di, ids + count);
    count += hn::CountTrue(d, band);
  };
  // Four vectors a step, stored by StoreKeptOfFour: one vector a step left each store's address
  // waiting on the previous vector's count.
  auto take_four = [&](size_t at, Sums& sum, Sums& above) {
    hn::Mask<decltype(d)> band[4];
    for (size_t k = 0; k < 4; ++k) {
      const auto q = hn::Mul(hn::LoadU(d, w + at + k * lanes), vinv);
      const auto below = hn::Lt(q, vlo);
      sum.Add(hn::IfThenElseZero(below, q));
      const auto under_hi = hn::Lt(q, vhi);
      above.Add(hn::IfThenZeroElse(under_hi, q));
      band[k] = hn::AndNot(below, under_hi);
    }
    count = StoreKeptOfFour(d, band, at, ids, count);
  };
  auto flush = [&](const Sums& sum, const Sums& above) {
    below_sum += sum.Total(d);
    above_sum += above.Total(d);
  };
  const auto all = hn::FirstN(d, lanes);
  while (i + lanes <= n) {
    Sums sum(d), above(d);
    size_t v = 0;
    for (; v + 4 <= 64 && i + 4 * lanes <= n; v += 4, i += 4 * lanes) take_four(i, sum, above);
    for (; v < 64 && i + lanes <= n; ++v, i += lanes)
      take(i, hn::Mul(hn::LoadU(d, w + i), vinv), all, sum, above);
    flush(sum, above);
  }
  if (i < n) {
    Sums sum(d), above(d);
    take(i, hn::Mul(LoadTail(d, w + i, n - i, 0.0f), vinv), hn::FirstN(d, n - i), sum, above);
    flush(sum, above);
  }
  *mass_below = below_sum;
  *mass_above = above_sum;
  return count;
}

double probabilities(float* HWY_RESTRICT x, size_t n, float max, float inv_sum,
                     float* HWY_RESTRICT lo, float* HWY_RESTRICT hi) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const auto vmax = hn::Set(d, max), vinv = hn::Set(d, inv_sum);
  auto smallest = hn::Set(d, kInf), largest = hn::Set(d, -kInf);
  PartialSums<decltype(d)> sum(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto q = hn::Mul(ExpFlushToZero(d, hn::Sub(hn::LoadU(d, x + i), vmax)), vinv);
    hn::StoreU(q, d, x + i);
    smallest = hn::Min(smallest, q);
    largest = hn::Max(largest, q);
    sum.Add(q);
  }
  if (i < n) {
    const auto valid = hn::FirstN(d, n - i);
    const auto q =
        hn::Mul(ExpFlushToZero(d, hn::Sub(LoadTail(d, x + i, n - i, -kInf), vmax)), vinv);
    StoreTail(d, q, x + i, n - i);
    smallest = hn::Min(smallest, hn::IfThenElse(valid, q, hn::Set(d, kInf)));
    largest = hn::Max(largest, q);  // the padding's q is 0
    sum.Add(q);
  }
  *lo = hn::GetLane(hn::MinOfLanes(d, smallest));
  *hi = hn::GetLane(hn::MaxOfLanes(d, largest));
  return sum.Total(d);
}

double sum_below(const float* HWY_RESTRICT x, size_t n, float threshold,
                 size_t* HWY_RESTRICT count) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const size_t lanes = hn::Lanes(d);
  const auto vthr = hn::Set(d, threshold);
  PartialSums<decltype(d)> sum(d);
  auto below = hn::Zero(di);  // minus the count, lane-wise (a true mask is -1)
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto v = hn::LoadU(d, x + i);
    const auto in = hn::Lt(v, vthr);
    sum.Add(hn::IfThenElseZero(in, v));
    below = hn::Add(below, hn::VecFromMask(di, hn::RebindMask(di, in)));
  }
  size_t tail = 0;
  if (i < n) {
    const auto v = LoadTail(d, x + i, n - i, threshold);  // the padding is not below
    const auto in = hn::Lt(v, vthr);
    sum.Add(hn::IfThenElseZero(in, v));
    tail = hn::CountTrue(d, in);
  }
  HWY_ALIGN int32_t counts[hn::MaxLanes(di)];
  hn::Store(below, di, counts);
  size_t total = tail;
  for (size_t lane = 0; lane < lanes; ++lane) total += static_cast<size_t>(-counts[lane]);
  *count = total;
  return sum.Total(d);
}

double sum_at_least(const float* HWY_RESTRICT x, size_t n, float threshold) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const auto vthr = hn::Set(d, threshold);
  PartialSums<decltype(d)> sum(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto v = hn::LoadU(d, x + i);
    sum.Add(hn::IfThenZeroElse(hn::Lt(v, vthr), v));
  }
  if (i < n) {
    const auto v = LoadTail(d, x + i, n - i, -kInf);  // the padding is below
    sum.Add(hn::IfThenZeroElse(hn::Lt(v, vthr), v));
  }
  return sum.Total(d);
}

}  // namespace lastmile::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lastmile::cpu {
HWY_EXPORT(exp_with_block_sums);
HWY_EXPORT(exp_block_sums);
HWY_EXPORT(probability_band);
HWY_EXPORT(probabilities);
HWY_EXPORT(sum_below);
HWY_EXPORT(sum_at_least);

double exp_with_block_sums(const float* x, float* w, size_t n, float max, size_t block,
                           double* block_sums) {
  return HWY_DYNAMIC_DISPATCH(exp_with_block_sums)(x, w, n, max, block, block_sums);
}
double exp_block_sums(const float* x, size_t n, float max, size_t block, double* block_sums) {
  return HWY_DYNAMIC_DISPATCH(exp_block_sums)(x, n, max, block, block_sums);
}
size_t probability_band(const float* w, size_t n, float inv_sum, float lo, float hi, int32_t* ids,
                        double* mass_below, double* mass_above) {
  return HWY_DYNAMIC_DISPATCH(probability_band)(w, n, inv_sum, lo, hi, ids, mass_below, mass_above);
}
double probabilities(float* x, size_t n, float max, float inv_sum, float* lo, float* hi) {
  return HWY_DYNAMIC_DISPATCH(probabilities)(x, n, max, inv_sum, lo, hi);
}
double sum_below(const float* x, size_t n, float threshold, size_t* count) {
  return HWY_DYNAMIC_DISPATCH(sum_below)(x, n, threshold, count);
}
double sum_at_least(const float* x, size_t n, float threshold) {
  return HWY_DYNAMIC_DISPATCH(sum_at_least)(x, n, threshold);
}
}  // namespace lastmile::cpu
#endif
