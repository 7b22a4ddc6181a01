// lastmile — the random stream: every uniform is a pure function of (request seed, step), through
// Random123's Philox-4x32-10 (DESIGN "Randomness"). Nothing here holds state.
#pragma once

#include <Random123/philox.h>

#include <cstdint>

namespace lastmile::detail {

// Key = the 64-bit seed, counter = (step, 0); the top 52 bits k of words 0-1 map to the open
// interval (0, 1) as (k + 0.5) / 2^52, exact in double: 2^-53 <= u <= 1 - 2^-53.
inline double uniform_open(uint64_t seed, uint64_t step) {
  r123::Philox4x32 philox;
  const r123::Philox4x32::key_type key = {
      {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}};
  const r123::Philox4x32::ctr_type counter = {
      {static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32), 0u, 0u}};
  const r123::Philox4x32::ctr_type bits = philox(counter, key);
  const uint64_t k = ((uint64_t{bits[0]} << 32) | bits[1]) >> 12;
  return (static_cast<double>(k) + 0.5) * 0x1.0p-52;
}

// SplitMix64's finaliser: seeds for requests without one, from (sampler seed, counter).
inline uint64_t derive_seed(uint64_t base, uint64_t counter) {
  uint64_t z = base + 0x9e3779b97f4a7c15ull * (counter + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace lastmile::detail
