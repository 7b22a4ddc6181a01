// lastmile — validation at the boundary (spec §12; STYLE §7): requests when they enter a batch,
// logits and batch shape at sample() entry. Kernels trust what passes.
#pragma once

#include <cstdint>
#include <string>

#include "lastmile/batch.hpp"
#include "lastmile/logits_view.hpp"
#include "lastmile/sampler.hpp"

namespace lastmile::detail {

void validate_config(const SamplerConfig& config);
// `who` names the request in messages, e.g. "request 3".
void validate_params(const std::string& who, const RequestParams& params, int64_t vocab_size);
void validate_token_ids(const std::string& who, const char* field, std::span<const TokenId> ids,
                        int64_t vocab_size);
// requests_validated: the caller (a RequestBatch) validated every request's params and histories
// when they entered; only the logits and the batch shape are checked, in O(1).
void validate_batch(const LogitsView& logits, const Batch& batch, const SamplerConfig& config,
                    bool requests_validated = false);

// A count of logprobs (a request's logprobs, Batch::num_logprobs, `lastmile run --num-logprobs`):
// -1 or in [0, vocab_size]; else InvalidArgument `who: <field>must be -1 or in [0, V], got n`.
void validate_num_logprobs(const std::string& who, const std::string& field, int64_t num_logprobs,
                           int64_t vocab_size);

std::string format_float(float value);

}  // namespace lastmile::detail
