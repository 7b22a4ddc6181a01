// lastmile — one logits row moving through the pipeline: its request, its scratch rows and where
// its results go. Steps read and write a row only through this.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "backend.hpp"
#include "lastmile/batch.hpp"
#include "lastmile/logits_view.hpp"
#include "pipeline/batch_plan.hpp"
#include "pipeline/output_buffers.hpp"
#include "token_index.hpp"

namespace lastmile::detail {

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Start of logits row `row` of the caller's matrix.
const void* row_pointer(const LogitsView& logits, int64_t row);

// Where a row's logits first held NaN or +inf (token_id -1: nowhere).
struct RowFailure {
  int64_t token_id = -1;
  const char* made_by = nullptr;  // null: the caller's input; else the step's parameter name
  bool is_nan = false;            // else +inf
};

// Scratch owned by one worker thread, grown, never shrunk: the working row, ids and values to list
// one, keys for an eighth of one (sort_keys_size) sharing their storage with top-p's histogram,
// and the history's lists.
struct RowScratch {
  std::vector<float> logits;  // the working row, edited in place by steps 2-7
  std::vector<float> sort_values;
  std::vector<int32_t> sort_ids;
  std::vector<uint64_t> sort_keys;  // key_storage_size(logits.size()) words
  std::vector<float> saved;         // allowed ids' values while the row is masked
  std::vector<TokenCount> token_counts;
  TokenIndex history_index;    // history token id -> its entry in token_counts
  std::vector<uint64_t> seen;  // penalties' token bitmap; all zero between rows
  // What step 2 learned of this row's input for a raw mode's step 8; reset for every row.
  RawRowSummary raw_summary;

  size_t list_room = 0;  // the backend's list_room(vocab_size)

  void reserve(int64_t vocab_size, size_t backend_list_room);
  SortScratch sort() {
    return SortScratch::over(sort_ids, sort_values, sort_keys, logits.size(), list_room);
  }
  // Step 7d's survivor list for step 7e (Backend::apply_top_k_top_p); set by 7d for every row.
  size_t listed_survivors = kNotListed;
  // Room for the longest history and whitelist of a batch, and for `counts_size` entries bucketed
  // by block (PenalisedBlocks: a row's prompt and history tokens, or a RequestBatch row's kept
  // counts), whichever worker gets that row.
  void reserve_lists(size_t history_size, size_t allowed_size, size_t counts_size);
  std::vector<uint32_t> counts_by_block;  // PenalisedBlocks' buckets
};

// Output history of spec §2.2: output tokens, then the drafts when they count.
struct History {
  std::span<const TokenId> output;
  std::span<const TokenId> drafts;

  size_t size() const { return output.size() + drafts.size(); }
  TokenId operator[](size_t i) const {
    return i < output.size() ? output[i] : drafts[i - output.size()];
  }
};

// A row's sampling parameters after greedy normalisation (spec §12.1): greedy rows have top_k,
// top_p and min_p switched off and temperature 1 for the division.
struct RowSampling {
  bool greedy = false;
  float temperature = 1.0f;
  int64_t top_k = 0;  // vocab_size when off
  float top_p = 1.0f;
  float min_p = 0.0f;
};

// Whether steps 3-6 change a request's row; steps 3-5 alone; step 6 alone.
bool edited_before_sampling(const BatchPlan& plan, const BatchRequest& request);
bool edited_before_penalties(const BatchPlan& plan, const BatchRequest& request);
bool penalised(const BatchPlan& plan, const RequestParams& params);
// Whether a greedy row is edited by no step but step 6, whose penalties only lower entries
// (repetition >= 1, frequency and presence >= 0), and its working row is read by no logprob: its
// argmax (and raw logprobs) then read only the caller's row, unless the backend declines
// (greedy.cpp). Only the unedited ones count below: a backend that declines a penalised one
// leaves it to the steps, which do not split.
bool greedy_within_callers_bounds(const BatchPlan& plan, const BatchRequest& request);
// Whether a random row is edited by step 6 alone, lowering entries, and its working row is read
// by no logprob and no custom processor: the backend may then draw it from the caller's row and
// its penalised blocks (draw.cpp). Not counted below either.
bool random_penalised_from_callers_row(const BatchPlan& plan, const BatchRequest& request);
// Whether a row's work is, unless the backend declines, reads of the caller's row (the input
// draw or argmax, raw logprobs), which may split over threads: no step edits it and no logprob
// reads the working row.
bool reads_only_callers_row(const BatchPlan& plan, const BatchRequest& request);

struct RowStep {
  const BatchPlan& plan;
  const Backend& backend;
  const LogitsView& input;
  const BatchRequest& request;
  int64_t row;
  RowSampling sampling;
  uint64_t seed;  // the request's stream key
  // Penalty state kept by a RequestBatch, if any: a bitmap of the prompt and output tokens and
  // the output tokens' counts.
  std::span<const uint64_t> kept_seen;
  std::span<const TokenCount> kept_output_counts;
  bool has_kept_counts;
  RowScratch& scratch;
  OutputBuffers& out;
  // How the row's reads of the caller's row may split over threads (the input draw and argmax,
  // raw logprobs): over the pool when the batch has fewer rows than threads, else not at all.
  // Fixed vocab chunks: the same result either way. Passes over the working row never split.
  ParallelFor split;

  std::span<float> logits;  // working float32 row
  TokenId greedy_token = 0;
  TokenId sampled_token = 0;
  // The row stops at the first NaN / +inf: in the input (made_by null) or made by a step from
  // finite logits (made_by names the parameter, e.g. "temperature"). Reported after the batch.
  RowFailure failure;
  // Step 2 divided the row by its temperature while converting it (step 7b then skips).
  bool divided_by_temperature = false;
  // Step 2 applied step 6's repetition factor while converting the row (step 6 then skips it).
  bool repetition_applied = false;
  bool failed() const { return failure.token_id >= 0; }
  // Records a NaN / +inf at `token_id` (>= 0) made by `made_by`; false when token_id < 0.
  bool record_bad_value(int64_t token_id, const char* made_by) {
    if (token_id < 0) return false;
    if (failed()) return true;  // the first cause is the one reported
    failure = {token_id, made_by, std::isnan(logits[static_cast<size_t>(token_id)])};
    return true;
  }

  const RequestParams& params() const { return request.params; }
  int64_t vocab_size() const { return plan.vocab_size; }
  const void* input_row() const;
  bool edited_before_sampling() const;  // whether steps 3-6 change this row
  // The caller's row's block maxima (learned by step 2 for raw logprobs) when no entry of the
  // working row after step 6 can exceed them: steps 3-6 only mask or lower (repetition >= 1,
  // frequency and presence >= 0; no logit bias, no processor). Else null.
  const BlockMaxima* callers_row_bounds() const;
  bool logprobs_read_working_row() const { return plan.logprobs_read_working_row(); }
  History history() const;  // for penalties and bad words
  // Sets (or clears again: the worker's bitmap is all zero between rows) the bits of scratch.seen
  // for the prompt and history tokens: repetition's seen tokens (spec §7.1).
  void mark_prompt_and_history(bool set);
  // The distinct history tokens with their counts (in_prompt unused: repetition is separate), in
  // order of first appearance, in scratch.token_counts: a token index in the worker's scratch,
  // O(H), no allocation. The index is left empty (emptied at each call's reserve_lists too),
  // forgetting only what this row put in: not the whole table, which a long history elsewhere in
  // the batch may have grown.
  std::span<const TokenCount> count_history();
  uint64_t stream_step() const { return request.step.value_or(request.output_token_ids.size()); }
};

}  // namespace lastmile::detail
