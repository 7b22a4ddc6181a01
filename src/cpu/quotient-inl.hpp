// lastmile — Quotient: x / t per lane with the bits of IEEE division, without a divide where the
// target has FMA, for the passes that divide a row by its temperature (spec §8.1: torch's div_).
// Re-included once per Highway target, as Highway's own -inl headers are.
//
// Why: a vector divide is slow next to the rest of a pass (on the order of ten cycles a 16-lane
// vdivps on Intel's AVX-512 cores, 3.5 an 8-lane one on Zen 3). With y = RN(1 / t):
// - q0 = RN(x y) is within 1.5 ulp of x / t (y's error and one rounding), and not always within
//   one: 1.5% of significand pairs are not.
// - q1 = RN(q0 + r0 y), r0 = RN(x - q0 t) by one FMA, is within an ulp: x - q0 t is a multiple
//   of ulp(q0) ulp(t) below 1.5 * 2^24 of them, so r0 is within one of them of it; q0 + r0 y
//   before rounding is then within 3.5 * 2^-24 ulp of x / t, and rounding adds half an ulp.
// - q2 = RN(q1 + r1 y), r1 = x - q1 t (exact, as q1 is within an ulp), is RN(x / t): Markstein's
//   theorem (y within half an ulp of 1 / t, q1 within an ulp of x / t).
// That needs nothing to underflow: 2^-24 <= t <= 2^24 and 2^-60 <= |x| < 2^100 keep the residuals'
// lowest bits far above the subnormals. ±0 and ±inf are their own quotients; other lanes (tiny,
// huge, NaN) take the divide, a whole vector at a time. q1 alone was already RN(x / t) for every
// pair tried (2.5e12); q2 is what the proof needs. Tests: tests/unit/cpu_quotient_test.cpp.
// A temperature row's statistics pass over a cached row (t = 0.8): 58.8 -> 48.0 us (44.7 with one
// correction); the bench's `temperature`: 34.1-35.4 -> 30.7-31.3 us a row (Xeon, Emerald Rapids,
// AVX-512, 2 threads, old and new builds in turns).
#if defined(LASTMILE_CPU_QUOTIENT_INL_HPP_) == defined(HWY_TARGET_TOGGLE)
#ifdef LASTMILE_CPU_QUOTIENT_INL_HPP_
#undef LASTMILE_CPU_QUOTIENT_INL_HPP_
#else
#define LASTMILE_CPU_QUOTIENT_INL_HPP_
#endif

#include <hwy/highway.h>

#include <cstdint>

HWY_BEFORE_NAMESPACE();
namespace lastmile::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class D>
class Quotient {
 public:
  Quotient(D d, float t)
      : t_(hn::Set(d, t)),
        y_(hn::Set(d, 1.0f / t)),
        corrected_(HWY_NATIVE_FMA && t >= 0x1p-24f && t <= 0x1p24f) {}

  // x / t, rounded as IEEE division rounds it.
  HWY_INLINE hn::Vec<D> Of(D d, hn::Vec<D> x) const {
#if HWY_NATIVE_FMA
    if (corrected_) {
      const hn::RebindToSigned<D> di;
      const auto magnitude = hn::And(hn::BitCast(di, x), hn::Set(di, 0x7fffffff));
      // 2^-60 <= |x| < 2^100, as float bits: exponent fields 67 to 226.
      const auto in_range = hn::And(hn::Gt(magnitude, hn::Set(di, 0x217fffff)),
                                    hn::Lt(magnitude, hn::Set(di, 0x71800000)));
      const auto q0 = hn::Mul(x, y_);
      const auto q1 = hn::MulAdd(hn::NegMulAdd(q0, t_, x), y_, q0);         // within an ulp
      const auto corrected = hn::MulAdd(hn::NegMulAdd(q1, t_, x), y_, q1);  // RN(x / t)
      if (HWY_LIKELY(hn::AllTrue(di, in_range))) return corrected;
      const auto own = hn::Or(hn::Eq(magnitude, hn::Zero(di)),  // ±0 and ±inf
                              hn::Eq(magnitude, hn::Set(di, 0x7f800000)));
      if (hn::AllTrue(di, hn::Or(in_range, own)))
        return hn::IfThenElse(hn::RebindMask(d, in_range), corrected, x);
    }
#else
    (void)d;
#endif
    return hn::Div(x, t_);
  }

 private:
  hn::Vec<D> t_, y_;
  bool corrected_;  // t in range, on a target with FMA
};

}  // namespace lastmile::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
