// lastmile — the stateless batch: one entry per logits row (the vLLM / FlashInfer shape).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "lastmile/params.hpp"

namespace lastmile {

// One logits row: its request's parameters and history. The spans are read during
// `Sampler::sample` only; the caller keeps them alive for that call.
struct BatchRequest {
  RequestParams params;
  std::span<const TokenId> prompt_token_ids;  // repetition penalty history
  std::span<const TokenId> output_token_ids;  // generated so far: penalties, bad words, min_tokens
  std::span<const TokenId> spec_token_ids;    // drafts; history only with predict_bonus_token
  // Position in the request's random stream. nullopt: output_token_ids.size(), so a seeded
  // request replays exactly when its history is replayed.
  std::optional<uint64_t> step;
};

struct Batch {
  std::vector<BatchRequest> requests;  // requests[i] describes logits row i
  // vLLM's max_num_logprobs: -1 the full [rows, vocab] matrix; N >= 0 top-N plus the sampled
  // token. nullopt: the largest requests[i].params.logprobs, a request's -1 counting as
  // vocab_size (top-N of every token, as vLLM), or none if no request asks.
  std::optional<int32_t> num_logprobs;
  // Draft tokens count as history for penalties and bad words (spec §2.2).
  bool predict_bonus_token = false;
  // Overrides SamplerConfig::logprobs_mode for this call.
  std::optional<LogprobsMode> logprobs_mode;
};

}  // namespace lastmile
