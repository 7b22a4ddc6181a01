// lastmile Python — requests (lastmile.SamplingParams objects or dicts) to C++ requests.
#pragma once

#include <nanobind/nanobind.h>

#include <string>
#include <vector>

#include "lastmile/batch.hpp"

namespace lastmile::python {

// The token histories a Batch's spans point into, owned by the call.
struct Histories {
  std::vector<std::vector<TokenId>> prompt, output, spec;
};

// Reads one request: a dict (unknown keys are an error) or any object with the fields as
// attributes (missing ones take their neutral value). `who` names it in messages. Raises
// TypeError for a wrong type, ValueError for an id that does not fit int32.
void read_request(nanobind::handle request, const std::string& who, BatchRequest& out,
                  std::vector<TokenId>& prompt, std::vector<TokenId>& output,
                  std::vector<TokenId>& spec);

// Reads a sequence of requests into batch.requests, their histories into `histories`.
void read_requests(nanobind::handle requests, Batch& batch, Histories& histories);

// Token ids from any iterable of integers (lists, tuples, numpy arrays).
std::vector<TokenId> read_token_ids(nanobind::handle ids, const std::string& who,
                                    const char* field);

}  // namespace lastmile::python
