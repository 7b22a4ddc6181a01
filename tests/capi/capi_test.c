/* lastmile — the C API from C11: every function, its status codes and the per-handle messages.
 * A plain C program (no test framework): each CHECK prints the failing line and the test exits 1.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lastmile/lastmile.h"

static int failures = 0;
#define CHECK(condition)                                                     \
  do {                                                                       \
    if (!(condition)) {                                                      \
      fprintf(stderr, "%s:%d: CHECK(%s)\n", __FILE__, __LINE__, #condition); \
      ++failures;                                                            \
    }                                                                        \
  } while (0)
#define CHECK_MESSAGE(actual, expected)                                                       \
  do {                                                                                        \
    if (strcmp((actual), (expected)) != 0) {                                                  \
      fprintf(stderr, "%s:%d: message\n  got:      %s\n  expected: %s\n", __FILE__, __LINE__, \
              (actual), (expected));                                                          \
      ++failures;                                                                             \
    }                                                                                         \
  } while (0)

enum { kVocab = 8 };
/* Row 0 peaks at token 5, row 1 at token 2. */
static const float kLogits[2][kVocab] = {{0, 1, 2, 3, 4, 9, 1, 0}, {1, 2, 8, 0, 0, 0, 0, 3}};

static lastmile_sampler* make_sampler(int64_t max_batch) {
  lastmile_sampler_config config;
  lastmile_sampler_config_init(&config);
  config.vocab_size = kVocab;
  config.max_batch = max_batch;
  config.threads = 1;
  lastmile_sampler* sampler = NULL;
  char error[128];
  CHECK(lastmile_sampler_create(&config, &sampler, error, sizeof error) == LASTMILE_STATUS_OK);
  CHECK_MESSAGE(error, "");
  return sampler;
}

static lastmile_logits view(int64_t rows) {
  lastmile_logits logits = {kLogits, LASTMILE_DTYPE_F32, rows, kVocab, kVocab};
  return logits;
}

/* A batch of one request, the request set to neutral values. */
static lastmile_batch one_request_batch(lastmile_request* request) {
  lastmile_request_init(request);
  lastmile_batch batch;
  lastmile_batch_init(&batch);
  batch.requests = request;
  batch.num_requests = 1;
  return batch;
}

static void create_reports_bad_config_in_the_callers_buffer(void) {
  lastmile_sampler_config config;
  lastmile_sampler_config_init(&config);
  config.vocab_size = 0;
  lastmile_sampler* sampler = (lastmile_sampler*)&config; /* must be reset to NULL */
  char error[128];
  CHECK(lastmile_sampler_create(&config, &sampler, error, sizeof error) ==
        LASTMILE_STATUS_INVALID_ARGUMENT);
  CHECK(sampler == NULL);
  CHECK_MESSAGE(error, "config: vocab_size must be >= 1, got 0");

  char tiny[8];
  CHECK(lastmile_sampler_create(&config, &sampler, tiny, sizeof tiny) ==
        LASTMILE_STATUS_INVALID_ARGUMENT);
  CHECK_MESSAGE(tiny, "config:"); /* truncated, still terminated */
  CHECK(lastmile_sampler_create(NULL, &sampler, error, sizeof error) ==
        LASTMILE_STATUS_INVALID_ARGUMENT);
  CHECK_MESSAGE(error, "config is NULL");
  config.vocab_size = kVocab;
  config.backend = 7;
  CHECK(lastmile_sampler_create(&config, &sampler, NULL, 0) == LASTMILE_STATUS_INVALID_ARGUMENT);
}

static void greedy_and_logprobs(void) {
  lastmile_sampler* sampler = make_sampler(2);
  lastmile_request requests[2];
  lastmile_request_init(&requests[0]);
  lastmile_request_init(&requests[1]);
  requests[0].temperature = 0.0f;
  requests[1].temperature = 0.0f;
  const int32_t bias_ids[] = {1};
  const float bias_values[] = {100.0f};
  requests[1].logit_bias_token_ids = bias_ids; /* row 1 now peaks at token 1 */
  requests[1].logit_bias_values = bias_values;
  requests[1].num_logit_bias = 1;
  lastmile_batch batch;
  lastmile_batch_init(&batch);
  batch.requests = requests;
  batch.num_requests = 2;
  batch.has_num_logprobs = 1;
  batch.num_logprobs = 2;
  const lastmile_logits logits = view(2);
  lastmile_output out;
  CHECK(lastmile_sampler_sample(sampler, &logits, &batch, &out) == LASTMILE_STATUS_OK);
  CHECK(out.num_rows == 2);
  CHECK(out.sampled_token_ids[0] == 5);
  CHECK(out.sampled_token_ids[1] == 1);
  CHECK(out.logprobs_width == 3);
  /* raw_logprobs: row 0 column 0 is token 5, then the top-2 of the unbiased row: 5, 4. */
  CHECK(out.logprobs_token_ids[0] == 5 && out.logprobs_token_ids[1] == 5 &&
        out.logprobs_token_ids[2] == 4);
  CHECK(fabsf(out.logprobs[1] - out.logprobs[0]) == 0.0f);
  CHECK(fabsf((out.logprobs[1] - out.logprobs[2]) - 5.0f) < 1e-5f);
  CHECK(out.logprobs_ranks[0] == 1);
  CHECK(out.logprobs_ranks[1] == 3); /* raw logprobs: token 1 (logit 2) sits below 8 and 3 */
  CHECK(out.token_logprobs_width == 0 && out.token_logprobs == NULL);
  CHECK(out.full_logprobs == NULL);
  CHECK_MESSAGE(lastmile_sampler_last_error(sampler), "");
  lastmile_sampler_destroy(sampler);
}

static void seeded_draws_repeat(void) {
  lastmile_sampler* sampler = make_sampler(1);
  lastmile_request request;
  lastmile_batch batch = one_request_batch(&request);
  request.temperature = 2.0f;
  request.has_seed = 1;
  request.seed = 42;
  const lastmile_logits logits = view(1);
  lastmile_output out;
  int32_t first[16];
  for (int round = 0; round < 2; ++round)
    for (uint64_t step = 0; step < 16; ++step) {
      request.has_step = 1;
      request.step = step;
      CHECK(lastmile_sampler_sample(sampler, &logits, &batch, &out) == LASTMILE_STATUS_OK);
      if (round == 0) first[step] = out.sampled_token_ids[0];
      CHECK(first[step] == out.sampled_token_ids[0]);
    }
  int differs = 0;
  for (int i = 1; i < 16; ++i) differs |= first[i] != first[0];
  CHECK(differs); /* temperature 2 over this row: 16 equal draws would be a broken stream */
  lastmile_sampler_destroy(sampler);
}

static void explicit_ids_and_full_matrix(void) {
  lastmile_sampler* sampler = make_sampler(1);
  lastmile_request request;
  lastmile_request_init(&request);
  request.temperature = 0.0f;
  const int32_t ids[] = {0, 7};
  request.has_logprob_token_ids = 1;
  request.logprob_token_ids = ids;
  request.num_logprob_token_ids = 2;
  lastmile_batch batch;
  lastmile_batch_init(&batch);
  batch.requests = &request;
  batch.num_requests = 1;
  batch.has_num_logprobs = 1;
  batch.num_logprobs = -1;
  batch.has_logprobs_mode = 1;
  batch.logprobs_mode = LASTMILE_LOGPROBS_MODE_RAW_LOGITS;
  const lastmile_logits logits = view(1);
  lastmile_output out;
  CHECK(lastmile_sampler_sample(sampler, &logits, &batch, &out) == LASTMILE_STATUS_OK);
  CHECK(out.token_logprobs_width == 3);
  CHECK(out.token_logprobs_token_ids[0] == 5 && out.token_logprobs_token_ids[2] == 7);
  CHECK(out.token_logprobs[0] == 9.0f && out.token_logprobs[1] == 0.0f);
  CHECK(out.token_logprobs_valid[1] == 1 && out.token_logprobs_ranks[0] == 1);
  CHECK(out.full_logprobs != NULL && out.full_logprobs[5] == 9.0f);
  CHECK(out.logprobs_width == 0);
  lastmile_sampler_destroy(sampler);
}

static void errors_name_request_and_field_and_stay_in_their_handle(void) {
  lastmile_sampler* a = make_sampler(1);
  lastmile_sampler* b = make_sampler(1);
  lastmile_request request;
  lastmile_batch batch = one_request_batch(&request);
  request.top_p = 1.5f;
  const lastmile_logits logits = view(1);
  lastmile_output out;
  CHECK(lastmile_sampler_sample(a, &logits, &batch, &out) == LASTMILE_STATUS_INVALID_ARGUMENT);
  CHECK_MESSAGE(lastmile_sampler_last_error(a), "request 0: top_p must be in (0, 1], got 1.5");
  CHECK_MESSAGE(lastmile_sampler_last_error(b), "");

  request.top_p = 1.0f;
  request.num_stop_token_ids = 2; /* with a NULL array */
  CHECK(lastmile_sampler_sample(a, &logits, &batch, &out) == LASTMILE_STATUS_INVALID_ARGUMENT);
  CHECK_MESSAGE(lastmile_sampler_last_error(a),
                "request 0: stop_token_ids is NULL but num_stop_token_ids is 2");
  request.num_stop_token_ids = 0;

  const float nan_row[kVocab] = {0, 1, NAN, 0, 0, 0, 0, 0};
  lastmile_logits bad = {nan_row, LASTMILE_DTYPE_F32, 1, kVocab, kVocab};
  CHECK(lastmile_sampler_sample(a, &bad, &batch, &out) == LASTMILE_STATUS_INVALID_LOGITS);
  CHECK_MESSAGE(lastmile_sampler_last_error(a), "row 0: logits contain NaN at token_id 2");
  bad.dtype = 9;
  CHECK(lastmile_sampler_sample(a, &bad, &batch, &out) == LASTMILE_STATUS_INVALID_LOGITS);
  CHECK_MESSAGE(lastmile_sampler_last_error(a),
                "logits: dtype must be a lastmile_dtype (0-2), got 9");
  CHECK(lastmile_sampler_sample(a, NULL, &batch, &out) == LASTMILE_STATUS_INVALID_ARGUMENT);
  CHECK_MESSAGE(lastmile_sampler_last_error(a), "logits is NULL");
  CHECK(lastmile_sampler_sample(NULL, &logits, &batch, &out) == LASTMILE_STATUS_INVALID_ARGUMENT);

  /* A good call clears the handle's message. */
  CHECK(lastmile_sampler_sample(a, &logits, &batch, &out) == LASTMILE_STATUS_OK);
  CHECK_MESSAGE(lastmile_sampler_last_error(a), "");
  lastmile_sampler_destroy(a);
  lastmile_sampler_destroy(b);
  lastmile_sampler_destroy(NULL);
}

static void bad_words_in_offsets_form(void) {
  lastmile_sampler* sampler = make_sampler(1);
  lastmile_request request;
  lastmile_request_init(&request);
  request.temperature = 0.0f;
  /* Two sequences: [3, 5] bans 5 after a history ending in 3; [2] bans 2 outright. */
  const int32_t words[] = {3, 5, 2};
  const int64_t offsets[] = {0, 2, 3};
  const int32_t output[] = {3};
  request.bad_words_token_ids = words;
  request.bad_words_offsets = offsets;
  request.num_bad_words = 2;
  request.output_token_ids = output;
  request.num_output_token_ids = 1;
  lastmile_batch batch;
  lastmile_batch_init(&batch);
  batch.requests = &request;
  batch.num_requests = 1;
  const lastmile_logits logits = view(1);
  lastmile_output out;
  CHECK(lastmile_sampler_sample(sampler, &logits, &batch, &out) == LASTMILE_STATUS_OK);
  CHECK(out.sampled_token_ids[0] == 4); /* 5 banned; 4 is next */
  const int64_t falling[] = {0, 2, 1};
  request.bad_words_offsets = falling;
  CHECK(lastmile_sampler_sample(sampler, &logits, &batch, &out) ==
        LASTMILE_STATUS_INVALID_ARGUMENT);
  CHECK_MESSAGE(lastmile_sampler_last_error(sampler),
                "request 0: bad_words_offsets must not decrease, got 1 after 2 at index 2");
  lastmile_sampler_destroy(sampler);
}

/* One sample call that must fail with INVALID_ARGUMENT, leaving `message` in the handle. */
static void expect_invalid_argument(lastmile_sampler* sampler, const lastmile_logits* logits,
                                    const lastmile_batch* batch, const char* message) {
  lastmile_output out;
  CHECK(lastmile_sampler_sample(sampler, logits, batch, &out) == LASTMILE_STATUS_INVALID_ARGUMENT);
  CHECK_MESSAGE(lastmile_sampler_last_error(sampler), message);
}

/* Counts past what an array can hold are refused by name before anything is copied or sized
 * (2^62 int32s would wrap the pointer range to nothing; 2^62 requests would be resized for). */
static void absurd_counts_name_their_field(void) {
  lastmile_sampler* sampler = make_sampler(1);
  lastmile_request request;
  lastmile_batch batch = one_request_batch(&request);
  const lastmile_logits logits = view(1);
  lastmile_output out;
  const int64_t huge = (int64_t)1 << 62;
  const int32_t ids[] = {1, 2, 3};

  request.stop_token_ids = ids;
  request.num_stop_token_ids = huge;
  expect_invalid_argument(
      sampler, &logits, &batch,
      "request 0: num_stop_token_ids is 4611686018427387904, past what an array can "
      "hold");
  request.num_stop_token_ids = 0;

  request.has_logprob_token_ids = 1;
  request.logprob_token_ids = ids;
  request.num_logprob_token_ids = huge;
  expect_invalid_argument(sampler, &logits, &batch,
                          "request 0: logprob_token_ids must hold at most 128 ids, got "
                          "4611686018427387904");
  request.has_logprob_token_ids = 0;

  const int64_t offsets[] = {0, 1, 3};
  request.bad_words_offsets = offsets;
  request.num_bad_words = 2;
  expect_invalid_argument(sampler, &logits, &batch,
                          "request 0: bad_words_token_ids is NULL but bad_words_offsets[1] is 1");
  const int64_t far[] = {0, huge};
  request.bad_words_token_ids = ids;
  request.bad_words_offsets = far;
  request.num_bad_words = 1;
  expect_invalid_argument(
      sampler, &logits, &batch,
      "request 0: bad_words_offsets[1] is 4611686018427387904, past what an array can "
      "hold");
  request.num_bad_words = huge;
  expect_invalid_argument(
      sampler, &logits, &batch,
      "request 0: num_bad_words is 4611686018427387904, past what an array can hold");
  request.num_bad_words = 0;

  const int32_t bias_ids[] = {1};
  const float bias_values[] = {1.0f};
  request.logit_bias_token_ids = bias_ids;
  request.logit_bias_values = bias_values;
  request.num_logit_bias = ((int64_t)1 << 61) - 1; /* fits int32 arrays, not the pairs made */
  expect_invalid_argument(
      sampler, &logits, &batch,
      "request 0: num_logit_bias is 2305843009213693951, past what an array can hold");
  request.num_logit_bias = 0;
  request.num_bad_words = (int64_t)1 << 59; /* fits int64 offsets, not the vectors made */
  expect_invalid_argument(
      sampler, &logits, &batch,
      "request 0: num_bad_words is 576460752303423488, past what an array can hold");
  request.num_bad_words = 0;

  batch.num_requests = huge;
  expect_invalid_argument(
      sampler, &logits, &batch,
      "batch: num_requests must be at most max_batch = 1, got 4611686018427387904");
  batch.num_requests = 1;
  CHECK(lastmile_sampler_sample(sampler, &logits, &batch, &out) == LASTMILE_STATUS_OK);
  lastmile_sampler_destroy(sampler);
}

static void request_batch_keeps_state(void) {
  lastmile_sampler_config config;
  lastmile_sampler_config_init(&config);
  config.vocab_size = kVocab;
  config.max_batch = 2;
  lastmile_request_batch* batch = NULL;
  CHECK(lastmile_request_batch_create(&config, &batch, NULL, 0) == LASTMILE_STATUS_OK);
  lastmile_request greedy;
  lastmile_request_init(&greedy);
  greedy.temperature = 0.0f;
  greedy.frequency_penalty = 2.0f; /* each repeat costs 2: row 0's peak (9 vs 4) flips after 3 */
  CHECK(lastmile_request_batch_add(batch, "a", &greedy) == LASTMILE_STATUS_OK);
  CHECK(lastmile_request_batch_add(batch, "a", &greedy) == LASTMILE_STATUS_INVALID_ARGUMENT);
  CHECK_MESSAGE(lastmile_request_batch_last_error(batch),
                "request 'a': request_id is already in the batch");
  CHECK(lastmile_request_batch_size(batch) == 1);
  const lastmile_logits logits = view(1);
  lastmile_output out;
  int32_t tokens[4];
  for (int step = 0; step < 4; ++step) {
    CHECK(lastmile_request_batch_step(batch, &logits, &out) == LASTMILE_STATUS_OK);
    tokens[step] = out.sampled_token_ids[0];
  }
  CHECK(tokens[0] == 5 && tokens[1] == 5 && tokens[2] == 5 && tokens[3] == 4);
  const int32_t* history = NULL;
  int64_t length = 0;
  CHECK(lastmile_request_batch_output_token_ids(batch, "a", &history, &length) ==
        LASTMILE_STATUS_OK);
  CHECK(length == 4 && history[3] == 4);

  lastmile_request second;
  lastmile_request_init(&second);
  second.temperature = 0.0f;
  CHECK(lastmile_request_batch_add(batch, "b", &second) == LASTMILE_STATUS_OK);
  const char* order[] = {"b", "a"};
  CHECK(lastmile_request_batch_reorder(batch, order, (int64_t)1 << 62) ==
        LASTMILE_STATUS_INVALID_ARGUMENT);
  CHECK_MESSAGE(lastmile_request_batch_last_error(batch),
                "reorder: expected 2 request ids, got 4611686018427387904");
  CHECK(lastmile_request_batch_reorder(batch, order, 2) == LASTMILE_STATUS_OK);
  const char* first = NULL;
  CHECK(lastmile_request_batch_request_id(batch, 0, &first) == LASTMILE_STATUS_OK);
  CHECK_MESSAGE(first, "b");
  CHECK(lastmile_request_batch_remove(batch, "zzz") == LASTMILE_STATUS_INVALID_ARGUMENT);
  CHECK_MESSAGE(lastmile_request_batch_last_error(batch),
                "request 'zzz': no such request_id in the batch");
  CHECK(lastmile_request_batch_remove(batch, "b") == LASTMILE_STATUS_OK);
  CHECK(lastmile_request_batch_add_reserved(batch, "r", &second, -1) ==
        LASTMILE_STATUS_INVALID_ARGUMENT);
  CHECK_MESSAGE(lastmile_request_batch_last_error(batch),
                "request 'r': max_output_tokens must be in [0, 2147483647], got -1");
  CHECK(lastmile_request_batch_add_reserved(batch, "r", &second, 64) == LASTMILE_STATUS_OK);
  const lastmile_logits two_rows = view(2);
  CHECK(lastmile_request_batch_step(batch, &two_rows, &out) == LASTMILE_STATUS_OK);
  CHECK(out.num_rows == 2 && out.sampled_token_ids[1] == 2); /* "r" is row 1: its peak */
  CHECK(lastmile_request_batch_remove(batch, "r") == LASTMILE_STATUS_OK);
  second.num_output_token_ids = 1;
  CHECK(lastmile_request_batch_add(batch, "c", &second) == LASTMILE_STATUS_INVALID_ARGUMENT);
  CHECK(lastmile_request_batch_size(NULL) == -1);
  lastmile_request_batch_destroy(batch);
}

int main(void) {
  CHECK_MESSAGE(lastmile_version(), "0.1.0");
  create_reports_bad_config_in_the_callers_buffer();
  greedy_and_logprobs();
  seeded_draws_repeat();
  explicit_ids_and_full_matrix();
  errors_name_request_and_field_and_stay_in_their_handle();
  bad_words_in_offsets_form();
  absurd_counts_name_their_field();
  request_batch_keeps_state();
  if (failures) {
    fprintf(stderr, "capi_test: %d checks failed\n", failures);
    return 1;
  }
  printf("capi_test: all checks passed\n");
  return 0;
}
