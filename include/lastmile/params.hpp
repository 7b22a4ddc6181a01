// lastmile — per-request sampling parameters, spelled as vLLM's SamplingParams (spec §12).
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace lastmile {

using TokenId = int32_t;

// Which tensor logprobs are read from (spec §3.1).
enum class LogprobsMode {
  raw_logprobs,        // log_softmax of the model logits, before any processing (default)
  raw_logits,          // the model logits as float32, unprocessed
  processed_logprobs,  // log_softmax of processed_logits
  processed_logits,    // logits after penalties, temperature, min_p and top-k / top-p masking
};

// One request's sampling parameters. Every field's default is its neutral value.
// Validated when the request enters a batch (`Sampler::sample`, `RequestBatch::add`).
struct RequestParams {
  float temperature = 1.0f;                               // finite, >= 0; < 1e-5 means greedy
  int32_t top_k = 0;                                      // >= -1; 0, -1 or >= vocab_size disables
  float top_p = 1.0f;                                     // (0, 1]; 1 disables
  float min_p = 0.0f;                                     // [0, 1]; 0 disables
  float presence_penalty = 0.0f;                          // [-2, 2]; 0 disables
  float frequency_penalty = 0.0f;                         // [-2, 2]; 0 disables
  float repetition_penalty = 1.0f;                        // finite, > 0; 1 disables
  std::vector<std::pair<TokenId, float>> logit_bias;      // (token id, finite bias) added to logits
  std::optional<std::vector<TokenId>> allowed_token_ids;  // whitelist; non-empty when set
  std::vector<std::vector<TokenId>> bad_words_token_ids;  // non-empty token sequences
  int32_t min_tokens = 0;               // >= 0; stop ids are banned while len(output) < min_tokens
  std::vector<TokenId> stop_token_ids;  // include EOS here: lastmile has no tokenizer
  std::optional<uint64_t> seed;         // nullopt: a seed derived from the sampler's seed
  std::optional<int32_t> logprobs;      // top-N count: nullopt, 0..vocab_size, or -1 (= vocab_size)
  std::optional<std::vector<TokenId>> logprob_token_ids;  // explicit ids to score, at most 128

  bool is_greedy() const { return temperature < kGreedyTemperatureEps; }

  // vLLM's _SAMPLING_EPS: temperatures below it sample greedily (spec §8.1).
  static constexpr float kGreedyTemperatureEps = 1e-5f;
  // vLLM's MAX_LOGPROB_TOKEN_IDS (spec §5.1).
  static constexpr int32_t kMaxLogprobTokenIds = 128;
};

}  // namespace lastmile
