// lastmile — the softmax kernels' vector exp: ExpFlushToZero (a degree-5 polynomial; on AVX-512
// a 32-entry table and a quadratic), ExpTermOf for sums that fuse its last multiply with their
// add, and the direct sums of exp(x) at t = 1 (DirectExpFits). Error bounds below, checked over
// every float of the range offline; tests/unit/cpu_exp_test.cpp keeps them. Re-included once
// per Highway target, as Highway's own -inl headers are.
#if defined(LASTMILE_CPU_EXP_INL_HPP_) == defined(HWY_TARGET_TOGGLE)
#ifdef LASTMILE_CPU_EXP_INL_HPP_
#undef LASTMILE_CPU_EXP_INL_HPP_
#else
#define LASTMILE_CPU_EXP_INL_HPP_
#endif

#include <hwy/highway.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

HWY_BEFORE_NAMESPACE();
namespace lastmile::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

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

}  // namespace lastmile::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // LASTMILE_CPU_EXP_INL_HPP_
