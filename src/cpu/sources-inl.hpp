// lastmile — a caller's fp32, bf16 or fp16 row read as float32 vectors, in place (Float32Source,
// BFloat16Source, Float16Source; with_source picks one by dtype): each kernel that reads a
// caller's row is written once for the three. Re-included once per Highway target, as
// Highway's own -inl headers are.
#if defined(LASTMILE_CPU_SOURCES_INL_HPP_) == defined(HWY_TARGET_TOGGLE)
#ifdef LASTMILE_CPU_SOURCES_INL_HPP_
#undef LASTMILE_CPU_SOURCES_INL_HPP_
#else
#define LASTMILE_CPU_SOURCES_INL_HPP_
#endif

#include <hwy/highway.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cpu/kernels.hpp"
#include "cpu/lanes-inl.hpp"

HWY_BEFORE_NAMESPACE();
namespace lastmile::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

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

}  // namespace lastmile::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // LASTMILE_CPU_SOURCES_INL_HPP_
