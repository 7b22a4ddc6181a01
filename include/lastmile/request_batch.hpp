// lastmile — the stateful batch: requests that live across steps (the engine shape).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "lastmile/logits_view.hpp"
#include "lastmile/output.hpp"
#include "lastmile/params.hpp"
#include "lastmile/sampler.hpp"

namespace lastmile {

namespace detail {
class RequestBatchImpl;
}

// Requests added once, sampled every step. Row i of the logits passed to `step` belongs to
// `request_id(i)`. Penalty counts are kept incrementally: a step costs O(distinct tokens seen)
// for penalties, not O(history). Results equal `Sampler::sample` on the same histories.
// Not thread-safe: one thread calls it at a time. An add, remove, reorder or step made while
// another runs (from a custom processor, or another thread) throws InvalidArgument.
// Example:
//   lastmile::SamplerConfig config;
//   config.vocab_size = 128256;
//   config.max_batch = 64;
//   lastmile::RequestBatch batch(config);
//   lastmile::RequestParams params;
//   params.top_k = 50;
//   batch.add("a", params, prompt_ids);
//   const auto& out = batch.step(lastmile::LogitsView::f32(logits, batch.size(), 128256));
class RequestBatch {
 public:
  explicit RequestBatch(SamplerConfig config);
  ~RequestBatch();
  // A moved-from batch may be destroyed or assigned to; any other call throws InvalidArgument.
  RequestBatch(RequestBatch&&) noexcept;
  RequestBatch& operator=(RequestBatch&&) noexcept;

  // Appends a request as the last row. Throws InvalidArgument on bad params or ids, an empty or
  // duplicate id, or a full batch (max_batch). Unseeded requests get a seed from the sampler's
  // seed and a counter of requests added, so their streams do not depend on batch position.
  // max_output_tokens reserves room for that many output tokens: steps then allocate nothing
  // until the request outgrows it (beyond it, storage grows geometrically, as a vector's).
  // A failed add (any exception, out_of_memory included) leaves the batch as it was.
  void add(std::string_view request_id, const RequestParams& params,
           std::span<const TokenId> prompt_token_ids = {}, int64_t max_output_tokens = 0);
  // Removes a request; the rows after it move up by one. Throws on an unknown id.
  void remove(std::string_view request_id);
  // Puts the requests in the given order: a permutation of the current ids.
  void reorder(std::span<const std::string> request_ids);

  // Samples one token per request, appends it to that request's output, returns the step's
  // output (rows in the current order). logits.num_rows must equal size(). A failed step
  // appends nothing.
  const SamplerOutput& step(const LogitsView& logits);

  int64_t size() const;
  std::string backend_name() const;  // as Sampler::backend_name
  // Both refer into the batch: valid until the next add, remove, reorder, step or assignment
  // (a step may move a request's output once it outgrows max_output_tokens). Copy to keep them.
  const std::string& request_id(int64_t row) const;
  std::span<const TokenId> output_token_ids(std::string_view request_id) const;

 private:
  std::unique_ptr<detail::RequestBatchImpl> impl_;
};

}  // namespace lastmile
