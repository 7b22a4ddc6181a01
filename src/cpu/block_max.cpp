// lastmile — maxima by blocks of a caller's row, read in place (Highway; STYLE §5): top-k's group
// maxima and top-N's block maxima, bf16 read in its own bits; and counts of the entries at least
// a value. Exact.
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "cpu/kernels.hpp"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/block_max.cpp"  // this file, re-included once per target
#include <hwy/foreach_target.h>                 // must come before highway.h
#include <hwy/highway.h>
// Per-target helpers, after highway.h: re-included once per target.
#include "cpu/lanes-inl.hpp"
#include "cpu/read_ahead-inl.hpp"
#include "cpu/sources-inl.hpp"

HWY_BEFORE_NAMESPACE();
namespace lastmile::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Number of entries >= v. Exact.
template <class Source>
int64_t count_pass(Source src, size_t n, float v) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const auto vv = hn::Set(d, v);
  size_t count = 0, i = 0;
  for (; i + lanes <= n; i += lanes) count += hn::CountTrue(d, hn::Ge(src.Whole(d, i), vv));
  if (i < n)
    count += hn::CountTrue(d, hn::And(hn::FirstN(d, n - i), hn::Ge(src.Tail(d, i, n - i), vv)));
  return static_cast<int64_t>(count);
}

// The max of entries [i, i + 4 * kQuads * lanes) of src, four vectors at a time, the vectors
// checked by their sums: NaN and +inf survive an addition (-inf makes neither, NaN stays NaN), so
// one test covers four vectors. A sum can overflow with no bad entry (the caller then checks
// vector by vector); exact_check tests each vector instead.
template <size_t kQuads, class D, class Source>
HWY_INLINE hn::Vec<D> QuadsMax(D d, Source src, size_t i, bool exact_check, BadLanes<D>& bad) {
  const size_t lanes = hn::Lanes(d);
  auto check = [&](auto v0, auto v1, auto v2, auto v3) {
    if (exact_check) {
      bad.Check(d, v0);
      bad.Check(d, v1);
      bad.Check(d, v2);
      bad.Check(d, v3);
    } else {
      bad.Check(d, hn::Add(hn::Add(v0, v1), hn::Add(v2, v3)));
    }
  };
  // The first quad starts the four maxima: a max with -inf per vector cost a group of 64 entries
  // (one quad on AVX3) half its max operations.
  auto max0 = src.Whole(d, i), max1 = src.Whole(d, i + lanes);
  auto max2 = src.Whole(d, i + 2 * lanes), max3 = src.Whole(d, i + 3 * lanes);
  check(max0, max1, max2, max3);
  for (size_t q = 1; q < kQuads; ++q) {
    i += 4 * lanes;
    const auto v0 = src.Whole(d, i), v1 = src.Whole(d, i + lanes);
    const auto v2 = src.Whole(d, i + 2 * lanes), v3 = src.Whole(d, i + 3 * lanes);
    check(v0, v1, v2, v3);
    max0 = hn::Max(max0, v0);
    max1 = hn::Max(max1, v1);
    max2 = hn::Max(max2, v2);
    max3 = hn::Max(max3, v3);
  }
  return hn::Max(hn::Max(max0, max1), hn::Max(max2, max3));
}

// Each block's max of a caller's row (blocks of `block` entries, the last may be shorter) into
// block_max; false on a NaN or +inf (then checked vector by vector, so an overflowing sum of
// finite entries is not one). Whole blocks of 1, 2, 4 or 8 quads (top-k's groups of 64 to 512
// entries) take an unrolled loop with no tail, whole blocks of a multiple of 8 quads (the
// statistics' 2048) loops of 8 quads; the rest loop over quads. Any order gives the same max:
// only a -0 / +0 pair can differ, and they compare equal wherever a max is used.
template <class Source>
bool block_max_pass(Source src, size_t n, size_t block, float* HWY_RESTRICT block_max,
                    bool exact_check = false) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  BadLanes bad(d);
  ReadAhead ahead(src.Address(0), src.Address(n));
  size_t start = 0, b = 0;
  auto whole_blocks = [&](auto quads) {
    for (; start + block <= n; start += block, ++b) {
      ahead.Reached(src.Address(start));
      block_max[b] = hn::GetLane(
          hn::MaxOfLanes(d, QuadsMax<decltype(quads)::value>(d, src, start, exact_check, bad)));
    }
  };
  if (block == 4 * lanes) whole_blocks(std::integral_constant<size_t, 1>());
  if (block == 8 * lanes) whole_blocks(std::integral_constant<size_t, 2>());
  if (block == 16 * lanes) whole_blocks(std::integral_constant<size_t, 4>());
  if (block == 32 * lanes) whole_blocks(std::integral_constant<size_t, 8>());
  if (block % (32 * lanes) == 0) {
    for (; start + block <= n; start += block, ++b) {
      ahead.Reached(src.Address(start));
      auto max = QuadsMax<8>(d, src, start, exact_check, bad);
      for (size_t i = start + 32 * lanes; i < start + block; i += 32 * lanes) {
        ahead.Reached(src.Address(i));
        max = hn::Max(max, QuadsMax<8>(d, src, i, exact_check, bad));
      }
      block_max[b] = hn::GetLane(hn::MaxOfLanes(d, max));
    }
  }
  for (; start < n; start += block, ++b) {
    const size_t end = std::min(n, start + block);
    auto max = hn::Set(d, -kInf);
    size_t i = start;
    for (; i + 4 * lanes <= end; i += 4 * lanes) {
      ahead.Reached(src.Address(i));
      max = hn::Max(max, QuadsMax<1>(d, src, i, exact_check, bad));
    }
    for (; i + lanes <= end; i += lanes) {
      const auto v = src.Whole(d, i);
      bad.Check(d, v);
      max = hn::Max(max, v);
    }
    if (i < end) {
      const auto v =
          hn::IfThenElse(hn::FirstN(d, end - i), src.Tail(d, i, end - i), hn::Set(d, -kInf));
      bad.Check(d, v);
      max = hn::Max(max, v);
    }
    block_max[b] = hn::GetLane(hn::MaxOfLanes(d, max));
  }
  if (bad.Any(d) && !exact_check) return block_max_pass(src, n, block, block_max, true);
  return !bad.Any(d);
}

// block_max_pass over bf16 in its own bits, no widening: twice the lanes a vector and a third of
// the operations (load, signed max, unsigned max against load, widen, shift, max and a check),
// where a 152k row's block maxima took 7.6 us against 4.3 for the roofline's read (Zen 4, 64 rows
// from L3). Non-negative bf16 values order as their bits taken as signed 16-bit integers,
// negative ones the other way, so a block's max is its largest signed bits when any is
// non-negative (the sign bit clear), else its smallest (rare: read again). NaN and +inf are the
// signed bits above 0x7f7f, or the unsigned ones above 0xff80 (NaN with the sign set); each block's
// signed max and the row's unsigned one show them. -0 and +0 may come out either way, as in
// block_max_pass.
bool bf16_block_max_pass(const uint16_t* HWY_RESTRICT x, size_t n, size_t block,
                         float* HWY_RESTRICT block_max) {
  const hn::ScalableTag<int16_t> d;
  const hn::RebindToUnsigned<decltype(d)> du;
  const size_t lanes = hn::Lanes(d);
  const auto* bits = reinterpret_cast<const int16_t*>(x);
  constexpr int16_t kLowest = std::numeric_limits<int16_t>::min(), kHighest = 0x7fff;
  auto unsigned_max = hn::Zero(du);
  int16_t signed_max = kLowest;
  auto as_float = [](int16_t b) {
    return std::bit_cast<float>(static_cast<uint32_t>(static_cast<uint16_t>(b)) << 16);
  };
  ReadAhead ahead(reinterpret_cast<uintptr_t>(x), reinterpret_cast<uintptr_t>(x + n));
  for (size_t start = 0, b = 0; start < n; start += block, ++b) {
    const size_t end = std::min(n, start + block);
    auto max = hn::Set(d, kLowest);
    size_t i = start;
    for (; i + lanes <= end; i += lanes) {
      ahead.Reached(reinterpret_cast<uintptr_t>(bits + i));
      const auto v = hn::LoadU(d, bits + i);
      max = hn::Max(max, v);
      unsigned_max = hn::Max(unsigned_max, hn::BitCast(du, v));
    }
    const size_t tail = end - i;
    HWY_ALIGN int16_t padded[hn::MaxLanes(d)] = {};  // unsigned 0: no NaN
    if (tail > 0) {
      std::memcpy(padded, bits + i, tail * sizeof(int16_t));
      const auto v = hn::Load(d, padded);
      max = hn::Max(max, hn::IfThenElse(hn::FirstN(d, tail), v, hn::Set(d, kLowest)));
      unsigned_max = hn::Max(unsigned_max, hn::BitCast(du, v));
    }
    int16_t block_bits = hn::GetLane(hn::MaxOfLanes(d, max));
    signed_max = std::max(signed_max, block_bits);
    if (block_bits < 0) {  // every entry negative: the smallest bits are the largest value
      auto min = hn::Set(d, kHighest);
      for (i = start; i + lanes <= end; i += lanes) min = hn::Min(min, hn::LoadU(d, bits + i));
      if (tail > 0)
        min = hn::Min(
            min, hn::IfThenElse(hn::FirstN(d, tail), hn::Load(d, padded), hn::Set(d, kHighest)));
      block_bits = hn::GetLane(hn::MinOfLanes(d, min));
    }
    block_max[b] = as_float(block_bits);
  }
  constexpr int16_t kPositiveInf = 0x7f80;
  constexpr uint16_t kNegativeInf = 0xff80;
  return signed_max < kPositiveInf && hn::GetLane(hn::MaxOfLanes(du, unsigned_max)) <= kNegativeInf;
}

bool source_block_max(const void* HWY_RESTRICT src, DType dtype, size_t n, size_t block,
                      float* HWY_RESTRICT block_max) {
  if (dtype == DType::bf16)
    return bf16_block_max_pass(static_cast<const uint16_t*>(src), n, block, block_max);
  return with_source(src, dtype,
                     [&](auto source) { return block_max_pass(source, n, block, block_max); });
}

int64_t count_at_least(const float* HWY_RESTRICT x, size_t n, float v) {
  return count_pass(Float32Source{x}, n, v);
}

int64_t count_source_at_least(const void* HWY_RESTRICT src, DType dtype, size_t n, float v) {
  return with_source(src, dtype, [&](auto source) { return count_pass(source, n, v); });
}

}  // namespace lastmile::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lastmile::cpu {
HWY_EXPORT(count_at_least);
HWY_EXPORT(count_source_at_least);
HWY_EXPORT(source_block_max);

int64_t count_at_least(const float* x, size_t n, float v) {
  return HWY_DYNAMIC_DISPATCH(count_at_least)(x, n, v);
}
int64_t count_source_at_least(const void* src, DType dtype, size_t n, float v) {
  return HWY_DYNAMIC_DISPATCH(count_source_at_least)(src, dtype, n, v);
}
bool source_block_max(const void* src, DType dtype, size_t n, size_t block, float* block_max) {
  return HWY_DYNAMIC_DISPATCH(source_block_max)(src, dtype, n, block, block_max);
}
}  // namespace lastmile::cpu
#endif
