// Stateful: requests live across steps; each step appends the sampled token to its request.
#include <cstdio>
#include <lastmile/lastmile.hpp>
#include <vector>

int main() {
  const int64_t vocab = 6;
  lastmile::SamplerConfig config;
  config.vocab_size = vocab;
  config.max_batch = 4;
  lastmile::RequestBatch batch(config);

  lastmile::RequestParams chat;
  chat.temperature = 0.7f;
  chat.top_p = 0.9f;
  chat.presence_penalty = 1.5f;  // counted incrementally, O(1) per new token
  chat.seed = 7;
  batch.add("chat", chat, /*prompt_token_ids=*/std::vector<lastmile::TokenId>{1, 2});
  lastmile::RequestParams code;
  code.temperature = 0.0f;
  batch.add("code", code);

  std::vector<float> logits(2 * vocab, 0.0f);
  for (int step = 0; step < 4; ++step) {
    logits[0 * vocab + 3] = 2.0f;  // "chat" prefers token 3
    logits[1 * vocab + 4] = 1.0f;  // "code" prefers token 4
    batch.step(lastmile::LogitsView::f32(logits.data(), batch.size(), vocab));
  }
  batch.remove("code");  // finished: rows after it move up
  std::printf("chat:");
  for (lastmile::TokenId t : batch.output_token_ids("chat")) std::printf(" %d", t);
  std::printf("\n");
  return batch.size() == 1 && batch.output_token_ids("chat").size() == 4 ? 0 : 1;
}
