// lastmile Python — a SamplerOutput copied into numpy arrays (the output lives in the sampler's
// workspace only until its next call; Python results must outlive it).
#pragma once

#include <nanobind/nanobind.h>

#include "lastmile/output.hpp"

namespace lastmile::python {

// {"sampled_token_ids": int32 [B], "logprobs": (ids int32 [B, W], values float32 [B, W],
//  ranks int64 [B]) or None, "token_logprobs": (ids, values, valid bool, ranks) or None,
//  "full_logprobs": float32 [B, V] or None: [0, V] for no rows that asked}. Needs the GIL.
nanobind::dict to_python(const SamplerOutput& output, int64_t vocab_size);

}  // namespace lastmile::python
