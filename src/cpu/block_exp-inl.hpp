// lastmile — sums of exp(x - max) by fixed blocks (exp_block_sums_pass), storing the weights or
// marking a value band's bits and summing below it on the way: the arithmetic the statistics
// pass and the exp kernels share, so that they keep each other's bits. Re-included once per
// Highway target, as Highway's own -inl headers are.
#if defined(LASTMILE_CPU_BLOCK_EXP_INL_HPP_) == defined(HWY_TARGET_TOGGLE)
#ifdef LASTMILE_CPU_BLOCK_EXP_INL_HPP_
#undef LASTMILE_CPU_BLOCK_EXP_INL_HPP_
#else
#define LASTMILE_CPU_BLOCK_EXP_INL_HPP_
#endif

#include <hwy/highway.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#include "cpu/exp-inl.hpp"
#include "cpu/kernels.hpp"
#include "cpu/lanes-inl.hpp"
#include "cpu/read_ahead-inl.hpp"

HWY_BEFORE_NAMESPACE();
namespace lastmile::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// A ValueBand's bits for entries [0, n): Mark sets bit i % 8 of bits[i / 8] for each lane of
// in_band (and of valid, for the padded last vector: kTail), clearing the others, a vector of
// entries i, i + 1, ... at a time in order.
template <class D>
class BandMarks {
 public:
  BandMarks(uint8_t* bits, size_t n) : bits_(bits), n_(n) {}
  template <class Tail>
  HWY_INLINE void Mark(Tail, size_t i, hn::Mask<D> in_band, hn::Mask<D> valid) {
    const D d;
    const size_t lanes = hn::Lanes(d);
    if constexpr (Tail::value) in_band = hn::And(valid, in_band);
    // Whole bytes, a movemask and a store, when the lanes come in eights (a scalable target's
    // MaxLanes is only a bound: its lanes are known at run time).
    if constexpr (!HWY_HAVE_SCALABLE && hn::MaxLanes(d) % 8 == 0 && !Tail::value) {
      hn::StoreMaskBits(d, in_band, bits_ + i / 8);
    } else {
      uint8_t bytes[(hn::MaxLanes(d) + 7) / 8] = {};
      hn::StoreMaskBits(d, in_band, bytes);
      if (lanes % 8 == 0) {  // the bytes that hold the row's entries
        std::memcpy(bits_ + i / 8, bytes, (std::min(n_, i + lanes) - i + 7) / 8);
      } else if (8 % lanes == 0) {  // 1, 2 or 4 lanes: gathered into a byte
        byte_ |= static_cast<uint8_t>(bytes[0] << (i % 8));
        if ((i + lanes) % 8 == 0 || i + lanes >= n_) bits_[i / 8] = std::exchange(byte_, 0);
      } else {  // lanes that straddle bytes (12 on 384-bit SVE): bit by bit
        for (size_t l = 0; l < lanes && i + l < n_; ++l) {
          const size_t k = i + l;
          const auto bit = static_cast<uint8_t>(1u << (k % 8));
          const bool set = (bytes[l / 8] >> (l % 8)) & 1;
          bits_[k / 8] = static_cast<uint8_t>(set ? bits_[k / 8] | bit : bits_[k / 8] & ~bit);
        }
      }
    }
  }

 private:
  uint8_t* bits_;
  size_t n_;
  uint8_t byte_ = 0;  // bits of the entries since the last multiple of 8 (narrow vectors)
};

// Sums exp(x - max) (ExpFlushToZero; 0 where x = -inf) per block of `block` entries (a multiple
// of every lane count) with lane-wise float partial sums, each block's sum into block_sums[b] in
// double, blocks added in order; with kStore also w = exp(x - max). Fixed blocking: the same bits
// for any thread count, and a block summed alone gives the same sum.
// With kBand (blocks of whole 64-entry words), also band.below_sums[b]: the block's sum over its
// entries x < band.from, summed as the whole block's is (which keeps its bits), and bit i % 8 of
// band.bits[i / 8] set where band.from <= x[i] <= band.to.
template <bool kStore, bool kBand = false>
double exp_block_sums_pass(const float* HWY_RESTRICT x, float* HWY_RESTRICT w, size_t n, float max,
                           size_t block, double* HWY_RESTRICT block_sums, LineByLine prefetch = {},
                           ValueBand* band = nullptr) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const auto vmax = hn::Set(d, max);
  const auto vfrom = hn::Set(d, kBand ? band->from : 0.0f);
  const auto vto = hn::Set(d, kBand ? band->to : 0.0f);
  double total = 0;
  BandMarks<decltype(d)> marks(kBand ? band->bits : nullptr, n);
  for (size_t start = 0, b = 0; start < n; start += block, ++b) {
    const size_t end = std::min(n, start + block);
    PartialSums<decltype(d)> sum(d), under(d);
    // tail: the padded last vector, `valid` its lanes in the row.
    auto add = [&](auto tail, size_t i, hn::Vec<decltype(d)> v, hn::Vec<decltype(d)> e,
                   hn::Mask<decltype(d)> valid) {
      sum.Add(e);
      if constexpr (kBand) {
        const auto below = hn::Lt(v, vfrom);
        under.Add(hn::IfThenElseZero(below, e));
        marks.Mark(tail, i, hn::AndNot(below, hn::Le(v, vto)), valid);
      }
    };
    size_t i = start;
    for (; i + lanes <= end; i += lanes) {
      prefetch.Step();  // one line a vector, if asked
      const auto v = hn::LoadU(d, x + i);
      const auto e = ExpFlushToZero(d, hn::Sub(v, vmax));
      if constexpr (kStore) hn::StoreU(e, d, w + i);
      add(std::false_type(), i, v, e, hn::FirstN(d, lanes));
    }
    if (i < end) {
      const auto v = LoadTail(d, x + i, end - i, -kInf);
      const auto e = ExpFlushToZero(d, hn::Sub(v, vmax));
      if constexpr (kStore) StoreTail(d, e, w + i, end - i);
      add(std::true_type(), i, v, e, hn::FirstN(d, end - i));  // the padding's e is 0
    }
    block_sums[b] = sum.Total(d);
    if constexpr (kBand) band->below_sums[b] = under.Total(d);
    total += block_sums[b];
  }
  return total;
}

// A block's sum of exp(x - max), relative to its max (exp_block_sums_pass); with band, its below
// sum and bits too. Out of line, as first_bad (lanes-inl.hpp).
HWY_NOINLINE inline double block_sum_below_max(const float* HWY_RESTRICT values, size_t size,
                                               float max, LineByLine prefetch,
                                               ValueBand* band = nullptr) {
  double sum;
  if (band != nullptr)
    return exp_block_sums_pass<false, true>(values, nullptr, size, max, size, &sum, prefetch, band);
  return exp_block_sums_pass<false>(values, nullptr, size, max, size, &sum, prefetch);
}

}  // namespace lastmile::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // LASTMILE_CPU_BLOCK_EXP_INL_HPP_
