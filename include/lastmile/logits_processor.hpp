// lastmile — custom logits processors, as vLLM's LogitsProcessor interface (spec §6.6).
#pragma once

#include <span>

#include "lastmile/params.hpp"

namespace lastmile {

// What a processor may read about the row it edits.
struct ProcessorRow {
  int64_t row = 0;  // logits row index in this call
  const RequestParams* params = nullptr;
  std::span<const TokenId> prompt_token_ids;
  std::span<const TokenId> output_token_ids;
};

// A user edit of the float32 logits of one row. Argmax-changing processors run in step 5 after
// min_tokens and logit_bias; argmax-invariant ones in step 7 after min_p, on sampled batches only.
// `apply` may be called from several threads at once (one row each). If it throws, `sample`
// stops the remaining rows and rethrows the first exception; that call's output is invalid.
// `apply` must not call the Sampler or RequestBatch running it (`sample`; `add`, `remove`,
// `reorder`, `step`): that call throws InvalidArgument.
class LogitsProcessor {
 public:
  virtual ~LogitsProcessor() = default;
  virtual bool is_argmax_invariant() const = 0;
  virtual void apply(const ProcessorRow& row, std::span<float> logits) const = 0;
};

}  // namespace lastmile
