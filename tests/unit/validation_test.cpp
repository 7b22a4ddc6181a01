// Validation at the boundary (spec §12; STYLE §7): every request field and bound, token ids in
// every id field, the batch and logits shape, NaN / +inf rows and the sampler config. Each test
// asserts the whole message and that the exception is lastmile::InvalidArgument.
#include <functional>
#include <limits>
#include <string>

#include "unit/test_util.hpp"

namespace lastmile_test {
namespace {

using lastmile::ErrorCode;
using lastmile::InvalidArgument;

constexpr int64_t kVocab = 8;

// Runs `call`, expecting InvalidArgument with exactly `message` and `code`.
void expect_invalid(const std::function<void()>& call, const std::string& message,
                    ErrorCode code = ErrorCode::invalid_argument) {
  try {
    call();
    ADD_FAILURE() << "expected InvalidArgument: " << message;
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()), message);
    EXPECT_EQ(e.code(), code) << message;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type, message: " << e.what();
  }
}

// Samples a 4-row batch whose row `index` is `bad` (others are defaults).
void sample_with(const Row& bad, int index = 3) {
  std::vector<Row> rows(4, row_with(RequestParams{}));
  rows[index] = bad;
  const std::vector<float> logits(4 * kVocab, 0.0f);
  Sampler sampler(make_config(kVocab, 4));
  sampler.sample(LogitsView::f32(logits.data(), 4, kVocab), make_batch(rows));
}

// Expects a request with these params at row 3 to fail with "request 3: <what>".
void expect_params_rejected(const RequestParams& p, const std::string& what) {
  expect_invalid([&] { sample_with(row_with(p)); }, "request 3: " + what);
}

void expect_params_accepted(const RequestParams& p) { EXPECT_NO_THROW(sample_with(row_with(p))); }

TEST(Validation, Temperature) {
  RequestParams p;
  p.temperature = -0.5f;
  expect_params_rejected(p, "temperature must be finite and >= 0, got -0.5");
  p.temperature = std::nanf("");
  expect_params_rejected(p, "temperature must be finite and >= 0, got nan");
  p.temperature = kInf;
  expect_params_rejected(p, "temperature must be finite and >= 0, got inf");
  p.temperature = -std::numeric_limits<float>::denorm_min();
  expect_params_rejected(p, "temperature must be finite and >= 0, got -1.40129846e-45");
  for (float ok : {0.0f, 1e-6f, 1.0f, 2.0f, 1e6f}) {
    p.temperature = ok;
    expect_params_accepted(p);
  }
}

TEST(Validation, TopK) {
  RequestParams p;
  p.top_k = -2;
  expect_params_rejected(p, "top_k must be >= -1 (0 or -1 disables), got -2");
  for (int32_t ok : {-1, 0, 1, 7, 8, 1000}) {
    p.top_k = ok;
    expect_params_accepted(p);
  }
}

TEST(Validation, TopP) {
  RequestParams p;
  p.top_p = 1.5f;
  expect_params_rejected(p, "top_p must be in (0, 1], got 1.5");
  p.top_p = 0.0f;
  expect_params_rejected(p, "top_p must be in (0, 1], got 0");
  p.top_p = -0.25f;
  expect_params_rejected(p, "top_p must be in (0, 1], got -0.25");
  p.top_p = 1.00000012f;
  expect_params_rejected(p, "top_p must be in (0, 1], got 1.00000012");
  p.top_p = std::nanf("");
  expect_params_rejected(p, "top_p must be in (0, 1], got nan");
  for (float ok : {1e-9f, 0.5f, 1.0f}) {
    p.top_p = ok;
    expect_params_accepted(p);
  }
}

TEST(Validation, MinP) {
  RequestParams p;
  p.min_p = -0.1f;
  expect_params_rejected(p, "min_p must be in [0, 1], got -0.100000001");
  p.min_p = 1.5f;
  expect_params_rejected(p, "min_p must be in [0, 1], got 1.5");
  p.min_p = std::nanf("");
  expect_params_rejected(p, "min_p must be in [0, 1], got nan");
  for (float ok : {0.0f, 0.5f, 1.0f}) {
    p.min_p = ok;
    expect_params_accepted(p);
  }
}

TEST(Validation, PresencePenalty) {
  RequestParams p;
  p.presence_penalty = 2.5f;
  expect_params_rejected(p, "presence_penalty must be in [-2, 2], got 2.5");
  p.presence_penalty = -2.0001f;
  expect_params_rejected(p, "presence_penalty must be in [-2, 2], got -2.0000999");
  p.presence_penalty = -kInf;
  expect_params_rejected(p, "presence_penalty must be in [-2, 2], got -inf");
  for (float ok : {-2.0f, 0.0f, 2.0f}) {
    p.presence_penalty = ok;
    expect_params_accepted(p);
  }
}

TEST(Validation, FrequencyPenalty) {
  RequestParams p;
  p.frequency_penalty = -3.0f;
  expect_params_rejected(p, "frequency_penalty must be in [-2, 2], got -3");
  p.frequency_penalty = 2.25f;
  expect_params_rejected(p, "frequency_penalty must be in [-2, 2], got 2.25");
  p.frequency_penalty = std::nanf("");
  expect_params_rejected(p, "frequency_penalty must be in [-2, 2], got nan");
  for (float ok : {-2.0f, 2.0f}) {
    p.frequency_penalty = ok;
    expect_params_accepted(p);
  }
}

TEST(Validation, RepetitionPenalty) {
  RequestParams p;
  p.repetition_penalty = 0.0f;
  expect_params_rejected(p, "repetition_penalty must be finite and > 0, got 0");
  p.repetition_penalty = -1.0f;
  expect_params_rejected(p, "repetition_penalty must be finite and > 0, got -1");
  p.repetition_penalty = kInf;
  expect_params_rejected(p, "repetition_penalty must be finite and > 0, got inf");
  p.repetition_penalty = std::nanf("");
  expect_params_rejected(p, "repetition_penalty must be finite and > 0, got nan");
  for (float ok : {1e-6f, 1.0f, 2.0f, 100.0f}) {
    p.repetition_penalty = ok;
    expect_params_accepted(p);
  }
}

TEST(Validation, LogitBias) {
  RequestParams p;
  p.logit_bias = {{1, 1.0f}, {8, 1.0f}};
  expect_params_rejected(p, "logit_bias token_id must be in [0, 8), got 8");
  p.logit_bias = {{-1, 1.0f}};
  expect_params_rejected(p, "logit_bias token_id must be in [0, 8), got -1");
  p.logit_bias = {{3, std::nanf("")}};
  expect_params_rejected(p, "logit_bias for token_id 3 must be finite, got nan");
  p.logit_bias = {{3, kInf}};
  expect_params_rejected(p, "logit_bias for token_id 3 must be finite, got inf");
  p.logit_bias = {{3, -kInf}};
  expect_params_rejected(p, "logit_bias for token_id 3 must be finite, got -inf");
  p.logit_bias = {{0, -1000.0f}, {7, 1000.0f}};
  expect_params_accepted(p);
}

TEST(Validation, AllowedTokenIds) {
  RequestParams p;
  p.allowed_token_ids = std::vector<TokenId>{};
  expect_params_rejected(p, "allowed_token_ids must not be empty");
  p.allowed_token_ids = std::vector<TokenId>{1, 8};
  expect_params_rejected(p, "allowed_token_ids[1] must be in [0, 8), got 8");
  p.allowed_token_ids = std::vector<TokenId>{-1};
  expect_params_rejected(p, "allowed_token_ids[0] must be in [0, 8), got -1");
  p.allowed_token_ids = std::vector<TokenId>{0, 7};
  expect_params_accepted(p);
}

TEST(Validation, BadWordsTokenIds) {
  RequestParams p;
  p.bad_words_token_ids = {{1}, {}};
  expect_params_rejected(p, "bad_words_token_ids[1] must not be empty");
  p.bad_words_token_ids = {{1, 2, -1}};
  expect_params_rejected(p, "bad_words_token_ids[0][2] must be in [0, 8), got -1");
  p.bad_words_token_ids = {{0}, {3, 8}};
  expect_params_rejected(p, "bad_words_token_ids[1][1] must be in [0, 8), got 8");
  p.bad_words_token_ids = {{0}, {7, 7}};
  expect_params_accepted(p);
}

TEST(Validation, MinTokensAndStopTokenIds) {
  RequestParams p;
  p.min_tokens = -1;
  expect_params_rejected(p, "min_tokens must be >= 0, got -1");
  p.min_tokens = 2;
  p.stop_token_ids = {0, 9};
  expect_params_rejected(p, "stop_token_ids[1] must be in [0, 8), got 9");
  p.stop_token_ids = {-3};
  expect_params_rejected(p, "stop_token_ids[0] must be in [0, 8), got -3");
  p.stop_token_ids = {0, 7};
  expect_params_accepted(p);
}

TEST(Validation, Logprobs) {
  RequestParams p;
  p.logprobs = -2;
  expect_params_rejected(p, "logprobs must be -1 or in [0, 8], got -2");
  p.logprobs = 9;
  expect_params_rejected(p, "logprobs must be -1 or in [0, 8], got 9");
  for (int32_t ok : {-1, 0, 8}) {
    p.logprobs = ok;
    expect_params_accepted(p);
  }
}

TEST(Validation, LogprobTokenIds) {
  RequestParams p;
  p.logprob_token_ids = std::vector<TokenId>(129, 1);
  expect_params_rejected(p, "logprob_token_ids must hold at most 128 ids, got 129");
  p.logprob_token_ids = std::vector<TokenId>{2, 8};
  expect_params_rejected(p, "logprob_token_ids[1] must be in [0, 8), got 8");
  p.logprob_token_ids = std::vector<TokenId>{-1};
  expect_params_rejected(p, "logprob_token_ids[0] must be in [0, 8), got -1");
  p.logprob_token_ids = std::vector<TokenId>(128, 7);
  expect_params_accepted(p);
  p.logprob_token_ids = std::vector<TokenId>{};
  expect_params_accepted(p);
}

TEST(Validation, HistoryTokenIds) {
  Row row;
  row.prompt = {0, 8};
  expect_invalid([&] { sample_with(row); },
                 "request 3: prompt_token_ids[1] must be in [0, 8), got 8");
  row.prompt = {};
  row.output = {-1};  // vLLM's async placeholder is not accepted here
  expect_invalid([&] { sample_with(row); },
                 "request 3: output_token_ids[0] must be in [0, 8), got -1");
  row.output = {};
  row.spec = {1, 2, 100};
  expect_invalid([&] { sample_with(row); },
                 "request 3: spec_token_ids[2] must be in [0, 8), got 100");
  row.spec = {};
  row.prompt = {7};
  row.output = {0};
  row.spec = {7};
  EXPECT_NO_THROW(sample_with(row));
}

// Long histories are checked in blocks: the first bad id is named wherever it sits (a block's
// first or last entry, past the last whole block), negatives and INT32_MIN included.
TEST(Validation, LongHistoriesNameTheirFirstBadId) {
  Row row;
  for (const size_t length : {size_t{255}, size_t{256}, size_t{257}, size_t{2000}}) {
    for (const size_t at : {size_t{0}, size_t{255}, size_t{256}, length - 1}) {
      if (at >= length) continue;
      for (const TokenId bad : {TokenId{8}, TokenId{-1}, std::numeric_limits<TokenId>::min()}) {
        row.output.assign(length, 7);
        row.output[at] = bad;
        if (at + 1 < length) row.output[length - 1] = 100;  // a later bad id is not named
        expect_invalid([&] { sample_with(row); },
                       "request 3: output_token_ids[" + std::to_string(at) +
                           "] must be in [0, 8), got " + std::to_string(bad));
      }
    }
    row.output.assign(length, 7);
    EXPECT_NO_THROW(sample_with(row));
  }
}

TEST(Validation, NamesTheRequestIndex) {
  RequestParams p;
  p.top_p = 1.5f;
  expect_invalid([&] { sample_with(row_with(p), 0); },
                 "request 0: top_p must be in (0, 1], got 1.5");
  expect_invalid([&] { sample_with(row_with(p), 2); },
                 "request 2: top_p must be in (0, 1], got 1.5");
}

// ---- batch and logits ----

TEST(Validation, RequestsMustMatchTheLogitsRows) {
  Sampler sampler(make_config(kVocab, 4));
  const std::vector<float> logits(2 * kVocab, 0.0f);
  const std::vector<Row> rows(3, row_with(RequestParams{}));
  expect_invalid(
      [&] { sampler.sample(LogitsView::f32(logits.data(), 2, kVocab), make_batch(rows)); },
      "batch: requests must hold one entry per logits row (2), got 3");
}

TEST(Validation, BatchNumLogprobs) {
  Sampler sampler(make_config(kVocab, 1));
  const std::vector<float> logits(kVocab, 0.0f);
  const std::vector<Row> rows = {row_with(RequestParams{})};
  expect_invalid(
      [&] { sampler.sample(LogitsView::f32(logits.data(), 1, kVocab), make_batch(rows, -2)); },
      "batch: num_logprobs must be -1 or in [0, 8], got -2");
  expect_invalid(
      [&] { sampler.sample(LogitsView::f32(logits.data(), 1, kVocab), make_batch(rows, 9)); },
      "batch: num_logprobs must be -1 or in [0, 8], got 9");
  EXPECT_NO_THROW(sampler.sample(LogitsView::f32(logits.data(), 1, kVocab), make_batch(rows, 8)));
}

TEST(Validation, WrongVocabSize) {
  Sampler sampler(make_config(kVocab, 1));
  const std::vector<float> logits(kVocab, 0.0f);
  const std::vector<Row> rows = {row_with(RequestParams{})};
  expect_invalid([&] { sampler.sample(LogitsView::f32(logits.data(), 1, 7), make_batch(rows)); },
                 "logits: vocab_size must equal the sampler's 8, got 7", ErrorCode::invalid_logits);
}

TEST(Validation, TooManyRows) {
  Sampler sampler(make_config(kVocab, 4));
  const std::vector<float> logits(5 * kVocab, 0.0f);
  const std::vector<Row> rows(5, row_with(RequestParams{}));
  expect_invalid(
      [&] { sampler.sample(LogitsView::f32(logits.data(), 5, kVocab), make_batch(rows)); },
      "logits: num_rows must be in [0, max_batch = 4], got 5", ErrorCode::invalid_logits);
  expect_invalid([&] { sampler.sample(LogitsView::f32(logits.data(), -1, kVocab), Batch{}); },
                 "logits: num_rows must be in [0, max_batch = 4], got -1",
                 ErrorCode::invalid_logits);
}

TEST(Validation, RowStride) {
  Sampler sampler(make_config(kVocab, 2));
  const std::vector<float> logits(2 * kVocab, 0.0f);
  const std::vector<Row> rows(2, row_with(RequestParams{}));
  LogitsView view = LogitsView::f32(logits.data(), 2, kVocab);
  view.row_stride = 7;
  expect_invalid([&] { sampler.sample(view, make_batch(rows)); },
                 "logits: row_stride must be 0 or >= vocab_size 8, got 7",
                 ErrorCode::invalid_logits);
  view.row_stride = -8;
  expect_invalid([&] { sampler.sample(view, make_batch(rows)); },
                 "logits: row_stride must be 0 or >= vocab_size 8, got -8",
                 ErrorCode::invalid_logits);
  view.row_stride = 0;
  EXPECT_NO_THROW(sampler.sample(view, make_batch(rows)));
}

// A stride so large that a later row lies past the address space (its byte offset would wrap) is
// refused before any row is read; one row reads none past the first, whatever the stride.
TEST(Validation, RowStrideBeyondTheAddressSpace) {
  Sampler sampler(make_config(kVocab, 2));
  const std::vector<float> logits(2 * kVocab, 0.0f);
  const std::vector<Row> rows(2, row_with(RequestParams{}));
  LogitsView view = LogitsView::f32(logits.data(), 2, kVocab);
  view.row_stride = std::numeric_limits<int64_t>::max() / 2;
  expect_invalid([&] { sampler.sample(view, make_batch(rows)); },
                 "logits: 2 rows at row_stride 4611686018427387903 reach past the address space",
                 ErrorCode::invalid_logits);
  view.row_stride = int64_t{1} << 61;  // 2^63 bytes on: the smallest f32 stride past it
  expect_invalid([&] { sampler.sample(view, make_batch(rows)); },
                 "logits: 2 rows at row_stride 2305843009213693952 reach past the address space",
                 ErrorCode::invalid_logits);
  view.dtype = lastmile::DType::bf16;
  view.row_stride = std::numeric_limits<int64_t>::max() / 2;  // 2^63 - 2 bytes, and a row
  expect_invalid([&] { sampler.sample(view, make_batch(rows)); },
                 "logits: 2 rows at row_stride 4611686018427387903 reach past the address space",
                 ErrorCode::invalid_logits);
  view.num_rows = 1;
  const std::vector<Row> one(1, row_with(RequestParams{}));
  view.row_stride = std::numeric_limits<int64_t>::max();
  EXPECT_NO_THROW(sampler.sample(view, make_batch(one)));
}

// Elements are read as what they are: a pointer that does not hold whole ones is refused.
TEST(Validation, MisalignedData) {
  Sampler sampler(make_config(kVocab, 1));
  const std::vector<Row> rows = {row_with(RequestParams{})};
  std::vector<float> storage(kVocab + 1, 0.0f);
  const char* bytes = reinterpret_cast<const char*>(storage.data());
  LogitsView view = LogitsView::f32(storage.data(), 1, kVocab);
  view.data = bytes + 2;
  expect_invalid([&] { sampler.sample(view, make_batch(rows)); },
                 "logits: data must be aligned to its 4-byte f32 elements",
                 ErrorCode::invalid_logits);
  view.dtype = lastmile::DType::bf16;  // 2 bytes: fine for bf16
  EXPECT_NO_THROW(sampler.sample(view, make_batch(rows)));
  view.data = bytes + 1;
  expect_invalid([&] { sampler.sample(view, make_batch(rows)); },
                 "logits: data must be aligned to its 2-byte bf16 elements",
                 ErrorCode::invalid_logits);
  view.num_rows = 0;  // nothing is read
  EXPECT_NO_THROW(sampler.sample(view, Batch{}));
}

TEST(Validation, NullDataAndBadDType) {
  Sampler sampler(make_config(kVocab, 1));
  const std::vector<Row> rows = {row_with(RequestParams{})};
  expect_invalid([&] { sampler.sample(LogitsView::f32(nullptr, 1, kVocab), make_batch(rows)); },
                 "logits: data is null", ErrorCode::invalid_logits);
  const std::vector<float> logits(kVocab, 0.0f);
  LogitsView view = LogitsView::f32(logits.data(), 1, kVocab);
  view.dtype = static_cast<lastmile::DType>(7);
  expect_invalid([&] { sampler.sample(view, make_batch(rows)); },
                 "logits: dtype must be f32, f16 or bf16, got enum value 7",
                 ErrorCode::invalid_logits);
}

TEST(Validation, EmptyBatchIsValid) {
  Sampler sampler(make_config(kVocab, 1));
  const SamplerOutput& out = sampler.sample(LogitsView::f32(nullptr, 0, kVocab), Batch{});
  EXPECT_EQ(out.num_rows, 0);
  EXPECT_TRUE(out.sampled_token_ids.empty());
}

TEST(Validation, NaNRowIsReportedWithItsFirstBadToken) {
  Sampler sampler(make_config(32, 3));
  std::vector<float> logits(3 * 32, 0.0f);
  logits[32 + 17] = std::nanf("");
  logits[32 + 20] = kInf;
  logits[2 * 32 + 1] = std::nanf("");  // a later row: the first bad row is reported
  const std::vector<Row> rows(3, row_with(RequestParams{}));
  expect_invalid([&] { sampler.sample(LogitsView::f32(logits.data(), 3, 32), make_batch(rows)); },
                 "row 1: logits contain NaN at token_id 17", ErrorCode::invalid_logits);
}

TEST(Validation, PositiveInfinityRowIsReported) {
  Sampler sampler(make_config(32, 2));
  std::vector<float> logits(2 * 32, 0.0f);
  logits[3] = kInf;
  logits[5] = std::nanf("");
  logits[32] = -kInf;  // -inf is a valid logit
  const std::vector<Row> rows(2, row_with(greedy_params()));
  expect_invalid([&] { sampler.sample(LogitsView::f32(logits.data(), 2, 32), make_batch(rows)); },
                 "row 0: logits contain +inf at token_id 3", ErrorCode::invalid_logits);
}

// Finite logits that parameters push to +inf: the request is named, never sampled from NaN
// probabilities. Every backend, since the check rides along each kernel.
void expect_overflow(const RequestParams& p, const std::string& message,
                     lastmile::BackendKind backend, const Row& extra = {}) {
  SamplerConfig config = make_config(40, 2);
  config.backend = backend;
  Sampler sampler(config);
  std::vector<float> logits(2 * 40, 1.0f);
  logits[40 + 33] = 3e38f;
  Row bad = extra;
  bad.params = p;
  const std::vector<Row> rows = {row_with(RequestParams{}), bad};
  expect_invalid([&] { sampler.sample(LogitsView::f32(logits.data(), 2, 40), make_batch(rows)); },
                 message);
}

class Overflow : public ::testing::TestWithParam<lastmile::BackendKind> {};

TEST_P(Overflow, SmallTemperatureIsReported) {
  RequestParams p;
  p.temperature = 0.5f;
  expect_overflow(p, "request 1: temperature made the logits +inf at token_id 33", GetParam());
}

// The input's NaN is the row's failure even where the temperature overflows an earlier token,
// as when the steps run apart: step 2 stops the row before step 7b.
TEST_P(Overflow, InputNaNIsReportedBeforeATemperatureOverflow) {
  SamplerConfig config = make_config(40, 1);
  config.backend = GetParam();
  Sampler sampler(config);
  std::vector<float> logits(40, 1.0f);
  logits[3] = 3e38f;
  logits[35] = std::nanf("");
  RequestParams p;
  p.temperature = 0.5f;
  expect_invalid(
      [&] { sampler.sample(LogitsView::f32(logits.data(), 1, 40), make_batch({row_with(p)})); },
      "row 0: logits contain NaN at token_id 35", ErrorCode::invalid_logits);
}

TEST_P(Overflow, LogitBiasIsReported) {
  RequestParams p;
  p.temperature = 0.0f;
  p.logit_bias = {{33, 1e38f}};
  expect_overflow(p, "request 1: logit_bias made the logits +inf at token_id 33", GetParam());
}

TEST_P(Overflow, RepetitionPenaltyBelowOneIsReported) {
  RequestParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 0.5f;
  Row history;
  history.prompt = {33};
  expect_overflow(p, "request 1: repetition_penalty made the logits +inf at token_id 33",
                  GetParam(), history);
}

// A RequestBatch applies repetition while converting the row (its bitmap is kept): the overflow
// is still named, and the input's NaN still comes first, as when the steps run apart.
TEST_P(Overflow, RepetitionPenaltyBelowOneIsReportedByARequestBatch) {
  SamplerConfig config = make_config(40, 1);
  config.backend = GetParam();
  RequestParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 0.5f;
  std::vector<float> logits(40, 1.0f);
  logits[33] = 3e38f;
  const std::vector<TokenId> prompt = {33};
  lastmile::RequestBatch requests(config);
  requests.add("a", p, prompt);
  expect_invalid([&] { requests.step(LogitsView::f32(logits.data(), 1, 40)); },
                 "request 'a' (row 0): repetition_penalty made the logits +inf at token_id 33");
  logits[35] = std::nanf("");
  expect_invalid([&] { requests.step(LogitsView::f32(logits.data(), 1, 40)); },
                 "row 0 (request 'a'): logits contain NaN at token_id 35",
                 ErrorCode::invalid_logits);
}

// Where several tokens overflow, every path names the lowest: the sparse walk over a short
// history (6 tokens x 16 < 100), the dense pass over a longer one, and a RequestBatch's kept
// bitmap (the sparse walk once named the first in the prompt's order, 51).
TEST_P(Overflow, RepetitionPenaltyNamesTheLowestOverflowingTokenOnEveryPath) {
  SamplerConfig config = make_config(100, 1);
  config.backend = GetParam();
  RequestParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 0.5f;
  for (const std::vector<TokenId>& prompt : {std::vector<TokenId>{51, 87, 16, 39, 2, 4},
                                             std::vector<TokenId>{51, 87, 16, 39, 2, 4, 60}}) {
    SCOPED_TRACE(prompt.size());
    std::vector<float> logits(100, 1.0f);
    for (const TokenId id : prompt) logits[static_cast<size_t>(id)] = 3e38f;
    Sampler sampler(config);
    Row row = row_with(p);
    row.prompt = prompt;
    expect_invalid(
        [&] { sampler.sample(LogitsView::f32(logits.data(), 1, 100), make_batch({row})); },
        "request 0: repetition_penalty made the logits +inf at token_id 2");
    lastmile::RequestBatch requests(config);
    requests.add("a", p, prompt);
    expect_invalid([&] { requests.step(LogitsView::f32(logits.data(), 1, 100)); },
                   "request 'a' (row 0): repetition_penalty made the logits +inf at token_id 2");
  }
}

// The README's promise for the other overflows: a temperature names the lowest id it made +inf
// (the row split over two threads too), a logit_bias the first of its list that overflowed.
TEST_P(Overflow, TemperatureNamesTheLowestAndLogitBiasTheFirstListed) {
  for (const int64_t vocab : {int64_t{100}, int64_t{200000}}) {
    SCOPED_TRACE(vocab);
    SamplerConfig config = make_config(vocab, 1, LogprobsMode::raw_logprobs, 2);
    config.backend = GetParam();
    Sampler sampler(config);
    std::vector<float> logits(static_cast<size_t>(vocab), 1.0f);
    for (const int64_t id : {vocab - 7, vocab / 2, int64_t{11}})
      logits[static_cast<size_t>(id)] = 3e38f;
    RequestParams p;
    p.temperature = 0.5f;
    expect_invalid(
        [&] {
          sampler.sample(LogitsView::f32(logits.data(), 1, vocab), make_batch({row_with(p)}));
        },
        "request 0: temperature made the logits +inf at token_id 11");
    p.temperature = 0.0f;
    p.logit_bias = {{static_cast<TokenId>(vocab / 2), 1e38f}, {11, 1e38f}};
    expect_invalid(
        [&] {
          sampler.sample(LogitsView::f32(logits.data(), 1, vocab), make_batch({row_with(p)}));
        },
        "request 0: logit_bias made the logits +inf at token_id " + std::to_string(vocab / 2));
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, Overflow,
                         ::testing::Values(lastmile::BackendKind::cpu,
                                           lastmile::BackendKind::reference));

TEST(Validation, NegativeInfinityIsAccepted) {
  Sampler sampler(make_config(4, 1));
  const std::vector<float> logits = {-kInf, -kInf, -kInf, -kInf};
  const std::vector<Row> rows = {row_with(RequestParams{})};
  EXPECT_NO_THROW(sampler.sample(LogitsView::f32(logits.data(), 1, 4), make_batch(rows)));
}

TEST(Validation, PaddingBeyondTheVocabIsNotRead) {
  // Stride 10 over vocab 8: NaNs in the padding are never inspected.
  Sampler sampler(make_config(kVocab, 2));
  std::vector<float> logits(2 * 10, 0.0f);
  logits[8] = logits[9] = logits[18] = logits[19] = std::nanf("");
  LogitsView view = LogitsView::f32(logits.data(), 2, kVocab);
  view.row_stride = 10;
  EXPECT_NO_THROW(sampler.sample(view, make_batch(std::vector<Row>(2, row_with(RequestParams{})))));
}

// ---- sampler config ----

TEST(Validation, SamplerConfig) {
  expect_invalid([] { Sampler s(make_config(0, 1)); }, "config: vocab_size must be >= 1, got 0");
  expect_invalid([] { Sampler s(make_config(int64_t{1} << 31, 1)); },
                 "config: vocab_size must fit int32 token ids, got 2147483648");
  expect_invalid([] { Sampler s(make_config(8, 0)); }, "config: max_batch must be >= 1, got 0");
  expect_invalid([] { Sampler s(make_config(8, 1, LogprobsMode::raw_logprobs, -1)); },
                 "config: threads must be in [0, 1024] (0: hardware concurrency), got -1");
  expect_invalid([] { Sampler s(make_config(8, 1, LogprobsMode::raw_logprobs, 1025)); },
                 "config: threads must be in [0, 1024] (0: hardware concurrency), got 1025");
  expect_invalid([] { Sampler s(make_config(8, 1, static_cast<LogprobsMode>(9))); },
                 "config: logprobs_mode must be a LogprobsMode, got enum value 9");
  SamplerConfig config = make_config(8, 1);
  config.logits_processors.push_back(nullptr);
  expect_invalid([&] { Sampler s(config); }, "config: logits_processors[0] is null");
}

TEST(Validation, RequestBatchAddValidatesParams) {
  lastmile::RequestBatch batch(make_config(kVocab, 2));
  RequestParams p;
  p.top_p = 1.5f;
  expect_invalid([&] { batch.add("a", p); }, "request 'a': top_p must be in (0, 1], got 1.5");
  const std::vector<TokenId> prompt = {1, 8};
  expect_invalid([&] { batch.add("b", RequestParams{}, prompt); },
                 "request 'b': prompt_token_ids[1] must be in [0, 8), got 8");
  EXPECT_EQ(batch.size(), 0);
}

}  // namespace
}  // namespace lastmile_test
