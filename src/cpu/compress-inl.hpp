// lastmile — CompressKept: the lanes a mask keeps, moved to the front of a vector, for the
// compressing kernels (compress_at_least, probability_band, the caller's-row lists), and
// StoreKeptOfFour, their stores four vectors a step. Re-included once per Highway target, as
// Highway's own -inl headers are.
//
// Why not hn::Compress everywhere: Highway 1.0.3's AVX2, SSE4 and SSSE3 Compress keep their lane
// tables in non-static constexpr arrays, which GCC 12 copies onto the stack at every call (1 KB on
// AVX2: about 85 cycles per vector). On Zen 3 (AVX2) that made topk_topp 478 us per row against
// 17 on Zen 4, whose AVX-512 compresses in hardware. These targets look the kept lanes' indices
// up in tables of static storage and permute by them; the others keep hn::Compress.
#if defined(LASTMILE_CPU_COMPRESS_INL_HPP_) == defined(HWY_TARGET_TOGGLE)
#ifdef LASTMILE_CPU_COMPRESS_INL_HPP_
#undef LASTMILE_CPU_COMPRESS_INL_HPP_
#else
#define LASTMILE_CPU_COMPRESS_INL_HPP_
#endif

#include <hwy/highway.h>

#include <array>
#include <cstddef>
#include <cstdint>

HWY_BEFORE_NAMESPACE();
namespace lastmile::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#undef LASTMILE_COMPRESS_BY_TABLE  // set for the target of this inclusion only
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_SSE4 || HWY_TARGET == HWY_SSSE3
#define LASTMILE_COMPRESS_BY_TABLE 1

// For each mask of 8 lanes, the lanes it keeps in ascending order, lane j of the result in
// nibble j (nibbles past the kept count 0).
constexpr std::array<uint32_t, 256> kept_lane_nibbles() {
  std::array<uint32_t, 256> table{};
  for (uint32_t bits = 0; bits < 256; ++bits) {
    uint32_t out = 0;
    for (uint32_t lane = 0; lane < 8; ++lane)
      if ((bits >> lane) & 1) table[bits] |= lane << (4 * out++);
  }
  return table;
}
inline constexpr std::array<uint32_t, 256> kKeptLaneNibbles = kept_lane_nibbles();

// For each mask of 4 lanes, the kept lanes' indices, in ascending order (the rest 0).
constexpr std::array<std::array<int32_t, 4>, 16> kept_lanes4() {
  std::array<std::array<int32_t, 4>, 16> table{};
  for (uint32_t bits = 0; bits < 16; ++bits)
    for (uint32_t lane = 0; lane < 4; ++lane)
      table[bits][lane] = static_cast<int32_t>((kKeptLaneNibbles[bits] >> (4 * lane)) & 0xf);
  return table;
}
alignas(16) inline constexpr std::array<std::array<int32_t, 4>, 16> kKeptLanes4 = kept_lanes4();

// The indices of the lanes `keep` selects, ascending, at the front (the rest 0).
template <class D>
HWY_INLINE hn::Vec<hn::RebindToSigned<D>> KeptLaneIndices(D d, hn::Mask<D> keep) {
  const hn::RebindToSigned<D> di;
  uint8_t bits[8] = {};
  hn::StoreMaskBits(d, keep, bits);
  if constexpr (hn::MaxLanes(d) == 8) {
    const auto nibbles = hn::Set(di, static_cast<int32_t>(kKeptLaneNibbles[bits[0]]));
    const auto shifts = hn::ShiftLeft<2>(hn::Iota(di, 0));  // 0, 4, ..., 28
    return hn::And(hn::Shr(nibbles, shifts), hn::Set(di, 7));
  } else {
    static_assert(hn::MaxLanes(d) == 4, "128-bit vectors of 32-bit lanes");
    return hn::Load(di, kKeptLanes4[bits[0]].data());
  }
}
#endif

// v's lanes that `keep` selects, in lane order, at the front; the lanes past CountTrue(keep) are
// unspecified (the kernels store whole vectors past their count). 32-bit lanes.
template <class D>
HWY_INLINE hn::Vec<D> CompressKept(D d, hn::Vec<D> v, hn::Mask<D> keep) {
  static_assert(sizeof(hn::TFromD<D>) == 4, "32-bit lanes");
#if defined(LASTMILE_COMPRESS_BY_TABLE)
  return hn::TableLookupLanes(v, hn::IndicesFromVec(d, KeptLaneIndices(d, keep)));
#else
  (void)d;
  return hn::Compress(v, keep);
#endif
}

// The ids first + lane of the lanes `keep` selects, in lane order, at the front (the rest
// unspecified): CompressKept of (first, first + 1, ...), which on the table targets is the lane
// indices plus first, with no permutation.
template <class D>
HWY_INLINE hn::Vec<hn::RebindToSigned<D>> CompressKeptIds(D d, hn::Mask<D> keep, size_t first) {
  const hn::RebindToSigned<D> di;
  const auto offset = hn::Set(di, static_cast<int32_t>(first));
#if defined(LASTMILE_COMPRESS_BY_TABLE)
  return hn::Add(offset, KeptLaneIndices(d, keep));
#else
  (void)d;
  // Iota(di, first) is built through the stack by GCC: a constant plus a broadcast instead.
  return hn::Compress(hn::Add(hn::Iota(di, 0), offset), hn::RebindMask(di, keep));
#endif
}

// Four vectors' kept lanes, stored in order from ids + count: vector k's ids are first + k * lanes
// + lane, and with `v` its kept values go to values + count as well. Returns the count after them.
// The four counts are taken before the stores: stored a vector at a time, each store's address
// waited on the previous vector's count (a chain through the mask's popcount). Whole vectors are
// stored past the count, as CompressKept's callers do.
template <class D>
HWY_INLINE size_t StoreKeptOfFour(D d, const hn::Mask<D> (&keep)[4], size_t first,
                                  int32_t* HWY_RESTRICT ids, size_t count,
                                  const hn::Vec<D>* v = nullptr,
                                  hn::TFromD<D>* HWY_RESTRICT values = nullptr) {
  const hn::RebindToSigned<D> di;
  const size_t lanes = hn::Lanes(d);
  size_t counts[4];
  for (size_t k = 0; k < 4; ++k) counts[k] = hn::CountTrue(d, keep[k]);
  for (size_t k = 0; k < 4; ++k) {  // in order: each store's tail is the next one's room
    hn::StoreU(CompressKeptIds(d, keep[k], first + k * lanes), di, ids + count);
    if (v != nullptr) hn::StoreU(CompressKept(d, v[k], keep[k]), d, values + count);
    count += counts[k];
  }
  return count;
}

}  // namespace lastmile::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
