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
void validate_batch(const LogitsView& logits, const Batch& batch, const SamplerConfig& config);

std::string format_float(float value);

}  // namespace lastmile::detail
