// lastmile — the floating-point environment the sampler computes in: IEEE's default (subnormals
// kept, round to nearest, exceptions masked) whatever the calling thread set, restored on the way
// out. PyTorch's set_flush_denormal(True), or any library built with -ffast-math (crtfastmath),
// sets DAZ and FTZ on x86 (FZ on AArch64): subnormal logits then compare as zero in the vector
// kernels but not in their float-bit keys, and the row walk's value ranges (cpu/selection.cpp)
// lost entries (a review's row of 40000: 10025 tokens masked differently from the oracle).
#pragma once

#include <cstdint>

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__) || defined(_M_IX86)
#include <xmmintrin.h>
#define LASTMILE_MXCSR 1
#elif defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#define LASTMILE_FPCR 1
#endif

namespace lastmile::detail {

#if defined(LASTMILE_MXCSR)
// MXCSR: exception masks set, no DAZ / FTZ, round to nearest; the caller's status flags kept.
struct FloatControl {
  using Bits = unsigned;
  static constexpr Bits kDefault = 0x1f80, kStatusFlags = 0x3f;
  static Bits read() { return _mm_getcsr(); }
  static void write(Bits bits) { _mm_setcsr(bits); }
};
#elif defined(LASTMILE_FPCR)
// FPCR: 0 is IEEE's default (no FZ / FZ16, no default NaN, round to nearest, no traps). The status
// flags live in FPSR, which this leaves alone.
struct FloatControl {
  using Bits = uint64_t;
  static constexpr Bits kDefault = 0, kStatusFlags = 0;
  static Bits read() {
    Bits bits;
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(bits));
    return bits;
  }
  static void write(Bits bits) { __asm__ __volatile__("msr fpcr, %0" : : "r"(bits)); }
};
#endif

class DefaultFloatEnvironment {
 public:
#if defined(LASTMILE_MXCSR) || defined(LASTMILE_FPCR)
  DefaultFloatEnvironment() : saved_(FloatControl::read()) {
    if (changed())
      FloatControl::write(FloatControl::kDefault | (saved_ & FloatControl::kStatusFlags));
  }
  ~DefaultFloatEnvironment() {
    if (changed()) FloatControl::write(saved_);
  }
#else
  // Elsewhere the caller's environment stands (README: Semantics). User-provided, so that a
  // guard that does nothing here is not an unused variable under -Werror.
  DefaultFloatEnvironment() {}
  ~DefaultFloatEnvironment() {}
#endif
  DefaultFloatEnvironment(const DefaultFloatEnvironment&) = delete;
  DefaultFloatEnvironment& operator=(const DefaultFloatEnvironment&) = delete;

 private:
#if defined(LASTMILE_MXCSR) || defined(LASTMILE_FPCR)
  bool changed() const { return (saved_ & ~FloatControl::kStatusFlags) != FloatControl::kDefault; }
  FloatControl::Bits saved_;
#endif
};

}  // namespace lastmile::detail
