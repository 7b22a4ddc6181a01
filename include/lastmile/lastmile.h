/* lastmile — the C API (C11): the same sampler as lastmile.hpp behind opaque handles.
 *
 * Every function that can fail returns a lastmile_status. A handle keeps the message of its last
 * status-returning call, "" once one succeeds (lastmile_sampler_last_error,
 * lastmile_request_batch_last_error): read it before the next call. There is no global error state,
 * so threads with their own handles never see each other's errors. No C++ exception crosses this
 * boundary. A handle is used by one thread at a time. After fork() a child's copy of a handle
 * samples on the calling thread alone (its workers stayed in the parent), to the same results; fork
 * only while no thread is inside a call on it.
 *
 * Example:
 *   lastmile_sampler_config config;
 *   lastmile_sampler_config_init(&config);
 *   config.vocab_size = 32000;
 *   lastmile_sampler* sampler = NULL;
 *   char error[256];
 *   if (lastmile_sampler_create(&config, &sampler, error, sizeof error) != LASTMILE_STATUS_OK) ...
 *   lastmile_request request;
 *   lastmile_request_init(&request);
 *   request.top_p = 0.9f;
 *   lastmile_batch batch;
 *   lastmile_batch_init(&batch);
 *   batch.requests = &request;
 *   batch.num_requests = 1;
 *   lastmile_logits logits = {data, LASTMILE_DTYPE_F32, 1, 32000, 32000};
 *   lastmile_output out;
 *   if (lastmile_sampler_sample(sampler, &logits, &batch, &out) != LASTMILE_STATUS_OK)
 *     fprintf(stderr, "%s\n", lastmile_sampler_last_error(sampler));
 *   int32_t token = out.sampled_token_ids[0];
 *   lastmile_sampler_destroy(sampler);
 */
#ifndef LASTMILE_LASTMILE_H_
#define LASTMILE_LASTMILE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum lastmile_status {
  LASTMILE_STATUS_OK = 0,
  LASTMILE_STATUS_INVALID_ARGUMENT = 1, /* a bad config, request field, token id or handle */
  LASTMILE_STATUS_INVALID_LOGITS = 2,   /* logits of the wrong shape or dtype, or NaN / +inf */
  LASTMILE_STATUS_UNSUPPORTED = 3,      /* a valid request this build cannot serve */
  LASTMILE_STATUS_OUT_OF_MEMORY = 4,
  LASTMILE_STATUS_INTERNAL = 5, /* a bug in lastmile, or an exception from a logits processor */
} lastmile_status;

typedef enum lastmile_dtype {
  LASTMILE_DTYPE_F32 = 0,
  LASTMILE_DTYPE_F16 = 1,
  LASTMILE_DTYPE_BF16 = 2, /* bit patterns in uint16_t */
} lastmile_dtype;

typedef enum lastmile_logprobs_mode {
  LASTMILE_LOGPROBS_MODE_RAW_LOGPROBS = 0,
  LASTMILE_LOGPROBS_MODE_RAW_LOGITS = 1,
  LASTMILE_LOGPROBS_MODE_PROCESSED_LOGPROBS = 2,
  LASTMILE_LOGPROBS_MODE_PROCESSED_LOGITS = 3,
} lastmile_logprobs_mode;

typedef enum lastmile_backend {
  LASTMILE_BACKEND_AUTOMATIC = 0,
  LASTMILE_BACKEND_CPU = 1,
  LASTMILE_BACKEND_REFERENCE = 2,
} lastmile_backend;

/* As lastmile::SamplerConfig. lastmile_sampler_config_init sets the defaults. */
typedef struct lastmile_sampler_config {
  int64_t vocab_size;    /* logits width, >= 1 */
  int64_t max_batch;     /* rows per call, at most; default 1 */
  int32_t logprobs_mode; /* a lastmile_logprobs_mode; default raw_logprobs */
  int32_t threads;       /* 0: hardware concurrency; results never depend on it */
  uint64_t seed;         /* seeds of requests without their own */
  int32_t backend;       /* a lastmile_backend */
} lastmile_sampler_config;

/* One logits row's request: lastmile::RequestParams plus its histories. Arrays are read during
 * the call only. lastmile_request_init sets every field to its neutral value. */
typedef struct lastmile_request {
  float temperature; /* < 1e-5: greedy */
  int32_t top_k;
  float top_p;
  float min_p;
  float presence_penalty;
  float frequency_penalty;
  float repetition_penalty;
  const int32_t* logit_bias_token_ids; /* [num_logit_bias] */
  const float* logit_bias_values;      /* [num_logit_bias] */
  int64_t num_logit_bias;
  int32_t has_allowed_token_ids; /* 0: no whitelist */
  const int32_t* allowed_token_ids;
  int64_t num_allowed_token_ids;
  /* Sequence i is bad_words_token_ids[bad_words_offsets[i] .. bad_words_offsets[i + 1]). */
  const int32_t* bad_words_token_ids;
  const int64_t* bad_words_offsets; /* [num_bad_words + 1], starting at 0 */
  int64_t num_bad_words;
  int32_t min_tokens;
  const int32_t* stop_token_ids;
  int64_t num_stop_token_ids;
  int32_t has_seed;
  uint64_t seed;
  int32_t has_logprobs;
  int32_t logprobs; /* top-N count, -1 = vocab_size */
  int32_t has_logprob_token_ids;
  const int32_t* logprob_token_ids;
  int64_t num_logprob_token_ids;
  const int32_t* prompt_token_ids;
  int64_t num_prompt_token_ids;
  const int32_t* output_token_ids;
  int64_t num_output_token_ids;
  const int32_t* spec_token_ids;
  int64_t num_spec_token_ids;
  int32_t has_step; /* 0: the step is num_output_token_ids */
  uint64_t step;
} lastmile_request;

/* As lastmile::Batch: requests[i] describes logits row i. */
typedef struct lastmile_batch {
  const lastmile_request* requests;
  int64_t num_requests;
  int32_t has_num_logprobs; /* 0: the largest requested top-N, or none */
  int32_t num_logprobs;     /* -1: the full [rows, vocab] matrix */
  int32_t predict_bonus_token;
  int32_t has_logprobs_mode; /* 0: the sampler's mode */
  int32_t logprobs_mode;
} lastmile_batch;

typedef struct lastmile_logits {
  const void* data; /* aligned to the element's size: 4 bytes for f32, 2 for f16 / bf16 */
  int32_t dtype;    /* a lastmile_dtype */
  int64_t num_rows;
  int64_t vocab_size;
  int64_t row_stride; /* elements between row starts, >= vocab_size; 0: vocab_size (packed) */
} lastmile_logits;

/* What a sample or step returned. The pointers live in the handle until its next sample, step
 * or destroy. Absent blocks have width 0 and NULL pointers. */
typedef struct lastmile_output {
  int64_t num_rows;
  const int32_t* sampled_token_ids;  /* [num_rows] */
  int64_t logprobs_width;            /* top-N + 1; column 0 is the sampled token */
  const int32_t* logprobs_token_ids; /* [num_rows * logprobs_width] */
  const float* logprobs;             /* [num_rows * logprobs_width] */
  const int64_t* logprobs_ranks;     /* [num_rows] */
  int64_t token_logprobs_width;      /* 1 + the longest logprob_token_ids list */
  const int32_t* token_logprobs_token_ids;
  const float* token_logprobs;
  const uint8_t* token_logprobs_valid;
  const int64_t* token_logprobs_ranks;
  const float* full_logprobs; /* [num_rows * vocab_size] when num_logprobs == -1 */
} lastmile_output;

void lastmile_sampler_config_init(lastmile_sampler_config* config);
void lastmile_request_init(lastmile_request* request);
void lastmile_batch_init(lastmile_batch* batch);

/* "0.1.0" */
const char* lastmile_version(void);

/* The stateless sampler. On failure *sampler is NULL and, when error_size > 0, the message is
 * written to error (NUL-terminated, truncated to fit). */
typedef struct lastmile_sampler lastmile_sampler;
lastmile_status lastmile_sampler_create(const lastmile_sampler_config* config,
                                        lastmile_sampler** sampler, char* error, size_t error_size);
void lastmile_sampler_destroy(lastmile_sampler* sampler); /* NULL is a no-op */
/* The message of the last call on this handle if it failed; "" if it succeeded (or none yet). */
const char* lastmile_sampler_last_error(const lastmile_sampler* sampler);
lastmile_status lastmile_sampler_sample(lastmile_sampler* sampler, const lastmile_logits* logits,
                                        const lastmile_batch* batch, lastmile_output* output);

/* The stateful batch (lastmile::RequestBatch). */
typedef struct lastmile_request_batch lastmile_request_batch;
lastmile_status lastmile_request_batch_create(const lastmile_sampler_config* config,
                                              lastmile_request_batch** batch, char* error,
                                              size_t error_size);
void lastmile_request_batch_destroy(lastmile_request_batch* batch);
/* As lastmile_sampler_last_error. */
const char* lastmile_request_batch_last_error(const lastmile_request_batch* batch);
/* The request's prompt_token_ids are its prompt; its output, spec and step fields must be empty. */
lastmile_status lastmile_request_batch_add(lastmile_request_batch* batch, const char* request_id,
                                           const lastmile_request* request);
/* lastmile_request_batch_add, reserving room for max_output_tokens outputs (0 to 2^31 - 1): the
   request's first max_output_tokens steps allocate nothing for it. */
lastmile_status lastmile_request_batch_add_reserved(lastmile_request_batch* batch,
                                                    const char* request_id,
                                                    const lastmile_request* request,
                                                    int64_t max_output_tokens);
lastmile_status lastmile_request_batch_remove(lastmile_request_batch* batch,
                                              const char* request_id);
lastmile_status lastmile_request_batch_reorder(lastmile_request_batch* batch,
                                               const char* const* request_ids,
                                               int64_t num_request_ids);
lastmile_status lastmile_request_batch_step(lastmile_request_batch* batch,
                                            const lastmile_logits* logits, lastmile_output* output);
int64_t lastmile_request_batch_size(const lastmile_request_batch* batch); /* -1 for NULL */
/* *request_id lives until the batch changes. */
lastmile_status lastmile_request_batch_request_id(lastmile_request_batch* batch, int64_t row,
                                                  const char** request_id);
/* The tokens sampled for the request so far; *token_ids lives until the batch's next step,
 * remove, reorder or destroy. */
lastmile_status lastmile_request_batch_output_token_ids(lastmile_request_batch* batch,
                                                        const char* request_id,
                                                        const int32_t** token_ids,
                                                        int64_t* num_token_ids);

#ifdef __cplusplus
}
#endif

#endif /* LASTMILE_LASTMILE_H_ */
