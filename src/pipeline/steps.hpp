// lastmile — the pipeline steps of spec §2.1, one per file, in vLLM's order. Each runs on one row.
#pragma once

#include "pipeline/row_step.hpp"

namespace lastmile::detail {

// 1  raw modes: the caller's row, never edited, read by step 8: the values' map, the sampled
//    token's rank, and the top k values and ids into ids / values.
RawLogprobs read_raw_logprobs(RowStep& row, int64_t k, TokenId* ids, float* values);
bool convert_to_float32(RowStep& row);       // 2  false: NaN / +inf in the row
void apply_allowed_token_ids(RowStep& row);  // 3
void apply_bad_words(RowStep& row);          // 4
void apply_min_tokens(RowStep& row);         // 5  argmax-changing processors...
void apply_logit_bias(RowStep& row);         //    ...
void apply_custom_processors(RowStep& row, bool argmax_invariant);  // 5 and 7c
void apply_penalties(RowStep& row);                                 // 6
void sample_tokens(RowStep& row);                                   // 7
void gather_logprobs(RowStep& row);                                 // 8

// Step 7's parts (spec §8, §9), called by sample_tokens.
void take_greedy_token(RowStep& row);
// Steps 2-7a for a greedy row that no step but step 6 edits, lowering entries, and whose working
// row no logprob reads: one read of the caller's row for its block maxima (with step 8's softmax
// terms when it needs them) and the few blocks that could hold the argmax, widened and penalised
// alone; no working row. An unedited float32 row with no softmax to learn is left to the next.
// False: the next path, or the steps.
bool take_greedy_token_within_callers_bounds(RowStep& row);
// Steps 2-7a in one checked read for an unedited float32 greedy row whose working row no logprob
// reads (one whose raw logprobs need the softmax only when the bounds path declined it: a
// vocabulary over 2^20); false: run the steps.
bool take_greedy_token_from_input(RowStep& row);
void apply_temperature(RowStep& row);
void apply_min_p(RowStep& row);
void apply_top_k_top_p(RowStep& row);
void draw_token(RowStep& row);
// Steps 2-7 from the caller's row for an unedited random row whose working row no logprob reads;
// false: run them.
bool draw_token_from_input(RowStep& row);
// Steps 2-7 for a random row that only step 6 edits, lowering entries, whose working row no
// logprob or custom processor reads: from the caller's row and the blocks the draw reads,
// penalised alone (Backend::draw_from_penalised_input); no working row. False: run the steps.
bool draw_token_from_penalised_input(RowStep& row);
// Steps 7b-e over the working row after step 6, for an edited random row whose working row no
// logprob reads and no custom processor edits; false: run them.
bool draw_token_from_working_row(RowStep& row);
// The same draw when the batch reads processed logprobs: at the row's temperature over the
// caller's row (unedited) or the working row before step 7b divides it, before min_p and top-k /
// top-p mask it, so the passes and their rounding are those of the row without logprobs; false:
// draw_token draws after them.
bool draw_token_as_without_logprobs(RowStep& row);

}  // namespace lastmile::detail
