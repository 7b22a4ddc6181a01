// lastmile — the floating-point environment the sampler computes in: IEEE's default (subnormals
// kept, round to nearest, exceptions masked) whatever the calling thread set, restored on the way
// out. PyTorch's set_flush_denormal(True), or any library built with -ffast-math (crtfastmath),
// sets DAZ and FTZ on x86: subnormal logits then compare as zero in the vector kernels but not in
// their float-bit keys, and the row walk's value ranges (cpu/selection.cpp) lost entries (a
// review's row of 40000: 10025 tokens masked differently from the oracle).
#pragma once

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__) || defined(_M_IX86)
#include <xmmintrin.h>
#define LASTMILE_MXCSR 1
#endif

namespace lastmile::detail {

class DefaultFloatEnvironment {
 public:
#ifdef LASTMILE_MXCSR
  // MXCSR: exception masks set, no DAZ / FTZ, round to nearest; the caller's status flags kept.
  static constexpr unsigned kDefault = 0x1f80, kStatusFlags = 0x3f;
  DefaultFloatEnvironment() : saved_(_mm_getcsr()) {
    if ((saved_ & ~kStatusFlags) != kDefault) _mm_setcsr(kDefault | (saved_ & kStatusFlags));
  }
  ~DefaultFloatEnvironment() {
    if ((saved_ & ~kStatusFlags) != kDefault) _mm_setcsr(saved_);
  }
#else
  // Elsewhere the caller's environment stands (README: Semantics).
  DefaultFloatEnvironment() = default;
#endif
  DefaultFloatEnvironment(const DefaultFloatEnvironment&) = delete;
  DefaultFloatEnvironment& operator=(const DefaultFloatEnvironment&) = delete;

 private:
#ifdef LASTMILE_MXCSR
  unsigned saved_;
#endif
};

}  // namespace lastmile::detail
