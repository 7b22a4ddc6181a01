// lastmile — a row's softmax statistics in one read of the caller's row (Highway; STYLE §5): each
// block's max and its sum of exp(x - max), by fixed blocks (the same bits for any thread
// count), with what a caller asks for on the way: the converted row, its group maxima, the
// entries near the max, a value band's bits. And the sum of exp over a caller's row below a
// value.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cpu/kernels.hpp"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/softmax_stats.cpp"  // this file, re-included once per target
#include <hwy/foreach_target.h>                     // must come before highway.h
#include <hwy/highway.h>
// Per-target helpers, after highway.h: re-included once per target.
#include "cpu/bf16_words-inl.hpp"
#include "cpu/block_exp-inl.hpp"
#include "cpu/exp-inl.hpp"
#include "cpu/lanes-inl.hpp"
#include "cpu/quotient-inl.hpp"
#include "cpu/read_ahead-inl.hpp"
#include "cpu/repetition-inl.hpp"
#include "cpu/sources-inl.hpp"

HWY_BEFORE_NAMESPACE();
namespace lastmile::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The row of src / t (quotient's t) a vector at a time: fn(i, v, valid) for each, the padded
// tail's extra lanes -inf and outside `valid`. Returns whether any valid lane held NaN or +inf
// (with kCheck; without, false: the caller finds them otherwise).
template <bool kDivide, class Source, class D, class Fn, bool kCheck = true>
HWY_INLINE bool for_each_vector(Source src, size_t from, size_t to, const Quotient<D>& quotient,
                                Fn fn, std::bool_constant<kCheck> = {}) {
  const D d;
  const size_t lanes = hn::Lanes(d);
  BadLanes bad(d);
  auto scaled = [&](hn::Vec<decltype(d)> v) {
    if constexpr (kDivide) v = quotient.Of(d, v);
    if constexpr (kCheck) bad.Check(d, v);
    return v;
  };
  size_t i = from;
  for (; i + lanes <= to; i += lanes) fn(i, scaled(src.Whole(d, i)), hn::FirstN(d, lanes));
  if (i < to) {
    const auto valid = hn::FirstN(d, to - i);
    fn(i, hn::IfThenElse(valid, scaled(src.Tail(d, i, to - i)), hn::Set(d, -kInf)), valid);
  }
  return bad.Any(d);
}

// Softmax statistics of src / t by blocks of `block` entries, in one read of src: each block is
// converted into `buffer` (room for `block` + one vector of floats, L1-resident; an undivided
// float32 row is read in place), its max goes to block_max[b] and the sum of exp(x - that max) to
// block_sums[b] (0 for a block of -inf only). At t = 1 the sums (and the band's) are taken as the
// block is read, exp(x) scaled after (DirectExpFits; block_softmax_stats_pipelined's bits): a flat
// row's top-p, which reads and sums a band, 80.7 -> 70.2 us (one thread, five alternating runs).
// With `near.ids`, the entries >= (the max so far) + near.below_max are also listed, id order:
// a superset of those >= the row's max + below_max, found without a second read. With `band`
// (blocks of whole words), its bits and below sums come from the same Exp. Returns false
// if any entry is NaN or +inf (the caller's, or made by the division).
template <bool kDivide, class Source>
bool block_softmax_stats_pass(Source src, size_t n, float t, size_t block,
                              float* HWY_RESTRICT buffer, float* HWY_RESTRICT block_max,
                              double* HWY_RESTRICT block_sums, NearMax* near, ConvertedRow out,
                              ValueBand* band) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const Repetition repetition(out.seen, out.r);
  // Vectors read their repetition mask from the bitmap (i is a multiple of the lanes); narrower
  // targets scale entry by entry after the block.
  const bool repeat_lanes = out.seen != nullptr && Repetition::Vectorised(d);
  // A factor r >= 1 never makes +inf: positive entries shrink (1 / r <= 1), the rest stay <= 0.
  const bool may_overflow = out.r < 1.0f;
  BadLanes overflowed(d);
  float max_so_far = near->max_at_least;
  const Quotient quotient(d, t);  // once a row: its reciprocal costs a scalar divide
  // An undivided float32 row is its own buffer: the block is still in L1 for the Exp (38 -> 35
  // us per cached 128k row).
  constexpr bool kInPlace = !kDivide && std::is_same_v<Source, Float32Source>;
  // At t = 1 the block's sums come with its read (AddExp, as block_softmax_stats_pipelined's):
  // direct, and used where DirectExpFits.
  const auto vfrom = hn::Set(d, band != nullptr ? band->from : 0.0f);
  const auto vto = hn::Set(d, band != nullptr ? band->to : 0.0f);
  BandMarks<decltype(d)> marks(band != nullptr ? band->bits : nullptr, n);
  // NaN and +inf found in the block sums, not by a compare a vector (kExpPropagatesNaN): their
  // direct terms are NaN, and so are their terms in a block summed below its max (+inf's max, or
  // one outside the direct range), as inf - inf or NaN - max. Three operations a vector fewer: a
  // flat float32 128k row's banded pass 25.2 -> 22.4 us, an LLM-shaped bf16 152k row's listing
  // one 33.6 -> 30.7 (Zen 4, one L2-resident row, medians of 300 calls); flat top-p 71.5 -> 69.4
  // us a row (one thread, five alternating runs).
  constexpr bool kSumsShowBad = !kDivide && kExpPropagatesNaN;
  for (size_t start = 0, b = 0; start < n; start += block, ++b) {
    const size_t end = std::min(n, start + block);
    auto max = hn::Set(d, -kInf);
    PartialSums<decltype(d)> sum(d), under(d);
    auto read = [&](auto banded) {
      return for_each_vector<kDivide>(
          src, start, end, quotient,
          [&](size_t i, auto v, auto valid) {
            max = hn::Max(max, v);
            if constexpr (!kInPlace) hn::StoreU(v, d, buffer + (i - start));
            if constexpr (!kDivide) {
              const auto term = ExpTermOf(d, v);
              sum.AddExp(term);
              if constexpr (decltype(banded)::value) {
                const auto below = hn::Lt(v, vfrom);
                under.AddExp(term, below);
                const auto in_band = hn::AndNot(below, hn::Le(v, vto));
                if (i + lanes > end)
                  marks.Mark(std::true_type(), i, in_band, valid);  // the padded last vector
                else
                  marks.Mark(std::false_type(), i, in_band, valid);
              }
            }
            if (out.dst == nullptr) return;
            if (repeat_lanes) {
              v = repetition.Where(d, i, v);  // the padded tail's -inf stays -inf
              if (may_overflow) overflowed.Check(d, v);
            }
            if (i + lanes <= end)
              hn::StoreU(v, d, out.dst + i);
            else
              StoreTail(d, v, out.dst + i, end - i);
          },
          std::bool_constant<!kSumsShowBad>());
    };
    const bool bad = !kDivide && band != nullptr ? read(std::true_type()) : read(std::false_type());
    if (bad || overflowed.Any(d)) return false;
    if (out.seen != nullptr && !repeat_lanes && !repeat_seen(out, start, end)) return false;
    block_max[b] = hn::GetLane(hn::MaxOfLanes(d, max));
    block_sums[b] = 0;
    // A lane's max may drop a NaN (and a +inf before it) for a later -inf: the sum keeps them.
    if (kSumsShowBad && block_max[b] == -kInf && std::isnan(sum.Total(d))) return false;
    if (block_max[b] == -kInf) {
      if (band != nullptr) {  // -inf only: nothing below the band, nothing marked in it
        band->below_sums[b] = 0;
        std::fill(band->bits + start / 8, band->bits + (end + 7) / 8, uint8_t{0});
      }
      continue;
    }
    // A block summed below its max: the next block streams in while its Exp runs (LineByLine).
    const float* values = buffer;
    if constexpr (kInPlace) values = reinterpret_cast<const float*>(src.Address(start));
    const LineByLine next_block(src.Address(end), src.Address(std::min(n, end + block)));
    if (!kDivide && DirectExpFits(block_max[b], end - start)) {
      block_sums[b] = DirectBlockSum(sum.Total(d), block_max[b]);
      if (band != nullptr) band->below_sums[b] = DirectBlockSum(under.Total(d), block_max[b]);
    } else if (band == nullptr) {
      block_sums[b] = block_sum_below_max(values, end - start, block_max[b], next_block);
    } else {  // its bits marked again, the same
      ValueBand block_band{band->from, band->to, band->bits + start / 8, band->below_sums + b};
      block_sums[b] =
          block_sum_below_max(values, end - start, block_max[b], next_block, &block_band);
    }
    if (kSumsShowBad && std::isnan(block_sums[b])) return false;
    if (near->ids == nullptr || near->count > near->room) continue;  // none, or stopped
    max_so_far = std::max(max_so_far, block_max[b]);
    const size_t from = near->count;  // listing.cpp's kernel, dispatched: one call a block
    near->count += cpu::compress_at_least(values, end - start, max_so_far + near->below_max, false,
                                          near->ids + from, near->values + from, near->room - from);
    if (near->count > near->room) continue;  // stopped: the list is incomplete
    for (size_t i = from; i < near->count; ++i) near->ids[i] += static_cast<int32_t>(start);
  }
  return true;
}

// block_softmax_stats_pass without a near list or band. At t = 1, one loop: each vector is summed
// as it is read (AddExp, DirectExpFits), with no block max to wait for and no buffer (a block
// summed below its max is read again into it): a bf16 152k row's statistics 27.5 -> 22.4 us, a
// float32 one 25.8 -> 22.2 (Zen 4, one L2-resident row, medians of ten alternating runs), the
// bench's bf16 mix 0.915x (one thread). At other t,
// software-pipelined: block b's Exp and block b + 1's read in one loop, each vector of the buffer
// read by the Exp before the next block's replaces it. The read (widening, max, checks, stores)
// and the Exp (multiplies) load different units, which the two loops one after the other left
// idle in turn: a cached float32 128k row's statistics 30.0 -> 27.7 us, 64 bf16 152k rows in turn
// 43.0 -> 40.9 us (Zen 4, medians of 8 alternating runs of the micro-benchmarks). Each block's sum
// adds the same vectors in the same order as block_softmax_stats_pass: the same bits. Where the
// exp propagates NaN (kExpPropagatesNaN), NaN and +inf are found in the block's sum, not by a
// compare on every vector read. With kGroups, the read's max is taken by groups (GroupMaxima).
template <bool kDivide, bool kGroups, class Source>
bool block_softmax_stats_pipelined(Source src, size_t n, float t, size_t block,
                                   float* HWY_RESTRICT buffer, float* HWY_RESTRICT block_max,
                                   double* HWY_RESTRICT block_sums, ConvertedRow out,
                                   GroupMaxima groups) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const Quotient quotient(d, t);
  const Repetition repetition(out.seen, out.r);
  const bool repeat_lanes = out.seen != nullptr && Repetition::Vectorised(d);
  const bool may_overflow = out.r < 1.0f;
  constexpr bool kInPlace = !kDivide && std::is_same_v<Source, Float32Source>;
  BadLanes bad(d), overflowed(d);
  // The block being read: [start, end), into the buffer, its max so far in `max`.
  size_t start = 0, end = std::min(n, block);
  auto max = hn::Set(d, -kInf);
  // kGroups: `max` holds the group being read (groups tile the blocks, a power of two entries;
  // the row's last may be short), flushed at its end: its lane maxima stored, reduced once the
  // block is read, and folded into the block's lane maxima. The read itself is the same as
  // without: a group check a vector inside it cost the pass 16%, as GCC then kept the row
  // writer's branch in the loop.
  auto block_lanes_max = hn::Set(d, -kInf);
  size_t block_groups = 0, group = 0;
  bool group_open = false;  // read since the last flush
  HWY_ALIGN float group_lanes[kGroups ? kMaxBlockGroups * hn::MaxLanes(d) : 1];
  auto flush = [&]() {
    if constexpr (kGroups) {
      hn::Store(max, d, group_lanes + block_groups++ * lanes);
      block_lanes_max = hn::Max(block_lanes_max, max);
      max = hn::Set(d, -kInf);
      group_open = false;
    }
  };
  // The vector at start + i: whole, or the padded tail (its extra lanes -inf); as
  // block_softmax_stats_pass's read.
  auto read = [&](size_t i, auto whole_vector) HWY_ATTR {
    const size_t at = start + i;
    constexpr bool whole = decltype(whole_vector)::value;
    hn::Vec<decltype(d)> v;
    if constexpr (whole)
      v = src.Whole(d, at);
    else
      v = src.Tail(d, at, end - at);
    if constexpr (kDivide) v = quotient.Of(d, v);
    if constexpr (!kExpPropagatesNaN) bad.Check(d, v);
    if (!whole) v = hn::IfThenElse(hn::FirstN(d, end - at), v, hn::Set(d, -kInf));
    max = hn::Max(max, v);
    if constexpr (kGroups) group_open = true;
    if constexpr (kDivide) hn::StoreU(v, d, buffer + i);  // for the Exp (t = 1: summed as read)
    if (out.dst == nullptr) return v;
    auto written = v;
    if (repeat_lanes) {
      written = repetition.Where(d, at, v);  // the padded tail's -inf stays -inf
      if (may_overflow) overflowed.Check(d, written);
    }
    if (whole)
      hn::StoreU(written, d, out.dst + at);
    else
      StoreTail(d, written, out.dst + at, end - at);
    return v;
  };
  // The read block's max into *block_max; false if it held NaN / +inf or a penalty made +inf.
  auto finish = [&](float* block_max_out) {
    if (bad.Any(d) || overflowed.Any(d)) return false;
    if (out.seen != nullptr && !repeat_lanes && !repeat_seen(out, start, end)) return false;
    if constexpr (kGroups) {
      if (group_open) flush();  // the row's short last group
      *block_max_out = hn::GetLane(hn::MaxOfLanes(d, block_lanes_max));
      block_lanes_max = hn::Set(d, -kInf);
      for (size_t g = 0; g < block_groups; ++g)
        groups.max[group++] = hn::GetLane(hn::MaxOfLanes(d, hn::Load(d, group_lanes + g * lanes)));
      block_groups = 0;
    } else {
      *block_max_out = hn::GetLane(hn::MaxOfLanes(d, max));
    }
    return true;
  };
  const size_t blocks = (n + block - 1) / block;
  if (blocks == 0) return true;
  if constexpr (!kDivide) {
    // t = 1: no block max is needed before the Exp, so each block is summed as it is read
    // (AddExp, exp_block_sums_pass's direct arithmetic and order): two operations a vector fewer
    // than exp(x - max) and its sum, and no store and load of the block.
    for (size_t b = 0; b < blocks; ++b, start = end, end = std::min(n, end + block)) {
      PartialSums<decltype(d)> sum(d);
      max = hn::Set(d, -kInf);
      LineByLine prefetch(src.Address(end), src.Address(std::min(n, end + block)));
      const size_t size = end - start;
      bool by_words = false;
#if HWY_TARGET <= HWY_AVX3
      if constexpr (std::is_same_v<Source, BFloat16Source>) {
        by_words = out.dst == nullptr && out.seen == nullptr && size % 32 == 0 &&
                   Bf16BlockByWords<kGroups>(src.x + start, size, groups.group, sum, &block_max[b],
                                             groups.max + group, prefetch);
        if (kGroups && by_words) group += size / groups.group;
      }
#endif
      if (!by_words) {
        size_t i = 0;
        while (i + lanes <= size) {  // by groups (each from a group's start), or all at once
          const size_t stop = kGroups ? std::min(size, i + groups.group) : size;
          for (; i + lanes <= stop; i += lanes) {
            prefetch.Step();
            sum.AddExp(ExpTermOf(d, read(i, std::true_type())));
          }
          if (kGroups && (i & (groups.group - 1)) == 0) flush();  // a whole group read
        }
        if (i < size) sum.AddExp(ExpTermOf(d, read(i, std::false_type())));  // padded with -inf
        if (!finish(&block_max[b])) return false;
      }
      const float m = block_max[b];
      // Where the sum is kept, NaN and +inf make it NaN (kExpPropagatesNaN; a max may drop them).
      if (m == -kInf || DirectExpFits(m, end - start)) {
        const double total = sum.Total(d);
        block_sums[b] = m == -kInf ? 0.0 : DirectBlockSum(total, m);
        if (std::isnan(total)) return false;
      } else {  // summed relative to its max, as block_sum_below_max does: the block read again
        const float* values = reinterpret_cast<const float*>(src.Address(start));
        if constexpr (!kInPlace) {
          for_each_vector<false>(  // checked by the first read, or by the sum below
              src, start, end, quotient,
              [&](size_t at, auto v, auto) { hn::StoreU(v, d, buffer + (at - start)); },
              std::false_type());
          values = buffer;
        }
        block_sums[b] = block_sum_below_max(values, end - start, m, LineByLine());
        if (kExpPropagatesNaN && std::isnan(block_sums[b])) return false;
      }
    }
    return true;
  }
  auto read_rest = [&](size_t i) {  // the read block's vectors from i on
    for (; i + lanes <= end - start; i += lanes) {
      read(i, std::true_type());
      if (kGroups && ((i + lanes) & (groups.group - 1)) == 0) flush();
    }
    if (i < end - start) read(i, std::false_type());
  };
  read_rest(0);
  if (!finish(&block_max[0])) return false;
  for (size_t b = 0; b < blocks; ++b) {
    const size_t size = end - start;
    // Block b's values: in place, or in the buffer, where block b + 1's vector i replaces its
    // vector i once the Exp has read it (so not restrict).
    const float* values = kInPlace ? reinterpret_cast<const float*>(src.Address(start)) : buffer;
    const size_t next_size = b + 1 < blocks ? std::min(n, end + block) - end : 0;
    start = end;
    end += next_size;
    max = hn::Set(d, -kInf);
    size_t i = 0, next_read = 0;
    if (block_max[b] == -kInf) {
      // Max may have dropped a NaN (or +inf) for a later -inf in its lane: look again.
      if (kExpPropagatesNaN && first_bad(values, 0, size) >= 0) return false;
      block_sums[b] = 0;
    } else {  // exp_block_sums_pass's arithmetic and order
      const auto vmax = hn::Set(d, block_max[b]);
      PartialSums<decltype(d)> sum(d);
      // The block after the next streams in meanwhile, a line a vector (without it the read
      // waited on the row, as the two loops had).
      LineByLine prefetch(src.Address(end), src.Address(std::min(n, end + block)));
      // By groups (each from a group's start), or all at once.
      while (i + lanes <= next_size) {  // next_size <= size
        const size_t stop = kGroups ? std::min(next_size, i + groups.group) : next_size;
        for (; i + lanes <= stop; i += lanes) {
          prefetch.Step();
          sum.Add(ExpFlushToZero(d, hn::Sub(hn::LoadU(d, values + i), vmax)));
          read(i, std::true_type());
        }
        if (kGroups && (i & (groups.group - 1)) == 0) flush();  // a whole group read
      }
      next_read = i;
      for (; i + lanes <= size; i += lanes)
        sum.Add(ExpFlushToZero(d, hn::Sub(hn::LoadU(d, values + i), vmax)));
      if (i < size)
        sum.Add(ExpFlushToZero(d, hn::Sub(LoadTail(d, values + i, size - i, -kInf), vmax)));
      block_sums[b] = sum.Total(d);
      if (kExpPropagatesNaN && std::isnan(block_sums[b])) return false;
    }
    if (next_size == 0) break;
    read_rest(next_read);
    if (!finish(&block_max[b + 1])) return false;
  }
  return true;
}

double sum_exp_scaled_below(const void* HWY_RESTRICT src, DType dtype, size_t n, float a,
                            float below, float reference) {
  return with_source(src, dtype, [&](auto source) {
    const hn::ScalableTag<float> d;
    const size_t lanes = hn::Lanes(d);
    const auto va = hn::Set(d, a), vbelow = hn::Set(d, below);
    const auto negated = hn::Set(d, -reference);
    // Float partial sums of the statistics' blocks at most: the error the callers allow for
    // (kernels.hpp) is that of such sums.
    double total = 0;
    for (size_t start = 0; start < n; start += kStatisticsBlock) {
      const size_t end = std::min(n, start + kStatisticsBlock);
      PartialSums<decltype(d)> sum(d);
      auto add = [&](hn::Vec<decltype(d)> x, hn::Mask<decltype(d)> valid) {
        sum.AddExp(ExpTermOf(d, hn::MulAdd(x, va, negated)), hn::And(valid, hn::Lt(x, vbelow)));
      };
      size_t i = start;
      for (; i + lanes <= end; i += lanes) add(source.Whole(d, i), hn::FirstN(d, lanes));
      if (i < end) add(source.Tail(d, i, end - i), hn::FirstN(d, end - i));
      total += sum.Total(d);
    }
    return total;
  });
}

bool block_softmax_stats(const void* src, DType dtype, size_t n, float t, size_t block,
                         float* HWY_RESTRICT buffer, float* HWY_RESTRICT block_max,
                         double* HWY_RESTRICT block_sums, NearMax* near, ConvertedRow out,
                         ValueBand* band, GroupMaxima groups) {
  if (band != nullptr && band->bits == nullptr) band = nullptr;
  const bool pipelined = near->ids == nullptr && band == nullptr;
  // Groups of whole vectors, whole ones a block, come with the pipelined read.
  const bool read_groups = pipelined && groups.max != nullptr &&
                           std::has_single_bit(groups.group) && block % groups.group == 0 &&
                           block / groups.group <= kMaxBlockGroups &&
                           groups.group % hn::Lanes(hn::ScalableTag<float>()) == 0;
  return with_source(src, dtype, [&](auto source) {
    bool ok;
    if (pipelined) {
      auto pass = [&](auto divide, auto grouped) {
        return block_softmax_stats_pipelined<decltype(divide)::value, decltype(grouped)::value>(
            source, n, t, block, buffer, block_max, block_sums, out, groups);
      };
      if (read_groups)
        return t == 1.0f ? pass(std::false_type(), std::true_type())
                         : pass(std::true_type(), std::true_type());
      ok = t == 1.0f ? pass(std::false_type(), std::false_type())
                     : pass(std::true_type(), std::false_type());
    } else {
      ok = t == 1.0f ? block_softmax_stats_pass<false>(source, n, t, block, buffer, block_max,
                                                       block_sums, near, out, band)
                     : block_softmax_stats_pass<true>(source, n, t, block, buffer, block_max,
                                                      block_sums, near, out, band);
    }
    if (!ok || groups.max == nullptr) return ok;
    // Groups the read could not take (beside a near list or a band, which no caller asks for,
    // or not a power of two of whole vectors): a max pass of their own, divided as
    // quotient_block_maxima divides (by t > 0, monotone: the quotients' maxima).
    const size_t count = (n + groups.group - 1) / groups.group;
    return cpu::source_block_max(src, dtype, n, groups.group, groups.max) &&
           (t == 1.0f || cpu::divide(groups.max, count, t) < 0);
  });
}

}  // namespace lastmile::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lastmile::cpu {
HWY_EXPORT(block_softmax_stats);
HWY_EXPORT(sum_exp_scaled_below);

bool block_softmax_stats(const void* src, DType dtype, size_t n, float t, size_t block,
                         float* buffer, float* block_max, double* block_sums, NearMax* near,
                         ConvertedRow out, ValueBand* band, GroupMaxima groups) {
  return HWY_DYNAMIC_DISPATCH(block_softmax_stats)(src, dtype, n, t, block, buffer, block_max,
                                                   block_sums, near, out, band, groups);
}
double sum_exp_scaled_below(const void* src, DType dtype, size_t n, float a, float below,
                            float reference) {
  return HWY_DYNAMIC_DISPATCH(sum_exp_scaled_below)(src, dtype, n, a, below, reference);
}
}  // namespace lastmile::cpu
#endif
