// lastmile — RequestBatch: requests kept across steps, sampled through the same pipeline as
// Sampler::sample. What it adds: each request's output history, its seed, and its penalty counts
// updated per new token (O(1) each: a bit in a bitmap of seen tokens, an output count) instead
// of recounted from the history every step.
#include "lastmile/request_batch.hpp"

#include <algorithm>
#include <limits>
#include <new>
#include <string>
#include <string_view>
#include <type_traits>

#include "lastmile/error.hpp"
#include "moved_from.hpp"
#include "random/philox.hpp"
#include "sampler_impl.hpp"
#include "token_index.hpp"
#include "translate_bad_alloc.hpp"
#include "validate.hpp"

namespace lastmile {
namespace detail {

// RequestBatchImpl::add's pushes must not throw once room is reserved.
static_assert(std::is_nothrow_move_constructible_v<BatchRequest>);

namespace {

// "request 'id'" as errors name a request, a NUL byte shown as \0: what() is read as a C string,
// so a raw NUL would cut the message at the id.
std::string request_named(std::string_view id) {
  std::string name = "request '";
  for (const char c : id) {
    if (c == '\0')
      name += "\\0";
    else
      name += c;
  }
  return name += '\'';
}

}  // namespace

// Room for one more element, growing geometrically (a reserve of size + 1 each time would copy the
// list on every add).
template <class T>
void reserve_one_more(std::vector<T>& list) {
  if (list.size() == list.capacity()) list.reserve(std::max<size_t>(4, 2 * list.capacity()));
}

struct KeptRequest {
  std::string id;
  std::vector<TokenId> prompt;
  std::vector<TokenId> output;
  uint64_t seed = 0;
  std::vector<uint64_t> seen;             // bit t: token t in the prompt or output
  std::vector<TokenCount> output_counts;  // one entry per distinct output token
  TokenIndex output_of;                   // token id -> index in output_counts

  // Room for `tokens` output tokens, of which at most `vocab_size` are distinct (plus the one
  // more that reserve_next_output asks for even when every token has come).
  void reserve_output(size_t tokens, size_t vocab_size) {
    output.reserve(tokens);
    const size_t distinct = std::min(tokens, vocab_size + 1);
    output_counts.reserve(distinct);
    output_of.reserve(distinct, [this](uint32_t i) { return output_counts[i].token_id; });
  }
  // Room for one more output token in each list, so that add_output cannot fail: a step then
  // appends every request's token or, when this runs out of memory first, none.
  void reserve_next_output() {
    if (output.size() == output.capacity()) output.reserve(2 * output.capacity() + 16);
    if (output_counts.size() == output_counts.capacity())
      output_counts.reserve(2 * output_counts.capacity() + 16);
    output_of.reserve(output_counts.size() + 1,
                      [this](uint32_t i) { return output_counts[i].token_id; });
  }
  // After reserve_next_output: allocates nothing, so throws nothing.
  void add_output(TokenId token) {
    output.push_back(token);
    mark_seen(seen, token);
    const auto next = static_cast<uint32_t>(output_counts.size());
    const uint32_t index = output_of.find_or_insert(
        token, next, [this](uint32_t i) { return output_counts[i].token_id; });
    if (index == next) output_counts.push_back({token, 0, false});
    ++output_counts[index].output_count;
  }
};

// A step's rows read the requests' histories: add, remove, reorder and step are one call at a
// time (SamplerImpl::Call), a second refused, from a custom processor or another thread.
class RequestBatchImpl {
 public:
  explicit RequestBatchImpl(SamplerConfig config) : sampler_(std::move(config)) {}

  void add(std::string_view id, const RequestParams& params, std::span<const TokenId> prompt,
           int64_t max_output_tokens) {
    const SamplerImpl::Call call = sampler_.enter("add", kOwner);
    const std::string who = request_named(id);
    // An empty id names no request in errors; it is most likely a caller's unset string. A NUL
    // byte would cut every later error about the request (and the C API's ids end at one).
    if (id.empty()) throw InvalidArgument("add: request_id must not be empty");
    if (id.find('\0') != std::string_view::npos)
      throw InvalidArgument(who + ": request_id must not hold a NUL byte");
    if (find(id) >= 0) throw InvalidArgument(who + ": request_id is already in the batch");
    const SamplerConfig& config = sampler_.config();
    if (size() >= config.max_batch)
      throw InvalidArgument(
          who + ": the batch is full (max_batch = " + std::to_string(config.max_batch) + ")");
    validate_params(who, params, config.vocab_size);
    validate_token_ids(who, "prompt_token_ids", prompt, config.vocab_size);
    if (max_output_tokens < 0 || max_output_tokens > std::numeric_limits<int32_t>::max())
      throw InvalidArgument(who + ": max_output_tokens must be in [0, 2147483647], got " +
                            std::to_string(max_output_tokens));
    try {
      auto request = std::make_unique<KeptRequest>();
      request->id = std::string(id);
      request->prompt.assign(prompt.begin(), prompt.end());
      request->seed = derive_seed(config.seed ^ 0x5eed5eed5eed5eedull, added_);
      request->seen.assign(seen_words(config.vocab_size), 0);
      for (TokenId t : prompt) mark_seen(request->seen, t);
      request->reserve_output(static_cast<size_t>(max_output_tokens),
                              static_cast<size_t>(config.vocab_size));
      BatchRequest row;
      row.params = params;
      // Everything that can fail comes first: past the reserves the pushes move without throwing,
      // so a failed add leaves the batch as it was.
      reserve_one_more(requests_);
      reserve_one_more(batch_.requests);
      requests_.push_back(std::move(request));
      batch_.requests.push_back(std::move(row));
      ++added_;
    } catch (const std::bad_alloc&) {
      throw Error(ErrorCode::out_of_memory, who + ": add: out of memory");
    }
  }

  void remove(std::string_view id) {
    const SamplerImpl::Call call = sampler_.enter("remove", kOwner);
    const int64_t row = checked_find(id);
    requests_.erase(requests_.begin() + row);
    batch_.requests.erase(batch_.requests.begin() + row);
  }

  void reorder(std::span<const std::string> ids) {
    const SamplerImpl::Call call = sampler_.enter("reorder", kOwner);
    if (static_cast<int64_t>(ids.size()) != size())
      throw InvalidArgument("reorder: expected " + std::to_string(size()) + " request ids, got " +
                            std::to_string(ids.size()));
    std::vector<int64_t> from(ids.size());
    std::vector<bool> used(ids.size(), false);
    for (size_t i = 0; i < ids.size(); ++i) {
      from[i] = checked_find(ids[i]);
      if (used[from[i]])
        throw InvalidArgument("reorder: " + request_named(ids[i]) + " appears twice");
      used[from[i]] = true;
    }
    std::vector<std::unique_ptr<KeptRequest>> requests(ids.size());
    std::vector<BatchRequest> rows(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      requests[i] = std::move(requests_[from[i]]);
      rows[i] = std::move(batch_.requests[from[i]]);
    }
    requests_ = std::move(requests);
    batch_.requests = std::move(rows);
  }

  const SamplerOutput& step(const LogitsView& logits) {
    const SamplerImpl::Call call = sampler_.enter("step", kOwner);
    if (logits.num_rows != size())  // else named as a Batch's requests, which callers never see
      throw InvalidArgument("step: logits.num_rows must equal size() = " + std::to_string(size()) +
                            ", got " + std::to_string(logits.num_rows));
    kept_.resize(requests_.size());
    for (size_t i = 0; i < requests_.size(); ++i) {
      KeptRequest& r = *requests_[i];
      r.reserve_next_output();  // before kept_ reads the counts' capacity
      BatchRequest& row = batch_.requests[i];
      row.prompt_token_ids = r.prompt;
      row.output_token_ids = r.output;
      kept_[i] = {r.seed, r.seen, r.output_counts, r.output_counts.capacity(), r.id};
    }
    const SamplerOutput& out = sampler_.sample_within(logits, batch_, kept_);
    for (size_t i = 0; i < requests_.size(); ++i) {
      KeptRequest& r = *requests_[i];
      r.add_output(out.sampled_token_ids[i]);
    }
    return out;
  }

  int64_t size() const { return static_cast<int64_t>(requests_.size()); }
  std::string backend_name() const { return describe(sampler_.backend()); }

  const std::string& request_id(int64_t row) const {
    if (row < 0 || row >= size())
      throw InvalidArgument("request_id: row must be in [0, " + std::to_string(size()) + "), got " +
                            std::to_string(row));
    return requests_[row]->id;
  }

  std::span<const TokenId> output_token_ids(std::string_view id) const {
    return requests_[checked_find(id)]->output;
  }

 private:
  static constexpr const char* kOwner = "request batch";

  int64_t find(std::string_view id) const {
    for (size_t i = 0; i < requests_.size(); ++i)
      if (requests_[i]->id == id) return static_cast<int64_t>(i);
    return -1;
  }
  int64_t checked_find(std::string_view id) const {
    const int64_t row = find(id);
    if (row < 0) throw InvalidArgument(request_named(id) + ": no such request_id in the batch");
    return row;
  }

  SamplerImpl sampler_;
  std::vector<std::unique_ptr<KeptRequest>> requests_;  // row order
  Batch batch_;                                         // the same rows, as the sampler reads them
  std::vector<KeptRowState> kept_;
  uint64_t added_ = 0;
};

}  // namespace detail

RequestBatch::RequestBatch(SamplerConfig config)
    : impl_(detail::translating_bad_alloc("RequestBatch", [&] {
        return std::make_unique<detail::RequestBatchImpl>(std::move(config));
      })) {}
RequestBatch::~RequestBatch() = default;
RequestBatch::RequestBatch(RequestBatch&&) noexcept = default;
RequestBatch& RequestBatch::operator=(RequestBatch&&) noexcept = default;

void RequestBatch::add(std::string_view request_id, const RequestParams& params,
                       std::span<const TokenId> prompt_token_ids, int64_t max_output_tokens) {
  detail::translating_bad_alloc("add", [&] {
    detail::live(impl_, "RequestBatch")
        .add(request_id, params, prompt_token_ids, max_output_tokens);
  });
}
void RequestBatch::remove(std::string_view request_id) {
  detail::translating_bad_alloc("remove",
                                [&] { detail::live(impl_, "RequestBatch").remove(request_id); });
}
void RequestBatch::reorder(std::span<const std::string> request_ids) {
  detail::translating_bad_alloc("reorder",
                                [&] { detail::live(impl_, "RequestBatch").reorder(request_ids); });
}
const SamplerOutput& RequestBatch::step(const LogitsView& logits) {
  return detail::translating_bad_alloc("step", [&]() -> const SamplerOutput& {
    return detail::live(impl_, "RequestBatch").step(logits);
  });
}
int64_t RequestBatch::size() const {
  return detail::translating_bad_alloc("size",
                                       [&] { return detail::live(impl_, "RequestBatch").size(); });
}
std::string RequestBatch::backend_name() const {
  return detail::translating_bad_alloc(
      "backend_name", [&] { return detail::live(impl_, "RequestBatch").backend_name(); });
}
const std::string& RequestBatch::request_id(int64_t row) const {
  return detail::translating_bad_alloc("request_id", [&]() -> const std::string& {
    return detail::live(impl_, "RequestBatch").request_id(row);
  });
}
std::span<const TokenId> RequestBatch::output_token_ids(std::string_view request_id) const {
  return detail::translating_bad_alloc("output_token_ids", [&] {
    return detail::live(impl_, "RequestBatch").output_token_ids(request_id);
  });
}

}  // namespace lastmile
