/* The C API: a greedy row and a seeded top-p row over a 6-token vocabulary, with top-2 logprobs. */
#include <lastmile/lastmile.h>
#include <stdio.h>

int main(void) {
  const float logits[2][6] = {{0, 1, 0.5f, -1, 3, 2}, {1, 4, 0, 0, 2, -2}};
  lastmile_sampler_config config;
  lastmile_sampler_config_init(&config);
  config.vocab_size = 6;
  config.max_batch = 2;
  lastmile_sampler* sampler = NULL;
  char error[256];
  if (lastmile_sampler_create(&config, &sampler, error, sizeof error) != LASTMILE_STATUS_OK) {
    fprintf(stderr, "%s\n", error);
    return 1;
  }
  lastmile_request requests[2];
  lastmile_request_init(&requests[0]);
  lastmile_request_init(&requests[1]);
  requests[0].temperature = 0.0f;
  requests[1].top_p = 0.9f;
  requests[1].has_seed = 1;
  requests[1].seed = 42;
  lastmile_batch batch;
  lastmile_batch_init(&batch);
  batch.requests = requests;
  batch.num_requests = 2;
  batch.has_num_logprobs = 1;
  batch.num_logprobs = 2;
  const lastmile_logits view = {logits, LASTMILE_DTYPE_F32, 2, 6, 6};
  lastmile_output out;
  if (lastmile_sampler_sample(sampler, &view, &batch, &out) != LASTMILE_STATUS_OK) {
    fprintf(stderr, "%s\n", lastmile_sampler_last_error(sampler));
    return 1;
  }
  for (int64_t row = 0; row < out.num_rows; ++row) {
    const int64_t at = row * out.logprobs_width;
    printf("row %lld: token %d (logprob %.3f, rank %lld), top-2: %d %d\n", (long long)row,
           out.sampled_token_ids[row], out.logprobs[at], (long long)out.logprobs_ranks[row],
           out.logprobs_token_ids[at + 1], out.logprobs_token_ids[at + 2]);
  }
  requests[1].top_p = 1.5f; /* errors name the request and the field */
  if (lastmile_sampler_sample(sampler, &view, &batch, &out) == LASTMILE_STATUS_INVALID_ARGUMENT)
    printf("error: %s\n", lastmile_sampler_last_error(sampler));
  lastmile_sampler_destroy(sampler);
  return 0;
}
