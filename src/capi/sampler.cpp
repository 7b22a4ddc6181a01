// lastmile — the C API's stateless sampler: lastmile_sampler over lastmile::Sampler.
#include "lastmile/sampler.hpp"

#include <string>

#include "capi/convert.hpp"
#include "capi/handle_error.hpp"
#include "lastmile/lastmile.h"
#include "lastmile/version.hpp"

struct lastmile_sampler {
  lastmile::Sampler sampler;
  lastmile::Batch batch;   // refilled in place each call: steady-state calls do not allocate
  std::string last_error;  // this handle's only error state
};

using lastmile::capi::guarded;
using lastmile::capi::require;

extern "C" {

void lastmile_sampler_config_init(lastmile_sampler_config* config) {
  if (config == nullptr) return;
  *config = {};
  config->max_batch = 1;
  config->logprobs_mode = LASTMILE_LOGPROBS_MODE_RAW_LOGPROBS;
  config->backend = LASTMILE_BACKEND_AUTOMATIC;
}

void lastmile_request_init(lastmile_request* request) {
  if (request == nullptr) return;
  *request = {};
  const lastmile::RequestParams neutral;
  request->temperature = neutral.temperature;
  request->top_k = neutral.top_k;
  request->top_p = neutral.top_p;
  request->min_p = neutral.min_p;
  request->presence_penalty = neutral.presence_penalty;
  request->frequency_penalty = neutral.frequency_penalty;
  request->repetition_penalty = neutral.repetition_penalty;
}

void lastmile_batch_init(lastmile_batch* batch) {
  if (batch != nullptr) *batch = {};
}

const char* lastmile_version(void) { return lastmile::kVersion; }

lastmile_status lastmile_sampler_create(const lastmile_sampler_config* config,
                                        lastmile_sampler** sampler, char* error,
                                        size_t error_size) {
  std::string message;
  const lastmile_status status = guarded(message, [&] {
    require(sampler, "sampler");
    *sampler = nullptr;
    *sampler = new lastmile_sampler{lastmile::Sampler(lastmile::capi::to_config(config)), {}, {}};
  });
  lastmile::capi::write_error(error, error_size, message.c_str());
  return status;
}

void lastmile_sampler_destroy(lastmile_sampler* sampler) { delete sampler; }

const char* lastmile_sampler_last_error(const lastmile_sampler* sampler) {
  return sampler == nullptr ? "sampler is NULL" : sampler->last_error.c_str();
}

lastmile_status lastmile_sampler_sample(lastmile_sampler* sampler, const lastmile_logits* logits,
                                        const lastmile_batch* batch, lastmile_output* output) {
  if (sampler == nullptr) return LASTMILE_STATUS_INVALID_ARGUMENT;
  return guarded(sampler->last_error, [&] {
    require(output, "output");
    const lastmile::LogitsView view = lastmile::capi::to_logits_view(logits);
    lastmile::capi::fill_batch(batch, sampler->sampler.config().max_batch, sampler->batch);
    *output = lastmile::capi::to_c_output(sampler->sampler.sample(view, sampler->batch));
  });
}

}  // extern "C"
