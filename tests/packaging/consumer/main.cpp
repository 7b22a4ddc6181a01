// A user's program: samples one greedy row through the installed lastmile.
#include <cstdio>
#include <lastmile/lastmile.hpp>
#include <vector>

int main() {
  lastmile::SamplerConfig config;
  config.vocab_size = 5;
  lastmile::Sampler sampler(config);
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 3.5f, 0.0f};
  lastmile::Batch batch;
  batch.requests.emplace_back().params.temperature = 0.0f;
  const auto& out = sampler.sample(lastmile::LogitsView::f32(logits.data(), 1, 5), batch);
  if (out.sampled_token_ids[0] != 3) {
    std::fprintf(stderr, "expected token 3, got %d\n", out.sampled_token_ids[0]);
    return 1;
  }
  return 0;
}
