// libFuzzer harness over the C API: bytes -> a sampler config, a batch of requests (every field,
// counts and offsets included, NULL arrays with positive counts, out-of-range ids and NaN
// parameters), logits of any dtype and stride -> lastmile_sampler_sample, then the same requests
// through a lastmile_request_batch. Every call must return a status; OK outputs are read whole.
// Arrays the harness passes are as long as it says (the one contract C cannot check).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "lastmile/lastmile.h"

namespace {

class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  template <typename T>
  T take() {
    T value{};
    const size_t n = std::min(sizeof(T), size_ - at_);
    std::memcpy(&value, data_ + at_, n);
    at_ += n;
    return value;
  }
  uint32_t below(uint32_t bound) { return bound == 0 ? 0 : take<uint8_t>() % bound; }

 private:
  const uint8_t* data_;
  size_t size_, at_ = 0;
};

// Backing storage for one request's arrays.
struct RequestArrays {
  std::vector<int32_t> ids[7];
  std::vector<float> bias;
  std::vector<int64_t> offsets;
};

// A count that usually matches its array, sometimes lies with a NULL array or goes negative.
template <typename T>
const T* array(Bytes& in, std::vector<T>& backing, int64_t& count, size_t max_len, int64_t vocab) {
  const uint8_t mode = in.take<uint8_t>();
  backing.resize(mode % (max_len + 1));
  for (T& v : backing) {
    const int32_t raw = in.take<int16_t>();
    v = static_cast<T>(in.below(8) == 0 ? raw : (raw & 0x7fff) % std::max<int64_t>(vocab, 1));
  }
  count = static_cast<int64_t>(backing.size());
  if (mode == 0xff) count = -1;
  if (mode == 0xfe && count == 0) {
    count = 3;
    return nullptr;
  }
  return backing.empty() ? nullptr : backing.data();
}

void fill_request(Bytes& in, lastmile_request& r, RequestArrays& a, int64_t vocab) {
  lastmile_request_init(&r);
  const uint8_t fields = in.take<uint8_t>();
  auto pick = [&](float neutral, float a_value, float b_value) {
    switch (in.below(4)) {
      case 0:
        return neutral;
      case 1:
        return a_value;
      case 2:
        return b_value;
      default:
        return in.take<float>();  // any bits: NaN, inf, negative
    }
  };
  r.temperature = pick(1.0f, 0.0f, 0.7f);
  r.top_k = in.below(3) == 0 ? in.take<int32_t>() : static_cast<int32_t>(in.below(8));
  r.top_p = pick(1.0f, 0.9f, 0.5f);
  r.min_p = pick(0.0f, 0.1f, 0.5f);
  r.presence_penalty = pick(0.0f, 0.5f, -1.0f);
  r.frequency_penalty = pick(0.0f, 0.5f, 2.0f);
  r.repetition_penalty = pick(1.0f, 1.2f, 0.8f);
  int64_t bias_count = 0;
  r.logit_bias_token_ids = array(in, a.ids[0], bias_count, 4, vocab);
  a.bias.assign(std::max<int64_t>(bias_count, 0), 0.0f);
  for (float& b : a.bias) b = pick(0.0f, 5.0f, -100.0f);
  r.logit_bias_values = a.bias.empty() ? nullptr : a.bias.data();
  r.num_logit_bias = bias_count;
  r.has_allowed_token_ids = fields & 1;
  r.allowed_token_ids = array(in, a.ids[1], r.num_allowed_token_ids, 6, vocab);
  // Bad words: offsets within the token array, possibly decreasing or not starting at 0.
  int64_t words = 0;
  r.bad_words_token_ids = array(in, a.ids[2], words, 6, vocab);
  const size_t num_bad = in.below(4);
  a.offsets.assign(num_bad + 1, 0);
  for (size_t i = 1; i <= num_bad; ++i)
    a.offsets[i] =
        in.below(16) == 0
            ? static_cast<int64_t>(in.below(static_cast<uint32_t>(std::max<int64_t>(words, 0) + 1)))
            : std::min<int64_t>(a.offsets[i - 1] + 1 + in.below(2), std::max<int64_t>(words, 0));
  if (in.below(16) == 0) a.offsets[0] = 1;
  r.bad_words_offsets = a.offsets.data();
  r.num_bad_words = static_cast<int64_t>(num_bad);
  if (r.bad_words_token_ids == nullptr && words > 0) r.num_bad_words = 0;  // keep reads in bounds
  r.min_tokens = static_cast<int32_t>(in.below(4));
  r.stop_token_ids = array(in, a.ids[3], r.num_stop_token_ids, 3, vocab);
  r.has_seed = (fields >> 1) & 1;
  r.seed = in.take<uint64_t>();
  r.has_logprobs = (fields >> 2) & 1;
  r.logprobs = static_cast<int32_t>(in.below(12)) - 2;
  r.has_logprob_token_ids = (fields >> 3) & 1;
  r.logprob_token_ids = array(in, a.ids[4], r.num_logprob_token_ids, 4, vocab);
  r.prompt_token_ids = array(in, a.ids[5], r.num_prompt_token_ids, 8, vocab);
  r.output_token_ids = array(in, a.ids[6], r.num_output_token_ids, 8, vocab);
  r.has_step = (fields >> 4) & 1;
  r.step = in.take<uint8_t>();
}

// Touches every element an OK output promises, so ASan sees any short buffer.
uint64_t read_output(const lastmile_output& out, int64_t vocab) {
  uint64_t sum = 0;
  for (int64_t i = 0; i < out.num_rows; ++i) sum += static_cast<uint32_t>(out.sampled_token_ids[i]);
  for (int64_t i = 0; i < out.num_rows * out.logprobs_width; ++i)
    sum += static_cast<uint32_t>(out.logprobs_token_ids[i]) + (out.logprobs[i] < 0);
  for (int64_t i = 0; i < out.num_rows * out.token_logprobs_width; ++i)
    sum += out.token_logprobs_valid[i] + (out.token_logprobs[i] < 0);
  if (out.full_logprobs != nullptr)
    for (int64_t i = 0; i < out.num_rows * vocab; ++i) sum += out.full_logprobs[i] < 0;
  return sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Bytes in(data, size);
  lastmile_sampler_config config;
  lastmile_sampler_config_init(&config);
  // Mostly tiny vocabularies (fast runs), one input in 16 a large one: the kernels' sampled
  // thresholds, blocks and early exits only run past a few thousand tokens.
  config.vocab_size = in.below(16) == 0 ? 2048 + 4096 * static_cast<int64_t>(in.below(3))
                                        : static_cast<int64_t>(in.below(40)) - 1;
  config.max_batch = in.below(5);
  config.threads = static_cast<int32_t>(in.below(3));
  config.logprobs_mode = static_cast<int32_t>(in.below(6)) - 1;
  config.backend = static_cast<int32_t>(in.below(4));
  config.seed = in.take<uint8_t>();
  const int64_t vocab = std::max<int64_t>(config.vocab_size, 1);

  const auto rows = static_cast<int64_t>(in.below(5));
  std::vector<lastmile_request> requests(static_cast<size_t>(rows));
  std::vector<RequestArrays> arrays(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) fill_request(in, requests[i], arrays[i], vocab);
  lastmile_batch batch;
  lastmile_batch_init(&batch);
  batch.requests = requests.data();
  batch.num_requests = in.below(8) == 0 ? rows + 1 - 2 * in.below(2) : rows;
  batch.num_requests = std::clamp<int64_t>(batch.num_requests, 0, rows);
  batch.has_num_logprobs = in.below(2);
  batch.num_logprobs = static_cast<int32_t>(in.below(8)) - 2;
  batch.predict_bonus_token = in.below(2);
  batch.has_logprobs_mode = in.below(2);
  batch.logprobs_mode = static_cast<int32_t>(in.below(5));

  lastmile_logits logits;
  logits.dtype = static_cast<int32_t>(in.below(4));
  logits.num_rows = rows;
  logits.vocab_size = in.below(8) == 0 ? vocab + 1 : vocab;
  logits.row_stride = logits.vocab_size + in.below(3);
  std::vector<uint32_t> storage(static_cast<size_t>(rows * logits.row_stride + 1));
  for (uint32_t& v : storage) v = in.take<uint32_t>();
  logits.data = storage.data();

  lastmile_sampler* sampler = nullptr;
  char error[64];
  lastmile_output out;
  if (lastmile_sampler_create(&config, &sampler, error, sizeof error) == LASTMILE_STATUS_OK) {
    if (lastmile_sampler_sample(sampler, &logits, &batch, &out) == LASTMILE_STATUS_OK)
      read_output(out, vocab);
    else if (lastmile_sampler_last_error(sampler)[0] == '\0')
      __builtin_trap();  // a failure must say why
    lastmile_sampler_destroy(sampler);
  }

  lastmile_request_batch* kept = nullptr;
  if (lastmile_request_batch_create(&config, &kept, nullptr, 0) != LASTMILE_STATUS_OK) return 0;
  for (int64_t i = 0; i < rows; ++i) {
    requests[i].num_output_token_ids = 0;
    requests[i].has_step = 0;
    lastmile_request_batch_add(kept, std::to_string(i % 3).c_str(), &requests[i]);
  }
  logits.num_rows = lastmile_request_batch_size(kept);
  for (int step = 0; step < 2; ++step)
    if (lastmile_request_batch_step(kept, &logits, &out) == LASTMILE_STATUS_OK)
      read_output(out, vocab);
  lastmile_request_batch_remove(kept, "1");
  lastmile_request_batch_destroy(kept);
  return 0;
}
