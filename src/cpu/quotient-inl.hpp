// lastmile — Quotient: x / t per lane with the bits of IEEE division, without a divide where the
// target has FMA, for the passes that divide a row by its temperature (spec §8.1: torch's div_).
// Re-included once per Highway target, as Highway's own -inl headers are.
//
// Why: a vector divide is slow next to the rest of a pass (one 16-lane vdivps every 8-16 cycles on
// Intel's AVX-512 cores, one 8-lane every 3.5 on Zen 3). A multiply by y = 1 / t, rounded once, is
// within about an ulp of x / t; one FMA gives its residual x - q t exactly and a second rounds the
// corrected quotient. Markstein's theorem: when y = RN(1 / t) and q is within an ulp of x / t,
// RN(q + (x - q t) y) = RN(x / t), provided nothing underflows. Here nothing leaves the normal
// range while 2^-24 <= t <= 2^24 and 2^-60 <= |x| < 2^100 (the residual's lowest bit then sits far
// above the subnormals); ±0 and ±inf are their own quotients; anything else (tiny, huge, NaN)
// takes the divide, a whole vector at a time. Checked on every dividend significand against
// thousands of divisor significands (tests/unit/cpu_quotient_test.cpp). A temperature
// row's statistics pass over a cached row: 56 -> 44 us; the bench's `temperature`: 33-35 -> 28-32
// us a row (Xeon, Emerald Rapids, AVX-512, 2 threads, old and new builds in turns).
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
      const auto q = hn::Mul(x, y_);
      const auto corrected = hn::MulAdd(hn::NegMulAdd(q, t_, x), y_, q);
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
