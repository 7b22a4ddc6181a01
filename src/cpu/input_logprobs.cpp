// lastmile — the CPU backend's raw-mode logprobs read from a caller's row (spec §3.1, §4).
// No snapshot is kept: the caller's row is the raw tensor, and the raw values are a monotone map
// of it (RawValues). So every rank and top-N question about values becomes a logit threshold:
// the smallest float whose value reaches v, found by bisection with the map's own arithmetic.
// Entries at or above it are exactly those whose value is >= v, rounding ties included, and
// vector passes over the caller's row (no division, no writes) answer with the oracle's counts
// and order.
#include "cpu/input_logprobs.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu/input_draw.hpp"
#include "cpu/kernels.hpp"
#include "cpu/selection.hpp"

namespace lastmile::detail::cpu_selection {
namespace {

// The smallest float x with values(x) >= v: -inf for v = -inf (every entry passes).
float smallest_with_value_at_least(RawValues values, float v) {
  if (v == kNegInf) return kNegInf;
  uint32_t lo = orderable(kNegInf), hi = orderable(std::numeric_limits<float>::infinity());
  while (hi - lo > 1) {  // values(-inf) = -inf < v; values(+inf) = +inf >= v
    const uint32_t mid = lo + (hi - lo) / 2;
    (values(from_orderable(mid)) >= v ? hi : lo) = mid;
  }
  return from_orderable(hi);
}

}  // namespace

RawValues log_softmax_of_caller_row(const void* src, DType dtype, int64_t n) {
  float max = kNegInf;
  double total = 0;
  if (!caller_row_softmax(src, dtype, n, &max, &total)) {  // over 2^20 entries: plainly
    const auto size = static_cast<size_t>(n);
    for (size_t i = 0; i < size; ++i) max = std::max(max, scaled_entry(src, dtype, i, 1.0f));
    if (max != kNegInf)
      for (size_t i = 0; i < size; ++i) total += std::exp(scaled_entry(src, dtype, i, 1.0f) - max);
  }
  if (max == kNegInf) return {kNegInf, 0.0f};
  return {max, static_cast<float>(std::log(total))};
}

int64_t rank_in_caller_row(const void* src, DType dtype, int64_t n, RawValues values,
                           TokenId token_id) {
  const float v = values(scaled_entry(src, dtype, static_cast<size_t>(token_id), 1.0f));
  return cpu::count_source_at_least(src, dtype, static_cast<size_t>(n),
                                    smallest_with_value_at_least(values, v));
}

// The k-th largest entry x_k by selection (kth_largest on the caller's row); the k largest
// values are among the entries >= the smallest float whose value reaches values(x_k) (x_k
// itself unless rounding ties lower entries with it), ordered by value, then id.
void top_n_of_caller_row(const void* src, DType dtype, int64_t n, RawValues values, int64_t k,
                         TokenId* ids, float* out, SortScratch scratch) {
  if (k <= 0) return;
  const auto size = static_cast<size_t>(n);
  auto entry = [&](size_t i) { return scaled_entry(src, dtype, i, 1.0f); };
  auto list = [&](float threshold) {
    return list_scaled_at_least(src, dtype, size, 1.0f, threshold, scratch, ParallelFor{});
  };
  size_t candidates = 0;
  const std::optional<float> kth = kth_largest(
      n, k, scratch, &candidates, [&](int64_t i) { return entry(static_cast<size_t>(i)); }, list);
  // kth is always found on a checked row; were it not, the output is ids 0 with -inf values.
  const float v = kth ? values(*kth) : kNegInf;
  const float from = smallest_with_value_at_least(values, v);
  if (!kth || from < *kth) candidates = list(from);
  if (candidates == kNotListed) candidates = 0;
  // Descending value, ascending id, as one unsigned key (see CpuBackend::top_n).
  uint64_t* keys = scratch.keys.data();
  size_t count = 0;
  for (size_t i = 0; i < candidates; ++i) {
    const float value = values(scratch.values[i]);
    if (value >= v)
      keys[count++] = (uint64_t{~orderable(value)} << 32) | static_cast<uint32_t>(scratch.ids[i]);
  }
  const size_t shown = std::min(count, static_cast<size_t>(k));
  std::partial_sort(keys, keys + shown, keys + count);
  for (size_t i = 0; i < static_cast<size_t>(k); ++i) {
    ids[i] = i < shown ? static_cast<TokenId>(keys[i] & 0xffffffffu) : 0;
    out[i] = i < shown ? values(entry(static_cast<size_t>(ids[i]))) : kNegInf;
  }
}

}  // namespace lastmile::detail::cpu_selection
