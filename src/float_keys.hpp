// lastmile — floats as unsigned integers in float order, and the oracle's top-p order (spec §9.3)
// as one 64-bit key: the cpu backend's selections (cpu/selection.hpp) and kernels (reduce.cpp).
#pragma once

#include <bit>
#include <cstdint>

#include "lastmile/params.hpp"

namespace lastmile::detail {

// Float bits mapped so that unsigned order is float order (-inf lowest); NaN-free input. -0 and
// +0 map to one key, as they compare equal for the oracle (ties then go by id).
inline uint32_t orderable(float v) {
  const uint32_t bits = std::bit_cast<uint32_t>(v + 0.0f);  // -0 + 0 is +0
  // Negative: every bit flipped; else the sign bit set. As a mask, not a branch on the sign.
  const uint32_t flip = static_cast<uint32_t>(static_cast<int32_t>(bits) >> 31) | 0x80000000u;
  return bits ^ flip;
}
inline float from_orderable(uint32_t key) {
  return std::bit_cast<float>(key & 0x80000000u ? key & 0x7fffffffu : ~key);
}

// The oracle's order for top-p (ascending value, among equal values the larger id first) as one
// unsigned key, and back.
inline uint64_t ascending_key(float value, int32_t id) {
  return (uint64_t{orderable(value)} << 32) | (0xffffffffu - static_cast<uint32_t>(id));
}
inline float key_value(uint64_t key) { return from_orderable(static_cast<uint32_t>(key >> 32)); }
inline TokenId key_id(uint64_t key) {
  return static_cast<TokenId>(0xffffffffu - static_cast<uint32_t>(key & 0xffffffffu));
}

}  // namespace lastmile::detail
