// Step 7e/f — the seeded draw and the greedy/random merge (spec §9.5, §8.1; DESIGN "Randomness").
// One uniform per (request seed, step) from Philox-4x32-10 picks a token by inverse CDF over the
// processed row, so a row's token never depends on its batch position, its companions or threads.
// Greedy rows keep their argmax (vLLM draws for them too and discards the draw).
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

}  // namespace lastmile::detail
