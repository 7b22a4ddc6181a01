// lastmile — top-k (then top-p) drawn from a caller's row in place (input_draw.hpp): the k-th
// largest quotient from group maxima and a listing of the groups that reach it (else a sampled
// threshold), the draw over the survivors; over a penalised row, from a list of 2k candidates.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "cpu/input_draw.hpp"
#include "cpu/kernels.hpp"
#include "cpu/selection.hpp"

namespace lastmile::detail::cpu_selection {

size_t top_k_group_size(size_t n, int64_t k) {
  const size_t group = group_size(n);
  if (k < 1 || group == 0) return 0;
  return (n + group - 1) / group / 4 >= static_cast<uint64_t>(k) ? group : 0;
}

// One max pass, a selection among at most kMaxGroups maxima and a listing of a few percent of
// the row, where a sampled threshold listed hundreds of entries from a compress of all of it.
std::optional<float> kth_largest_by_groups(const void* src, DType dtype, size_t n, float t,
                                           int64_t k, SortScratch scratch, size_t* candidates,
                                           const ParallelFor& parallel, float* listed_from,
                                           const float* known_maxima) {
  const size_t group = top_k_group_size(n, k);
  if (group == 0) return std::nullopt;
  float read_maxima[kMaxGroups];
  const float* const maxima = known_maxima != nullptr ? known_maxima : read_maxima;
  if (known_maxima == nullptr &&
      !quotient_block_maxima(src, dtype, n, t, group, read_maxima, parallel))
    return std::nullopt;
  const auto groups = static_cast<int64_t>((n + group - 1) / group);
  size_t listed_maxima = 0;  // the k-th largest max, itself by sampled threshold among the maxima
  const float kth_max = *kth_largest(
      groups, k, scratch, &listed_maxima, [&](int64_t g) { return maxima[g]; },
      [&](float threshold) {
        return cpu::compress_at_least(maxima, static_cast<size_t>(groups), threshold, false,
                                      scratch.ids.data(), scratch.values.data());
      });
  const auto kk = static_cast<size_t>(k);
  // Fewer than k groups hold a finite quotient (a masked row: a processed top-k, top-p or min-p
  // row shown with more logprobs than it keeps, or top-k after a grammar's mask): from -inf the
  // whole row would be listed and selected, so the finite ones only, as kth_largest lists.
  const float from = kth_max == kNegInf ? std::numeric_limits<float>::lowest() : kth_max;
  // A masked row's list (from the lowest float) holds every finite entry: not one or two a group.
  size_t listed = list_scaled_at_least(src, dtype, n, t, from, scratch, parallel,
                                       {maxima, group, kth_max > kNegInf});
  // Fewer than k listed from a finite max cannot happen on a checked row; declining keeps a
  // broken list harmless.
  if (listed == kNotListed || (listed < kk && kth_max > kNegInf)) return std::nullopt;
  if (listed_from != nullptr) *listed_from = from;
  *candidates = listed;
  if (listed < kk) return kNegInf;  // fewer than k finite, those listed
  return kth_listed(scratch, listed, kk);
}

namespace {

// The draw over top-k's survivors, the candidates listed in scratch (id order) that reach the
// k-th largest quotient kth, after top-p if asked.
TokenId draw_over_top_k(size_t candidates, float kth, const DrawParams& params, double u,
                        SortScratch scratch) {
  size_t kept = keep_at_least(scratch, candidates, kth);
  if (params.apply_top_p) kept = top_p_keep(kept, params.top_p, scratch, nullptr);
  const float* values = scratch.values.data();
  // Top-k in the thousands: by blocks (an all -inf list goes on to the oracle's token 0).
  const float max = kept > kLongList ? *std::max_element(values, values + kept) : kNegInf;
  if (max > kNegInf) return draw_over_long_list(kept, scratch.ids.data(), values, max, u);
  return draw_over_list(kept, scratch.ids.data(), u, [values](size_t i) { return values[i]; });
}

}  // namespace

// Top-k, then top-p on the survivors.
TokenId draw_top_k(const void* src, DType dtype, int64_t n, const DrawParams& params, double u,
                   SortScratch scratch, const ParallelFor& parallel) {
  const float t = params.temperature;
  bool bad = false;
  auto sample = [&](int64_t i) {
    float v = scaled_entry(src, dtype, static_cast<size_t>(i), t);
    if (std::isnan(v) || std::isinf(v)) {
      bad = bad || !(v < 0);  // NaN or +inf; -inf is a masked token
      return kNegInf;         // keeps the sample selection well defined
    }
    return v;
  };
  auto compress = [&](float threshold) {
    return bad ? kNotListed
               : list_scaled_at_least(src, dtype, static_cast<size_t>(n), t, threshold, scratch,
                                      parallel);
  };
  size_t candidates = 0;
  // A row the groups decline (NaN / +inf) the sampled threshold's listing declines too.
  std::optional<float> kth = kth_largest_by_groups(src, dtype, static_cast<size_t>(n), t,
                                                   params.top_k, scratch, &candidates, parallel);
  if (!kth) kth = kth_largest(n, params.top_k, scratch, &candidates, sample, compress);
  if (!kth) return kNoInputDraw;
  return draw_over_top_k(candidates, *kth, params, u, scratch);
}

// Top-k (then top-p) over a penalised row, from the caller's row and a list. Step 6 only lowers
// entries, so an entry below the 2k-th largest of the caller's group maxima, m, stays below m.
// The entries at or above m (2k at least, id order) are listed from the caller's row, as
// kth_largest_by_groups lists them for 2k, lowered as step 6 lowers them (PenalisedRow::lower)
// and divided. When k of them keep a quotient above m's, the list holds the working row's k
// largest quotients and every entry that reaches the k-th: the k-th and the survivors (id order,
// same quotients) that draw_top_k finds over the working row, so the same top-p and the same
// token. Else (the history holds most of the largest) it declines, and the steps decide. The
// bench mix's penalised top-k rows (152k bf16 logits, 2k-token histories, one thread) took 119 us
// each this way, 169 through the steps (medians of five runs in turns). Listing the entries near
// the max during the summary's read, instead of reading the group maxima again, took 135: the
// early blocks' maxima lie far below the row's, so those blocks listed most of their entries.
// group_maxima, if known: the caller's row's, as kth_largest_by_groups reads them for 2k.
TokenId draw_top_k_from_penalised_row(const PenalisedRow& row, size_t n, const DrawParams& params,
                                      double u, SortScratch scratch, const ParallelFor& parallel,
                                      const float* group_maxima) {
  const auto k = static_cast<size_t>(params.top_k);
  size_t listed = 0;
  float bound = kNegInf;  // m: every entry at or above it is listed
  const std::optional<float> kth =
      kth_largest_by_groups(row.src, row.dtype, n, 1.0f, 2 * params.top_k, scratch, &listed,
                            parallel, &bound, group_maxima);
  // Declined: NaN / +inf (the steps report it), or a masked row (fewer than 2k groups hold a
  // finite entry: listed from the lowest float).
  if (!kth || bound == std::numeric_limits<float>::lowest()) return kNoInputDraw;
  if (!lower_and_divide(row, scratch, listed, params.temperature, &bound)) return kNoInputDraw;
  const float* const values = scratch.values.data();
  const auto above = std::count_if(values, values + listed, [bound](float v) { return v > bound; });
  if (static_cast<size_t>(above) < k) return kNoInputDraw;
  return draw_over_top_k(listed, kth_listed(scratch, listed, k), params, u, scratch);
}

}  // namespace lastmile::detail::cpu_selection
