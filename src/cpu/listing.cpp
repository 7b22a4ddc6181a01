// lastmile — kernels that list a row's entries, in id order (Highway; STYLE §5): (id, value) of
// those at least a threshold, from a float32 row or from a caller's row read in place (whole,
// or by groups); the ids in a value range, and that range's smallest and largest; (id, value) of
// those a bitmap marks. Compressed a vector at a time (cpu/compress-inl.hpp).
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cpu/kernels.hpp"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/listing.cpp"  // this file, re-included once per target
#include <hwy/foreach_target.h>               // must come before highway.h
#include <hwy/highway.h>
// Per-target helpers, after highway.h: re-included once per target.
#include "cpu/compress-inl.hpp"
#include "cpu/lanes-inl.hpp"
#include "cpu/quotient-inl.hpp"
#include "cpu/sources-inl.hpp"

HWY_BEFORE_NAMESPACE();
namespace lastmile::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Appends (id, value) of every entry with value >= threshold (strictly greater when `strict`),
// in id order; returns how many, or stops early and returns a count > limit once more than
// `limit` entries passed. ids / values need room for n + kCompressSlack entries: whole vectors are
// stored past the count (the register form of compress; AMD Zen 4 microcodes the memory form,
// which made this kernel 10x slower there).
size_t compress_at_least(const float* HWY_RESTRICT x, size_t n, float threshold, bool strict,
                         int32_t* HWY_RESTRICT ids, float* HWY_RESTRICT values, size_t limit) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const size_t lanes = hn::Lanes(d);
  const auto vthr = hn::Set(d, threshold);
  size_t count = 0, i = 0;
  auto kept_by = [&](hn::Vec<decltype(d)> v) { return strict ? hn::Gt(v, vthr) : hn::Ge(v, vthr); };
  // Four vectors a step (StoreKeptOfFour): one branch for four. A flat row's min-p near list (a
  // tenth of each block kept, from L1) mispredicted a branch a vector and took 14% of such a row.
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    const hn::Vec<decltype(d)> v[4] = {hn::LoadU(d, x + i), hn::LoadU(d, x + i + lanes),
                                       hn::LoadU(d, x + i + 2 * lanes),
                                       hn::LoadU(d, x + i + 3 * lanes)};
    const hn::Mask<decltype(d)> keep[4] = {kept_by(v[0]), kept_by(v[1]), kept_by(v[2]),
                                           kept_by(v[3])};
    if (hn::AllFalse(d, hn::Or(hn::Or(keep[0], keep[1]), hn::Or(keep[2], keep[3])))) continue;
    count = StoreKeptOfFour(d, keep, i, ids, count, v, values);
    if (count > limit) return count;
  }
  for (; i + lanes <= n; i += lanes) {
    const auto v = hn::LoadU(d, x + i);
    const auto keep = kept_by(v);
    if (hn::AllFalse(d, keep)) continue;
    hn::StoreU(CompressKeptIds(d, keep, i), di, ids + count);
    hn::StoreU(CompressKept(d, v, keep), d, values + count);
    count += hn::CountTrue(d, keep);
    if (count > limit) return count;
  }
  for (; i < n; ++i) {
    if (strict ? x[i] > threshold : x[i] >= threshold) {
      ids[count] = static_cast<int32_t>(i);
      values[count++] = x[i];
    }
  }
  return count;
}

// The indices of the entries in [lo, hi), in order; stops once more than `limit` passed (a count
// > limit). Every vector compressed, without a branch: top-p narrows a flat row's band (8k
// entries) to a few hundred, which a third of the vectors hold, and the scalar loop this replaced
// (a branch an entry) cost 4 of such a row's 52 us.
size_t list_between(const float* HWY_RESTRICT x, size_t n, float lo, float hi,
                    uint32_t* HWY_RESTRICT at, size_t limit) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const size_t lanes = hn::Lanes(d);
  const auto vlo = hn::Set(d, lo), vhi = hn::Set(d, hi);
  size_t count = 0, i = 0;
  auto list = [&](hn::Vec<decltype(d)> v, hn::Mask<decltype(d)> valid) {
    const auto keep = hn::And(valid, hn::AndNot(hn::Lt(v, vlo), hn::Lt(v, vhi)));
    hn::StoreU(CompressKeptIds(d, keep, i), di, reinterpret_cast<int32_t*>(at) + count);
    count += hn::CountTrue(d, keep);
  };
  for (; i + lanes <= n && count <= limit; i += lanes)
    list(hn::LoadU(d, x + i), hn::FirstN(d, lanes));
  if (i < n && count <= limit) list(LoadTail(d, x + i, n - i, lo), hn::FirstN(d, n - i));
  return count;
}

// The smallest and largest of the entries in [lo, hi) (+inf and -inf when none): whether a range
// of a top-p walk holds one value, in one vector pass where a scalar histogram pass cost 10 times
// as long.
void min_max_between(const float* HWY_RESTRICT x, size_t n, float lo, float hi, float* min,
                     float* max) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const auto vlo = hn::Set(d, lo), vhi = hn::Set(d, hi);
  const auto pos_inf = hn::Set(d, kInf), neg_inf = hn::Set(d, -kInf);
  auto smallest = pos_inf, largest = neg_inf;
  auto take = [&](hn::Vec<decltype(d)> v, hn::Mask<decltype(d)> valid) {
    const auto in = hn::And(valid, hn::AndNot(hn::Lt(v, vlo), hn::Lt(v, vhi)));
    smallest = hn::Min(smallest, hn::IfThenElse(in, v, pos_inf));
    largest = hn::Max(largest, hn::IfThenElse(in, v, neg_inf));
  };
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) take(hn::LoadU(d, x + i), hn::FirstN(d, lanes));
  if (i < n) take(LoadTail(d, x + i, n - i, lo), hn::FirstN(d, n - i));
  *min = hn::GetLane(hn::MinOfLanes(d, smallest));
  *max = hn::GetLane(hn::MaxOfLanes(d, largest));
}

// Whether four vectors' entries are all below vthr (then none is NaN or +inf).
template <class D, class V>
HWY_INLINE bool AllBelow(D d, V vthr, V v0, V v1, V v2, V v3) {
  return hn::AllTrue(d, hn::And(hn::And(hn::Lt(v0, vthr), hn::Lt(v1, vthr)),
                                hn::And(hn::Lt(v2, vthr), hn::Lt(v3, vthr))));
}

// compress_at_least over src[from, to) of a caller's row, read in place and widened: appends
// (id, value) of entries >= threshold, id order (ids index src), at ids / values; returns how
// many, or stops once more than `limit` passed (a count > limit: at most 4 vectors more, which
// kCompressSlack holds). seen_bad notes any NaN / +inf read (then the list is meaningless).
template <class Source, class D>
HWY_INLINE size_t compress_source_range(D d, Source src, size_t from, size_t to, float threshold,
                                        int32_t* HWY_RESTRICT ids, float* HWY_RESTRICT values,
                                        BadLanes<D>& seen_bad, size_t limit) {
  static_assert(4 * hn::MaxLanes(D()) <= kCompressSlack, "the overshoot past the limit fits");
  const hn::RebindToSigned<decltype(d)> di;
  const size_t lanes = hn::Lanes(d);
  const auto vthr = hn::Set(d, threshold);
  size_t count = 0;
  auto append = [&](size_t i, hn::Vec<decltype(d)> v, hn::Mask<decltype(d)> keep) {
    hn::StoreU(CompressKeptIds(d, keep, i), di, ids + count);
    hn::StoreU(CompressKept(d, v, keep), d, values + count);
    count += hn::CountTrue(d, keep);
  };
  size_t i = from;
  // One branch per four vectors: a group all of whose entries are below the threshold is
  // skipped, the others are checked and compressed without a branch per vector. A branch per
  // vector (mispredicted where a quarter of the vectors pass) cost 40% of the pass on Zen 4 (69
  // -> 49 us per topk_topp row), but compressing every vector cost AVX2, whose compress is a
  // table lookup and a permutation, 25 instructions a vector where top-k lists a few hundred
  // entries of a 128k row (4% of the vectors pass, 14% of the groups). An entry below the
  // threshold is neither NaN nor +inf, so a skipped group needs no check either.
  for (; i + 4 * lanes <= to; i += 4 * lanes) {
    const auto v0 = src.Whole(d, i), v1 = src.Whole(d, i + lanes);
    const auto v2 = src.Whole(d, i + 2 * lanes), v3 = src.Whole(d, i + 3 * lanes);
    if (AllBelow(d, vthr, v0, v1, v2, v3)) continue;
    seen_bad.Check(d, v0);
    seen_bad.Check(d, v1);
    seen_bad.Check(d, v2);
    seen_bad.Check(d, v3);
    const auto k0 = hn::Ge(v0, vthr), k1 = hn::Ge(v1, vthr);
    const auto k2 = hn::Ge(v2, vthr), k3 = hn::Ge(v3, vthr);
    append(i, v0, k0);
    append(i + lanes, v1, k1);
    append(i + 2 * lanes, v2, k2);
    append(i + 3 * lanes, v3, k3);
    if (count > limit) return count;
  }
  for (; i + lanes <= to; i += lanes) {
    const auto v = src.Whole(d, i);
    seen_bad.Check(d, v);
    append(i, v, hn::Ge(v, vthr));
    if (count > limit) return count;
  }
  if (i < to) {
    const auto valid = hn::FirstN(d, to - i);
    const auto v = src.Tail(d, i, to - i);  // padded with zeros: masked out below
    seen_bad.Note(d, hn::And(valid, NaNOrPositiveInf(d, v)));
    append(i, v, hn::And(valid, hn::Ge(v, vthr)));
  }
  return count;
}

// The same over src[0, n): *bad whether NaN / +inf was seen.
template <class Source>
size_t compress_source_pass(Source src, size_t n, float threshold, int32_t* HWY_RESTRICT ids,
                            float* HWY_RESTRICT values, bool* bad, size_t limit) {
  const hn::ScalableTag<float> d;
  BadLanes seen_bad(d);
  const size_t count = compress_source_range(d, src, 0, n, threshold, ids, values, seen_bad, limit);
  *bad = seen_bad.Any(d);
  return count;
}

size_t compress_source(const void* src, DType dtype, size_t n, float threshold,
                       int32_t* HWY_RESTRICT ids, float* HWY_RESTRICT values, bool* bad,
                       size_t limit) {
  return with_source(src, dtype, [&](auto source) {
    return compress_source_pass(source, n, threshold, ids, values, bad, limit);
  });
}

// compress_source_range for groups that hold one or two passing entries each (top-k's, whose max
// reaches the k-th largest max): the four vectors' masks make one word and the entries are
// appended without a branch, where two compresses a vector took about 500 ns of a 32k row's 50
// groups of 64 (this: 400; micro-benchmark, AVX-512 Xeon). Used for min-p's listing too, it made
// the bench's serving_mix 4% slower: those groups hold more, or none in most vectors.
template <class Source, class D>
HWY_INLINE size_t list_sparse_range(D d, Source src, size_t from, size_t to, float threshold,
                                    int32_t* HWY_RESTRICT ids, float* HWY_RESTRICT values,
                                    BadLanes<D>& seen_bad, size_t limit) {
  constexpr size_t kQuad = 4 * hn::MaxLanes(D());
  static_assert(kQuad <= 64 && kQuad <= kCompressSlack, "a quad's bits fit a word");
  constexpr bool kFloat32 = std::is_same_v<Source, Float32Source>;  // read again, not converted
  const size_t lanes = hn::Lanes(d);
  const uint64_t lane_bits = lanes == 64 ? ~uint64_t{0} : (uint64_t{1} << lanes) - 1;
  const auto vthr = hn::Set(d, threshold);
  HWY_ALIGN float quad[kQuad];
  size_t count = 0, i = from;
  for (; i + 4 * lanes <= to; i += 4 * lanes) {
    // A quad with nothing to list is skipped as compress_source_range skips it (groups of 128 or
    // more hold empty ones): below the threshold, none is NaN or +inf.
    const auto v0 = src.Whole(d, i), v1 = src.Whole(d, i + lanes);
    const auto v2 = src.Whole(d, i + 2 * lanes), v3 = src.Whole(d, i + 3 * lanes);
    if (AllBelow(d, vthr, v0, v1, v2, v3)) continue;
    uint64_t passing = 0;
    auto note = [&](size_t q, hn::Vec<D> v) {
      seen_bad.Check(d, v);
      if constexpr (!kFloat32) hn::Store(v, d, quad + q * lanes);
      uint8_t bytes[8] = {};
      hn::StoreMaskBits(d, hn::Ge(v, vthr), bytes);
      uint64_t bits;
      std::memcpy(&bits, bytes, sizeof(bits));
      passing |= (bits & lane_bits) << (q * lanes);
    };
    note(0, v0);
    note(1, v1);
    note(2, v2);
    note(3, v3);
    // The first two without a branch (past the passing ones, writes the next append overwrites,
    // within the slack), any more in a loop: a loop for all mispredicted its exit.
    auto append = [&](size_t at) {
      ids[count] = static_cast<int32_t>(i + at);
      if constexpr (kFloat32) {
        values[count] = src.x[i + at];
      } else {
        values[count] = quad[at];
      }
    };
    const auto passed = static_cast<size_t>(std::popcount(passing));
    append(std::min<size_t>(std::countr_zero(passing), 4 * lanes - 1));
    count += passed > 0;
    passing &= passing - 1;
    append(std::min<size_t>(std::countr_zero(passing), 4 * lanes - 1));
    count += passed > 1;
    passing &= passing - 1;
    for (; passing != 0; passing &= passing - 1) {
      append(static_cast<size_t>(std::countr_zero(passing)));
      ++count;
    }
    if (count > limit) return count;
  }
  if (i == to) return count;
  return count + compress_source_range(d, src, i, to, threshold, ids + count, values + count,
                                       seen_bad, limit - count);
}

size_t compress_source_groups(const void* src, DType dtype, size_t n, size_t group,
                              const int32_t* HWY_RESTRICT groups, size_t count, float threshold,
                              bool few_each, int32_t* HWY_RESTRICT ids, float* HWY_RESTRICT values,
                              bool* bad, size_t limit) {
  return with_source(src, dtype, [&](auto source) {
    const hn::ScalableTag<float> d;
    BadLanes seen_bad(d);
    size_t listed = 0;
    for (size_t g = 0; g < count; ++g) {
      const size_t from = static_cast<size_t>(groups[g]) * group;
      const size_t to = std::min(n, from + group);
      listed += few_each ? list_sparse_range(d, source, from, to, threshold, ids + listed,
                                             values + listed, seen_bad, limit - listed)
                         : compress_source_range(d, source, from, to, threshold, ids + listed,
                                                 values + listed, seen_bad, limit - listed);
      if (listed > limit) break;
    }
    *bad = seen_bad.Any(d);
    return listed;
  });
}

// (id, src / t) of the entries a bitmap marks, id order. A word at a time: a flat row's band
// marks about 6% of it, so nearly every word holds a mark and the skip is predictable; within one,
// every vector is compressed without a branch (a third of 16-lane vectors hold none). The bit by
// bit walk this replaced cost 15 of a flat top-p row's 80 us, its exits mispredicted.
template <bool kDivide, class Source>
size_t list_marked_pass(Source src, size_t n, float t, const uint8_t* HWY_RESTRICT bits,
                        int32_t* HWY_RESTRICT ids, float* HWY_RESTRICT values, size_t limit) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const size_t lanes = hn::Lanes(d);
  static_assert(64 % hn::MaxLanes(d) == 0, "a word holds whole vectors");
  static_assert(std::endian::native == std::endian::little,
                "a word's low bits are its first bytes");
  const Quotient quotient(d, t);
  size_t count = 0;
  auto list = [&](size_t i, hn::Vec<decltype(d)> v, uint64_t lane_bits) {
    // LoadMaskBits reads the low lanes' bits.
    const auto keep = hn::LoadMaskBits(d, reinterpret_cast<const uint8_t*>(&lane_bits));
    if constexpr (kDivide) v = quotient.Of(d, v);
    hn::StoreU(CompressKeptIds(d, keep, i), di, ids + count);
    hn::StoreU(CompressKept(d, v, keep), d, values + count);
    count += hn::CountTrue(d, keep);
  };
  const size_t whole = n / 64 * 64;
  for (size_t start = 0; start < whole; start += 64) {
    uint64_t word;
    std::memcpy(&word, bits + start / 8, 8);
    if (word == 0) continue;
    if (count + 64 > limit) return limit + 1;  // the word's marks could pass it
    for (size_t i = start; i < start + 64; i += lanes)
      list(i, src.Whole(d, i), word >> (i - start));
  }
  if (whole == n) return count;
  uint64_t word = 0;  // no byte past (n + 7) / 8 read, no bit past n kept
  std::memcpy(&word, bits + whole / 8, (n - whole + 7) / 8);
  word &= (uint64_t{1} << (n - whole)) - 1;
  if (count + 64 > limit) return limit + 1;
  for (size_t i = whole; i < n; i += lanes)
    list(i, i + lanes <= n ? src.Whole(d, i) : src.Tail(d, i, n - i), word >> (i - whole));
  return count;
}

size_t list_marked(const void* src, DType dtype, size_t n, float t,
                   const uint8_t* HWY_RESTRICT bits, int32_t* HWY_RESTRICT ids,
                   float* HWY_RESTRICT values, size_t limit) {
  return with_source(src, dtype, [&](auto source) {
    return t == 1.0f ? list_marked_pass<false>(source, n, t, bits, ids, values, limit)
                     : list_marked_pass<true>(source, n, t, bits, ids, values, limit);
  });
}

}  // namespace lastmile::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lastmile::cpu {
HWY_EXPORT(compress_at_least);
HWY_EXPORT(list_between);
HWY_EXPORT(min_max_between);
HWY_EXPORT(compress_source);
HWY_EXPORT(compress_source_groups);
HWY_EXPORT(list_marked);

size_t compress_at_least(const float* x, size_t n, float threshold, bool strict, int32_t* ids,
                         float* values, size_t limit) {
  return HWY_DYNAMIC_DISPATCH(compress_at_least)(x, n, threshold, strict, ids, values, limit);
}
size_t list_between(const float* x, size_t n, float lo, float hi, uint32_t* at, size_t limit) {
  return HWY_DYNAMIC_DISPATCH(list_between)(x, n, lo, hi, at, limit);
}
void min_max_between(const float* x, size_t n, float lo, float hi, float* min, float* max) {
  HWY_DYNAMIC_DISPATCH(min_max_between)(x, n, lo, hi, min, max);
}
size_t compress_source(const void* src, DType dtype, size_t n, float threshold, int32_t* ids,
                       float* values, bool* bad, size_t limit) {
  return HWY_DYNAMIC_DISPATCH(compress_source)(src, dtype, n, threshold, ids, values, bad, limit);
}
size_t compress_source_groups(const void* src, DType dtype, size_t n, size_t group,
                              const int32_t* groups, size_t count, float threshold, bool few_each,
                              int32_t* ids, float* values, bool* bad, size_t limit) {
  return HWY_DYNAMIC_DISPATCH(compress_source_groups)(src, dtype, n, group, groups, count,
                                                      threshold, few_each, ids, values, bad, limit);
}
size_t list_marked(const void* src, DType dtype, size_t n, float t, const uint8_t* bits,
                   int32_t* ids, float* values, size_t limit) {
  return HWY_DYNAMIC_DISPATCH(list_marked)(src, dtype, n, t, bits, ids, values, limit);
}
}  // namespace lastmile::cpu
#endif
