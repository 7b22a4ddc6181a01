// lastmile — what one sampling step returns (spec §1.2, §4, §5).
#pragma once

#include <cstdint>
#include <span>

#include "lastmile/params.hpp"

namespace lastmile {

// A [num_rows, width] block of logprobs, row-major, read from the active logprobs mode.
struct LogprobsBlock {
  int64_t width = 0;                   // columns per row
  std::span<const TokenId> token_ids;  // [num_rows * width]; column 0 is the sampled token
  std::span<const float> logprobs;     // [num_rows * width]
  std::span<const int64_t> ranks;      // [num_rows]: count of row entries >= the sampled token's
  bool present() const { return width > 0; }
};

// Explicit-id logprobs (generative scoring). Padding columns hold id 0, -inf and valid = 0.
struct TokenLogprobsBlock : LogprobsBlock {
  std::span<const uint8_t> valid;  // [num_rows * width]
};

// Lives in the sampler's workspace: valid until its next `sample` call, which rewrites it while it
// runs, so none of it may be that call's input (copy sampled_token_ids into a history first).
struct SamplerOutput {
  int64_t num_rows = 0;
  std::span<const TokenId> sampled_token_ids;  // [num_rows]
  LogprobsBlock logprobs;                      // num_logprobs >= 0: width = num_logprobs + 1
  TokenLogprobsBlock token_logprobs;           // any request has logprob_token_ids
  std::span<const float> full_logprobs;        // num_logprobs == -1: [num_rows * vocab_size]
  // The step's num_logprobs was -1, also with no rows (then full_logprobs is [0, vocab_size]:
  // empty, and still asked for, as vLLM's tensor of shape [0, V]).
  bool has_full_logprobs = false;
};

}  // namespace lastmile
