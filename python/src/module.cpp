// lastmile Python — the nanobind module lastmile._lastmile. The package (python/lastmile) wraps it
// in documented classes; this file only binds: conversion lives in logits.cpp, requests.cpp and
// results.cpp. Every call converts its inputs with the GIL held, releases the GIL while sampling
// (through GilReleased: exit_gate.hpp), and copies the results out with the GIL held again.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <mutex>
#include <string>
#include <vector>

#include "exit_gate.hpp"
#include "lastmile/error.hpp"
#include "lastmile/lastmile.hpp"
#include "lastmile/version.hpp"
#include "logits.hpp"
#include "requests.hpp"
#include "results.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace lastmile::python {
namespace {

LogprobsMode parse_mode(const std::string& mode) {
  if (mode == "raw_logprobs") return LogprobsMode::raw_logprobs;
  if (mode == "raw_logits") return LogprobsMode::raw_logits;
  if (mode == "processed_logprobs") return LogprobsMode::processed_logprobs;
  if (mode == "processed_logits") return LogprobsMode::processed_logits;
  throw InvalidArgument(
      "logprobs_mode must be raw_logprobs, raw_logits, processed_logprobs or "
      "processed_logits, got '" +
      mode + "'");
}

BackendKind parse_backend(const std::string& backend) {
  if (backend == "automatic") return BackendKind::automatic;
  if (backend == "cpu") return BackendKind::cpu;
  if (backend == "reference") return BackendKind::reference;
  throw InvalidArgument("backend must be automatic, cpu or reference, got '" + backend + "'");
}

SamplerConfig make_config(int64_t vocab_size, int64_t max_batch, const std::string& logprobs_mode,
                          int threads, uint64_t seed, const std::string& backend) {
  SamplerConfig config;
  config.vocab_size = vocab_size;
  config.max_batch = max_batch;
  config.logprobs_mode = parse_mode(logprobs_mode);
  config.threads = threads;
  config.seed = seed;
  config.backend = parse_backend(backend);
  return config;
}

// One sampler per object; the mutex makes two Python threads sharing it take turns (the GIL is
// released while sampling, so without it they would race on the workspace).
class PySampler {
 public:
  PySampler(int64_t vocab_size, int64_t max_batch, const std::string& logprobs_mode, int threads,
            uint64_t seed, const std::string& backend)
      : sampler_(make_config(vocab_size, max_batch, logprobs_mode, threads, seed, backend)) {}

  nb::dict sample(const AnyArray& logits, nb::handle requests, bool predict_bonus_token,
                  const std::optional<std::string>& logprobs_mode,
                  const std::optional<int32_t>& num_logprobs,
                  const std::optional<std::string>& dtype) {
    const LogitsView view = logits_view(logits, dtype);
    Batch batch;
    Histories histories;
    read_requests(requests, batch, histories);
    batch.predict_bonus_token = predict_bonus_token;
    batch.num_logprobs = num_logprobs;
    if (logprobs_mode) batch.logprobs_mode = parse_mode(*logprobs_mode);
    std::unique_lock lock(mutex_, std::defer_lock);
    const SamplerOutput* out = nullptr;
    {
      GilReleased release;
      lock.lock();
      out = &sampler_.sample(view, batch);
    }
    return to_python(*out, sampler_.config().vocab_size);  // still under the lock
  }

  std::string backend_name() const { return sampler_.backend_name(); }
  int64_t vocab_size() const { return sampler_.config().vocab_size; }
  int64_t max_batch() const { return sampler_.config().max_batch; }

 private:
  Sampler sampler_;
  std::mutex mutex_;
};

// The same rule as PySampler: the mutex is only ever taken with the GIL released (taking it
// while holding the GIL could deadlock against a step() that holds it and waits for the GIL).
// Methods with only C++ arguments are bound with a GilReleased call guard.
class PyRequestBatch {
 public:
  PyRequestBatch(int64_t vocab_size, int64_t max_batch, const std::string& logprobs_mode,
                 int threads, uint64_t seed, const std::string& backend)
      : vocab_size_(vocab_size),
        batch_(make_config(vocab_size, max_batch, logprobs_mode, threads, seed, backend)) {}

  void add(const std::string& id, nb::handle params, nb::handle prompt, int64_t max_output_tokens) {
    const std::string who = "request '" + id + "'";
    BatchRequest request;
    std::vector<TokenId> params_prompt, output, spec;
    read_request(params, who, request, params_prompt, output, spec);
    if (!output.empty() || !spec.empty() || request.step)
      throw InvalidArgument(who +
                            ": output_token_ids, spec_token_ids and step are kept by the batch");
    const std::vector<TokenId> ids =
        prompt.is_none() ? params_prompt : read_token_ids(prompt, who, "prompt_token_ids");
    GilReleased release;
    std::lock_guard lock(mutex_);
    batch_.add(id, request.params, ids, max_output_tokens);
  }
  void remove(const std::string& id) {
    std::lock_guard lock(mutex_);
    batch_.remove(id);
  }
  void reorder(const std::vector<std::string>& ids) {
    std::lock_guard lock(mutex_);
    batch_.reorder(ids);
  }
  nb::dict step(const AnyArray& logits, const std::optional<std::string>& dtype) {
    const LogitsView view = logits_view(logits, dtype);
    std::unique_lock lock(mutex_, std::defer_lock);
    const SamplerOutput* out = nullptr;
    {
      GilReleased release;
      lock.lock();
      out = &batch_.step(view);
    }
    return to_python(*out, vocab_size_);  // the lock is still held: the output stays valid
  }
  std::vector<std::string> request_ids() {
    std::lock_guard lock(mutex_);
    std::vector<std::string> ids;
    for (int64_t i = 0; i < batch_.size(); ++i) ids.push_back(batch_.request_id(i));
    return ids;
  }
  std::vector<TokenId> output_token_ids(const std::string& id) {
    std::lock_guard lock(mutex_);
    const auto ids = batch_.output_token_ids(id);
    return {ids.begin(), ids.end()};
  }
  int64_t size() {
    std::lock_guard lock(mutex_);
    return batch_.size();
  }
  std::string backend_name() const { return batch_.backend_name(); }

 private:
  int64_t vocab_size_;
  RequestBatch batch_;
  std::mutex mutex_;
};

}  // namespace
}  // namespace lastmile::python

NB_MODULE(_lastmile, m) {
  using namespace lastmile;
  using namespace lastmile::python;
  m.attr("__version__") = kVersion;
  m.attr("MAX_THREADS") = SamplerConfig::kMaxThreads;

  // ErrorCode -> Python exception, 1:1 (STYLE §7); the package re-exports the classes. The
  // types live as long as the interpreter: plain references, never released at exit.
  static PyObject* const error =
      PyErr_NewException("lastmile._lastmile.Error", PyExc_RuntimeError, nullptr);
  static PyObject* const invalid_argument = PyErr_NewException(
      "lastmile._lastmile.InvalidArgument",
      nb::make_tuple(nb::handle(error), nb::handle(PyExc_ValueError)).ptr(), nullptr);
  static PyObject* const invalid_logits =
      PyErr_NewException("lastmile._lastmile.InvalidLogits", invalid_argument, nullptr);
  static PyObject* const unsupported = PyErr_NewException(
      "lastmile._lastmile.Unsupported",
      nb::make_tuple(nb::handle(error), nb::handle(PyExc_NotImplementedError)).ptr(), nullptr);
  m.attr("Error") = nb::handle(error);
  m.attr("InvalidArgument") = nb::handle(invalid_argument);
  m.attr("InvalidLogits") = nb::handle(invalid_logits);
  m.attr("Unsupported") = nb::handle(unsupported);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      PyObject* type = error;
      switch (e.code()) {
        case ErrorCode::invalid_argument:
          type = invalid_argument;
          break;
        case ErrorCode::invalid_logits:
          type = invalid_logits;
          break;
        case ErrorCode::unsupported:
          type = unsupported;
          break;
        case ErrorCode::out_of_memory:
          type = PyExc_MemoryError;
          break;
        case ErrorCode::internal:
          break;
      }
      PyErr_SetString(type, e.what());
    }
  });

  nb::class_<PySampler>(m, "Sampler")
      .def(nb::init<int64_t, int64_t, const std::string&, int, uint64_t, const std::string&>(),
           "vocab_size"_a, "max_batch"_a, "logprobs_mode"_a, "threads"_a, "seed"_a, "backend"_a)
      .def("sample", &PySampler::sample, "logits"_a, "requests"_a, "predict_bonus_token"_a,
           "logprobs_mode"_a.none(), "num_logprobs"_a.none(), "dtype"_a.none())
      .def_prop_ro("backend_name", &PySampler::backend_name)
      .def_prop_ro("vocab_size", &PySampler::vocab_size)
      .def_prop_ro("max_batch", &PySampler::max_batch);

  nb::class_<PyRequestBatch>(m, "RequestBatch")
      .def(nb::init<int64_t, int64_t, const std::string&, int, uint64_t, const std::string&>(),
           "vocab_size"_a, "max_batch"_a, "logprobs_mode"_a, "threads"_a, "seed"_a, "backend"_a)
      .def("add", &PyRequestBatch::add, "request_id"_a, "params"_a, "prompt_token_ids"_a.none(),
           "max_output_tokens"_a = 0)
      .def("remove", &PyRequestBatch::remove, "request_id"_a, nb::call_guard<GilReleased>())
      .def("reorder", &PyRequestBatch::reorder, "request_ids"_a, nb::call_guard<GilReleased>())
      .def("step", &PyRequestBatch::step, "logits"_a, "dtype"_a.none())
      .def("request_ids", &PyRequestBatch::request_ids, nb::call_guard<GilReleased>())
      .def("output_token_ids", &PyRequestBatch::output_token_ids, "request_id"_a,
           nb::call_guard<GilReleased>())
      .def("size", &PyRequestBatch::size, nb::call_guard<GilReleased>())
      .def_prop_ro("backend_name", &PyRequestBatch::backend_name);

  // Registered with atexit by the package (exit_gate.hpp); waits with the GIL released.
  m.def(
      "_close_for_exit", [] { exit_gate().close_and_wait(); },
      nb::call_guard<nb::gil_scoped_release>());

  // The address the sampler reads for these logits: tests check that no copy is made.
  m.def(
      "logits_address",
      [](const AnyArray& logits, const std::optional<std::string>& dtype) {
        return reinterpret_cast<uintptr_t>(logits_view(logits, dtype).data);
      },
      "logits"_a, "dtype"_a.none() = nb::none());
}
