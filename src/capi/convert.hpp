// lastmile — C structs to the C++ API: config, one request, a batch, logits, and the output back.
// Pointer / count pairs are checked here (a NULL array with a positive count, a negative count, a
// count past what an array can hold, more requests than max_batch);
// the values themselves are validated by the sampler, with the same messages as in C++.
#pragma once

#include <string>

#include "lastmile/batch.hpp"
#include "lastmile/lastmile.h"
#include "lastmile/logits_view.hpp"
#include "lastmile/output.hpp"
#include "lastmile/sampler.hpp"

namespace lastmile::capi {

SamplerConfig to_config(const lastmile_sampler_config* config);

// Fills `out` in place, reusing its vectors' capacity, so a steady-state call does not allocate.
// `who` names the request in messages, e.g. "request 3".
void fill_request(const std::string& who, const lastmile_request& request, BatchRequest& out);
void fill_batch(const lastmile_batch* batch, int64_t max_batch, Batch& out);

LogitsView to_logits_view(const lastmile_logits* logits);
lastmile_output to_c_output(const SamplerOutput& output);

// Throws InvalidArgument "`name` is NULL" when pointer is null.
void require(const void* pointer, const char* name);

}  // namespace lastmile::capi
