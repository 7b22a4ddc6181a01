// lastmile — the CPU backend's selection pieces (selection.hpp).
#include "cpu/selection.hpp"

#include <utility>

namespace lastmile::detail::cpu_selection {

// Every entry is copied and the count advanced by the test (kept <= i, so nothing unread is
// overwritten): a branch on it mispredicted on lists of which about half is kept (top-k 20000
// lists about 40000 candidates).
size_t keep_at_least(SortScratch scratch, size_t candidates, float kth) {
  size_t kept = 0;
  for (size_t i = 0; i < candidates; ++i) {
    const float value = scratch.values[i];
    scratch.ids[kept] = scratch.ids[i];
    scratch.values[kept] = value;
    kept += value >= kth;
  }
  return kept;
}

namespace {

// top_p_masked_prefix on a list longer than scratch.keys: the same sums in the same order, the
// keys sorted a chunk at a time (for_each_ascending), twice: for the sum, then for the walk.
size_t top_p_masked_by_chunks(size_t kept, float top_p, SortScratch scratch,
                              uint64_t* last_masked) {
  const float* values = scratch.values.data();
  const int32_t* ids = scratch.ids.data();
  auto key_at = [&](size_t i) { return ascending_key(values[i], ids[i]); };
  uint64_t top_key = 0;
  for (size_t i = 0; i < kept; ++i) top_key = std::max(top_key, key_at(i));
  const float max = key_value(top_key);
  if (max == kNegInf) return 0;
  double sum = 0;
  for_each_ascending(kept, key_at, scratch.keys, [&](const uint64_t* sorted, size_t m) {
    for (size_t j = 0; j < m; ++j) sum += std::exp(key_value(sorted[j]) - max);
    return true;
  });
  const auto inv_sum = static_cast<float>(1.0 / sum);
  const float cut = 1.0f - top_p;
  double cumulative = 0;
  size_t masked = 0;
  for_each_ascending(kept, key_at, scratch.keys, [&](const uint64_t* sorted, size_t m) {
    for (size_t j = 0; j < m; ++j) {
      if (masked + 1 >= kept) return false;  // the largest is never masked
      cumulative += std::exp(key_value(sorted[j]) - max) * inv_sum;
      if (static_cast<float>(cumulative) > cut) return false;
      *last_masked = sorted[j];
      ++masked;
    }
    return true;
  });
  return masked;
}

}  // namespace

// The masked entries of the oracle's full walk add exact zeros to its sums, so deciding on the
// list alone gives the same cut. Cumulative sums never decrease: the masked ones are a prefix.
size_t top_p_masked_prefix(size_t kept, float top_p, SortScratch scratch, uint64_t* last_masked) {
  if (kept > scratch.keys.size()) return top_p_masked_by_chunks(kept, top_p, scratch, last_masked);
  uint64_t* keys = scratch.keys.data();
  for (size_t i = 0; i < kept; ++i) keys[i] = ascending_key(scratch.values[i], scratch.ids[i]);
  std::sort(keys, keys + kept);
  if (kept == 0) return 0;
  const float max = key_value(keys[kept - 1]);
  if (max == kNegInf) return 0;
  double sum = 0;
  for (size_t i = 0; i < kept; ++i) sum += std::exp(key_value(keys[i]) - max);
  const auto inv_sum = static_cast<float>(1.0 / sum);
  const float cut = 1.0f - top_p;
  double cumulative = 0;
  size_t masked = 0;
  for (size_t i = 0; i + 1 < kept; ++i) {
    cumulative += std::exp(key_value(keys[i]) - max) * inv_sum;
    if (static_cast<float>(cumulative) > cut) break;
    masked = i + 1;
  }
  if (masked > 0) *last_masked = keys[masked - 1];
  return masked;
}

void sort_samples(float* values, size_t n, unsigned from_bit) {
  constexpr size_t kMax = 1024, kBits = 8, kBuckets = size_t{1} << kBits;
  uint32_t keys[kMax], other[kMax];
  for (size_t i = 0; i < n; ++i) keys[i] = orderable(values[i]);
  uint32_t* from = keys;
  uint32_t* to = other;
  for (unsigned shift = from_bit; shift < 32; shift += kBits) {  // least significant digit first
    uint32_t start[kBuckets] = {};
    for (size_t i = 0; i < n; ++i) ++start[(from[i] >> shift) & (kBuckets - 1)];
    uint32_t sum = 0;
    for (uint32_t& s : start) sum += std::exchange(s, sum);
    for (size_t i = 0; i < n; ++i) to[start[(from[i] >> shift) & (kBuckets - 1)]++] = from[i];
    std::swap(from, to);
  }
  for (size_t i = 0; i < n; ++i) values[i] = from_orderable(from[i]);
}

// Between -inf (masked unless threshold is 0) and max (kept when threshold <= inv_sum).
float smallest_kept(float max, float inv_sum, float threshold) {
  return smallest_passing([&](float v) { return !(std::exp(v - max) * inv_sum < threshold); });
}

MinPCut min_p_cut(float max, float min_p) {
  auto smallest_with_weight = [max](float w) {
    return smallest_passing([&](float v) { return !(std::exp(v - max) < w); });
  };
  return {smallest_with_weight(from_orderable(orderable(min_p) - 4)), smallest_with_weight(min_p)};
}

}  // namespace lastmile::detail::cpu_selection
