// lastmile — golden case folders (../shared/golden/README.md): case.json + logits.npy in, and
// output.json (+ full_logprobs.npy) out. For the CLI and tests; not part of the library.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "io/npy.hpp"
#include "lastmile/batch.hpp"
#include "lastmile/logits_view.hpp"
#include "lastmile/output.hpp"

namespace lastmile::io {

// A case's batch; the histories live here and the Batch's spans point into them.
struct Case {
  std::string logits_dtype = "float32";
  LogprobsMode logprobs_mode = LogprobsMode::raw_logprobs;
  std::optional<int32_t> num_logprobs;
  bool predict_bonus_token = false;
  std::vector<RequestParams> params;
  std::vector<std::vector<TokenId>> prompt_token_ids, output_token_ids, spec_token_ids;

  Batch batch() const;  // views into this Case: keep it alive while the batch is used
};

// Throws lastmile::InvalidArgument naming the field: `case.json: requests[2].top_p: expected a
// number, got "x"`. Ranges are the sampler's to check.
Case parse_case(const std::string& json_text, const std::string& name = "case.json");
Case read_case(const std::string& path);

// The modes' names, as case.json and the CLI spell them, in LogprobsMode's order.
const std::vector<std::string>& logprobs_mode_names();
// Throws InvalidArgument: `expected raw_logprobs, ... or processed_logits, got "x"`.
LogprobsMode parse_logprobs_mode(const std::string& text);

// The logits of a case, checked against its logits_dtype and number of requests.
LogitsView logits_view(const NpyArray& logits, const Case& c, const std::string& name);

// output.json of the runner contract. histograms: one token -> count map per row (with --repeat:
// present even for no rows), or null.
std::string output_json(const SamplerOutput& out,
                        const std::vector<std::map<TokenId, int64_t>>* histograms);

}  // namespace lastmile::io
