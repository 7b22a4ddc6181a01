// lastmile — the CPU backend's raw-mode logprobs read from a caller's row (spec §3.1, §4).
// No snapshot is kept: the caller's row is the raw tensor, and the raw values are a monotone map
// of it (RawValues). So every rank and top-N question about values becomes a logit threshold:
// the smallest float whose value reaches v, found by bisection with the map's own arithmetic.
// Entries at or above it are exactly those whose value is >= v, rounding ties included, and
// vector passes over the caller's row (no division, no writes) answer with the oracle's counts
// and order: the softmax statistics by blocks, a count for the rank, a selection for the top-N.
// (Listing the entries near the max on the statistics pass, to answer from the list, was slower:
// its per-block compress cost as much as the separate passes over the cached row.)
#include "cpu/input_logprobs.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu/input_draw.hpp"
#include "cpu/kernels.hpp"
#include "cpu/selection.hpp"

namespace lastmile::detail::cpu_selection {
namespace {

// The smallest float x with values(x) >= v (-inf for v = -inf: every entry passes).
float smallest_with_value_at_least(RawValues values, float v) {
  return smallest_passing([&](float x) { return values(x) >= v; });
}

float entry(const void* src, DType dtype, size_t i) { return scaled_entry(src, dtype, i, 1.0f); }

// The k largest values among `listed` entries of scratch (which hold every entry whose value is
// >= v, and at least k of them), descending, equal values by ascending id.
void top_n_of_list(const void* src, DType dtype, RawValues values, size_t listed, float v,
                   int64_t k, TokenId* ids, float* out, SortScratch scratch) {
  const size_t shown = largest_listed(scratch, listed, values, v, k, ids);
  for (size_t i = 0; i < static_cast<size_t>(k); ++i) {  // shown < k only on an unchecked row
    if (i >= shown) ids[i] = 0;
    out[i] = i < shown ? values(entry(src, dtype, static_cast<size_t>(ids[i]))) : kNegInf;
  }
}

// The k-th largest entry x_k by selection over the caller's row (kth_largest); the k largest
// values are among the entries >= the smallest float whose value reaches values(x_k) (x_k itself
// unless rounding ties lower entries with it).
void top_n_of_caller_row(const void* src, DType dtype, int64_t n, RawValues values, int64_t k,
                         TokenId* ids, float* out, SortScratch scratch) {
  auto list = [&](float threshold) {
    return list_scaled_at_least(src, dtype, static_cast<size_t>(n), 1.0f, threshold, scratch,
                                ParallelFor{});
  };
  size_t candidates = 0;
  const std::optional<float> kth = kth_largest(
      n, k, scratch, &candidates,
      [&](int64_t i) { return entry(src, dtype, static_cast<size_t>(i)); }, list);
  const float v = kth ? values(*kth) : kNegInf;  // kth is always found on a checked row
  const float from = smallest_with_value_at_least(values, v);
  if (!kth || from < *kth) candidates = list(from);
  top_n_of_list(src, dtype, values, candidates == kNotListed ? 0 : candidates, v, k, ids, out,
                scratch);
}

// log_softmax's max and log-sum of the caller's float32 view: block statistics in one read, or
// (over 2^20 entries) plainly.
RawValues log_softmax_terms(const void* src, DType dtype, int64_t n) {
  float max = kNegInf;
  double total = 0;
  if (!caller_row_softmax(src, dtype, n, &max, &total)) {
    const auto size = static_cast<size_t>(n);
    for (size_t i = 0; i < size; ++i) max = std::max(max, entry(src, dtype, i));
    if (max != kNegInf)
      for (size_t i = 0; i < size; ++i) total += std::exp(entry(src, dtype, i) - max);
  }
  if (max == kNegInf) return {kNegInf, 0.0f};  // the identity: the row stays -inf
  return {max, static_cast<float>(std::log(total))};
}

}  // namespace

RawLogprobs raw_logprobs_of_caller_row(const void* src, DType dtype, int64_t n, bool log_softmax,
                                       TokenId token_id, int64_t k, TokenId* ids, float* out,
                                       SortScratch scratch) {
  const RawValues values = log_softmax ? log_softmax_terms(src, dtype, n) : RawValues{};
  const float v = values(entry(src, dtype, static_cast<size_t>(token_id)));
  const int64_t rank = cpu::count_source_at_least(src, dtype, static_cast<size_t>(n),
                                                  smallest_with_value_at_least(values, v));
  if (k > 0) top_n_of_caller_row(src, dtype, n, values, k, ids, out, scratch);
  return {values, rank};
}

}  // namespace lastmile::detail::cpu_selection
