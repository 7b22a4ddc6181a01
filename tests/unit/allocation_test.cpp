// Steady state allocates nothing (DESIGN "Memory and threads"): after a warm-up call sizes the
// workspace, Sampler::sample on a batch of the same shape makes no heap allocation, on one
// thread and on several. Counted with a replaced global operator new.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <set>
#include <string>

#include "lastmile/lastmile.h"
#include "unit/test_util.hpp"

namespace {
std::atomic<int64_t> g_allocations{0};
// Fault injection: while it is n > 0, the n-th throwing allocation from now fails (bad_alloc).
std::atomic<int64_t> g_fail_countdown{0};

bool injected_failure() noexcept {
  int64_t n = g_fail_countdown.load(std::memory_order_relaxed);
  while (n > 0)
    if (g_fail_countdown.compare_exchange_weak(n, n - 1, std::memory_order_relaxed)) return n == 1;
  return false;
}
}  // namespace

// Every replaceable form of new / delete goes through malloc / free here, so that sanitizers'
// own operators never meet ours (a nothrow new from the library with our delete would be an
// alloc-dealloc mismatch). g++ 12 sees malloc / free behind them at inlined call sites and warns
// of a mismatch that is not one.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
namespace {
std::atomic<size_t> g_largest_allocation{0};

void count_allocation(size_t size) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  size_t largest = g_largest_allocation.load(std::memory_order_relaxed);
  while (size > largest && !g_largest_allocation.compare_exchange_weak(largest, size)) {
  }
}
void* counted_malloc(size_t size) noexcept {
  count_allocation(size);
  return std::malloc(size ? size : 1);
}
void* counted_aligned(size_t size, std::align_val_t align) noexcept {
  count_allocation(size);
  const auto a = static_cast<size_t>(align);
  return std::aligned_alloc(a, (size + a - 1) / a * a);
}
}  // namespace

void* operator new(size_t size) {
  if (injected_failure()) throw std::bad_alloc();
  if (void* p = counted_malloc(size)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t size) { return operator new(size); }
void* operator new(size_t size, const std::nothrow_t&) noexcept { return counted_malloc(size); }
void* operator new[](size_t size, const std::nothrow_t&) noexcept { return counted_malloc(size); }
void* operator new(size_t size, std::align_val_t align) {
  if (injected_failure()) throw std::bad_alloc();
  if (void* p = counted_aligned(size, align)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t size, std::align_val_t align) { return operator new(size, align); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace lastmile_test {
namespace {

// Allocations made by 5 calls of a fresh sampler with `threads` threads after a warm-up call,
// which sizes its workspace.
int64_t steady_state_allocations(const std::vector<float>& logits, int64_t rows, int64_t vocab,
                                 const lastmile::Batch& batch, int threads) {
  lastmile::SamplerConfig config;
  config.vocab_size = vocab;
  config.max_batch = rows;
  config.threads = threads;
  lastmile::Sampler sampler(config);
  const auto view = lastmile::LogitsView::f32(logits.data(), rows, vocab);
  sampler.sample(view, batch);
  const int64_t before = g_allocations.load();
  for (int step = 0; step < 5; ++step) sampler.sample(view, batch);
  return g_allocations.load() - before;
}

// Logits in [0, 1000 / divisor), a fixed pattern.
std::vector<float> patterned_logits(int64_t rows, int64_t vocab, float divisor) {
  std::vector<float> logits(static_cast<size_t>(rows * vocab));
  for (size_t i = 0; i < logits.size(); ++i)
    logits[i] = static_cast<float>((i * 7919) % 1000) / divisor;
  return logits;
}

TEST(Allocation, SteadyStateSampleAllocatesNothing) {
  constexpr int64_t kVocab = 1000;
  constexpr int kRows = 6;
  const std::vector<float> logits = patterned_logits(kRows, kVocab, 100.0f);
  const std::vector<TokenId> prompt = {1, 2, 3}, output = {4, 5, 5, 6};
  lastmile::Batch batch;
  batch.num_logprobs = 5;
  for (int r = 0; r < kRows; ++r) {
    lastmile::BatchRequest& row = batch.requests.emplace_back();
    row.prompt_token_ids = prompt;
    row.output_token_ids = output;
    row.params.seed = static_cast<uint64_t>(r);
  }
  batch.requests[0].params.temperature = 0.0f;
  batch.requests[0].params.repetition_penalty = 1.3f;  // greedy, penalties alone: no working row
  batch.requests[0].params.presence_penalty = 0.4f;
  batch.requests[1].params.top_k = 20;
  batch.requests[1].params.top_p = 0.9f;
  batch.requests[2].params.min_p = 0.1f;
  batch.requests[3].params.repetition_penalty = 1.2f;
  batch.requests[3].params.frequency_penalty = 0.5f;
  batch.requests[3].params.bad_words_token_ids = {{5, 6, 7}, {9}};
  batch.requests[4].params.allowed_token_ids = std::vector<TokenId>{1, 2, 3, 4, 5};
  batch.requests[4].params.logit_bias = {{3, 1.0f}};
  batch.requests[5].params.logprob_token_ids = std::vector<TokenId>{7, 8};
  batch.requests[5].params.min_tokens = 9;
  batch.requests[5].params.stop_token_ids = {0};
  for (const bool logprobs : {true, false}) {  // without: the greedy row by block maxima alone
    if (!logprobs) batch.num_logprobs.reset();
    for (int threads : {1, 2})
      EXPECT_EQ(steady_state_allocations(logits, kRows, kVocab, batch, threads), 0)
          << "threads " << threads << " logprobs " << logprobs;
  }
}

// Penalised min_p rows drawn from the caller's row (no working row), with raw logprobs (the
// summary) and without (block maxima): 8 blocks, a peaked head that the histories lower. Rows 0
// and 1 keep their max (token 9000) and draw from a list of the entries near it; rows 2 and 3
// lower it past the list's margin and draw from their penalised blocks (one block or two).
TEST(Allocation, PenalisedMinPRowsFromTheirBlocksAllocateNothing) {
  constexpr int64_t kVocab = 16384;
  constexpr int kRows = 4;
  std::vector<float> logits = patterned_logits(kRows, kVocab, 500.0f);
  for (int r = 0; r < kRows; ++r)
    for (int64_t id : {100, 5000, 9000})
      logits[r * kVocab + id] = 12.0f + static_cast<float>(id % 7);
  const std::vector<TokenId> output = {100, 100, 5000, 7, 8},
                             lowering_the_max = {100, 100, 5000, 7, 8, 9000, 9000};
  for (const bool logprobs : {true, false}) {
    lastmile::Batch batch;
    if (logprobs) batch.num_logprobs = 5;
    for (int r = 0; r < kRows; ++r) {
      lastmile::BatchRequest& row = batch.requests.emplace_back();
      row.output_token_ids = r < 2 ? output : lowering_the_max;
      row.params.seed = static_cast<uint64_t>(r);
      row.params.min_p = 0.2f;
      row.params.temperature = r % 2 == 0 ? 1.0f : 0.7f;
      row.params.repetition_penalty = 1.3f;
      row.params.frequency_penalty = 0.5f;
    }
    for (int threads : {1, 2})
      EXPECT_EQ(steady_state_allocations(logits, kRows, kVocab, batch, threads), 0)
          << "threads " << threads << " logprobs " << logprobs;
  }
}

// Four penalised rows of 40000 tokens over patterned logits (body_shift added) with 4 to 8 at
// every 997th token from 100, drawn from lists of the caller's row that the history lowers (no
// working row), with raw logprobs and without; the history holds some of the largest entries, in
// the prompt, output and drafts. sampling(r, p) sets row r's sampling parameters.
template <class Sampling>
void expect_penalised_list_rows_allocate_nothing(float body_shift, Sampling sampling) {
  constexpr int64_t kVocab = 40000;  // 625 groups: top-k up to 78 is listed so
  constexpr int kRows = 4;
  std::vector<float> logits = patterned_logits(kRows, kVocab, 500.0f);
  for (float& v : logits) v += body_shift;
  for (int r = 0; r < kRows; ++r)
    for (int64_t id = 100; id < kVocab; id += 997) logits[r * kVocab + id] = 4.0f + (id % 5);
  const std::vector<TokenId> prompt = {100, 1097, 3}, output = {2094, 2094, 5, 100},
                             drafts = {3091};
  for (const bool logprobs : {true, false}) {
    lastmile::Batch batch;
    batch.predict_bonus_token = true;
    if (logprobs) batch.num_logprobs = 5;
    for (int r = 0; r < kRows; ++r) {
      lastmile::BatchRequest& row = batch.requests.emplace_back();
      row.prompt_token_ids = prompt;
      row.output_token_ids = output;
      row.spec_token_ids = drafts;
      row.params.seed = static_cast<uint64_t>(r);
      row.params.temperature = r % 2 == 0 ? 1.0f : 0.7f;
      sampling(r, row.params);
      row.params.repetition_penalty = 1.3f;
      row.params.frequency_penalty = 0.5f;
      row.params.presence_penalty = 0.2f;
    }
    for (int threads : {1, 2})
      EXPECT_EQ(steady_state_allocations(logits, kRows, kVocab, batch, threads), 0)
          << "threads " << threads << " logprobs " << logprobs;
  }
}

// Penalised top-k rows (then top-p on some) list their candidates.
TEST(Allocation, PenalisedTopKRowsFromAListAllocateNothing) {
  expect_penalised_list_rows_allocate_nothing(0.0f, [](int r, lastmile::RequestParams& p) {
    p.top_k = r < 2 ? 5 : 30;
    if (r % 2 == 1) p.top_p = 0.8f;
  });
}

// Penalised top-p rows list the entries near the max (the body lies 20 below) and bound the rest
// by the raw summary (learned when no logprob asks for it).
TEST(Allocation, PenalisedTopPRowsFromAListAllocateNothing) {
  expect_penalised_list_rows_allocate_nothing(
      -20.0f, [](int r, lastmile::RequestParams& p) { p.top_p = r < 2 ? 0.8f : 0.95f; });
}

// A RequestBatch whose requests reserved their output length steps without allocating, while
// every step appends a token (mostly new ones: flat logits) to histories that penalties read.
TEST(Allocation, RequestBatchStepsWithinReservedOutputAllocateNothing) {
  constexpr int64_t kVocab = 1000;
  constexpr int kRows = 4, kSteps = 40;
  std::vector<float> logits(kRows * kVocab);
  for (size_t i = 0; i < logits.size(); ++i)
    logits[i] = static_cast<float>((i * 7919) % 1000) / 1000.0f;
  for (int threads : {1, 2}) {
    lastmile::SamplerConfig config;
    config.vocab_size = kVocab;
    config.max_batch = kRows;
    config.threads = threads;
    lastmile::RequestBatch batch(config);
    const std::vector<TokenId> prompt = {1, 2, 3};
    for (int r = 0; r < kRows; ++r) {
      lastmile::RequestParams params;
      params.seed = static_cast<uint64_t>(r);
      params.repetition_penalty = 1.1f;
      params.frequency_penalty = 0.2f;
      params.presence_penalty = 0.1f;
      if (r == 1) params.top_k = 50;
      if (r == 2) {  // greedy with penalties alone and raw logprobs: no working row
        params.temperature = 0.0f;
        params.logprobs = 3;
      }
      const char* const ids[kRows] = {"r0", "r1", "r2", "r3"};
      batch.add(ids[r], params, prompt, kSteps + 1);
    }
    const auto view = lastmile::LogitsView::f32(logits.data(), kRows, kVocab);
    batch.step(view);  // warm-up: sizes the workspace
    const int64_t before = g_allocations.load();
    for (int step = 0; step < kSteps; ++step) batch.step(view);
    EXPECT_EQ(g_allocations.load() - before, 0) << "threads " << threads;
    const std::span<const TokenId> output = batch.output_token_ids("r0");
    ASSERT_EQ(output.size(), size_t{kSteps + 1});
    const std::set<TokenId> distinct(output.begin(), output.end());
    EXPECT_GT(distinct.size(), size_t{16}) << "the index must have met many new tokens";
  }
}

// A request has at most vocab_size distinct output tokens: a reserve for more output tokens sizes
// their counts and index for the vocabulary, not for the output (max_output_tokens = 2^31 - 1
// used to zero-fill a 16 GiB index), and the steps still allocate nothing.
TEST(Allocation, AReservePastTheVocabularyCountsAtMostTheVocabulary) {
  constexpr int64_t kVocab = 64, kTokens = int64_t{1} << 20;
  std::vector<float> logits(kVocab, 0.0f);  // flat: every token comes up
  lastmile::SamplerConfig config;
  config.vocab_size = kVocab;
  config.max_batch = 1;
  config.threads = 1;
  lastmile::RequestBatch batch(config);
  lastmile::RequestParams params;
  params.seed = 7;
  params.frequency_penalty = 0.1f;
  g_largest_allocation = 0;
  batch.add("a", params, {}, kTokens);
  EXPECT_EQ(g_largest_allocation.load(), kTokens * sizeof(TokenId));  // the output list itself
  const auto view = lastmile::LogitsView::f32(logits.data(), 1, kVocab);
  batch.step(view);  // warm-up: sizes the workspace
  const int64_t before = g_allocations.load();
  for (int step = 0; step < 2000; ++step) batch.step(view);
  EXPECT_EQ(g_allocations.load() - before, 0);
  const std::span<const TokenId> output = batch.output_token_ids("a");
  EXPECT_EQ(std::set<TokenId>(output.begin(), output.end()).size(), size_t{kVocab});
}

// A RequestBatch whose add or step runs out of memory changes nothing: every throwing allocation
// they make is failed in turn (the first add of a request, the first step of a fresh batch, which
// sizes the workspace and grows every history), and after each failure the batch holds the
// requests and histories it held before, and goes on working. The failure is out_of_memory, naming
// the request for add.
TEST(Allocation, RequestBatchAddAndStepFailingAtAnyAllocationChangeNothing) {
  constexpr int64_t kVocab = 64;
  std::vector<float> logits(2 * kVocab);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>((i * 37) % 64) / 8.0f;
  lastmile::SamplerConfig config;
  config.vocab_size = kVocab;
  config.max_batch = 2;
  config.threads = 1;
  lastmile::RequestParams params;
  params.repetition_penalty = 1.2f;
  params.frequency_penalty = 0.5f;
  params.logit_bias = {{3, 1.0f}, {9, -2.0f}};
  params.bad_words_token_ids = {{5, 6}, {7}};
  params.logprobs = 2;
  const std::vector<TokenId> prompt = {1, 2, 3};
  const auto one_row = lastmile::LogitsView::f32(logits.data(), 1, kVocab);
  const auto two_rows = lastmile::LogitsView::f32(logits.data(), 2, kVocab);
  int failed_adds = 0;
  for (int64_t k = 1;; ++k) {
    lastmile::RequestBatch batch(config);
    batch.add("a", params, prompt, 0);
    batch.step(one_row);
    g_fail_countdown = k;
    bool added = false;
    try {
      batch.add("b", params, prompt, 0);
      added = true;
    } catch (const lastmile::Error& e) {
      EXPECT_EQ(e.code(), lastmile::ErrorCode::out_of_memory) << e.what();
      EXPECT_NE(std::string(e.what()).find("request 'b'"), std::string::npos) << e.what();
    }
    g_fail_countdown = 0;
    if (added) break;
    ++failed_adds;
    ASSERT_EQ(batch.size(), 1) << "allocation " << k;
    EXPECT_EQ(batch.output_token_ids("a").size(), size_t{1}) << "allocation " << k;
    batch.add("b", params, prompt, 0);  // the failed add left no trace of it
    EXPECT_EQ(batch.step(two_rows).num_rows, 2) << "allocation " << k;
    EXPECT_EQ(batch.output_token_ids("b").size(), size_t{1}) << "allocation " << k;
  }
  EXPECT_GE(failed_adds, 3);
  int failed_steps = 0;
  for (int64_t k = 1;; ++k) {
    lastmile::RequestBatch batch(config);
    batch.add("a", params, prompt, 0);
    batch.add("b", params, prompt, 0);
    g_fail_countdown = k;
    bool stepped = false;
    try {
      batch.step(two_rows);
      stepped = true;
    } catch (const lastmile::Error& e) {
      EXPECT_EQ(e.code(), lastmile::ErrorCode::out_of_memory) << e.what();
    }
    g_fail_countdown = 0;
    if (stepped) break;
    ++failed_steps;
    EXPECT_EQ(batch.output_token_ids("a").size(), size_t{0}) << "allocation " << k;
    EXPECT_EQ(batch.output_token_ids("b").size(), size_t{0}) << "allocation " << k;
    const lastmile::SamplerOutput& out = batch.step(two_rows);
    ASSERT_EQ(out.num_rows, 2) << "allocation " << k;
    EXPECT_EQ(batch.output_token_ids("a").size(), size_t{1}) << "allocation " << k;
    EXPECT_EQ(batch.output_token_ids("b").size(), size_t{1}) << "allocation " << k;
  }
  EXPECT_GE(failed_steps, 3);
}

// Calls f with its k-th allocation failing, for k = 1, 2, ... until a call makes fewer than k.
// Every failure must come out as lastmile::Error (STYLE §7: one exception family), never as a
// bare std::bad_alloc. Returns how many calls ended in out_of_memory.
template <class F>
int out_of_memory_errors(const char* what, F f) {
  int errors = 0;
  for (int64_t k = 1; k < 10000; ++k) {
    g_fail_countdown = k;
    try {
      f();
    } catch (const lastmile::Error& e) {
      if (e.code() == lastmile::ErrorCode::out_of_memory) ++errors;
    } catch (const std::bad_alloc&) {
      ADD_FAILURE() << what << ": std::bad_alloc escaped at allocation " << k;
    }
    const bool reached = g_fail_countdown.load() == 0;
    g_fail_countdown = 0;
    if (!reached) return errors;
  }
  ADD_FAILURE() << what << ": never finished";
  return errors;
}

TEST(Allocation, EveryPublicCallReportsOutOfMemoryAsAnError) {
  lastmile::SamplerConfig config;
  config.vocab_size = 16;
  config.max_batch = 4;
  config.threads = 1;
  lastmile::RequestBatch batch(config);
  for (const char* id : {"a", "b", "c"}) batch.add(id, {}, {}, 0);
  const std::vector<std::string> order = {"c", "a", "b"};
  EXPECT_GE(out_of_memory_errors("reorder", [&] { batch.reorder(order); }), 1);
  EXPECT_EQ(batch.request_id(0), "c");
  EXPECT_GE(out_of_memory_errors("remove", [&] { batch.remove("no such id, a long one"); }), 1);
  EXPECT_GE(out_of_memory_errors("request_id", [&] { (void)batch.request_id(7); }), 1);
  EXPECT_GE(out_of_memory_errors("output_token_ids",
                                 [&] { (void)batch.output_token_ids("no such id, a long one"); }),
            1);
  EXPECT_GE(out_of_memory_errors("backend_name", [&] { (void)batch.backend_name(); }), 1);
  lastmile::Sampler sampler(config);
  EXPECT_GE(out_of_memory_errors("Sampler::backend_name", [&] { (void)sampler.backend_name(); }),
            1);
  lastmile::RequestBatch moved_to(std::move(batch));
  lastmile::Sampler sampler_moved_to(std::move(sampler));
  EXPECT_GE(out_of_memory_errors("moved-from size", [&] { (void)batch.size(); }), 1);
  EXPECT_GE(out_of_memory_errors("moved-from config", [&] { (void)sampler.config(); }), 1);
  EXPECT_EQ(moved_to.size(), 3);
}

// A C call that runs out of memory says where: the copy of a request's arrays names the request
// and the field (an absurd count is the likelier cause than the machine), the batch's own sizing
// names the batch, and the sampler's workspace names the call. No failure is a bare "out of
// memory", and after each the handle samples again.
// A neutral C request whose lists the C API copies into its Batch: two biases (ids[0, 2) with
// values), a whitelist of ids[0, num_allowed), two bad words (ids + 2 cut at offsets) and a stop
// id (ids[0]) that min_tokens bans.
void set_copied_lists(lastmile_request& request, const int32_t* ids, int64_t num_allowed,
                      const float* values, const int64_t* offsets) {
  lastmile_request_init(&request);
  request.logit_bias_token_ids = ids;
  request.logit_bias_values = values;
  request.num_logit_bias = 2;
  request.has_allowed_token_ids = 1;
  request.allowed_token_ids = ids;
  request.num_allowed_token_ids = num_allowed;
  request.bad_words_token_ids = ids + 2;
  request.bad_words_offsets = offsets;
  request.num_bad_words = 2;
  request.stop_token_ids = ids;
  request.num_stop_token_ids = 1;
  request.min_tokens = 1;
}

TEST(Allocation, CApiOutOfMemoryNamesTheRequestAndField) {
  constexpr int64_t kVocab = 64;
  std::vector<float> logits(kVocab);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>((i * 37) % 64) / 8.0f;
  lastmile_sampler_config config;
  lastmile_sampler_config_init(&config);
  config.vocab_size = kVocab;
  config.threads = 1;
  const int32_t ids[] = {3, 9, 5, 6, 7};
  const float values[] = {1.0f, -2.0f};
  const int64_t offsets[] = {0, 2, 3};
  lastmile_request request;
  set_copied_lists(request, ids, 5, values, offsets);
  lastmile_batch batch;
  lastmile_batch_init(&batch);
  batch.requests = &request;
  batch.num_requests = 1;
  const lastmile_logits view = {logits.data(), LASTMILE_DTYPE_F32, 1, kVocab, kVocab};
  std::set<std::string> messages;
  for (int64_t k = 1;; ++k) {
    lastmile_sampler* sampler = nullptr;
    ASSERT_EQ(lastmile_sampler_create(&config, &sampler, nullptr, 0), LASTMILE_STATUS_OK);
    lastmile_output out;
    g_fail_countdown = k;
    const lastmile_status status = lastmile_sampler_sample(sampler, &view, &batch, &out);
    g_fail_countdown = 0;
    if (status == LASTMILE_STATUS_OK) {
      lastmile_sampler_destroy(sampler);
      break;
    }
    const std::string message = lastmile_sampler_last_error(sampler);
    EXPECT_EQ(status, LASTMILE_STATUS_OUT_OF_MEMORY) << message;
    EXPECT_NE(message, "out of memory") << "allocation " << k;
    messages.insert(message);
    EXPECT_EQ(lastmile_sampler_sample(sampler, &view, &batch, &out), LASTMILE_STATUS_OK)
        << "allocation " << k;
    lastmile_sampler_destroy(sampler);
  }
  for (const char* expected :
       {"batch: out of memory", "request 0: out of memory copying logit_bias (num_logit_bias = 2)",
        "request 0: out of memory copying allowed_token_ids (num_allowed_token_ids = 5)",
        "request 0: out of memory copying bad_words_token_ids (num_bad_words = 2)",
        "request 0: out of memory copying bad_words_token_ids (bad_words_offsets[1] = 2)",
        "request 0: out of memory copying bad_words_token_ids (bad_words_offsets[2] = 3)",
        "request 0: out of memory copying stop_token_ids (num_stop_token_ids = 1)",
        "sample: out of memory"})
    EXPECT_TRUE(messages.count(expected)) << expected;
}

// The C API's stateless sample refills its Batch in place, and names its fields only for an
// error: a steady call allocates nothing, with every array field set (names past a short
// string's 15 characters, such as num_allowed_token_ids, once cost a heap string each call).
TEST(Allocation, CApiSteadyStateSampleAllocatesNothing) {
  constexpr int64_t kVocab = 64;
  std::vector<float> logits(2 * kVocab);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>((i * 37) % 64) / 8.0f;
  const int32_t ids[] = {3, 9, 5, 6, 7, 11};
  const float values[] = {1.0f, -2.0f};
  const int64_t offsets[] = {0, 2, 3};
  lastmile_request requests[2];
  for (lastmile_request& request : requests) {
    set_copied_lists(request, ids, 6, values, offsets);
    request.has_logprob_token_ids = 1;
    request.logprob_token_ids = ids;
    request.num_logprob_token_ids = 2;
    request.prompt_token_ids = ids;
    request.num_prompt_token_ids = 3;
    request.output_token_ids = ids + 3;
    request.num_output_token_ids = 2;
    request.spec_token_ids = ids + 5;
    request.num_spec_token_ids = 1;
    request.has_seed = 1;
    request.seed = 7;
    request.repetition_penalty = 1.2f;
    request.top_k = 4;
  }
  requests[1].temperature = 0.0f;
  lastmile_batch batch;
  lastmile_batch_init(&batch);
  batch.requests = requests;
  batch.num_requests = 2;
  batch.has_num_logprobs = 1;
  batch.num_logprobs = 3;
  batch.predict_bonus_token = 1;
  const lastmile_logits view = {logits.data(), LASTMILE_DTYPE_F32, 2, kVocab, kVocab};
  for (int threads : {1, 2}) {
    lastmile_sampler_config config;
    lastmile_sampler_config_init(&config);
    config.vocab_size = kVocab;
    config.max_batch = 2;
    config.threads = threads;
    lastmile_sampler* sampler = nullptr;
    ASSERT_EQ(lastmile_sampler_create(&config, &sampler, nullptr, 0), LASTMILE_STATUS_OK);
    lastmile_output out;
    ASSERT_EQ(lastmile_sampler_sample(sampler, &view, &batch, &out), LASTMILE_STATUS_OK)
        << lastmile_sampler_last_error(sampler);
    const int64_t before = g_allocations.load();
    for (int step = 0; step < 5; ++step)
      ASSERT_EQ(lastmile_sampler_sample(sampler, &view, &batch, &out), LASTMILE_STATUS_OK);
    EXPECT_EQ(g_allocations.load() - before, 0) << "threads " << threads;
    lastmile_sampler_destroy(sampler);
  }
}

}  // namespace
}  // namespace lastmile_test
