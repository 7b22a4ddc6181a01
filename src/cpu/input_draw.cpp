// lastmile — the CPU backend's draw straight from a caller's row (Backend::draw_from_input).
// Writing a 128k-entry float32 working row costs as much as reading the caller's: the two share
// L2 and evict each other. For a random row that nothing edits and no logprob reads, these paths
// read the caller's row in place (dividing by the temperature on the fly, exactly as step 7b)
// and keep only short lists:
// - temperature only: softmax statistics by blocks in one read; the walk recomputes one block;
// - min_p: the block maxima alone, then the blocks that reach min_p's cut listed: the sum only
//   matters to entries within rounding of the cut (then the statistics and the oracle's test as
//   a logit threshold);
// - top-k (and top-p): candidates at or above the k-th largest group max (a sampled threshold
//   when k is large for the row, or the row is over 2^20), the k-th among them, top-p's cut on
//   the list, the draw on it.
// - top-p alone: the probabilities from the band's low end up, listed on a second read; on a
//   flat row (most of it kept) the band is guessed from samples and marked by the statistics
//   pass itself, with the mass below it, so the row is read once.
// min_p with top-k or top-p needs the whole processed row: the steps.
// One file a kind of draw (input_min_p.cpp, input_top_p.cpp, input_top_k.cpp) over the passes they
// share (input_passes.cpp); here the choice among them.
#include "cpu/input_draw.hpp"

#include <cstdint>

#include "cpu/input_logprobs.hpp"
#include "cpu/selection.hpp"

namespace lastmile::detail::cpu_selection {

TokenId draw_from_caller_row(const void* src, DType dtype, int64_t n, const DrawParams& params,
                             double u, SortScratch scratch, const ParallelFor& parallel,
                             RawRowSummary* summary) {
  const bool top_k = params.top_k<n, min_p = params.min_p> 0.0f;
  const bool top_p = params.apply_top_p && params.top_p < 1.0f;
  if (top_k && !min_p) return draw_top_k(src, dtype, n, params, u, scratch, parallel);
  if (top_p && !top_k && !min_p)
    return draw_top_p(src, dtype, n, params, u, scratch, parallel, summary);
  if (top_k || top_p) return kNoInputDraw;
  // p = 1 top-p masks only tokens of probability 0, which the draw never picks (u > 0).
  return draw_by_softmax(src, dtype, n, params, u, scratch, parallel, summary);
}

// Top-k without min_p (then top-p) lists its candidates from the caller's row
// (draw_top_k_from_penalised_row); top-p alone lists the entries near the max and bounds the rest
// by the raw summary's total, learned here when not asked for (draw_top_p_from_penalised_row);
// min_p alone reads the row block by block (draw_min_p_from_penalised_blocks). The rest is
// declined unread.
TokenId draw_from_penalised_blocks(const PenalisedRow& row, int64_t n, const DrawParams& params,
                                   double u, SortScratch scratch, RawRowSummary* summary,
                                   const ParallelFor& parallel) {
  const auto size = static_cast<size_t>(n);
  const bool min_p_alone =
      params.min_p > 0.0f && params.top_k >= n && !(params.apply_top_p && params.top_p < 1.0f);
  const size_t top_k_group = top_k_group_size(size, 2 * params.top_k);
  const bool top_k = params.min_p == 0.0f && top_k_group > 0 && row.lower != nullptr;
  const bool top_p_alone = row.lower != nullptr && params.apply_top_p && params.top_p < 1.0f &&
                           params.top_k >= n && params.min_p == 0.0f;
  if (summary != nullptr) summary->known = false;
  if (!top_k && !top_p_alone && (!min_p_alone || !min_p_by_maxima_fits(size, params.min_p)))
    return kNoInputDraw;  // unread
  // Top-p alone bounds the unlisted entries by the raw summary's total: learned here when no
  // logprob asks for it, as one Exp pass at t = 1 where the steps would take the working row's.
  // Top-k's group maxima come with that read when it is made: a max pass fewer (the bench mix's
  // top-k rows, 152k bf16 with 5 logprobs, took 38.9 us each instead of 44.6; one thread, Zen 4,
  // medians of six rounds in turns).
  RawRowSummary own;
  RawRowSummary* const learned = summary != nullptr ? summary : top_p_alone ? &own : nullptr;
  // Top-p's list of the entries near the max reads the groups that reach it, not the blocks (a
  // sixth of an LLM-shaped row's groups against some two thirds of its blocks): the bench mix's
  // top-p rows alone, bf16 152k 46.5 -> 45.4 us, float32 128k 33.7 -> 32.5 (one thread, Zen 4,
  // medians of five and three runs in turns). A wash while the summary read bf16 rows as floats
  // (its groups then cost it some 1.9 us a row).
  const size_t group = top_k ? top_k_group : top_p_alone ? group_size(size) : 0;
  float group_maxima[kMaxGroups];
  const cpu::GroupMaxima groups = {group, group > 0 ? group_maxima : nullptr};
  if (learned != nullptr) {
    learned->known = summarise_while_converting(row.src, row.dtype, n, nullptr, nullptr, 1.0f,
                                                learned, parallel, groups);
    if (!learned->known) return kNoInputDraw;
  }
  if (top_k)
    return draw_top_k_from_penalised_row(row, size, params, u, scratch, parallel,
                                         learned != nullptr ? group_maxima : nullptr);
  if (top_p_alone)
    return draw_top_p_from_penalised_row(row, size, params, u, scratch, *learned, parallel,
                                         {groups.max, group, true});
  return draw_min_p_from_penalised_blocks(row, size, params, u, scratch, summary, parallel);
}

}  // namespace lastmile::detail::cpu_selection
