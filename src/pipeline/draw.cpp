// Step 7e/f — the seeded draw and the greedy/random merge (spec §9.5, §8.1; DESIGN "Randomness").
// One uniform per (request seed, step) from Philox-4x32-10 picks a token by inverse CDF over the
// processed row, so a row's token never depends on its batch position, its companions or threads.
// Greedy rows keep their argmax (vLLM draws for them too and discards the draw). Every random row
// without custom processors (which edit the row at 7c) is drawn by the backend's draw_from_input,
// steps 7b-e in passes that write no row: over the caller's row when steps 3-6 leave it alone
// (steps 2-7 in one read or two), else over the working row after step 6. A row that only step 6
// edits, lowering entries, may skip the working row: draw_from_penalised_input reads the caller's
// row and penalises only the blocks or the listed entries the draw needs, for the same token.
// Whether a batch reads processed logprobs is batch-wide, so the same row may come to step 7 with
// them: it is then drawn by the same draw_from_input at its temperature, over the caller's row
// (unedited) or the working row before step 7b divides it, before 7c-d mask it for the logprobs.
// Only when draw_from_input declines does the row draw after steps 7b-d. A row's token never
// depends on whether its companions ask for logprobs: the backend's input draw and its steps agree
// only up to rounding, and so would a draw over the divided row at temperature 1 (its sums of
// exp(x) scaled after, not exp(x - max)), which once settled a top-p cut on an exact tie the other
// way.
#include <optional>

#include "pipeline/penalised_blocks.hpp"
#include "pipeline/steps.hpp"
#include "random/philox.hpp"

namespace lastmile::detail {

void draw_token(RowStep& row) {
  if (row.sampling.greedy) {
    row.sampled_token = row.greedy_token;
    return;
  }
  const double u = uniform_open(row.seed, row.stream_step());
  row.sampled_token = row.backend.draw(row.logits.data(), row.vocab_size(), u, row.scratch.sort(),
                                       row.scratch.listed_survivors);
}

namespace {

DrawParams draw_params(const RowStep& row, float temperature) {
  return {temperature, row.sampling.top_k, row.plan.any_top_p, row.sampling.top_p,
          row.sampling.min_p};
}

// draw_from_input over `src`, a caller's row or an edited working row not yet divided, divided by
// `temperature` on the way. `split`: how its passes may split.
// Only a caller's row is read by other threads: the working row was just written by this one,
// and handing its cache lines to another core cost more than the split saved
// (docs/performance-log.md). `summary`: the caller's row's raw summary, when step 8 needs it (a
// draw at temperature 1 learns it on the way).
bool draw_from(RowStep& row, const void* src, DType dtype, float temperature,
               const ParallelFor& split, RawRowSummary* summary = nullptr) {
  const TokenId token = row.backend.draw_from_input(
      src, dtype, row.vocab_size(), draw_params(row, temperature),
      uniform_open(row.seed, row.stream_step()), row.scratch.sort(), split, summary);
  if (token == kNoInputDraw) return false;
  row.sampled_token = token;
  return true;
}

// A PenalisedRow's context: step 6's blocks, set up at the first read.
struct PenalisedStep {
  RowStep& row;
  std::optional<PenalisedBlocks> penalised;
  PenalisedBlocks& blocks() {
    if (!penalised) penalised.emplace(row, static_cast<size_t>(kPenalisedBlock));
    return *penalised;
  }
};

}  // namespace

bool draw_token_from_input(RowStep& row) {
  if (row.sampling.greedy || row.logprobs_read_working_row() || row.edited_before_sampling())
    return false;
  return draw_from(row, row.input_row(), row.input.dtype, row.sampling.temperature, row.split,
                   row.plan.needs_raw_softmax() ? &row.scratch.raw_summary : nullptr);
}

bool draw_token_from_penalised_input(RowStep& row) {
  if (!random_penalised_from_callers_row(row.plan, row.request)) return false;
  // Step 6's blocks are set up at the backend's first read: one that declines unread costs
  // nothing.
  PenalisedStep blocks{row, std::nullopt};
  auto read = [](void* context, int64_t start, int64_t count, float* out) {
    static_cast<PenalisedStep*>(context)->blocks().read(start, count, out);
  };
  auto lower = [](void* context, const int32_t* ids, float* values, size_t count) {
    static_cast<PenalisedStep*>(context)->blocks().lower_listed(ids, values, count);
  };
  // A stateless row's prompt, output and drafts; a RequestBatch row's kept bitmap and counts,
  // which its lists need not match, decide there: declined.
  auto seen = [](void* context, std::span<const TokenId> spans[3]) {
    const RowStep& step = static_cast<PenalisedStep*>(context)->row;
    if (step.has_kept_counts) return false;
    const History history = step.history();
    spans[0] = step.request.prompt_token_ids;
    spans[1] = history.output;
    spans[2] = history.drafts;
    return true;
  };
  const TokenId token = row.backend.draw_from_penalised_input(
      PenalisedRow{row.input_row(), row.input.dtype, &blocks, read, lower, seen}, row.vocab_size(),
      draw_params(row, row.sampling.temperature), uniform_open(row.seed, row.stream_step()),
      row.scratch.sort(), row.plan.needs_raw_softmax() ? &row.scratch.raw_summary : nullptr,
      row.split);
  if (token == kNoInputDraw) return false;
  row.sampled_token = token;
  return true;
}

bool draw_token_from_working_row(RowStep& row) {
  if (row.sampling.greedy || row.logprobs_read_working_row() || !row.edited_before_sampling() ||
      !row.plan.processors.empty())
    return false;
  return draw_from(row, row.logits.data(), DType::f32, row.sampling.temperature, ParallelFor{});
}

bool draw_token_as_without_logprobs(RowStep& row) {
  if (row.sampling.greedy || !row.logprobs_read_working_row() || !row.plan.processors.empty())
    return false;
  // An unedited row's working row may hold it divided already (float32_view.cpp): read the
  // caller's, as draw_token_from_input does.
  if (!row.edited_before_sampling())
    return draw_from(row, row.input_row(), row.input.dtype, row.sampling.temperature,
                     ParallelFor{});
  return draw_from(row, row.logits.data(), DType::f32, row.sampling.temperature, ParallelFor{});
}

}  // namespace lastmile::detail
