// lastmile — the C API's stateful batch: lastmile_request_batch over lastmile::RequestBatch.
#include "lastmile/request_batch.hpp"

#include <string>
#include <vector>

#include "capi/convert.hpp"
#include "capi/handle_error.hpp"
#include "lastmile/error.hpp"
#include "lastmile/lastmile.h"

struct lastmile_request_batch {
  lastmile::RequestBatch batch;
  lastmile::BatchRequest request;  // add()'s scratch
  std::vector<std::string> ids;    // reorder()'s scratch
  std::string last_error;
};

using lastmile::InvalidArgument;
using lastmile::capi::guarded;
using lastmile::capi::require;

extern "C" {

lastmile_status lastmile_request_batch_create(const lastmile_sampler_config* config,
                                              lastmile_request_batch** batch, char* error,
                                              size_t error_size) {
  std::string message;
  const lastmile_status status = guarded(message, [&] {
    require(batch, "batch");
    *batch = nullptr;
    *batch = new lastmile_request_batch{
        lastmile::RequestBatch(lastmile::capi::to_config(config)), {}, {}, {}};
  });
  lastmile::capi::write_error(error, error_size, message.c_str());
  return status;
}

void lastmile_request_batch_destroy(lastmile_request_batch* batch) { delete batch; }

const char* lastmile_request_batch_last_error(const lastmile_request_batch* batch) {
  return batch == nullptr ? "batch is NULL" : batch->last_error.c_str();
}

lastmile_status lastmile_request_batch_add(lastmile_request_batch* batch, const char* request_id,
                                           const lastmile_request* request) {
  return lastmile_request_batch_add_reserved(batch, request_id, request, 0);
}

lastmile_status lastmile_request_batch_add_reserved(lastmile_request_batch* batch,
                                                    const char* request_id,
                                                    const lastmile_request* request,
                                                    int64_t max_output_tokens) {
  if (batch == nullptr) return LASTMILE_STATUS_INVALID_ARGUMENT;
  return guarded(batch->last_error, [&] {
    require(request_id, "request_id");
    require(request, "request");
    const std::string who = "request '" + std::string(request_id) + "'";
    if (request->num_output_token_ids != 0 || request->num_spec_token_ids != 0 || request->has_step)
      throw InvalidArgument(who +
                            ": output_token_ids, spec_token_ids and step must be empty on add: "
                            "the batch keeps them");
    lastmile::capi::fill_request(who, *request, batch->request);
    batch->batch.add(request_id, batch->request.params, batch->request.prompt_token_ids,
                     max_output_tokens);
  });
}

lastmile_status lastmile_request_batch_remove(lastmile_request_batch* batch,
                                              const char* request_id) {
  if (batch == nullptr) return LASTMILE_STATUS_INVALID_ARGUMENT;
  return guarded(batch->last_error, [&] {
    require(request_id, "request_id");
    batch->batch.remove(request_id);
  });
}

lastmile_status lastmile_request_batch_reorder(lastmile_request_batch* batch,
                                               const char* const* request_ids,
                                               int64_t num_request_ids) {
  if (batch == nullptr) return LASTMILE_STATUS_INVALID_ARGUMENT;
  return guarded(batch->last_error, [&] {
    if (num_request_ids < 0)
      throw InvalidArgument("reorder: num_request_ids must be >= 0, got " +
                            std::to_string(num_request_ids));
    if (num_request_ids != batch->batch.size())  // before the ids are sized for
      throw InvalidArgument("reorder: expected " + std::to_string(batch->batch.size()) +
                            " request ids, got " + std::to_string(num_request_ids));
    if (num_request_ids > 0) require(request_ids, "request_ids");
    batch->ids.resize(static_cast<size_t>(num_request_ids));
    for (int64_t i = 0; i < num_request_ids; ++i) {
      if (request_ids[i] == nullptr)
        throw InvalidArgument("reorder: request_ids[" + std::to_string(i) + "] is NULL");
      batch->ids[static_cast<size_t>(i)] = request_ids[i];
    }
    batch->batch.reorder(batch->ids);
  });
}

lastmile_status lastmile_request_batch_step(lastmile_request_batch* batch,
                                            const lastmile_logits* logits,
                                            lastmile_output* output) {
  if (batch == nullptr) return LASTMILE_STATUS_INVALID_ARGUMENT;
  return guarded(batch->last_error, [&] {
    require(output, "output");
    const lastmile::LogitsView view = lastmile::capi::to_logits_view(logits);
    *output = lastmile::capi::to_c_output(batch->batch.step(view));
  });
}

int64_t lastmile_request_batch_size(const lastmile_request_batch* batch) {
  return batch == nullptr ? -1 : batch->batch.size();
}

lastmile_status lastmile_request_batch_request_id(lastmile_request_batch* batch, int64_t row,
                                                  const char** request_id) {
  if (batch == nullptr) return LASTMILE_STATUS_INVALID_ARGUMENT;
  return guarded(batch->last_error, [&] {
    require(request_id, "request_id");
    *request_id = batch->batch.request_id(row).c_str();
  });
}

lastmile_status lastmile_request_batch_output_token_ids(lastmile_request_batch* batch,
                                                        const char* request_id,
                                                        const int32_t** token_ids,
                                                        int64_t* num_token_ids) {
  if (batch == nullptr) return LASTMILE_STATUS_INVALID_ARGUMENT;
  return guarded(batch->last_error, [&] {
    require(request_id, "request_id");
    require(token_ids, "token_ids");
    require(num_token_ids, "num_token_ids");
    const auto ids = batch->batch.output_token_ids(request_id);
    *token_ids = ids.data();
    *num_token_ids = static_cast<int64_t>(ids.size());
  });
}

}  // extern "C"
