// lastmile — the CPU backend's raw-mode logprobs read from a caller's row
// (Backend::input_raw_logprobs).
#pragma once

#include "backend.hpp"

namespace lastmile::detail::cpu_selection {

RawLogprobs raw_logprobs_of_caller_row(const void* src, DType dtype, int64_t n, bool log_softmax,
                                       TokenId token_id, int64_t k, TokenId* ids, float* out,
                                       SortScratch scratch);

}  // namespace lastmile::detail::cpu_selection
