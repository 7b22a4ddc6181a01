// RequestBatch — requests kept across steps: add / remove / reorder / step, their errors, and the
// history a step appends (penalties and min_tokens then see it on the next step).
#include <functional>
#include <string>
#include <string_view>

#include "unit/test_util.hpp"

namespace lastmile_test {
namespace {

using lastmile::InvalidArgument;
using lastmile::RequestBatch;

void expect_message(const std::function<void()>& call, const std::string& message) {
  try {
    call();
    ADD_FAILURE() << "expected InvalidArgument: " << message;
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

std::vector<TokenId> outputs(const RequestBatch& batch, const std::string& id) {
  const auto span = batch.output_token_ids(id);
  return {span.begin(), span.end()};
}

// Logits for `rows` rows of vocab 4 where row r's argmax is token argmax[r].
std::vector<float> one_hot_rows(const std::vector<TokenId>& argmax) {
  std::vector<float> logits(argmax.size() * 4, 0.0f);
  for (size_t r = 0; r < argmax.size(); ++r) logits[r * 4 + argmax[r]] = 5.0f;
  return logits;
}

std::vector<TokenId> step(RequestBatch& batch, const std::vector<TokenId>& argmax) {
  const std::vector<float> logits = one_hot_rows(argmax);
  const SamplerOutput& out =
      batch.step(LogitsView::f32(logits.data(), static_cast<int64_t>(argmax.size()), 4));
  return {out.sampled_token_ids.begin(), out.sampled_token_ids.end()};
}

TEST(RequestBatch, AddAppendsRowsInOrder) {
  RequestBatch batch(make_config(4, 3));
  EXPECT_EQ(batch.size(), 0);
  batch.add("a", greedy_params());
  batch.add("b", greedy_params());
  EXPECT_EQ(batch.size(), 2);
  EXPECT_EQ(batch.request_id(0), "a");
  EXPECT_EQ(batch.request_id(1), "b");
  EXPECT_TRUE(batch.output_token_ids("a").empty());
}

TEST(RequestBatch, DuplicateIdIsRejected) {
  RequestBatch batch(make_config(4, 3));
  batch.add("a", greedy_params());
  expect_message([&] { batch.add("a", greedy_params()); },
                 "request 'a': request_id is already in the batch");
  EXPECT_EQ(batch.size(), 1);
}

TEST(RequestBatch, EmptyIdIsRejected) {
  RequestBatch batch(make_config(4, 3));
  expect_message([&] { batch.add("", greedy_params()); }, "add: request_id must not be empty");
  EXPECT_EQ(batch.size(), 0);
}

// A NUL byte would cut every error that names the request (what() is a C string): refused, and
// shown as \0 where a lookup names such an id.
TEST(RequestBatch, IdWithNulIsRejectedAndShown) {
  using namespace std::string_view_literals;
  RequestBatch batch(make_config(4, 3));
  expect_message([&] { batch.add("x\0y"sv, greedy_params()); },
                 "request 'x\\0y': request_id must not hold a NUL byte");
  EXPECT_EQ(batch.size(), 0);
  batch.add("x", greedy_params());
  expect_message([&] { batch.remove("x\0y"sv); },
                 "request 'x\\0y': no such request_id in the batch");
  EXPECT_EQ(batch.size(), 1);
}

TEST(RequestBatch, NegativeMaxOutputTokensIsRejected) {
  RequestBatch batch(make_config(4, 3));
  expect_message([&] { batch.add("a", greedy_params(), {}, -1); },
                 "request 'a': max_output_tokens must be in [0, 2147483647], got -1");
  expect_message([&] { batch.add("a", greedy_params(), {}, int64_t{1} << 40); },
                 "request 'a': max_output_tokens must be in [0, 2147483647], got 1099511627776");
  EXPECT_EQ(batch.size(), 0);
}

// Outputs past the reserved length still grow (the index rehashes): histories stay whole.
TEST(RequestBatch, OutputsOutgrowTheirReservation) {
  const int64_t vocab = 64;
  RequestBatch batch(make_config(vocab, 1));
  lastmile::RequestParams params;
  params.seed = 3;
  params.frequency_penalty = 0.5f;
  batch.add("a", params, {}, 2);
  std::vector<float> logits(vocab, 0.0f);
  for (int step = 0; step < 100; ++step)
    batch.step(lastmile::LogitsView::f32(logits.data(), 1, vocab));
  const auto output = batch.output_token_ids("a");
  ASSERT_EQ(output.size(), 100u);
  EXPECT_GT(std::set<TokenId>(output.begin(), output.end()).size(), 20u);
}

TEST(RequestBatch, FullBatchIsRejected) {
  RequestBatch batch(make_config(4, 2));
  batch.add("a", greedy_params());
  batch.add("b", greedy_params());
  expect_message([&] { batch.add("c", greedy_params()); },
                 "request 'c': the batch is full (max_batch = 2)");
  EXPECT_EQ(batch.size(), 2);
}

TEST(RequestBatch, UnknownIdIsRejected) {
  RequestBatch batch(make_config(4, 2));
  batch.add("a", greedy_params());
  expect_message([&] { batch.remove("z"); }, "request 'z': no such request_id in the batch");
  expect_message([&] { (void)batch.output_token_ids("z"); },
                 "request 'z': no such request_id in the batch");
  expect_message([&] { (void)batch.request_id(1); }, "request_id: row must be in [0, 1), got 1");
  expect_message([&] { (void)batch.request_id(-1); }, "request_id: row must be in [0, 1), got -1");
}

TEST(RequestBatch, StepAppendsTheSampledTokenToEachRequest) {
  RequestBatch batch(make_config(4, 2));
  batch.add("a", greedy_params());
  batch.add("b", greedy_params());
  EXPECT_EQ(step(batch, {2, 1}), (std::vector<TokenId>{2, 1}));
  EXPECT_EQ(step(batch, {3, 0}), (std::vector<TokenId>{3, 0}));
  EXPECT_EQ(outputs(batch, "a"), (std::vector<TokenId>{2, 3}));
  EXPECT_EQ(outputs(batch, "b"), (std::vector<TokenId>{1, 0}));
}

TEST(RequestBatch, StepNeedsOneLogitsRowPerRequest) {
  RequestBatch batch(make_config(4, 3));
  batch.add("a", greedy_params());
  batch.add("b", greedy_params());
  expect_message([&] { step(batch, {1}); }, "step: logits.num_rows must equal size() = 2, got 1");
  EXPECT_TRUE(batch.output_token_ids("a").empty());
}

TEST(RequestBatch, FailedStepAppendsNothing) {
  RequestBatch batch(make_config(4, 1));
  batch.add("a", greedy_params());
  std::vector<float> logits = {0.0f, std::nanf(""), 0.0f, 0.0f};
  expect_message([&] { batch.step(LogitsView::f32(logits.data(), 1, 4)); },
                 "row 0 (request 'a'): logits contain NaN at token_id 1");
  EXPECT_TRUE(batch.output_token_ids("a").empty());
}

// A step's errors name the request by its id, beside its row: the caller of a RequestBatch never
// sees a Batch, whose "request 1" would be a row index.
TEST(RequestBatch, StepErrorsNameTheRequestId) {
  RequestBatch batch(make_config(4, 3));
  batch.add("a", greedy_params());
  RequestParams hot;
  hot.temperature = 1e-4f;  // sampled: 1e38 / 1e-4 overflows to +inf
  batch.add("b", hot);
  std::vector<float> logits = {0.0f, 1.0f, 0.0f, 0.0f, 0.0f, 1e38f, 0.0f, 0.0f};
  expect_message([&] { batch.step(LogitsView::f32(logits.data(), 2, 4)); },
                 "request 'b' (row 1): temperature made the logits +inf at token_id 1");
  logits[6] = std::nanf("");
  expect_message([&] { batch.step(LogitsView::f32(logits.data(), 2, 4)); },
                 "row 1 (request 'b'): logits contain NaN at token_id 2");
  EXPECT_TRUE(batch.output_token_ids("a").empty());
}

TEST(RequestBatch, RemoveShiftsLaterRowsUp) {
  RequestBatch batch(make_config(4, 3));
  batch.add("a", greedy_params());
  batch.add("b", greedy_params());
  batch.add("c", greedy_params());
  step(batch, {0, 1, 2});
  batch.remove("b");
  ASSERT_EQ(batch.size(), 2);
  EXPECT_EQ(batch.request_id(0), "a");
  EXPECT_EQ(batch.request_id(1), "c");
  step(batch, {3, 3});
  EXPECT_EQ(outputs(batch, "a"), (std::vector<TokenId>{0, 3}));
  EXPECT_EQ(outputs(batch, "c"), (std::vector<TokenId>{2, 3}));
}

TEST(RequestBatch, ReAddedIdStartsAFreshHistory) {
  RequestBatch batch(make_config(4, 1));
  batch.add("a", greedy_params());
  step(batch, {1});
  batch.remove("a");
  batch.add("a", greedy_params());
  EXPECT_TRUE(batch.output_token_ids("a").empty());
}

TEST(RequestBatch, ReorderPermutesRowsAndKeepsHistories) {
  RequestBatch batch(make_config(4, 3));
  batch.add("a", greedy_params());
  batch.add("b", greedy_params());
  batch.add("c", greedy_params());
  step(batch, {0, 1, 2});
  const std::vector<std::string> order = {"c", "a", "b"};
  batch.reorder(order);
  EXPECT_EQ(batch.request_id(0), "c");
  EXPECT_EQ(batch.request_id(1), "a");
  EXPECT_EQ(batch.request_id(2), "b");
  // Row 0 now belongs to c.
  step(batch, {3, 2, 1});
  EXPECT_EQ(outputs(batch, "a"), (std::vector<TokenId>{0, 2}));
  EXPECT_EQ(outputs(batch, "b"), (std::vector<TokenId>{1, 1}));
  EXPECT_EQ(outputs(batch, "c"), (std::vector<TokenId>{2, 3}));
}

TEST(RequestBatch, ReorderMustBeAPermutation) {
  RequestBatch batch(make_config(4, 3));
  batch.add("a", greedy_params());
  batch.add("b", greedy_params());
  batch.add("c", greedy_params());
  const std::vector<std::string> short_list = {"a", "b"};
  expect_message([&] { batch.reorder(short_list); }, "reorder: expected 3 request ids, got 2");
  const std::vector<std::string> twice = {"a", "b", "a"};
  expect_message([&] { batch.reorder(twice); }, "reorder: request 'a' appears twice");
  const std::vector<std::string> unknown = {"a", "q", "b"};
  expect_message([&] { batch.reorder(unknown); }, "request 'q': no such request_id in the batch");
  // Nothing moved.
  EXPECT_EQ(batch.request_id(0), "a");
  EXPECT_EQ(batch.request_id(1), "b");
  EXPECT_EQ(batch.request_id(2), "c");
}

TEST(RequestBatch, FrequencyPenaltyFollowsTheGrowingHistory) {
  // Logits [1, 0.875, 0.5], frequency 0.25 (all exact in float32), greedy:
  // step 1 [1, .875, .5] -> 0;  2 [.75, .875, .5] -> 1;  3 [.75, .625, .5] -> 0;
  // 4 [.5, .625, .5] -> 1;  5 [.5, .375, .5] -> 0 (tie, lowest id);  6 [.25, .375, .5] -> 2;
  // 7 [.25, .375, .25] -> 1.
  RequestBatch batch(make_config(3, 1));
  RequestParams p = greedy_params();
  p.frequency_penalty = 0.25f;
  batch.add("a", p);
  const std::vector<float> logits = {1.0f, 0.875f, 0.5f};
  for (int i = 0; i < 7; ++i) batch.step(LogitsView::f32(logits.data(), 1, 3));
  EXPECT_EQ(outputs(batch, "a"), (std::vector<TokenId>{0, 1, 0, 1, 0, 2, 1}));
}

TEST(RequestBatch, RepetitionPenaltyCountsThePrompt) {
  // Prompt {0}, repetition 2: [1, 0.75] -> [0.5, 0.75] -> 1; then both seen: [0.5, 0.375] -> 0.
  RequestBatch batch(make_config(2, 1));
  RequestParams p = greedy_params();
  p.repetition_penalty = 2.0f;
  const std::vector<TokenId> prompt = {0};
  batch.add("a", p, prompt);
  const std::vector<float> logits = {1.0f, 0.75f};
  for (int i = 0; i < 3; ++i) batch.step(LogitsView::f32(logits.data(), 1, 2));
  EXPECT_EQ(outputs(batch, "a"), (std::vector<TokenId>{1, 0, 0}));
}

TEST(RequestBatch, BadWordsSeeTheGeneratedHistory) {
  // Token 2 is always the argmax; the word [2, 2] bans it right after it was generated, so the
  // output alternates 2, 1, 2, 1.
  RequestBatch batch(make_config(4, 1));
  RequestParams p = greedy_params();
  p.bad_words_token_ids = {{2, 2}};
  batch.add("a", p);
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f, -1.0f};
  for (int i = 0; i < 4; ++i) batch.step(LogitsView::f32(logits.data(), 1, 4));
  EXPECT_EQ(outputs(batch, "a"), (std::vector<TokenId>{2, 1, 2, 1}));
}

TEST(RequestBatch, MoveKeepsTheRequests) {
  RequestBatch batch(make_config(4, 2));
  batch.add("a", greedy_params());
  step(batch, {3});
  RequestBatch moved(std::move(batch));
  EXPECT_EQ(moved.size(), 1);
  EXPECT_EQ(outputs(moved, "a"), std::vector<TokenId>{3});
  step(moved, {1});
  EXPECT_EQ(outputs(moved, "a"), (std::vector<TokenId>{3, 1}));
}

// A moved-from batch or sampler holds nothing: every call but destruction and assignment throws
// InvalidArgument saying so (it dereferenced null before), and assigning to it revives it.
TEST(RequestBatch, MovedFromThrowsUntilAssigned) {
  RequestBatch batch(make_config(4, 2));
  batch.add("a", greedy_params());
  RequestBatch moved(std::move(batch));
  const std::string message = "RequestBatch: used after being moved from";
  auto expect_moved_from = [&](const std::function<void()>& call) {
    try {
      call();
      ADD_FAILURE() << "expected InvalidArgument";
    } catch (const lastmile::InvalidArgument& e) {
      EXPECT_EQ(std::string(e.what()), message);
    }
  };
  const std::vector<float> logits = one_hot_rows({1});
  expect_moved_from([&] { batch.size(); });
  expect_moved_from([&] { batch.add("b", greedy_params()); });
  expect_moved_from([&] { batch.remove("a"); });
  expect_moved_from([&] { batch.reorder({}); });
  expect_moved_from([&] { batch.step(LogitsView::f32(logits.data(), 1, 4)); });
  expect_moved_from([&] { batch.backend_name(); });
  expect_moved_from([&] { batch.request_id(0); });
  expect_moved_from([&] { batch.output_token_ids("a"); });
  batch = RequestBatch(make_config(4, 2));
  EXPECT_EQ(batch.size(), 0);

  lastmile::Sampler sampler(make_config(4, 1));
  lastmile::Sampler other(std::move(sampler));
  try {
    sampler.sample(LogitsView::f32(logits.data(), 1, 4), lastmile::Batch{});
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const lastmile::InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()), "Sampler: used after being moved from");
  }
  EXPECT_THROW(sampler.config(), lastmile::InvalidArgument);
  EXPECT_THROW(sampler.backend_name(), lastmile::InvalidArgument);
  EXPECT_EQ(other.config().vocab_size, 4);
}

TEST(RequestBatch, StepReturnsLogprobsForTheBatch) {
  RequestBatch batch(make_config(4, 2));
  RequestParams p = greedy_params();
  p.logprobs = 2;
  batch.add("a", p);
  batch.add("b", greedy_params());
  const std::vector<float> logits = one_hot_rows({1, 2});
  const SamplerOutput& out = batch.step(LogitsView::f32(logits.data(), 2, 4));
  ASSERT_EQ(out.logprobs.width, 3);
  EXPECT_EQ(out.logprobs.token_ids[0], 1);
  EXPECT_EQ(out.logprobs.token_ids[1], 1);
  EXPECT_EQ(out.logprobs.token_ids[3], 2);
  EXPECT_EQ(out.logprobs.ranks[1], 1);
}

}  // namespace
}  // namespace lastmile_test
