// lastmile CLI — `lastmile bench`: each scenario (bench/scenarios) timed three ways on the same
// logits in one run: lastmile's Sampler ("ours"), the memory roofline (one SIMD max-reduce read
// over the rows) and the full-sort baseline (vLLM's CPU path re-told in C++). Medians; ours and
// the roofline timed in turns, so their ratio compares the same moments of a shared machine.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "commands.hpp"
#include "cpu/kernels.hpp"
#include "full_sort_baseline.hpp"
#include "lastmile/lastmile.hpp"
#include "reference/float16.hpp"
#include "report.hpp"
#include "scenarios.hpp"
#include "threading/thread_pool.hpp"
#include "timing.hpp"

namespace lastmile::cli {
namespace {

using bench::Result;
using bench::Scenario;

// What was timed must be right, or its figures mean nothing: every token of ours in the
// vocabulary and on a finite logit, and a greedy row's the baseline's (its argmax by another
// road; random rows draw by other random numbers). `baseline`: the baseline's tokens, as floats
// (exact below 2^24). Throws naming the scenario and row.
void check_tokens(const Scenario& s, const LogitsView& view, const Batch& batch,
                  const SamplerOutput& ours, const std::vector<float>& baseline) {
  for (int64_t r = 0; r < s.batch; ++r) {
    const TokenId token = ours.sampled_token_ids[static_cast<size_t>(r)];
    const std::string where = s.name + " row " + std::to_string(r) + ": token ";
    if (token < 0 || token >= s.vocab)
      throw Error(ErrorCode::internal, where + std::to_string(token) + " outside the vocabulary");
    const size_t at = static_cast<size_t>(r * s.vocab + token);
    const float logit = s.dtype == DType::f32
                            ? static_cast<const float*>(view.data)[at]
                            : detail::bf16_to_f32(static_cast<const uint16_t*>(view.data)[at]);
    if (!std::isfinite(logit))
      throw Error(ErrorCode::internal, where + std::to_string(token) + " has logit -inf");
    const auto expected = static_cast<TokenId>(baseline[static_cast<size_t>(r)]);
    if (batch.requests[static_cast<size_t>(r)].params.is_greedy() && token != expected)
      throw Error(ErrorCode::internal, where + std::to_string(token) +
                                           " is greedy, and the baseline's argmax is " +
                                           std::to_string(expected));
  }
}

// The scenario's logits, in as many copies as fresh_rows asks (else one), and the copy each call
// in turns reads: the next one.
class ScenarioLogits {
 public:
  explicit ScenarioLogits(const Scenario& s)
      : bytes_(bench::make_logits(s)),
        batch_bytes_(bytes_.size()),
        copies_(s.fresh_rows
                    ? std::max<size_t>(2, (bench::kFreshBytes + batch_bytes_ - 1) / batch_bytes_)
                    : 1),
        rows_{nullptr, s.batch, s.vocab, s.vocab, s.dtype} {
    bytes_.resize(batch_bytes_ * copies_);
    for (size_t c = 1; c < copies_; ++c)
      std::memcpy(bytes_.data() + c * batch_bytes_, bytes_.data(), batch_bytes_);
  }
  LogitsView first() const { return copy(0); }
  LogitsView next() {
    next_ = (next_ + 1) % copies_;
    return copy(next_);
  }

 private:
  LogitsView copy(size_t c) const {
    LogitsView v = rows_;
    v.data = bytes_.data() + c * batch_bytes_;
    return v;
  }
  std::vector<unsigned char> bytes_;
  size_t batch_bytes_, copies_;
  LogitsView rows_;  // the batch's shape; data set per copy
  size_t next_ = 0;
};

// The scenario's requests, each seeded by its row; their histories live in `histories`.
Batch make_batch(const Scenario& s, std::vector<std::vector<TokenId>>& histories) {
  Batch batch;
  batch.num_logprobs = s.num_logprobs;
  histories.assign(static_cast<size_t>(s.batch), {});
  for (int64_t r = 0; r < s.batch; ++r) {
    BatchRequest& row = batch.requests.emplace_back();
    row.params.seed = static_cast<uint64_t>(r);
    s.request(r, row, histories[static_cast<size_t>(r)]);
  }
  return batch;
}

// Median seconds a call of ours, of the roofline (`roofline_on` the bench's `pool`), of the twin
// (if any) and, beside a one-thread twin, of the roofline on one thread, timed in turns: the
// machine's memory speed drifts within seconds, and their ratio is the figure that matters.
std::vector<double> time_in_turns(const Scenario& s, const SamplerConfig& config,
                                  const Batch& batch, ScenarioLogits& logits,
                                  const std::function<void(detail::ThreadPool&)>& roofline_on,
                                  detail::ThreadPool& pool) {
  const std::function<void()> roofline = [&] { roofline_on(pool); };
  if (s.stateful) {
    RequestBatch requests(config), no_history(config);
    for (int64_t r = 0; r < s.batch; ++r) {
      const BatchRequest& row = batch.requests[static_cast<size_t>(r)];
      requests.add(std::to_string(r), row.params, row.prompt_token_ids);
      no_history.add(std::to_string(r), row.params);
    }
    std::vector<std::function<void()>> calls = {[&] { requests.step(logits.first()); }, roofline};
    if (s.twin == Scenario::Twin::empty_history)
      calls.push_back([&] { no_history.step(logits.first()); });
    return bench::median_seconds_in_turns(calls);
  }
  Sampler sampler(config);
  std::vector<std::function<void()>> calls = {[&] { sampler.sample(logits.next(), batch); },
                                              roofline};
  std::optional<Sampler> twin_sampler;
  std::optional<ScenarioLogits> llm_shaped;
  std::optional<detail::ThreadPool> one_thread_pool;
  if (s.twin == Scenario::Twin::llm_shaped) {
    llm_shaped.emplace(bench::reshaped(s, s.name, LogitsShape::llm));
    twin_sampler.emplace(config);
    calls.push_back([&] { twin_sampler->sample(llm_shaped->first(), batch); });
  } else if (s.twin == Scenario::Twin::one_thread) {
    SamplerConfig one_thread = config;
    one_thread.threads = 1;
    twin_sampler.emplace(one_thread);
    calls.push_back([&] { twin_sampler->sample(logits.next(), batch); });
    // The machine's own scaling beside ours: the roofline's read on one thread, in the same turns
    // (a lone row's read is one task on any pool: nothing to compare).
    if (s.batch > 1) {
      one_thread_pool.emplace(1);
      calls.push_back([&] { roofline_on(*one_thread_pool); });
    }
  }
  return bench::median_seconds_in_turns(calls, s.pause);
}

Result run_scenario(const Scenario& s) {
  Result result{s};
  ScenarioLogits logits(s);
  std::vector<std::vector<TokenId>> histories;
  const Batch batch = make_batch(s, histories);
  SamplerConfig config;
  config.vocab_size = s.vocab;
  config.max_batch = s.batch;
  config.threads = s.threads;
  config.backend = s.backend;
  const auto rows = static_cast<double>(s.batch);
  detail::ThreadPool pool(s.threads);
  std::vector<float> sink(static_cast<size_t>(s.batch));
  const void* roofline_data = nullptr;
  auto roofline_row = [&](int64_t r, int) {
    if (s.dtype == DType::f32)
      sink[r] = cpu::row_max(static_cast<const float*>(roofline_data) + r * s.vocab, s.vocab);
    else
      sink[r] =
          cpu::row_max_bits16(static_cast<const uint16_t*>(roofline_data) + r * s.vocab, s.vocab);
  };
  auto roofline_on = [&](detail::ThreadPool& threads) {
    roofline_data = logits.next().data;
    threads.run(s.batch, roofline_row);
  };
  const std::vector<double> medians = time_in_turns(s, config, batch, logits, roofline_on, pool);
  if (s.twin != Scenario::Twin::none) result.twin_us = medians[2] / rows * 1e6;
  if (medians.size() > 3) result.twin_roofline_us = medians[3] / rows * 1e6;
  result.ours_us = medians[0] / rows * 1e6;
  result.roofline_us = medians[1] / rows * 1e6;

  // The baseline reads the first copy back to back, with no pause: its full sort dominates.
  const LogitsView view = logits.first();
  std::vector<bench::BaselineScratch> scratch(static_cast<size_t>(pool.num_threads()));
  auto baseline = [&](int64_t r, int worker) {
    sink[r] = static_cast<float>(bench::baseline_sample_row(
        view, r, batch.requests[static_cast<size_t>(r)], s.num_logprobs.value_or(-1),
        static_cast<uint64_t>(r), scratch[static_cast<size_t>(worker)]));
  };
  result.baseline_us = bench::median_seconds([&] { pool.run(s.batch, baseline); }) / rows * 1e6;
  Sampler checked(config);  // sink holds the baseline's tokens from its last call
  check_tokens(s, view, batch, checked.sample(view, batch), sink);
  return result;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

// The name of the backend `kind` picks on this machine.
std::string backend_name(BackendKind kind) {
  SamplerConfig probe;
  probe.vocab_size = 1;
  probe.threads = 1;
  probe.backend = kind;
  return Sampler(probe).backend_name();
}

// The scenarios --scenario picks, on `backend`: a name alone (decode_b1, not decode_b1_paused
// too), else every name with that prefix; all when it is empty.
std::vector<Scenario> chosen_scenarios(const BenchOptions& options, int threads) {
  std::vector<Scenario> all = bench::all_scenarios(threads), chosen;
  const bool named = std::any_of(all.begin(), all.end(),
                                 [&](const Scenario& s) { return s.name == options.scenario; });
  for (Scenario& s : all)
    if (options.scenario.empty() || s.name == options.scenario ||
        (!named && s.name.rfind(options.scenario, 0) == 0)) {
      s.backend = options.backend;  // the backend the header names is the one timed
      chosen.push_back(std::move(s));
    }
  if (chosen.empty())
    throw InvalidArgument("--scenario " + options.scenario +
                          ": no scenario has that name or prefix");
  return chosen;
}

// A path the results cannot be written to fails now, not after minutes of timing (the probe
// leaves no empty file behind).
void check_writable(const std::string& json_path) {
  std::error_code error;
  // A link counts as there even when dangling: removing it would lose the link and leave the
  // file the probe made through it.
  const bool existed = std::filesystem::exists(std::filesystem::symlink_status(json_path, error));
  if (!std::ofstream(json_path, std::ios::app))
    throw InvalidArgument("--json " + json_path + ": cannot open for writing");
  if (!existed) std::filesystem::remove(json_path, error);
}

void write_json(const std::string& path, const nlohmann::json& doc) {
  std::ofstream out(path);
  out << doc.dump(2) << '\n';
  out.close();  // a full disk shows at the flush: checked after it
  if (!out) throw Error(ErrorCode::internal, path + ": write failed");
}

}  // namespace

int run_bench(const BenchOptions& options) {
  const int threads =
      options.threads > 0 ? options.threads : std::max(1u, std::thread::hardware_concurrency());
  const std::string backend = backend_name(options.backend);
  const std::vector<Scenario> scenarios = chosen_scenarios(options, threads);
  if (!options.json_path.empty()) check_writable(options.json_path);

  std::vector<Result> results;
  for (size_t i = 0; i < scenarios.size(); ++i) {
    const Scenario& s = scenarios[i];
    std::fprintf(stderr, "[%zu/%zu] %s: batch %lld, vocab %lld, %s, %d threads ...\n", i + 1,
                 scenarios.size(), s.name.c_str(), static_cast<long long>(s.batch),
                 static_cast<long long>(s.vocab), bench::dtype_label(s.dtype), s.threads);
    results.push_back(run_scenario(s));
  }

  const std::string cpu_name = cpu_model();  // read once: the header and the JSON
  std::printf("lastmile bench: backend %s, %s, medians per row\n", backend.c_str(),
              cpu_name.c_str());
  const std::optional<bench::WorkerStart> wake = bench::worker_start(threads);
  if (wake) bench::print_worker_start(*wake, threads);
  std::printf("\n");
  const nlohmann::json scenario_json = bench::print_table(results);
  const nlohmann::json scaling_json = bench::report_scaling(results);
  bench::print_twins(results);
  const nlohmann::json targets_json = bench::report_targets(results, scaling_json);
  if (options.json_path.empty()) return 0;
  write_json(options.json_path,
             {{"machine",
               {{"cpu", cpu_name},
                {"hardware_threads", std::thread::hardware_concurrency()},
                {"simd_target", cpu::dispatch_target_name()},
                {"backend", backend},
                // null: one thread, or no worker came before the caller had run every task.
                {"worker_start_delay_us",
                 wake && wake->measured > 0 ? nlohmann::json(wake->median_us) : nlohmann::json()}}},
              {"scenarios", scenario_json},
              {"scaling", scaling_json},
              {"targets", targets_json}});
  return 0;
}

}  // namespace lastmile::cli
