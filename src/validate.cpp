// lastmile — validation: each rule of spec §12 as one check with one message
// (`request 3: top_p must be in (0, 1], got 1.5`).
#include "validate.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <limits>

#include "backend.hpp"
#include "lastmile/error.hpp"

namespace lastmile::detail {
namespace {

const char* dtype_name(DType dtype) {
  return dtype == DType::f32 ? "f32" : dtype == DType::f16 ? "f16" : "bf16";
}

bool valid_mode(LogprobsMode mode) {
  return mode == LogprobsMode::raw_logprobs || mode == LogprobsMode::raw_logits ||
         mode == LogprobsMode::processed_logprobs || mode == LogprobsMode::processed_logits;
}

[[noreturn]] void fail(const std::string& who, const std::string& what) {
  throw InvalidArgument(who + ": " + what);
}

void check_range(const std::string& who, const char* field, float value, bool ok,
                 const char* rule) {
  if (!ok) fail(who, std::string(field) + " must be " + rule + ", got " + format_float(value));
}

std::string vocab_range(int64_t vocab_size) { return "[0, " + std::to_string(vocab_size) + ")"; }

}  // namespace

std::string format_float(float value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", static_cast<double>(value));
  return text;
}

void validate_config(const SamplerConfig& config) {
  if (config.vocab_size < 1)
    fail("config", "vocab_size must be >= 1, got " + std::to_string(config.vocab_size));
  if (config.vocab_size > INT32_MAX)
    fail("config", "vocab_size must fit int32 token ids, got " + std::to_string(config.vocab_size));
  if (config.max_batch < 1)
    fail("config", "max_batch must be >= 1, got " + std::to_string(config.max_batch));
  if (config.threads < 0 || config.threads > SamplerConfig::kMaxThreads)
    fail("config", "threads must be in [0, " + std::to_string(SamplerConfig::kMaxThreads) +
                       "] (0: hardware concurrency), got " + std::to_string(config.threads));
  if (!valid_mode(config.logprobs_mode))
    fail("config", "logprobs_mode must be a LogprobsMode, got enum value " +
                       std::to_string(static_cast<int>(config.logprobs_mode)));
  if (config.backend != BackendKind::automatic && config.backend != BackendKind::cpu &&
      config.backend != BackendKind::reference)
    fail("config", "backend must be automatic, cpu or reference, got enum value " +
                       std::to_string(static_cast<int>(config.backend)));
  for (size_t i = 0; i < config.logits_processors.size(); ++i)
    if (!config.logits_processors[i])
      fail("config", "logits_processors[" + std::to_string(i) + "] is null");
}

namespace {

// Index of the first id outside [0, vocab_size), or -1. Blocks first, with no branch an id:
// an id is valid when neither it nor (vocab_size - 1 - id) has its top bit set (as unsigned), so
// a block's ids ORed together tell whether any is not, in or / sub instructions the compiler
// vectorises with baseline SSE2. A call validates every history of the batch on the caller's
// thread before the rows spread (64 rows of 2k tokens took 110 us a call, a branch an id, while
// the other thread waited).
int64_t first_invalid(std::span<const TokenId> ids, int64_t vocab_size) {
  constexpr size_t kBlock = 256;
  const auto limit = static_cast<uint32_t>(std::clamp<int64_t>(vocab_size, 0, int64_t{1} << 31));
  size_t i = 0;
  while (i < ids.size()) {
    const size_t end = std::min(ids.size(), i + kBlock);
    uint32_t either = 0;
    for (size_t j = i; j < end; ++j) {
      const auto id = static_cast<uint32_t>(ids[j]);
      either |= id | (limit - 1 - id);
    }
    if (either >> 31) break;  // the loop below finds which
    i = end;
  }
  for (; i < ids.size(); ++i)
    if (static_cast<uint32_t>(ids[i]) >= limit) return static_cast<int64_t>(i);
  return -1;
}

}  // namespace

void validate_token_ids(const std::string& who, const char* field, std::span<const TokenId> ids,
                        int64_t vocab_size) {
  const int64_t i = first_invalid(ids, vocab_size);
  if (i >= 0)
    fail(who, std::string(field) + "[" + std::to_string(i) + "] must be in " +
                  vocab_range(vocab_size) + ", got " + std::to_string(ids[i]));
}

void validate_params(const std::string& who, const RequestParams& p, int64_t vocab_size) {
  check_range(who, "temperature", p.temperature, std::isfinite(p.temperature) && p.temperature >= 0,
              "finite and >= 0");
  if (p.top_k < -1)
    fail(who, "top_k must be >= -1 (0 or -1 disables), got " + std::to_string(p.top_k));
  check_range(who, "top_p", p.top_p, p.top_p > 0 && p.top_p <= 1, "in (0, 1]");
  check_range(who, "min_p", p.min_p, p.min_p >= 0 && p.min_p <= 1, "in [0, 1]");
  check_range(who, "presence_penalty", p.presence_penalty,
              p.presence_penalty >= -2 && p.presence_penalty <= 2, "in [-2, 2]");
  check_range(who, "frequency_penalty", p.frequency_penalty,
              p.frequency_penalty >= -2 && p.frequency_penalty <= 2, "in [-2, 2]");
  check_range(who, "repetition_penalty", p.repetition_penalty,
              std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0, "finite and > 0");
  for (const auto& [token_id, bias] : p.logit_bias) {
    if (token_id < 0 || token_id >= vocab_size)
      fail(who, "logit_bias token_id must be in " + vocab_range(vocab_size) + ", got " +
                    std::to_string(token_id));
    if (!std::isfinite(bias))
      fail(who, "logit_bias for token_id " + std::to_string(token_id) + " must be finite, got " +
                    format_float(bias));
  }
  if (p.allowed_token_ids) {
    if (p.allowed_token_ids->empty()) fail(who, "allowed_token_ids must not be empty");
    validate_token_ids(who, "allowed_token_ids", *p.allowed_token_ids, vocab_size);
  }
  for (size_t i = 0; i < p.bad_words_token_ids.size(); ++i) {
    const std::vector<TokenId>& word = p.bad_words_token_ids[i];
    if (!word.empty() && first_invalid(word, vocab_size) < 0) continue;  // no message to build
    const std::string field = "bad_words_token_ids[" + std::to_string(i) + "]";
    if (word.empty()) fail(who, field + " must not be empty");
    validate_token_ids(who, field.c_str(), word, vocab_size);
  }
  if (p.min_tokens < 0) fail(who, "min_tokens must be >= 0, got " + std::to_string(p.min_tokens));
  validate_token_ids(who, "stop_token_ids", p.stop_token_ids, vocab_size);
  if (p.logprobs) validate_num_logprobs(who, "logprobs ", *p.logprobs, vocab_size);
  if (p.logprob_token_ids) {
    if (p.logprob_token_ids->size() > static_cast<size_t>(RequestParams::kMaxLogprobTokenIds))
      fail(who, "logprob_token_ids must hold at most " +
                    std::to_string(RequestParams::kMaxLogprobTokenIds) + " ids, got " +
                    std::to_string(p.logprob_token_ids->size()));
    validate_token_ids(who, "logprob_token_ids", *p.logprob_token_ids, vocab_size);
  }
}

void validate_num_logprobs(const std::string& who, const std::string& field, int64_t num_logprobs,
                           int64_t vocab_size) {
  if (num_logprobs < -1 || num_logprobs > vocab_size)
    fail(who, field + "must be -1 or in [0, " + std::to_string(vocab_size) + "], got " +
                  std::to_string(num_logprobs));
}

void validate_batch(const LogitsView& logits, const Batch& batch, const SamplerConfig& config,
                    bool requests_validated) {
  if (logits.dtype != DType::f32 && logits.dtype != DType::f16 && logits.dtype != DType::bf16)
    throw InvalidArgument(ErrorCode::invalid_logits,
                          "logits: dtype must be f32, f16 or bf16, got enum value " +
                              std::to_string(static_cast<int>(logits.dtype)));
  if (logits.vocab_size != config.vocab_size)
    throw InvalidArgument(ErrorCode::invalid_logits,
                          "logits: vocab_size must equal the sampler's " +
                              std::to_string(config.vocab_size) + ", got " +
                              std::to_string(logits.vocab_size));
  if (logits.num_rows < 0 || logits.num_rows > config.max_batch)
    throw InvalidArgument(
        ErrorCode::invalid_logits,
        "logits: num_rows must be in [0, max_batch = " + std::to_string(config.max_batch) +
            "], got " + std::to_string(logits.num_rows));
  if (logits.row_stride != 0 && logits.row_stride < logits.vocab_size)
    throw InvalidArgument(ErrorCode::invalid_logits,
                          "logits: row_stride must be 0 or >= vocab_size " +
                              std::to_string(logits.vocab_size) + ", got " +
                              std::to_string(logits.row_stride));
  if (logits.data == nullptr && logits.num_rows > 0)
    throw InvalidArgument(ErrorCode::invalid_logits, "logits: data is null");
  // Row r is read at data + r * row_stride elements: the last row must end within the address
  // space, or that offset wraps (and reads before data).
  const auto size = static_cast<int64_t>(element_size(logits.dtype));
  const int64_t stride = row_stride(logits);
  const int64_t addressable = std::numeric_limits<ptrdiff_t>::max() / size;
  if (logits.num_rows > 1 && (stride > (addressable - logits.vocab_size) / (logits.num_rows - 1)))
    throw InvalidArgument(ErrorCode::invalid_logits,
                          "logits: " + std::to_string(logits.num_rows) + " rows at row_stride " +
                              std::to_string(stride) + " reach past the address space");
  if (logits.num_rows > 0 &&
      reinterpret_cast<uintptr_t>(logits.data) % static_cast<uintptr_t>(size) != 0)
    throw InvalidArgument(ErrorCode::invalid_logits, "logits: data must be aligned to its " +
                                                         std::to_string(size) + "-byte " +
                                                         dtype_name(logits.dtype) + " elements");
  if (static_cast<int64_t>(batch.requests.size()) != logits.num_rows)
    fail("batch", "requests must hold one entry per logits row (" +
                      std::to_string(logits.num_rows) + "), got " +
                      std::to_string(batch.requests.size()));
  if (batch.num_logprobs)
    validate_num_logprobs("batch", "num_logprobs ", *batch.num_logprobs, config.vocab_size);
  if (batch.logprobs_mode && !valid_mode(*batch.logprobs_mode))
    fail("batch", "logprobs_mode must be a LogprobsMode, got enum value " +
                      std::to_string(static_cast<int>(*batch.logprobs_mode)));
  if (requests_validated) return;
  for (size_t i = 0; i < batch.requests.size(); ++i) {
    const std::string who = "request " + std::to_string(i);
    const BatchRequest& r = batch.requests[i];
    validate_params(who, r.params, config.vocab_size);
    validate_token_ids(who, "prompt_token_ids", r.prompt_token_ids, config.vocab_size);
    validate_token_ids(who, "output_token_ids", r.output_token_ids, config.vocab_size);
    validate_token_ids(who, "spec_token_ids", r.spec_token_ids, config.vocab_size);
  }
}

}  // namespace lastmile::detail
