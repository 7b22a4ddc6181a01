// Step 7e/f — the seeded draw and the greedy/random merge (spec §9.5, §8.1; DESIGN "Randomness").
// One uniform per (request seed, step) from Philox-4x32-10 picks a token by inverse CDF over the
// processed row, so a row's token never depends on its batch position, its companions or threads.
// Greedy rows keep their argmax (vLLM draws for them too and discards the draw). A random row that
// steps 3-6 leave alone and no logprob reads may be drawn straight from the caller's row: the
// backend's draw_from_input, steps 2 and 7b-e without a working row (the same token).
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

bool draw_token_from_input(RowStep& row) {
  if (row.sampling.greedy || row.plan.needs_logprobs() || row.edited_before_sampling())
    return false;
  const DrawParams params{row.sampling.temperature, row.sampling.top_k, row.plan.any_top_p,
                          row.sampling.top_p, row.sampling.min_p};
  const TokenId token = row.backend.draw_from_input(
      row.input_row(), row.input.dtype, row.vocab_size(), params,
      uniform_open(row.seed, row.stream_step()), row.scratch.sort(), row.parallel);
  if (token == kNoInputDraw) return false;
  row.sampled_token = token;
  return true;
}

}  // namespace lastmile::detail
