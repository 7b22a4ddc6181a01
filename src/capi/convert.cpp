// lastmile — C structs to the C++ API (see convert.hpp).
#include "capi/convert.hpp"

#include <cstddef>
#include <limits>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "lastmile/error.hpp"
#include "translate_bad_alloc.hpp"

namespace lastmile::capi {
namespace {

// A field's name, made a string only for an error: names past a short string's 15 characters
// (num_allowed_token_ids) would otherwise cost a steady call a heap allocation each.
class FieldName {
 public:
  FieldName(const char* name) : name_(name) {}  // implicit: a plain name passes as itself
  static FieldName count_of(const char* field) { return FieldName("num_", field, -1); }
  static FieldName element(const char* array, int64_t index) { return FieldName("", array, index); }
  std::string str() const {
    std::string name = std::string(prefix_) + name_;
    if (index_ >= 0) name += "[" + std::to_string(index_) + "]";
    return name;
  }

 private:
  FieldName(const char* prefix, const char* name, int64_t index)
      : prefix_(prefix), name_(name), index_(index) {}
  const char* prefix_ = "";
  const char* name_;
  int64_t index_ = -1;
};

// A count of T no array can hold: past it, data + count wraps (and a span of it reads nothing or
// anything), so such a count is refused before it is used.
template <typename T>
void check_addressable(const std::string& who, const FieldName& name, int64_t count) {
  if (count > std::numeric_limits<ptrdiff_t>::max() / static_cast<int64_t>(sizeof(T)))
    throw InvalidArgument(who + ": " + name.str() + " is " + std::to_string(count) +
                          ", past what an array can hold");
}

// Runs a copy of `field`'s `count` entries; a failure names them, for the caller's count is the
// likelier cause than the machine.
template <typename F>
void copying(const std::string& who, const char* field, const FieldName& count, int64_t size,
             F&& f) {
  try {
    f();
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::out_of_memory, who + ": out of memory copying " + field + " (" +
                                              count.str() + " = " + std::to_string(size) + ")");
  }
}

// A C array: NULL is fine only when empty. `count_name`: the count field's name after "num_"
// when it differs from the array's (logit_bias_token_ids / _values share num_logit_bias).
template <typename T>
std::span<const T> array(const std::string& who, const char* field, const T* data, int64_t size,
                         const char* count_name = nullptr) {
  const FieldName count = FieldName::count_of(count_name ? count_name : field);
  if (size < 0)
    throw InvalidArgument(who + ": " + count.str() + " must be >= 0, got " + std::to_string(size));
  check_addressable<T>(who, count, size);
  if (size > 0 && data == nullptr)
    throw InvalidArgument(who + ": " + field + " is NULL but " + count.str() + " is " +
                          std::to_string(size));
  return {data, static_cast<size_t>(size)};
}

void fill_bad_words(const std::string& who, const lastmile_request& r,
                    std::vector<std::vector<TokenId>>& out) {
  if (r.num_bad_words < 0)
    throw InvalidArgument(who + ": num_bad_words must be >= 0, got " +
                          std::to_string(r.num_bad_words));
  // num_bad_words + 1 offsets in, as many vectors out (the larger element)
  check_addressable<std::vector<TokenId>>(who, "num_bad_words", r.num_bad_words);
  if (r.num_bad_words > 0 && r.bad_words_offsets == nullptr)
    throw InvalidArgument(who + ": bad_words_offsets is NULL but num_bad_words is " +
                          std::to_string(r.num_bad_words));
  copying(who, "bad_words_token_ids", "num_bad_words", r.num_bad_words,
          [&] { out.resize(static_cast<size_t>(r.num_bad_words)); });
  if (r.num_bad_words == 0) return;
  if (r.bad_words_offsets[0] != 0)
    throw InvalidArgument(who + ": bad_words_offsets[0] must be 0, got " +
                          std::to_string(r.bad_words_offsets[0]));
  for (int64_t i = 0; i < r.num_bad_words; ++i) {
    const int64_t begin = r.bad_words_offsets[i], end = r.bad_words_offsets[i + 1];
    if (end < begin)
      throw InvalidArgument(who + ": bad_words_offsets must not decrease, got " +
                            std::to_string(end) + " after " + std::to_string(begin) + " at index " +
                            std::to_string(i + 1));
    const FieldName end_name = FieldName::element("bad_words_offsets", i + 1);
    check_addressable<TokenId>(who, end_name, end);
    if (end > begin && r.bad_words_token_ids == nullptr)
      throw InvalidArgument(who + ": bad_words_token_ids is NULL but " + end_name.str() + " is " +
                            std::to_string(end));
    copying(who, "bad_words_token_ids", end_name, end, [&] {  // a word: named by its end
      out[static_cast<size_t>(i)].assign(r.bad_words_token_ids + begin,
                                         r.bad_words_token_ids + end);
    });
  }
}

}  // namespace

void require(const void* pointer, const char* name) {
  if (pointer == nullptr) throw InvalidArgument(std::string(name) + " is NULL");
}

SamplerConfig to_config(const lastmile_sampler_config* config) {
  require(config, "config");
  if (config->logprobs_mode < 0 || config->logprobs_mode > 3)
    throw InvalidArgument("config: logprobs_mode must be a lastmile_logprobs_mode (0-3), got " +
                          std::to_string(config->logprobs_mode));
  if (config->backend < 0 || config->backend > 2)
    throw InvalidArgument("config: backend must be a lastmile_backend (0-2), got " +
                          std::to_string(config->backend));
  SamplerConfig out;
  out.vocab_size = config->vocab_size;
  out.max_batch = config->max_batch;
  out.logprobs_mode = static_cast<LogprobsMode>(config->logprobs_mode);
  out.threads = config->threads;
  out.seed = config->seed;
  out.backend = static_cast<BackendKind>(config->backend);
  return out;
}

void fill_request(const std::string& who, const lastmile_request& r, BatchRequest& out) {
  RequestParams& p = out.params;
  p.temperature = r.temperature;
  p.top_k = r.top_k;
  p.top_p = r.top_p;
  p.min_p = r.min_p;
  p.presence_penalty = r.presence_penalty;
  p.frequency_penalty = r.frequency_penalty;
  p.repetition_penalty = r.repetition_penalty;
  // The pairs they become are the larger element: past them, resize would throw length_error.
  check_addressable<std::pair<TokenId, float>>(who, "num_logit_bias", r.num_logit_bias);
  const auto bias_ids =
      array(who, "logit_bias_token_ids", r.logit_bias_token_ids, r.num_logit_bias, "logit_bias");
  const auto bias_values =
      array(who, "logit_bias_values", r.logit_bias_values, r.num_logit_bias, "logit_bias");
  copying(who, "logit_bias", "num_logit_bias", r.num_logit_bias,
          [&] { p.logit_bias.resize(bias_ids.size()); });
  for (size_t i = 0; i < bias_ids.size(); ++i) p.logit_bias[i] = {bias_ids[i], bias_values[i]};
  if (r.has_allowed_token_ids) {
    const auto ids = array(who, "allowed_token_ids", r.allowed_token_ids, r.num_allowed_token_ids);
    copying(who, "allowed_token_ids", "num_allowed_token_ids", r.num_allowed_token_ids, [&] {
      if (!p.allowed_token_ids) p.allowed_token_ids.emplace();
      p.allowed_token_ids->assign(ids.begin(), ids.end());
    });
  } else {
    p.allowed_token_ids.reset();
  }
  fill_bad_words(who, r, p.bad_words_token_ids);
  p.min_tokens = r.min_tokens;
  const auto stops = array(who, "stop_token_ids", r.stop_token_ids, r.num_stop_token_ids);
  copying(who, "stop_token_ids", "num_stop_token_ids", r.num_stop_token_ids,
          [&] { p.stop_token_ids.assign(stops.begin(), stops.end()); });
  p.seed = r.has_seed ? std::optional<uint64_t>(r.seed) : std::nullopt;
  p.logprobs = r.has_logprobs ? std::optional<int32_t>(r.logprobs) : std::nullopt;
  if (r.has_logprob_token_ids) {
    if (r.num_logprob_token_ids > RequestParams::kMaxLogprobTokenIds)  // before any copy
      throw InvalidArgument(who + ": logprob_token_ids must hold at most " +
                            std::to_string(RequestParams::kMaxLogprobTokenIds) + " ids, got " +
                            std::to_string(r.num_logprob_token_ids));
    const auto ids = array(who, "logprob_token_ids", r.logprob_token_ids, r.num_logprob_token_ids);
    copying(who, "logprob_token_ids", "num_logprob_token_ids", r.num_logprob_token_ids, [&] {
      if (!p.logprob_token_ids) p.logprob_token_ids.emplace();
      p.logprob_token_ids->assign(ids.begin(), ids.end());
    });
  } else {
    p.logprob_token_ids.reset();
  }
  out.prompt_token_ids = array(who, "prompt_token_ids", r.prompt_token_ids, r.num_prompt_token_ids);
  out.output_token_ids = array(who, "output_token_ids", r.output_token_ids, r.num_output_token_ids);
  out.spec_token_ids = array(who, "spec_token_ids", r.spec_token_ids, r.num_spec_token_ids);
  out.step = r.has_step ? std::optional<uint64_t>(r.step) : std::nullopt;
}

namespace {

void fill_batch_unnamed(const lastmile_batch* batch, int64_t max_batch, Batch& out) {
  require(batch, "batch");
  if (batch->num_requests > max_batch)  // before the requests are sized for
    throw InvalidArgument(
        "batch: num_requests must be at most max_batch = " + std::to_string(max_batch) + ", got " +
        std::to_string(batch->num_requests));
  const auto requests =
      array(std::string("batch"), "requests", batch->requests, batch->num_requests);
  if (batch->has_logprobs_mode && (batch->logprobs_mode < 0 || batch->logprobs_mode > 3))
    throw InvalidArgument("batch: logprobs_mode must be a lastmile_logprobs_mode (0-3), got " +
                          std::to_string(batch->logprobs_mode));
  out.requests.resize(requests.size());
  for (size_t i = 0; i < requests.size(); ++i)
    fill_request("request " + std::to_string(i), requests[i], out.requests[i]);
  out.num_logprobs =
      batch->has_num_logprobs ? std::optional<int32_t>(batch->num_logprobs) : std::nullopt;
  out.predict_bonus_token = batch->predict_bonus_token != 0;
  out.logprobs_mode = batch->has_logprobs_mode
                          ? std::optional(static_cast<LogprobsMode>(batch->logprobs_mode))
                          : std::nullopt;
}

}  // namespace

void fill_batch(const lastmile_batch* batch, int64_t max_batch, Batch& out) {
  // The batch's own sizing and the requests' names; the requests' copies name themselves.
  detail::translating_bad_alloc("batch", [&] { fill_batch_unnamed(batch, max_batch, out); });
}

LogitsView to_logits_view(const lastmile_logits* logits) {
  require(logits, "logits");
  if (logits->dtype < 0 || logits->dtype > 2)
    throw InvalidArgument(
        ErrorCode::invalid_logits,
        "logits: dtype must be a lastmile_dtype (0-2), got " + std::to_string(logits->dtype));
  return {logits->data, logits->num_rows, logits->vocab_size, logits->row_stride,
          static_cast<DType>(logits->dtype)};
}

lastmile_output to_c_output(const SamplerOutput& o) {
  lastmile_output c{};
  c.num_rows = o.num_rows;
  c.sampled_token_ids = o.sampled_token_ids.data();
  if (o.logprobs.present()) {
    c.logprobs_width = o.logprobs.width;
    c.logprobs_token_ids = o.logprobs.token_ids.data();
    c.logprobs = o.logprobs.logprobs.data();
    c.logprobs_ranks = o.logprobs.ranks.data();
  }
  if (o.token_logprobs.present()) {
    c.token_logprobs_width = o.token_logprobs.width;
    c.token_logprobs_token_ids = o.token_logprobs.token_ids.data();
    c.token_logprobs = o.token_logprobs.logprobs.data();
    c.token_logprobs_valid = o.token_logprobs.valid.data();
    c.token_logprobs_ranks = o.token_logprobs.ranks.data();
  }
  if (!o.full_logprobs.empty()) c.full_logprobs = o.full_logprobs.data();
  return c;
}

}  // namespace lastmile::capi
