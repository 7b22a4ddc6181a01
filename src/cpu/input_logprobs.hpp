// lastmile — the CPU backend's raw-mode logprobs read from a caller's row (Backend::input_*).
#pragma once

#include "backend.hpp"

namespace lastmile::detail::cpu_selection {

RawValues log_softmax_of_caller_row(const void* src, DType dtype, int64_t n);
int64_t rank_in_caller_row(const void* src, DType dtype, int64_t n, RawValues values,
                           TokenId token_id);
void top_n_of_caller_row(const void* src, DType dtype, int64_t n, RawValues values, int64_t k,
                         TokenId* ids, float* out, SortScratch scratch);

}  // namespace lastmile::detail::cpu_selection
