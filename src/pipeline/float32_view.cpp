// Step 2 — the float32 working row (spec §2.1 step 2).
// fp16 / bf16 widen exactly. Unlike vLLM, the caller's logits are never edited: the working row
// is ours. A NaN or +inf is recorded and the row stops here; the sampler reports it by row.
// A random row that steps 3-6 leave alone is divided by its temperature (step 7b) in the same
// pass: the same bits, one read of the row (raw modes read the caller's row, not this one).
// A penalised row gets step 6's repetition factor in the same pass too (from its RequestBatch's
// seen-token bitmap, or one marked from its prompt and history), when nothing in steps 3-5 could
// change what it scales: their masks to -inf commute with it (-inf stays -inf); a logit bias or
// a custom processor would not.
// Under raw_logprobs, the same read also learns the softmax terms of the caller's row, which
// step 8 would otherwise read the row again for (Backend::convert_row_summarised).
#include "pipeline/steps.hpp"

namespace lastmile::detail {
namespace {

bool temperature_folds_into_conversion(const RowStep& row) {
  return !row.sampling.greedy && row.sampling.temperature != 1.0f && !row.edited_before_sampling();
}

bool repetition_folds_into_conversion(const RowStep& row) {
  const RequestParams& p = row.params();
  return row.plan.any_penalties && p.repetition_penalty != 1.0f && p.logit_bias.empty() &&
         row.plan.processors.empty();
}

// raw_logprobs' step 8 reads the caller's row for its softmax terms: the conversion reads it
// anyway, and learns them on the way (unless the temperature folds in: then the row it writes is
// not the raw one), unless an input path that declined learned them already.
bool summarises_raw_logprobs(const RowStep& row) {
  return row.plan.needs_raw_softmax() && !temperature_folds_into_conversion(row) &&
         !row.scratch.raw_summary.known;
}

// The conversion, with repetition's factor where `seen` (null: no repetition folds in).
bool convert(RowStep& row, const uint64_t* seen) {
  const bool repeats = seen != nullptr;
  if (summarises_raw_logprobs(row)) {
    const int64_t bad = row.backend.convert_row_summarised(
        row.input_row(), row.input.dtype, row.logits.data(), row.vocab_size(), seen,
        row.params().repetition_penalty, &row.scratch.raw_summary);
    row.repetition_applied = repeats && bad < 0;
    if (bad < 0) return true;
    if (!repeats) {
      row.failure.token_id = bad;  // the input's
      return false;
    }
    // NaN / +inf: in the input, or made by the penalty? The steps apart tell, as they report.
  } else if (repeats) {
    row.repetition_applied = row.backend.convert_row_repeated(
                                 row.input_row(), row.input.dtype, row.logits.data(),
                                 row.vocab_size(), seen, row.params().repetition_penalty) < 0;
    if (row.repetition_applied) return true;
    // NaN / +inf: in the input, or made by the penalty? The steps apart tell, as they report.
  }
  if (temperature_folds_into_conversion(row)) {
    row.divided_by_temperature =
        row.backend.convert_row_divided(row.input_row(), row.input.dtype, row.logits.data(),
                                        row.vocab_size(), row.sampling.temperature) < 0;
    if (row.divided_by_temperature) return true;
    // NaN / +inf: in the input, or made by the division? The steps apart tell, as they report.
  }
  row.failure.token_id = row.backend.convert_row(row.input_row(), row.input.dtype,
                                                 row.logits.data(), row.vocab_size());
  return !row.failed();
}

}  // namespace

bool convert_to_float32(RowStep& row) {
  if (!repetition_folds_into_conversion(row)) return convert(row, nullptr);
  if (row.has_kept_counts) return convert(row, row.kept_seen.data());
  row.mark_prompt_and_history(true);
  const bool converted = convert(row, row.scratch.seen.data());
  row.mark_prompt_and_history(false);
  return converted;
}

}  // namespace lastmile::detail
