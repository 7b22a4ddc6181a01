// lastmile — row passes for the CPU backend (Highway; STYLE §5). Each is one streaming pass over
// a row; summation order is fixed per target (lane-wise partial sums, then lanes in order).
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "cpu/kernels.hpp"
#include "cpu/prefetch.hpp"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/row_ops.cpp"  // this file, re-included once per target
#include <hwy/cache_control.h>
#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>
// clang-format off: Highway's math after highway.h, re-included per target
#include <hwy/contrib/math/math-inl.h>

#include "cpu/compress-inl.hpp"
#include "cpu/quotient-inl.hpp"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace lastmile::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kExpFlushBelow = -86.9f;

// The blocks (of at most 2048 entries) whose max lets the statistics at t = 1 sum exp(x) itself
// (AddExp: no subtraction, the add fused), scaled by exp(-max) in double after: up to 80, no float
// partial sum overflows (a block's 2048 entries of at most e^80 add up to under 2^127), and from
// -40 the entries the exp flushes (x < -86.9) lie e^-46.9 or more below the block's max, where they
// add nothing to its float sum. Other blocks sum exp(x - max), as at other temperatures. Each
// direct term, rounded to float, lies within 4.6e-7 of exp(x), relative (6.6 ULP, at 79.8; 3.9e-7
// and 6.0 ULP below 0), monotone: checked offline over every float in [-86.9, 80]; other targets
// take ExpFlushToZero's polynomial up to 80 (DirectTermsHoldTheirBound holds them to 4.6e-7 too).
inline bool DirectExpFits(float max, size_t block) {
  return max >= -40.0f && max <= 80.0f && block <= 2048;
}
// Such a block's sum of exp(x - max) from its direct sum of exp(x): both loops take it here, so
// that they keep each other's bits.
inline double DirectBlockSum(double sum_of_exp, float max) {
  return sum_of_exp * std::exp(-static_cast<double>(max));
}

// The first index in [from, n) holding NaN or +inf, or -1. The vector loops flag whether any
// full vector held one: if none did, only the scalar tail is scanned.
int64_t first_bad(const float* x, size_t from, size_t n) {
  for (size_t j = from; j < n; ++j)
    if (std::isnan(x[j]) || x[j] == kInf) return static_cast<int64_t>(j);
  return -1;
}

// ExpFlushToZero's last step: y * 2^k, or 0 where x < kExpFlushBelow; k added to y's exponent
// bits (k is t's low bits: the bias bits shift out), exact while the product stays normal, as it
// does over the range kept. NaN's payload, which no caller passes, the shift moves into the
// exponent.
template <class D, class V>
HWY_INLINE V ScaledOrFlushed(D d, V y, V t, V x) {
  const hn::RebindToSigned<D> di;
  const auto scaled = hn::Add(hn::BitCast(di, y), hn::ShiftLeft<23>(hn::BitCast(di, t)));
  return hn::IfThenZeroElse(hn::Lt(x, hn::Set(d, kExpFlushBelow)), hn::BitCast(d, scaled));
}

// exp(x) for x <= 0, as the softmax kernels need it (x - max; and up to 80 for the statistics at
// t = 1, DirectExpFits): relative error below 4.1e-7 (at most 5.01 ULP, near the bottom of the
// range; 2.74 ULP above -20) and monotone (all three checked over every float in [-86.9, 0]);
// below -86.9 it flushes to 0, so the scaling by 2^k never leaves the normal range. Reduction by ln
// 2 rounded to float in one FMA (its error grows with |k|: the larger errors sit on weights that
// add nothing to a softmax sum; targets without FMA take ln 2 in two parts, Cody and Waite's way),
// a degree-5 polynomial (coefficients fitted for relative error 1.05e-7 on |r| <= ln 2 / 2), and
// 2^k applied exactly (ScaledOrFlushed). Seven multiplies a vector, where the 1-ULP version (a
// two-part ln 2 and degree 6) took nine: the exp passes are compute-bound, and exp_block_sums over
// a cached 128k row went 42.3 -> 34.4 us on Zen 3 (the two builds timed in turns). 1 + r + r^2
// p(r), not Horner's form to the end, keeps it monotone. AVX-512 targets take the table exp below
// instead.
template <class D, class V>
HWY_INLINE V ExpFlushToZero(D d, V x) {
  const auto round_bias = hn::Set(d, 12582912.0f);  // 1.5 * 2^23: t's low bits hold round(x/ln 2)
  const auto t = hn::MulAdd(x, hn::Set(d, 1.44269504088896341f), round_bias);
  const auto k = hn::Sub(t, round_bias);
#if HWY_NATIVE_FMA
  const auto r = hn::MulAdd(k, hn::Set(d, -0.693147182464599609375f), x);  // ln 2 as a float
#else  // k * ln 2 would round before the subtraction: ln 2 in two parts, k * the first exact
  auto r = hn::MulAdd(k, hn::Set(d, -0.693145751953125f), x);
  r = hn::MulAdd(k, hn::Set(d, -1.428606765330187045e-6f), r);
#endif
  auto p = hn::Set(d, 8.312525089e-03f);  // exp(r) = 1 + r + r^2 p(r)
  p = hn::MulAdd(p, r, hn::Set(d, 4.189011361e-02f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.666711446e-01f));
  p = hn::MulAdd(p, r, hn::Set(d, 4.999923179e-01f));
  const auto y = hn::Add(hn::MulAdd(p, hn::Mul(r, r), r), hn::Set(d, 1.0f));
  return ScaledOrFlushed(d, y, t, x);
}
#if HWY_TARGET <= HWY_AVX3
// AVX-512's exp: 2^(j/32) from a table of 32 lanes (one vpermt2d), which leaves |r| <= ln 2 / 64,
// where a quadratic holds: exp(x) = 2^k 2^(j/32) (1 + c1 r + r^2 / 2), x = (32k + j) ln 2 / 32 + r.
// Two multiplies a vector fewer than the polynomial above; 2^k goes into the table entry's
// exponent by an integer add, the entry stored less j's share of t's shifted bits. The exp passes
// are compute-bound: 64 bf16 152k rows' statistics took 0.94x the time of a 16-lane table with a
// cubic (Zen 4, timed in turns, medians of 60 rounds). c1 near 1 + (ln 2 / 64)^2 / 8 (1 + 123
// ULP), which levels the quadratic's error over |r| <= ln 2 / 64, lowered to 1 + 120 ULP (the
// best ULP bound of a grid), and the entries rounded down: the reduction's error (ln 2 / 32
// rounded to float, times n) only raises the result, by up to 2.4e-7 at the bottom of the range.
// Over every float in [-86.9, 0] (checked offline): relative error at most 3.52e-7 (at -86.9),
// at most 5.48 ULP (at -86.68; 2.32 ULP above -20), monotone. The flush is the zero-masked last
// FMA, so -inf (r is NaN there) gives 0.
struct TableExp {
  hn::Vec512<float> scale, r, quadratic;  // exp(x) = scale (1 + r quadratic)
};
HWY_INLINE TableExp TableExpParts(hn::Full512<float> d, hn::Vec512<float> x) {
  const hn::RebindToSigned<decltype(d)> di;
  const auto round_bias = hn::Set(d, 12582912.0f);  // 1.5 * 2^23: t's low bits hold n
  const auto t = hn::MulAdd(x, hn::Set(d, 0x1.715476p+5f), round_bias);  // n = round(32 x / ln 2)
  const auto n = hn::Sub(t, round_bias);
  const auto r = hn::MulAdd(n, hn::Set(d, -0x1.62e43p-6f), x);  // ln 2 / 32 as a float
  // Entry j: the bits of 2^(j/32) (rounded down to float), less j << 18, which t << 18 adds
  // back along with k << 23 (t's bias bits shift out).
  alignas(64) static constexpr int32_t kTable[32] = {
      std::bit_cast<int32_t>(0x1.000000p+0f) - (0 << 18),
      std::bit_cast<int32_t>(0x1.059b0cp+0f) - (1 << 18),
      std::bit_cast<int32_t>(0x1.0b5586p+0f) - (2 << 18),
      std::bit_cast<int32_t>(0x1.11301cp+0f) - (3 << 18),
      std::bit_cast<int32_t>(0x1.172b82p+0f) - (4 << 18),
      std::bit_cast<int32_t>(0x1.1d4872p+0f) - (5 << 18),
      std::bit_cast<int32_t>(0x1.2387a6p+0f) - (6 << 18),
      std::bit_cast<int32_t>(0x1.29e9dep+0f) - (7 << 18),
      std::bit_cast<int32_t>(0x1.306fe0p+0f) - (8 << 18),
      std::bit_cast<int32_t>(0x1.371a72p+0f) - (9 << 18),
      std::bit_cast<int32_t>(0x1.3dea64p+0f) - (10 << 18),
      std::bit_cast<int32_t>(0x1.44e086p+0f) - (11 << 18),
      std::bit_cast<int32_t>(0x1.4bfdacp+0f) - (12 << 18),
      std::bit_cast<int32_t>(0x1.5342b4p+0f) - (13 << 18),
      std::bit_cast<int32_t>(0x1.5ab07cp+0f) - (14 << 18),
      std::bit_cast<int32_t>(0x1.6247eap+0f) - (15 << 18),
      std::bit_cast<int32_t>(0x1.6a09e6p+0f) - (16 << 18),
      std::bit_cast<int32_t>(0x1.71f75ep+0f) - (17 << 18),
      std::bit_cast<int32_t>(0x1.7a1146p+0f) - (18 << 18),
      std::bit_cast<int32_t>(0x1.825898p+0f) - (19 << 18),
      std::bit_cast<int32_t>(0x1.8ace54p+0f) - (20 << 18),
      std::bit_cast<int32_t>(0x1.93737ap+0f) - (21 << 18),
      std::bit_cast<int32_t>(0x1.9c4918p+0f) - (22 << 18),
      std::bit_cast<int32_t>(0x1.a5503ap+0f) - (23 << 18),
      std::bit_cast<int32_t>(0x1.ae89f8p+0f) - (24 << 18),
      std::bit_cast<int32_t>(0x1.b7f76ep+0f) - (25 << 18),
      std::bit_cast<int32_t>(0x1.c199bcp+0f) - (26 << 18),
      std::bit_cast<int32_t>(0x1.cb720cp+0f) - (27 << 18),
      std::bit_cast<int32_t>(0x1.d5818cp+0f) - (28 << 18),
      std::bit_cast<int32_t>(0x1.dfc972p+0f) - (29 << 18),
      std::bit_cast<int32_t>(0x1.ea4afap+0f) - (30 << 18),
      std::bit_cast<int32_t>(0x1.f50764p+0f) - (31 << 18)};
  const auto t_bits = hn::BitCast(di, t);
  const auto entry = hn::Vec512<int32_t>{_mm512_permutex2var_epi32(
      hn::Load(di, kTable).raw, t_bits.raw, hn::Load(di, kTable + 16).raw)};  // j: t's low 5 bits
  const auto scale = hn::BitCast(d, hn::Add(entry, hn::ShiftLeft<18>(t_bits)));       // 2^(n/32)
  const auto quadratic = hn::MulAdd(r, hn::Set(d, 0.5f), hn::Set(d, 0x1.0000fp+0f));  // c1 + r / 2
  return {scale, r, quadratic};
}
// Kept: not below the flush point (unordered: the complement of Lt, one compare, so NaN and +inf
// are kept and reach the result).
HWY_INLINE __mmask16 NotFlushed(hn::Vec512<float> x) {
  return _mm512_cmp_ps_mask(x.raw, _mm512_set1_ps(kExpFlushBelow), _CMP_NLT_UQ);
}
HWY_INLINE hn::Vec512<float> ExpFlushToZero(hn::Full512<float> d, hn::Vec512<float> x) {
  const TableExp e = TableExpParts(d, x);
  return hn::Vec512<float>{_mm512_maskz_fmadd_ps(NotFlushed(x), hn::Mul(e.scale, e.r).raw,
                                                 e.quadratic.raw, e.scale.raw)};
}
// exp(x) as a term of a sum (ExpTerm::AddTo: sum + exp(x) in the lanes of `where` that
// ExpFlushToZero does not flush, the others keeping sum), computed once for sums that share it.
// Here the exp's last multiply fuses with the add: scale (1 + r quadratic) as one FMA into the
// sum, its factor (1 + r quadratic) rounded first. Two operations a vector fewer than
// Add(sum, ExpFlushToZero(x)) (the sum's add and scale * r): the statistics pass of a row at
// t = 1 is bound by its vector operations.
struct ExpTerm {
  hn::Vec512<float> scale, factor;
  __mmask16 kept;
  HWY_INLINE hn::Vec512<float> AddTo(hn::Vec512<float> sum, __mmask16 where = 0xFFFF) const {
    return hn::Vec512<float>{_mm512_mask3_fmadd_ps(scale.raw, factor.raw, sum.raw, kept & where)};
  }
  HWY_INLINE hn::Vec512<float> AddTo(hn::Vec512<float> sum, hn::Mask512<float> where) const {
    return AddTo(sum, where.raw);
  }
};
// ExpTermOf(x) where no lane of x lies below the flush point (the caller knows): every lane kept,
// with no compare.
HWY_INLINE ExpTerm UnflushedExpTermOf(hn::Full512<float> d, hn::Vec512<float> x) {
  const TableExp e = TableExpParts(d, x);
  return {e.scale, hn::MulAdd(e.r, e.quadratic, hn::Set(d, 1.0f)), static_cast<__mmask16>(0xFFFF)};
}
HWY_INLINE ExpTerm ExpTermOf(hn::Full512<float> d, hn::Vec512<float> x) {
  ExpTerm term = UnflushedExpTermOf(d, x);
  term.kept = NotFlushed(x);
  return term;
}
#endif
// Other targets: ExpFlushToZero(x), added.
template <class V>
struct GenericExpTerm {
  V e;
  HWY_INLINE V AddTo(V sum) const { return hn::Add(sum, e); }
  template <class M>
  HWY_INLINE V AddTo(V sum, M where) const {
    return hn::Add(sum, hn::IfThenElseZero(where, e));
  }
};
template <class D, class V>
HWY_INLINE GenericExpTerm<V> ExpTermOf(D d, V x) {
  return {ExpFlushToZero(d, x)};
}

// Whether ExpFlushToZero gives NaN for NaN and +inf (the table's does: r is NaN there; the
// polynomial's last step may make a number of NaN's bits), so that a block's sum shows them.
#if HWY_TARGET <= HWY_AVX3
constexpr bool kExpPropagatesNaN = true;
#else
constexpr bool kExpPropagatesNaN = false;
#endif

// Lanes holding NaN or +inf: what the checked passes accumulate, first_bad's rule per lane. One
// compare: exactly those lanes are not below +inf.
template <class D, class V>
HWY_INLINE auto NaNOrPositiveInf(D d, V v) {
  return hn::Not(hn::Lt(v, hn::Set(d, kInf)));
}

// Lanes that ever held NaN or +inf, kept in a vector: OR-ing mask registers made a dependency
// chain that slowed the checked passes up to 3x on Zen 4. It keeps the lanes that stayed below
// +inf, AND-ed: a check is then a compare and an AND, where NaNOrPositiveInf's negation took a
// third instruction on every vector of every checked pass.
template <class D>
struct BadLanes {
  hn::Vec<D> below_inf;  // all ones in a lane until it holds NaN or +inf
  explicit BadLanes(D d) : below_inf(hn::VecFromMask(d, hn::FirstN(d, hn::Lanes(d)))) {}
  void Note(D d, hn::Mask<D> bad) { below_inf = hn::AndNot(hn::VecFromMask(d, bad), below_inf); }
  void Check(D d, hn::Vec<D> v) {
    below_inf = hn::And(below_inf, hn::VecFromMask(d, hn::Lt(v, hn::Set(d, kInf))));
  }
  bool Any(D d) const { return !hn::AllTrue(d, hn::MaskFromVec(below_inf)); }
};

// A vector's stored lanes added in lane order, in double: every kernel's partial sums end here,
// so kernels that sum the same lanes agree to the bit.
template <class D>
HWY_INLINE double LanesInDouble(D d, const float* lanes) {
  double sum = 0;
  for (size_t l = 0; l < hn::Lanes(d); ++l) sum += lanes[l];
  return sum;
}

// Float partial sums over at least kMinLanes lanes whatever the vector width: a narrow target
// (4 lanes, 1 for scalar) keeps kMinLanes / lanes accumulators, taking vectors in turn, so each
// float partial sums as few entries as on a 16-lane target (one accumulator summed 16x more
// entries: log-sums drifted 1e-5 from the oracle's). Total: each accumulator's LanesInDouble,
// accumulators in order; with one accumulator, LanesInDouble itself.
//
// The accumulators rotate instead of being indexed by a counter: the k-th Add goes to the k-th
// accumulator (mod kCount) as before, but every index is a constant, so they stay in registers
// (indexed by a counter GCC kept them on the stack, a store and reload per vector: the AVX2 exp
// pass took 43.7 us per cached 128k row instead of 41.6).
template <class D, size_t kMinLanes = 16>
struct PartialSums {
#if HWY_HAVE_SCALABLE
  static constexpr size_t kCount = 1;  // no arrays of sizeless vectors
#else
  static constexpr size_t kCount =
      hn::MaxLanes(D()) >= kMinLanes ? 1 : kMinLanes / hn::MaxLanes(D());
#endif
  hn::Vec<D> sums[kCount];  // sums[0] takes the next vector
  size_t added = 0;
  explicit PartialSums(D d) {
    for (auto& sum : sums) sum = hn::Zero(d);
  }
  HWY_INLINE void Add(hn::Vec<D> v) { Take(hn::Add(sums[0], v)); }
  // Add(ExpFlushToZero(x)) (in the lanes of `where`) as ExpTermOf(x) adds: the same order,
  // other bits.
  template <class Term, class... Where>
  HWY_INLINE void AddExp(const Term& term, Where... where) {
    Take(term.AddTo(sums[0], where...));
  }
  HWY_INLINE void Take(hn::Vec<D> first) {  // sums[0] plus the next vector
    for (size_t k = 0; k + 1 < kCount; ++k) sums[k] = sums[k + 1];
    sums[kCount - 1] = first;
    ++added;
  }
  double Total(D d) const {
    // Accumulator j (the one vectors j, j + kCount, ... went to) is sums[(j - added) mod kCount].
    HWY_ALIGN float lanes[kCount * hn::MaxLanes(d)];
    for (size_t k = 0; k < kCount; ++k) hn::Store(sums[k], d, lanes + k * hn::Lanes(d));
    const size_t shift = added % kCount;
    auto accumulator = [&](size_t j) {
      return LanesInDouble(d, lanes + (j + kCount - shift) % kCount * hn::Lanes(d));
    };
    double total = accumulator(0);
    for (size_t j = 1; j < kCount; ++j) total += accumulator(j);
    return total;
  }
};

// x[i, i + count) for count < a vector's lanes, the rest of the vector `fill`: tails go through
// the vector code, so every entry sees the same arithmetic (ExpFlushToZero is not std::exp).
template <class D>
HWY_INLINE hn::Vec<D> LoadTail(D d, const float* HWY_RESTRICT x, size_t count, float fill) {
  HWY_ALIGN float padded[hn::MaxLanes(d)];
  std::fill(padded, padded + hn::MaxLanes(d), fill);
  std::memcpy(padded, x, count * sizeof(float));
  return hn::Load(d, padded);
}
template <class D>
HWY_INLINE void StoreTail(D d, hn::Vec<D> v, float* HWY_RESTRICT x, size_t count) {
  HWY_ALIGN float padded[hn::MaxLanes(d)];
  hn::Store(v, d, padded);
  std::memcpy(x, padded, count * sizeof(float));
}

// The float32 row of a caller's fp32, bf16 or fp16 logits, a whole vector or a padded tail at
// a time. Every widening is exact (bf16 is the top half of a float32; every fp16 is a float32,
// F16C on x86).
struct Float32Source {
  const float* x;
  uintptr_t Address(size_t i) const { return reinterpret_cast<uintptr_t>(x + i); }
  template <class D>
  hn::Vec<D> Whole(D d, size_t i) const {
    return hn::LoadU(d, x + i);
  }
  template <class D>
  hn::Vec<D> Tail(D d, size_t i, size_t count) const {
    return LoadTail(d, x + i, count, 0.0f);
  }
};
#if HWY_TARGET <= HWY_AVX3
// vpermw's index (zero-masked by 0xAAAAAAAA) putting words [first, first + 16) of a 32-word
// vector into the top halves of 16 float lanes, the bottoms zeroed: those bf16 entries widened.
HWY_INLINE __m512i WordsToTopHalves(int16_t first) {
  return _mm512_add_epi16(_mm512_set_epi16(15, 0, 14, 0, 13, 0, 12, 0, 11, 0, 10, 0, 9, 0, 8, 0, 7,
                                           0, 6, 0, 5, 0, 4, 0, 3, 0, 2, 0, 1, 0, 0, 0),
                          _mm512_set1_epi16(first));
}
#endif
struct BFloat16Source {
  const uint16_t* x;
  uintptr_t Address(size_t i) const { return reinterpret_cast<uintptr_t>(x + i); }
  template <class D>
  hn::Vec<D> Whole(D d, size_t i) const {
#if HWY_TARGET <= HWY_AVX3
    // One word permute puts each entry in the top half of its lane and zeroes the bottom: the same
    // vector as the widening move and the shift, one operation fewer. The bf16 statistics pass is
    // bound by its vector operations (some 18 a vector): 64 152k rows in turn 24.8 -> 24.1 us a
    // row (Zen 4, medians of four runs in turns).
    if constexpr (std::is_same_v<hn::TFromD<D>, float> && hn::MaxLanes(D()) == 16) {
      const __m512i entries =
          _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)));
      return hn::Vec512<float>{_mm512_castsi512_ps(
          _mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, WordsToTopHalves(0), entries))};
    }
#endif
    const hn::Rebind<uint16_t, D> du16;
    return hn::BitCast(
        d, hn::ShiftLeft<16>(hn::PromoteTo(hn::RebindToUnsigned<D>(), hn::LoadU(du16, x + i))));
  }
  template <class D>
  hn::Vec<D> Tail(D d, size_t i, size_t count) const {
    HWY_ALIGN uint16_t padded[hn::MaxLanes(d)] = {};
    std::memcpy(padded, x + i, count * sizeof(uint16_t));
    return BFloat16Source{padded}.Whole(d, 0);
  }
};
struct Float16Source {
  const uint16_t* x;
  uintptr_t Address(size_t i) const { return reinterpret_cast<uintptr_t>(x + i); }
  template <class D>
  hn::Vec<D> Whole(D d, size_t i) const {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2  // F16C: exact, infinities and NaN included
    const hn::Rebind<hwy::float16_t, D> df16;
    return hn::PromoteTo(d, hn::LoadU(df16, reinterpret_cast<const hwy::float16_t*>(x) + i));
#else
    return Widened(d, x + i);
#endif
  }
  // binary16 -> float32 in integer arithmetic, exact for every input: the emulated PromoteTo of
  // targets without F16C (Highway 1.0) turned +-inf into +-65536 and NaN into numbers, so NaN and
  // +inf went unseen there. Normal: exponent rebiased (+112); inf / NaN: exponent all ones,
  // payload kept; subnormal: the mantissa times 2^-24, exact in float32.
  template <class D>
  static hn::Vec<D> Widened(D d, const uint16_t* p) {
    const hn::RebindToUnsigned<D> du;
    const hn::RebindToSigned<D> di;
    const auto h = hn::PromoteTo(du, hn::LoadU(hn::Rebind<uint16_t, D>(), p));
    const auto sign = hn::ShiftLeft<16>(hn::And(h, hn::Set(du, 0x8000u)));
    const auto magnitude = hn::And(h, hn::Set(du, 0x7fffu));
    const auto exponent = hn::ShiftRight<10>(magnitude);
    const auto normal = hn::Add(hn::ShiftLeft<13>(magnitude), hn::Set(du, 112u << 23));
    const auto special = hn::Or(hn::ShiftLeft<13>(magnitude), hn::Set(du, 0x7f800000u));
    const auto subnormal = hn::BitCast(
        du, hn::Mul(hn::ConvertTo(d, hn::BitCast(di, magnitude)), hn::Set(d, 0x1p-24f)));
    auto bits = hn::IfThenElse(hn::Eq(exponent, hn::Zero(du)), subnormal, normal);
    bits = hn::IfThenElse(hn::Eq(exponent, hn::Set(du, 31u)), special, bits);
    return hn::BitCast(d, hn::Or(bits, sign));
  }
  template <class D>
  hn::Vec<D> Tail(D d, size_t i, size_t count) const {
    HWY_ALIGN uint16_t padded[hn::MaxLanes(d)] = {};
    std::memcpy(padded, x + i, count * sizeof(uint16_t));
    return Float16Source{padded}.Whole(d, 0);
  }
};

// dst = the float32 row of src, divided by t when kDivide (Quotient: the same bits as scalar
// division). Returns the first index of dst holding NaN or +inf, or -1: the check rides along
// the one pass.
template <bool kDivide, class Source>
int64_t convert_pass(Source src, float* HWY_RESTRICT dst, size_t n, float t) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const Quotient quotient(d, t);
  BadLanes bad(d);
  auto finish = [&](hn::Vec<decltype(d)> v) {
    if constexpr (kDivide) v = quotient.Of(d, v);
    bad.Check(d, v);  // padded tail lanes hold 0: never flagged
    return v;
  };
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(finish(src.Whole(d, i)), d, dst + i);
  if (i < n) StoreTail(d, finish(src.Tail(d, i, n - i)), dst + i, n - i);
  return !bad.Any(d) ? -1 : first_bad(dst, 0, n);
}

template <class Source>
int64_t convert(Source src, float* HWY_RESTRICT dst, size_t n, float t) {
  return t == 1.0f ? convert_pass<false>(src, dst, n, t) : convert_pass<true>(src, dst, n, t);
}

// fn(source) for a caller's row of `dtype`.
template <class Fn>
auto with_source(const void* src, DType dtype, Fn fn) {
  switch (dtype) {
    case DType::bf16:
      return fn(BFloat16Source{static_cast<const uint16_t*>(src)});
    case DType::f16:
      return fn(Float16Source{static_cast<const uint16_t*>(src)});
    case DType::f32:
      break;
  }
  return fn(Float32Source{static_cast<const float*>(src)});
}

int64_t load_row(const void* HWY_RESTRICT src, DType dtype, float* HWY_RESTRICT dst, size_t n,
                 float t) {
  return with_source(src, dtype, [&](auto source) { return convert(source, dst, n, t); });
}

#if HWY_TARGET == HWY_AVX2
// For each byte of a seen bitmap, the masks of its 8 lanes (all ones where the bit is set): one
// load, where LoadMaskBits takes the byte through a general register, then broadcasts, ANDs and
// compares it.
constexpr std::array<std::array<int32_t, 8>, 256> seen_lane_masks() {
  std::array<std::array<int32_t, 8>, 256> table{};
  for (uint32_t bits = 0; bits < 256; ++bits)
    for (uint32_t lane = 0; lane < 8; ++lane) table[bits][lane] = (bits >> lane) & 1 ? -1 : 0;
  return table;
}
alignas(32) inline constexpr std::array<std::array<int32_t, 8>, 256> kSeenLaneMasks =
    seen_lane_masks();
#endif

// Spec §7.2's repetition factor where bit i of `seen` is set (bit i % 64 of word i / 64): positive
// logits times the float32 reciprocal 1 / r (as torch), the others times r. One definition for the
// dense pass and the conversion that folds it in, so the two agree to the bit.
struct Repetition {
  const uint64_t* seen;
  float r, inverse;
  Repetition(const uint64_t* seen_bits, float factor)
      : seen(seen_bits), r(factor), inverse(1.0f / factor) {}
  bool Seen(size_t i) const { return (seen[i / 64] >> (i % 64) & 1) != 0; }
  float Scaled(float x) const { return x * (x > 0 ? inverse : r); }
  // Vectors of 8 or more lanes dividing 64 read their mask straight from the bitmap's bytes
  // (little-endian: bit i of byte j is token 8j + i); narrower ones go entry by entry.
  template <class D>
  static bool Vectorised(D d) {
    return hn::Lanes(d) >= 8 && 64 % hn::Lanes(d) == 0;
  }
  // Entries [j, j + lanes) of v, scaled where seen (j a multiple of the lanes).
  template <class D>
  hn::Vec<D> Where(D d, size_t j, hn::Vec<D> v) const {
    const auto factor = hn::IfThenElse(hn::Gt(v, hn::Zero(d)), hn::Set(d, inverse), hn::Set(d, r));
    const uint8_t* bits = reinterpret_cast<const uint8_t*>(seen) + j / 8;
#if HWY_TARGET == HWY_AVX2
    const auto mask = hn::MaskFromVec(
        hn::BitCast(d, hn::Load(hn::RebindToSigned<D>(), kSeenLaneMasks[*bits].data())));
#else
    const auto mask = hn::LoadMaskBits(d, bits);
#endif
    return hn::IfThenElse(mask, hn::Mul(v, factor), v);
  }
};

// load_row, with the Repetition factor applied in the same pass. The first index of dst holding
// NaN or +inf, or -1.
template <class Source>
int64_t load_repeated_pass(Source src, float* HWY_RESTRICT dst, size_t n,
                           const uint64_t* HWY_RESTRICT seen, float r) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const Repetition repetition(seen, r);
  BadLanes bad(d);
  size_t i = 0;
  if (Repetition::Vectorised(d)) {
    for (; i + 64 <= n; i += 64) {
      const bool any_seen = seen[i / 64] != 0;  // else convert only
      for (size_t j = i; j < i + 64; j += lanes) {
        auto v = src.Whole(d, j);
        if (any_seen) v = repetition.Where(d, j, v);
        bad.Check(d, v);
        hn::StoreU(v, d, dst + j);
      }
    }
  }
  const size_t tail = i;  // the rest converted, then scaled entry by entry
  for (; i + lanes <= n; i += lanes) {
    const auto v = src.Whole(d, i);
    bad.Check(d, v);
    hn::StoreU(v, d, dst + i);
  }
  if (i < n) {
    const auto v = src.Tail(d, i, n - i);  // padded with zeros: never flagged
    bad.Check(d, v);
    StoreTail(d, v, dst + i, n - i);
  }
  for (size_t j = tail; j < n; ++j)
    if (repetition.Seen(j)) dst[j] = repetition.Scaled(dst[j]);
  return first_bad(dst, !bad.Any(d) ? tail : 0, n);  // a scaled tail entry may be +inf
}

int64_t load_row_repeated(const void* HWY_RESTRICT src, DType dtype, float* HWY_RESTRICT dst,
                          size_t n, const uint64_t* HWY_RESTRICT seen, float r) {
  return with_source(src, dtype,
                     [&](auto source) { return load_repeated_pass(source, dst, n, seen, r); });
}

// Prefetches a streaming read's lines a fixed distance ahead of it, up to the end of what it
// reads. A batch past the cache comes from memory, where the block max passes (a reduction and a
// store every group of 64) fell behind row_max's plain read, the hardware prefetcher alone
// keeping too few lines in flight: 256 top-k/top-p rows of 128k (131 MB, one thread) took
// 47-55 us a row against row_max's 38-43; with the lines requested 4 KB ahead, 41-50 (min-p
// 50 -> 46). Rows in cache ran as before. None where software_prefetch_pays() says not.
class ReadAhead {
 public:
  static constexpr uintptr_t kDistance = 4096, kLine = 64;
  ReadAhead(uintptr_t begin, uintptr_t end)
      : next_(software_prefetch_pays() ? begin + kDistance : end), end_(end) {}
  // The read has reached `at`: request the lines up to kDistance past it.
  HWY_INLINE void Reached(uintptr_t at) {
    const uintptr_t to = std::min(at + kDistance, end_);
    for (; next_ < to; next_ += kLine) hwy::Prefetch(reinterpret_cast<const char*>(next_));
  }

 private:
  uintptr_t next_, end_;
};

// Prefetches [begin, end) a line a step while a loop over something else runs: a block's Exp
// requests the next block's lines, one a vector, so that its read finds them in cache (else the
// read and the arithmetic took turns: 70 vs 44 us per 128k row, from memory vs from cache). The
// default range is empty: nothing requested; so is every range where software_prefetch_pays()
// says not.
class LineByLine {
 public:
  LineByLine() = default;
  LineByLine(uintptr_t begin, uintptr_t end)
      : next_(begin), end_(software_prefetch_pays() ? end : begin) {}
  HWY_INLINE void Step() {
    if (next_ < end_) hwy::Prefetch(reinterpret_cast<const char*>(next_));
    next_ += ReadAhead::kLine;
  }

 private:
  uintptr_t next_ = 0, end_ = 0;
};

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

// x /= t with the bits of scalar division (Quotient). Returns the first index holding NaN or
// +inf, or -1 (the check rides along the pass).
int64_t divide(float* HWY_RESTRICT x, size_t n, float t) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const Quotient quotient(d, t);
  BadLanes bad(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto q = quotient.Of(d, hn::LoadU(d, x + i));
    bad.Check(d, q);
    hn::StoreU(q, d, x + i);
  }
  for (; i < n; ++i) x[i] /= t;
  return first_bad(x, !bad.Any(d) ? n - n % lanes : 0, n);
}

// The Repetition factor over a float32 row in place (the reference's arithmetic, lane by lane).
// Words of 64 tokens with no bit set are skipped whole. Returns the first index left +inf, or -1.
int64_t apply_repetition_dense(float* HWY_RESTRICT x, size_t n, const uint64_t* HWY_RESTRICT seen,
                               float r) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const auto inf = hn::Set(d, kInf);
  const Repetition repetition(seen, r);
  BadLanes bad(d);
  size_t i = 0;
  if (Repetition::Vectorised(d)) {
    for (; i + 64 <= n; i += 64) {
      if (seen[i / 64] == 0) continue;
      for (size_t j = i; j < i + 64; j += lanes) {
        const auto out = repetition.Where(d, j, hn::LoadU(d, x + j));
        bad.Note(d, hn::Eq(out, inf));
        hn::StoreU(out, d, x + j);
      }
    }
  }
  const size_t tail = i;
  for (; i < n; ++i)
    if (repetition.Seen(i)) x[i] = repetition.Scaled(x[i]);
  // +inf came from a finite input (the row was checked): look only where one was flagged.
  return first_bad(x, !bad.Any(d) ? tail : 0, n);
}

// The first index holding NaN or +inf, or -1.
int64_t find_nan_or_inf(const float* HWY_RESTRICT x, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  BadLanes bad(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto v = hn::LoadU(d, x + i);
    bad.Check(d, v);
  }
  return first_bad(x, !bad.Any(d) ? n - n % lanes : 0, n);
}

// x := (x - max) - log_sum.
void subtract_two(float* HWY_RESTRICT x, size_t n, float max, float log_sum) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const auto vmax = hn::Set(d, max), vlog = hn::Set(d, log_sum);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes)
    hn::StoreU(hn::Sub(hn::Sub(hn::LoadU(d, x + i), vmax), vlog), d, x + i);
  for (; i < n; ++i) x[i] = (x[i] - max) - log_sum;
}

// Masks every x < threshold. Exact.
void mask_below(float* HWY_RESTRICT x, size_t n, float threshold) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const auto vthr = hn::Set(d, threshold), neg_inf = hn::Set(d, -kInf);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto v = hn::LoadU(d, x + i);
    hn::StoreU(hn::IfThenElse(hn::Lt(v, vthr), neg_inf, v), d, x + i);
  }
  for (; i < n; ++i)
    if (x[i] < threshold) x[i] = -kInf;
}

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

double exp_with_block_sums(const float* HWY_RESTRICT x, float* HWY_RESTRICT w, size_t n, float max,
                           size_t block, double* HWY_RESTRICT block_sums) {
  return exp_block_sums_pass<true>(x, w, n, max, block, block_sums);
}

double exp_block_sums(const float* HWY_RESTRICT x, size_t n, float max, size_t block,
                      double* HWY_RESTRICT block_sums) {
  return exp_block_sums_pass<false>(x, nullptr, n, max, block, block_sums);
}

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

// out.dst[start, end) scaled by the Repetition factor where seen, entry by entry (targets too
// narrow for Repetition::Where): the same products. False if one overflowed to +inf.
inline bool repeat_seen(const ConvertedRow& out, size_t start, size_t end) {
  const Repetition repetition(out.seen, out.r);
  bool finite = true;
  for (size_t w = start / 64; w * 64 < end; ++w) {
    for (uint64_t bits = out.seen[w]; bits != 0; bits &= bits - 1) {
      const size_t i = w * 64 + static_cast<size_t>(std::countr_zero(bits));
      if (i < start || i >= end) continue;
      out.dst[i] = repetition.Scaled(out.dst[i]);
      finite &= out.dst[i] < kInf;
    }
  }
  return finite;
}

// A block's sum of exp(x - max), relative to its max (exp_block_sums_pass); with band, its below
// sum and bits too.
double block_sum_below_max(const float* HWY_RESTRICT values, size_t size, float max,
                           LineByLine prefetch, ValueBand* band = nullptr) {
  double sum;
  if (band != nullptr)
    return exp_block_sums_pass<false, true>(values, nullptr, size, max, size, &sum, prefetch, band);
  return exp_block_sums_pass<false>(values, nullptr, size, max, size, &sum, prefetch);
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
    const size_t from = near->count;
    near->count += compress_at_least(values, end - start, max_so_far + near->below_max, false,
                                     near->ids + from, near->values + from, near->room - from);
    if (near->count > near->room) continue;  // stopped: the list is incomplete
    for (size_t i = from; i < near->count; ++i) near->ids[i] += static_cast<int32_t>(start);
  }
  return true;
}

// The most groups a block of block_softmax_stats_pipelined holds (groups of 64 at least).
constexpr size_t kMaxBlockGroups = kStatisticsBlock / 64;

#if HWY_TARGET <= HWY_AVX3
// The largest word of each of eight vectors of 32 (signed), out[g] vector g's: halves, quarters,
// then within 128 bits, eight vectors at once, some 25 operations for the eight where reducing
// each alone took some 15 (Bf16BlockByWords' groups of 256: the bench mix's top-k rows, bf16 152k,
// 32.8 -> 32.0 us; one thread, Zen 4, medians of six runs in turns).
HWY_INLINE void MaxWordsOfEight(const int16_t* vectors, int16_t* out) {  // out may overlap vectors
  __m512i v[8];
  for (size_t g = 0; g < 8; ++g) v[g] = _mm512_load_si512(vectors + g * 32);
  // [max of a's halves | max of b's halves], 16 words each.
  auto halves = [](__m512i a, __m512i b) {
    return _mm512_max_epi16(_mm512_shuffle_i64x2(a, b, 0x44), _mm512_shuffle_i64x2(a, b, 0xEE));
  };
  // 128-bit lane k: 8 words of vector k (a's two, then b's two).
  auto quarters = [](__m512i a, __m512i b) {
    return _mm512_max_epi16(_mm512_shuffle_i64x2(a, b, 0x88), _mm512_shuffle_i64x2(a, b, 0xDD));
  };
  const __m512i low = quarters(halves(v[0], v[1]), halves(v[2], v[3]));   // vectors 0-3
  const __m512i high = quarters(halves(v[4], v[5]), halves(v[6], v[7]));  // vectors 4-7
  // 128-bit lane k: 4 words of vector k, then 4 of vector k + 4; then 2 and 2; then word 0 and
  // word 4 hold their maxima.
  __m512i m = _mm512_max_epi16(_mm512_unpacklo_epi64(low, high), _mm512_unpackhi_epi64(low, high));
  m = _mm512_max_epi16(m, _mm512_shuffle_epi32(m, _MM_PERM_CDAB));
  m = _mm512_max_epi16(m, _mm512_srli_epi32(m, 16));
  HWY_ALIGN int16_t words[32];
  _mm512_store_si512(words, m);
  for (size_t k = 0; k < 4; ++k) {
    out[k] = words[8 * k];
    out[k + 4] = words[8 * k + 4];
  }
}

// A bf16 block's sum at t = 1 (AddExp, every lane kept) and its max (with kGroups, its groups'
// maxima too), read 32 words at a time: the max taken on the words as 16-bit integers, which
// order positive floats as floats, and their unsigned max showing whether any entry lies below the
// Exp's flush point (-inf and negative NaN included). Two integer operations for two vectors
// replace a float max and the flush compare on each; the statistics pass over a bf16 row is bound
// by its vector operations, and the bench's bf16 mix took 0.955x the time (one thread, four
// alternating runs, Zen 4; greedy rows 27.6 -> 26.2 us). False, having written nothing, where the
// words cannot tell: a block or group whose max is not above +0 (all entries negative, or -0
// beside +0, whose float max differs), one holding +inf or NaN, or an entry the Exp flushes; the
// float read then takes the block. Otherwise the same sum (the masked FMA with every lane kept)
// and the same maxima (positive floats' bits are their order) as that read.
template <bool kGroups, class Sums>
HWY_INLINE bool Bf16BlockByWords(const uint16_t* HWY_RESTRICT x, size_t size, size_t group,
                                 Sums& sum, float* block_max, float* group_max,
                                 LineByLine& prefetch) {
  const hn::Full512<float> d;
  const hn::Full512<int16_t> dw;
  constexpr uint16_t kFirstFlushed = 0xC2AE;  // -87: the bf16 words below -86.9 are these and up
  constexpr int16_t kInfinity = 0x7F80;
  const __m512i lower = WordsToTopHalves(0), upper = WordsToTopHalves(16);
  if (kGroups && (group % 32 != 0 || size % group != 0)) return false;  // whole loads a group
  const size_t groups = kGroups ? size / group : 1, words = kGroups ? group : size;
  HWY_ALIGN int16_t maxima[kGroups ? kMaxBlockGroups * 32 : 32];
  __m512i flushed = _mm512_setzero_si512();
  Sums block_sum(d);
  for (size_t g = 0; g < groups; ++g) {
    __m512i max = _mm512_set1_epi16(-32768);
    for (size_t i = g * words; i < (g + 1) * words; i += 32) {
      const __m512i w = _mm512_loadu_si512(x + i);
      max = _mm512_max_epi16(max, w);
      flushed = _mm512_max_epu16(flushed, w);
      prefetch.Step();
      block_sum.AddExp(UnflushedExpTermOf(
          d, hn::Vec512<float>{
                 _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, lower, w))}));
      prefetch.Step();
      block_sum.AddExp(UnflushedExpTermOf(
          d, hn::Vec512<float>{
                 _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, upper, w))}));
    }
    _mm512_store_si512(maxima + g * 32, max);
  }
  if (hn::GetLane(hn::MaxOfLanes(hn::Full512<uint16_t>(), hn::Vec512<uint16_t>{flushed})) >=
      kFirstFlushed)
    return false;
  int16_t top = 0;
  size_t g = 0;
  for (; g + 8 <= groups; g += 8) MaxWordsOfEight(maxima + g * 32, maxima + g);
  for (; g < groups; ++g)
    maxima[g] = hn::GetLane(hn::MaxOfLanes(dw, hn::Load(dw, maxima + g * 32)));
  for (g = 0; g < groups; ++g) {
    if (maxima[g] <= 0 || maxima[g] >= kInfinity) return false;
    top = std::max(top, maxima[g]);
  }
  auto as_float = [](int16_t word) {
    return std::bit_cast<float>(static_cast<uint32_t>(static_cast<uint16_t>(word)) << 16);
  };
  if constexpr (kGroups)
    for (size_t g = 0; g < groups; ++g) group_max[g] = as_float(maxima[g]);
  *block_max = as_float(top);
  sum = block_sum;
  return true;
}
#endif

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
    return source_block_max(src, dtype, n, groups.group, groups.max) &&
           (t == 1.0f || divide(groups.max, count, t) < 0);
  });
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

// With q = w * inv_sum: appends the ids with lo <= q < hi (id order) and returns how many; adds
// the q < lo to *mass_below (float partial sums per 64 vectors, each added in double: calls over
// consecutive pieces of whole 64 vectors add the same terms in the same order as one call). ids
// needs room for n + kCompressSlack entries.
size_t probability_band(const float* HWY_RESTRICT w, size_t n, float inv_sum, float lo, float hi,
                        int32_t* HWY_RESTRICT ids, double* mass_below) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const size_t lanes = hn::Lanes(d);
  const auto vinv = hn::Set(d, inv_sum), vlo = hn::Set(d, lo), vhi = hn::Set(d, hi);
  size_t count = 0, i = 0;
  double below_sum = *mass_below;
  using Sums = PartialSums<decltype(d)>;
  auto take = [&](size_t at, hn::Vec<decltype(d)> q, hn::Mask<decltype(d)> valid, Sums& sum) {
    const auto below = hn::And(valid, hn::Lt(q, vlo));
    sum.Add(hn::IfThenElseZero(below, q));
    // No branch on an empty band: a third of the vectors hold band tokens, and mispredicting
    // them cost more than compressing every vector.
    const auto band = hn::And(valid, hn::AndNot(below, hn::Lt(q, vhi)));
    hn::StoreU(CompressKeptIds(d, band, at), di, ids + count);
    count += hn::CountTrue(d, band);
  };
  // Four vectors a step, stored by StoreKeptOfFour: one vector a step left each store's address
  // waiting on the previous vector's count.
  auto take_four = [&](size_t at, Sums& sum) {
    hn::Mask<decltype(d)> band[4];
    for (size_t k = 0; k < 4; ++k) {
      const auto q = hn::Mul(hn::LoadU(d, w + at + k * lanes), vinv);
      const auto below = hn::Lt(q, vlo);
      sum.Add(hn::IfThenElseZero(below, q));
      band[k] = hn::AndNot(below, hn::Lt(q, vhi));
    }
    count = StoreKeptOfFour(d, band, at, ids, count);
  };
  auto flush = [&](const Sums& sum) { below_sum += sum.Total(d); };
  const auto all = hn::FirstN(d, lanes);
  while (i + lanes <= n) {
    Sums sum(d);
    size_t v = 0;
    for (; v + 4 <= 64 && i + 4 * lanes <= n; v += 4, i += 4 * lanes) take_four(i, sum);
    for (; v < 64 && i + lanes <= n; ++v, i += lanes)
      take(i, hn::Mul(hn::LoadU(d, w + i), vinv), all, sum);
    flush(sum);
  }
  if (i < n) {
    Sums sum(d);
    take(i, hn::Mul(LoadTail(d, w + i, n - i, 0.0f), vinv), hn::FirstN(d, n - i), sum);
    flush(sum);
  }
  *mass_below = below_sum;
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

}  // namespace lastmile::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lastmile::cpu {
HWY_EXPORT(load_row);
HWY_EXPORT(load_row_repeated);
HWY_EXPORT(block_softmax_stats);
HWY_EXPORT(sum_exp_scaled_below);
HWY_EXPORT(compress_source);
HWY_EXPORT(compress_source_groups);
HWY_EXPORT(list_marked);
HWY_EXPORT(list_between);
HWY_EXPORT(min_max_between);
HWY_EXPORT(row_argmax);
HWY_EXPORT(argmax_checked);
HWY_EXPORT(divide);
HWY_EXPORT(find_nan_or_inf);
HWY_EXPORT(apply_repetition_dense);
HWY_EXPORT(subtract_two);
HWY_EXPORT(mask_below);
HWY_EXPORT(count_at_least);
HWY_EXPORT(count_source_at_least);
HWY_EXPORT(source_block_max);
HWY_EXPORT(compress_at_least);
HWY_EXPORT(exp_with_block_sums);
HWY_EXPORT(exp_block_sums);
HWY_EXPORT(probability_band);
HWY_EXPORT(probabilities);
HWY_EXPORT(sum_below);

int64_t load_row(const void* src, DType dtype, float* dst, size_t n, float t) {
  return HWY_DYNAMIC_DISPATCH(load_row)(src, dtype, dst, n, t);
}
int64_t load_row_repeated(const void* src, DType dtype, float* dst, size_t n, const uint64_t* seen,
                          float r) {
  return HWY_DYNAMIC_DISPATCH(load_row_repeated)(src, dtype, dst, n, seen, r);
}
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
size_t list_between(const float* x, size_t n, float lo, float hi, uint32_t* at, size_t limit) {
  return HWY_DYNAMIC_DISPATCH(list_between)(x, n, lo, hi, at, limit);
}
void min_max_between(const float* x, size_t n, float lo, float hi, float* min, float* max) {
  HWY_DYNAMIC_DISPATCH(min_max_between)(x, n, lo, hi, min, max);
}
int64_t row_argmax(const float* x, size_t n) { return HWY_DYNAMIC_DISPATCH(row_argmax)(x, n); }
int64_t argmax_checked(const float* x, size_t n, int64_t* first_bad_index) {
  return HWY_DYNAMIC_DISPATCH(argmax_checked)(x, n, first_bad_index);
}
int64_t divide(float* x, size_t n, float t) { return HWY_DYNAMIC_DISPATCH(divide)(x, n, t); }
int64_t find_nan_or_inf(const float* x, size_t n) {
  return HWY_DYNAMIC_DISPATCH(find_nan_or_inf)(x, n);
}
int64_t apply_repetition_dense(float* x, size_t n, const uint64_t* seen, float r) {
  return HWY_DYNAMIC_DISPATCH(apply_repetition_dense)(x, n, seen, r);
}
void subtract_two(float* x, size_t n, float max, float log_sum) {
  HWY_DYNAMIC_DISPATCH(subtract_two)(x, n, max, log_sum);
}
void mask_below(float* x, size_t n, float threshold) {
  HWY_DYNAMIC_DISPATCH(mask_below)(x, n, threshold);
}
int64_t count_at_least(const float* x, size_t n, float v) {
  return HWY_DYNAMIC_DISPATCH(count_at_least)(x, n, v);
}
int64_t count_source_at_least(const void* src, DType dtype, size_t n, float v) {
  return HWY_DYNAMIC_DISPATCH(count_source_at_least)(src, dtype, n, v);
}
bool source_block_max(const void* src, DType dtype, size_t n, size_t block, float* block_max) {
  return HWY_DYNAMIC_DISPATCH(source_block_max)(src, dtype, n, block, block_max);
}
size_t compress_at_least(const float* x, size_t n, float threshold, bool strict, int32_t* ids,
                         float* values, size_t limit) {
  return HWY_DYNAMIC_DISPATCH(compress_at_least)(x, n, threshold, strict, ids, values, limit);
}
double exp_with_block_sums(const float* x, float* w, size_t n, float max, size_t block,
                           double* block_sums) {
  return HWY_DYNAMIC_DISPATCH(exp_with_block_sums)(x, w, n, max, block, block_sums);
}
double exp_block_sums(const float* x, size_t n, float max, size_t block, double* block_sums) {
  return HWY_DYNAMIC_DISPATCH(exp_block_sums)(x, n, max, block, block_sums);
}
size_t probability_band(const float* w, size_t n, float inv_sum, float lo, float hi, int32_t* ids,
                        double* mass_below) {
  return HWY_DYNAMIC_DISPATCH(probability_band)(w, n, inv_sum, lo, hi, ids, mass_below);
}
double probabilities(float* x, size_t n, float max, float inv_sum, float* lo, float* hi) {
  return HWY_DYNAMIC_DISPATCH(probabilities)(x, n, max, inv_sum, lo, hi);
}
double sum_below(const float* x, size_t n, float threshold, size_t* count) {
  return HWY_DYNAMIC_DISPATCH(sum_below)(x, n, threshold, count);
}
}  // namespace lastmile::cpu
#endif
