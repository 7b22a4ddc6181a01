// lastmile — spec §7.2's repetition factor where a history bitmap's bit is set (Repetition), by
// vectors or entry by entry (repeat_seen): one definition for every pass that folds it in, so
// that they agree to the bit. Re-included once per Highway target, as Highway's own -inl
// headers are.
#if defined(LASTMILE_CPU_REPETITION_INL_HPP_) == defined(HWY_TARGET_TOGGLE)
#ifdef LASTMILE_CPU_REPETITION_INL_HPP_
#undef LASTMILE_CPU_REPETITION_INL_HPP_
#else
#define LASTMILE_CPU_REPETITION_INL_HPP_
#endif

#include <hwy/highway.h>

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "cpu/kernels.hpp"
#include "cpu/lanes-inl.hpp"

HWY_BEFORE_NAMESPACE();
namespace lastmile::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

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

}  // namespace lastmile::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // LASTMILE_CPU_REPETITION_INL_HPP_
