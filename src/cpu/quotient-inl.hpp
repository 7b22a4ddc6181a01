// lastmile — Quotient: x / t per lane with the bits of IEEE division, for the passes that divide a
// row by its temperature (spec §8.1: torch's div_): a reciprocal corrected by FMAs where the
// target has FMA, else the vector divide; or the divide itself where it pays. Re-included once per
// Highway target, as Highway's own -inl headers are.
//
// Why: a vector divide is slow next to the rest of a pass (on the order of ten cycles a 16-lane
// vdivps on Intel's AVX-512 cores, 3.5 an 8-lane one on Zen 3), except where it runs beside the
// FMAs the reciprocal would take (a Zen 4's AVX-512: vector_divide_pays, cpu/tuning.hpp, decides;
// a Division picks one way for the tests). Otherwise, with y = RN(1 / t) and its remainder's share
// y_lo = RN(RN(1 - t y) y) (1 - t y exact by FMA), once a row:
// - q0 = RN(x y + RN(x y_lo)) is within an ulp of x / t: y + y_lo is 1 / t within about 2^-47
//   relative, so before its one rounding q0 is within 3 * 2^-48 |x / t| of it.
// - q = RN(q0 + (x - q0 t) y), the residual exact by FMA, is RN(x / t): Markstein's theorem
//   (y within half an ulp of 1 / t, q0 within an ulp of x / t).
// Four operations a vector. Correcting RN(x y) alone (three) was right for every pair tried, but
// RN(x y) is more than an ulp off for 1.5% of significand pairs, where the theorem says nothing.
// That needs nothing to underflow: 2^-24 <= t <= 2^24 and 2^-60 <= |x| < 2^100 keep the residual's
// lowest bit far above the subnormals (x y_lo may be subnormal: it then adds under 2^-149, far
// below q0's last place). ±0 and ±inf are their own quotients; other lanes (tiny, huge, NaN) take
// the divide, a whole vector at a time. Tests: tests/unit/cpu_quotient_test.cpp.
#if defined(LASTMILE_CPU_QUOTIENT_INL_HPP_) == defined(HWY_TARGET_TOGGLE)
#ifdef LASTMILE_CPU_QUOTIENT_INL_HPP_
#undef LASTMILE_CPU_QUOTIENT_INL_HPP_
#else
#define LASTMILE_CPU_QUOTIENT_INL_HPP_
#endif

#include <hwy/highway.h>

#include <cmath>
#include <cstdint>

#include "cpu/tuning.hpp"

HWY_BEFORE_NAMESPACE();
namespace lastmile::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class D>
class Quotient {
 public:
  Quotient(D d, float t, Division how = Division::fastest)
      : t_(hn::Set(d, t)),
        y_(hn::Set(d, 1.0f / t)),
        y_lo_(hn::Set(d, std::fma(-t, 1.0f / t, 1.0f) * (1.0f / t))),
        corrected_(HWY_NATIVE_FMA && t >= 0x1p-24f && t <= 0x1p24f && ReciprocalChosen(how)) {}

  // x / t, rounded as IEEE division rounds it.
  HWY_INLINE hn::Vec<D> Of(D d, hn::Vec<D> x) const {
#if HWY_NATIVE_FMA
    if (corrected_) {
      const hn::RebindToSigned<D> di;
      const auto magnitude = hn::And(hn::BitCast(di, x), hn::Set(di, 0x7fffffff));
      // 2^-60 <= |x| < 2^100, as float bits: exponent fields 67 to 226.
      const auto in_range = hn::And(hn::Gt(magnitude, hn::Set(di, 0x217fffff)),
                                    hn::Lt(magnitude, hn::Set(di, 0x71800000)));
      const auto q0 = hn::MulAdd(x, y_, hn::Mul(x, y_lo_));                 // within an ulp
      const auto corrected = hn::MulAdd(hn::NegMulAdd(q0, t_, x), y_, q0);  // RN(x / t)
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
  // Whether x / t goes by the reciprocal (for t in range, on a target with FMA).
  bool ByReciprocal() const { return corrected_; }

 private:
  static bool ReciprocalChosen(Division how) {
    if (how != Division::fastest) return how == Division::by_reciprocal;
    return !(HWY_TARGET <= HWY_AVX3 && vector_divide_pays());  // AVX-512 measured only
  }

  hn::Vec<D> t_, y_, y_lo_;
  bool corrected_;  // t in range, on a target with FMA, and the reciprocal chosen (`how`)
};

}  // namespace lastmile::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
