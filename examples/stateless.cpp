// Batched, stateless: one call samples every row of a logits matrix.
#include <cstdio>
#include <lastmile/lastmile.hpp>
#include <vector>

int main() {
  const int64_t vocab = 8;
  lastmile::SamplerConfig config;
  config.vocab_size = vocab;
  config.max_batch = 2;
  lastmile::Sampler sampler(config);

  const std::vector<float> logits = {
      0.0f, 1.0f, 3.0f, 0.5f, -1.0f, 2.0f, 0.0f, 0.0f,  // row 0: greedy
      2.0f, 1.9f, 0.1f, 0.0f, 0.0f,  0.0f, 0.0f, 0.0f,  // row 1: top-k 2, seeded
  };
  const std::vector<lastmile::TokenId> history = {2, 2};

  lastmile::Batch batch;
  batch.num_logprobs = 2;  // top-2 logprobs plus the sampled token
  auto& greedy = batch.requests.emplace_back();
  greedy.params.temperature = 0.0f;
  greedy.params.repetition_penalty = 2.0f;  // token 2 was generated twice: 3.0 -> 1.5
  greedy.output_token_ids = history;
  auto& random = batch.requests.emplace_back();
  random.params.top_k = 2;
  random.params.seed = 42;

  const lastmile::SamplerOutput& out =
      sampler.sample(lastmile::LogitsView::f32(logits.data(), 2, vocab), batch);
  for (int64_t row = 0; row < out.num_rows; ++row) {
    const int64_t w = out.logprobs.width;
    std::printf("row %lld: token %d (logprob %.3f, rank %lld), top-1 %d\n",
                static_cast<long long>(row), out.sampled_token_ids[row],
                out.logprobs.logprobs[row * w], static_cast<long long>(out.logprobs.ranks[row]),
                out.logprobs.token_ids[row * w + 1]);
  }
  // Row 0 is greedy after the penalty: token 5 (2.0) beats token 2 (3.0 / 2 = 1.5).
  // Row 1 can only be token 0 or 1 (top-k 2).
  return out.sampled_token_ids[0] == 5 && out.sampled_token_ids[1] <= 1 ? 0 : 1;
}
