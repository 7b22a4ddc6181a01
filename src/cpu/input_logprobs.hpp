// lastmile — the CPU backend's raw-mode logprobs read from a caller's row
// (Backend::input_raw_logprobs).
#pragma once

#include "backend.hpp"
#include "cpu/kernels.hpp"

namespace lastmile::detail::cpu_selection {

// `summary`, when known, is summarise_while_converting's of src (log_softmax only).
RawLogprobs raw_logprobs_of_caller_row(const void* src, DType dtype, int64_t n, bool log_softmax,
                                       TokenId token_id, int64_t k, TokenId* ids, float* out,
                                       SortScratch scratch, const RawRowSummary* summary,
                                       const ParallelFor& parallel);

// log_softmax's map from a row's max and sum of exp(x - max), that sum taken as at least 1 (the
// max's own term): the identity for an all -inf row.
RawValues log_softmax_map(float max, double total);

// Backend::convert_row_summarised's one read: src into dst (repetition_penalty's factor where
// seen, when seen is not null; dst null: nothing written) and the summary input_raw_logprobs
// with log_softmax computes, and src's group maxima if asked (caller_row_softmax). False, with
// dst unusable, on NaN / +inf (the input's or the penalty's) or over 2^20 entries. `parallel`
// may split the read (dst null only).
bool summarise_while_converting(const void* src, DType dtype, int64_t n, float* dst,
                                const uint64_t* seen, float repetition_penalty,
                                RawRowSummary* summary, const ParallelFor& parallel = {},
                                cpu::GroupMaxima groups = {});

}  // namespace lastmile::detail::cpu_selection
