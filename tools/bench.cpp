// lastmile CLI — `lastmile bench`: each scenario timed three ways on the same logits in one run:
// lastmile's Sampler ("ours"), the memory roofline (one SIMD max-reduce read over the rows) and
// the full-sort baseline (vLLM's CPU path re-told in C++). Medians; ours and the roofline timed in
// turns, so their ratio compares the same moments of a shared machine.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "commands.hpp"
#include "cpu/kernels.hpp"
#include "full_sort_baseline.hpp"
#include "lastmile/lastmile.hpp"
#include "llm_logits.hpp"
#include "reference/float16.hpp"
#include "threading/thread_pool.hpp"

namespace lastmile::cli {
namespace {

struct Scenario {
  std::string name;
  int64_t batch;
  int64_t vocab;
  DType dtype = DType::f32;
  LogitsShape shape = LogitsShape::llm;  // llm_logits.hpp
  int threads;
  std::function<void(int64_t row, BatchRequest&, std::vector<TokenId>& history)> request;
  std::optional<int32_t> num_logprobs;
  bool stateful = false;  // RequestBatch::step with the request's history as its prompt
  // A twin timed in turns with this scenario, for a target that is a ratio of the two (two
  // scenarios timed apart moved with the machine's memory speed: 1.03-1.6 for one build).
  enum class Twin { none, empty_history, llm_shaped, one_thread } twin = Twin::none;
  BackendKind backend = BackendKind::automatic;
  // > 0: all but this many entries of each row -inf, as an engine's grammar mask leaves them.
  int64_t finite = 0;
  // > 0: every timed call follows an idle wait this long, as an engine's decode steps follow its
  // forward pass (the pool's workers then sleep). This and fresh_rows: stateless scenarios only.
  std::chrono::microseconds pause{0};
  // Each call reads its own copy of the batch's logits, none read by the calls of the last 512 MiB
  // (above the L3 of today's server CPUs: the Xeon in docs/performance-log.md shares 260 MB), so
  // rows come from memory as a decode step's do (one row read again stays in a core's L2).
  bool fresh_rows = false;
};

// Bytes of logits a fresh_rows scenario cycles through.
constexpr size_t kFreshBytes = size_t{512} << 20;

struct Result {
  Scenario scenario;
  double ours_us = 0, roofline_us = 0, baseline_us = 0;  // per row, medians
  double twin_us = 0;                                    // the twin's, per row, median
};

double seconds(const std::function<void()>& call) {
  const auto start = std::chrono::steady_clock::now();
  call();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> times) {
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

// Median seconds per call of each of `calls`, timed in turns (a, b, a, b, ...) so that every one
// meets the same moments of a shared machine: one warm-up round, then at least 5 rounds and 0.3 s
// of the first call's time (at most 25 rounds). With a pause, an untimed idle wait before every
// call, and 100 rounds (a call after a pause varies more).
std::vector<double> median_seconds_in_turns(const std::vector<std::function<void()>>& calls,
                                            std::chrono::microseconds pause = {}) {
  for (const auto& call : calls) call();
  std::vector<std::vector<double>> times(calls.size());
  double first_total = 0;
  const bool paused = pause.count() > 0;
  const size_t min_rounds = paused ? 100 : 5, max_rounds = paused ? 100 : 25;
  while (times[0].size() < max_rounds && (times[0].size() < min_rounds || first_total < 0.3)) {
    // With pauses, odd rounds run the calls backwards: the first call after the previous
    // round's last ran about 10% faster than the rest (the same sampler in every place).
    const bool backwards = paused && times[0].size() % 2 == 1;
    for (size_t k = 0; k < calls.size(); ++k) {
      const size_t c = backwards ? calls.size() - 1 - k : k;
      if (paused) std::this_thread::sleep_for(pause);
      times[c].push_back(seconds(calls[c]));
    }
    first_total += times[0].back();
  }
  std::vector<double> medians;
  for (const auto& t : times) medians.push_back(median(t));
  return medians;
}

// Median seconds per call: one warm-up call, then at least 5 calls and 0.3 s (at most 25 calls).
double median_seconds(const std::function<void()>& call) {
  return median_seconds_in_turns({call})[0];
}

void topk_topp(BatchRequest& r) {
  r.params.temperature = 0.7f;
  r.params.top_k = 50;
  r.params.top_p = 0.9f;
}

// The serving mix: a quarter each greedy, top-k/top-p, min-p and top-p rows, all penalised over a
// 2k-token history (1k prompt + 1k output), 5 logprobs per row.
void serving_mix(int64_t row, BatchRequest& r, std::vector<TokenId>& history, int64_t vocab) {
  std::mt19937_64 rng(static_cast<uint64_t>(row) + 1);
  std::uniform_int_distribution<TokenId> token(0, static_cast<TokenId>(vocab - 1));
  history.resize(2000);
  for (TokenId& t : history) t = token(rng);
  r.prompt_token_ids = std::span<const TokenId>(history).first(1000);
  r.output_token_ids = std::span<const TokenId>(history).last(1000);
  RequestParams& p = r.params;
  p.repetition_penalty = 1.1f;
  p.frequency_penalty = 0.2f;
  p.presence_penalty = 0.1f;
  switch (row % 4) {
    case 0:
      p.temperature = 0.0f;
      break;
    case 1:
      topk_topp(r);
      break;
    case 2:
      p.min_p = 0.05f;
      break;
    case 3:
      p.temperature = 0.8f;
      p.top_p = 0.95f;
      break;
  }
}

std::vector<Scenario> all_scenarios(int threads) {
  const int64_t kLlama = 128256, kQwen = 151936;
  std::vector<Scenario> s;
  s.push_back({"greedy",
               64,
               kLlama,
               DType::f32,
               LogitsShape::llm,
               threads,
               [](int64_t, BatchRequest& r, auto&) { r.params.temperature = 0.0f; },
               {}});
  s.push_back({"temperature",
               64,
               kLlama,
               DType::f32,
               LogitsShape::llm,
               threads,
               [](int64_t, BatchRequest& r, auto&) { r.params.temperature = 0.8f; },
               {}});
  s.push_back({"topk_topp",
               64,
               kLlama,
               DType::f32,
               LogitsShape::llm,
               threads,
               [](int64_t, BatchRequest& r, auto&) { topk_topp(r); },
               {}});
  const Scenario topk_topp_rows = s.back();
  s.push_back({"topp",
               64,
               kLlama,
               DType::f32,
               LogitsShape::llm,
               threads,
               [](int64_t, BatchRequest& r, auto&) { r.params.top_p = 0.95f; },
               {}});
  const Scenario topp_rows = s.back();
  s.push_back({"topp_flat",
               64,
               kLlama,
               DType::f32,
               LogitsShape::flat,
               threads,
               [](int64_t, BatchRequest& r, auto&) { r.params.top_p = 0.95f; },
               {}});
  s.back().twin = Scenario::Twin::llm_shaped;  // topp, in turns
  s.push_back({"minp",
               64,
               kLlama,
               DType::f32,
               LogitsShape::llm,
               threads,
               [](int64_t, BatchRequest& r, auto&) { r.params.min_p = 0.05f; },
               {}});
  const Scenario minp_rows = s.back();
  // No targets: where the bench's LLM shape is kind to top-p and min-p (README, Performance).
  Scenario long_tail = topp_rows;
  long_tail.name = "topp_long_tail";
  long_tail.shape = LogitsShape::long_tail;
  s.push_back(long_tail);
  Scenario flat_min_p = minp_rows;
  flat_min_p.name = "minp_flat";
  flat_min_p.shape = LogitsShape::flat;
  s.push_back(flat_min_p);
  auto mix = [](int64_t vocab) {
    return [vocab](int64_t row, BatchRequest& r, std::vector<TokenId>& h) {
      serving_mix(row, r, h, vocab);
    };
  };
  s.push_back({"serving_mix", 64, kLlama, DType::f32, LogitsShape::llm, threads, mix(kLlama), 5});
  s.back().twin = Scenario::Twin::one_thread;  // serving_mix_1thread, in turns
  s.push_back({"serving_mix_1thread", 64, kLlama, DType::f32, LogitsShape::llm, 1, mix(kLlama), 5});
  s.push_back(
      {"serving_mix_qwen", 64, kQwen, DType::bf16, LogitsShape::llm, threads, mix(kQwen), 5});
  // The same rows asking no logprobs, as most engines' requests do: none needs the raw log-sum's
  // Exp pass but the top-p rows, whose draw bounds its list by it (no target).
  s.push_back(s.back());
  s.back().name = "mix_qwen_no_logprobs";
  s.back().num_logprobs.reset();
  s.push_back({"decode_b1",
               1,
               kLlama,
               DType::f32,
               LogitsShape::llm,
               threads,
               [](int64_t, BatchRequest& r, auto&) { topk_topp(r); },
               {}});
  s.back().twin = Scenario::Twin::one_thread;  // one row split over the threads, in turns
  s.push_back(s.back());
  s.back().name = "decode_b1_paused";
  s.back().pause = std::chrono::milliseconds(2);  // one row per decode step of 2 ms
  s.back().fresh_rows = true;
  for (int64_t b : {1, 4, 16, 64, 256})
    s.push_back({"scaling_b" + std::to_string(b),
                 b,
                 kLlama,
                 DType::f32,
                 LogitsShape::llm,
                 threads,
                 [](int64_t, BatchRequest& r, auto&) { topk_topp(r); },
                 {}});
  for (int64_t v : {32000, 128256, 256000})
    s.push_back({"scaling_v" + std::to_string(v),
                 64,
                 v,
                 DType::f32,
                 LogitsShape::llm,
                 threads,
                 [](int64_t, BatchRequest& r, auto&) { topk_topp(r); },
                 {}});
  // vLLM's default max_logprobs at a 32k vocabulary: more logprobs than the row has blocks.
  s.push_back({"logprobs20_v32000", 64, 32000, DType::f32, LogitsShape::llm, threads,
               [](int64_t, BatchRequest& r, auto&) { topk_topp(r); }, 20});
  // A grammar's mask applied by the engine: 16 tokens left, fewer than top-k's 50.
  Scenario masked = topk_topp_rows;
  masked.name = "topk_topp_masked";
  masked.finite = 16;
  s.push_back(masked);
  for (int64_t h : {0, 32000}) {
    Scenario st{"stateful_history_" + std::to_string(h / 1000) + "k",
                8,
                kLlama,
                DType::f32,
                LogitsShape::llm,
                threads,
                [h](int64_t row, BatchRequest& r, std::vector<TokenId>& history) {
                  std::mt19937_64 rng(static_cast<uint64_t>(row) + 7);
                  std::uniform_int_distribution<TokenId> token(0, 128255);
                  history.resize(static_cast<size_t>(h));
                  for (TokenId& t : history) t = token(rng);
                  r.prompt_token_ids = history;
                  topk_topp(r);
                  r.params.repetition_penalty = 1.1f;
                  r.params.frequency_penalty = 0.2f;
                },
                {}};
    st.stateful = true;
    if (h > 0) st.twin = Scenario::Twin::empty_history;
    s.push_back(st);
  }
  return s;
}

std::vector<unsigned char> make_logits(const Scenario& s) {
  std::mt19937_64 rng(1234);
  std::vector<float> row(static_cast<size_t>(s.vocab));
  const size_t element = s.dtype == DType::f32 ? 4 : 2;
  std::vector<unsigned char> bytes(static_cast<size_t>(s.batch * s.vocab) * element);
  for (int64_t r = 0; r < s.batch; ++r) {
    fill_row(s.shape, rng, row.data(), s.vocab);
    if (s.finite > 0) {  // every (vocab / finite)-th entry kept
      const int64_t stride = s.vocab / s.finite;
      for (int64_t v = 0; v < s.vocab; ++v)
        if (v % stride != r % stride || v / stride >= s.finite)
          row[v] = -std::numeric_limits<float>::infinity();
    }
    for (int64_t v = 0; v < s.vocab; ++v) {
      const size_t at = static_cast<size_t>(r * s.vocab + v);
      if (s.dtype == DType::f32) {
        std::memcpy(bytes.data() + at * 4, &row[v], 4);
      } else {  // bf16: round to nearest even
        uint32_t bits;
        std::memcpy(&bits, &row[v], 4);
        const auto half = static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
        std::memcpy(bytes.data() + at * 2, &half, 2);
      }
    }
  }
  return bytes;
}

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

Result run_scenario(const Scenario& s) {
  Result result{s};
  std::vector<unsigned char> bytes = make_logits(s);
  const size_t batch_bytes = bytes.size();
  const size_t copies =
      s.fresh_rows ? std::max<size_t>(2, (kFreshBytes + batch_bytes - 1) / batch_bytes) : 1;
  bytes.resize(batch_bytes * copies);
  for (size_t c = 1; c < copies; ++c)
    std::memcpy(bytes.data() + c * batch_bytes, bytes.data(), batch_bytes);
  const LogitsView view{bytes.data(), s.batch, s.vocab, s.vocab, s.dtype};
  // The copy each call in turns reads: the next one (Scenario::fresh_rows), else the one.
  size_t copy = 0;
  auto next_view = [&] {
    copy = (copy + 1) % copies;
    LogitsView v = view;
    v.data = bytes.data() + copy * batch_bytes;
    return v;
  };
  Batch batch;
  batch.num_logprobs = s.num_logprobs;
  std::vector<std::vector<TokenId>> histories(static_cast<size_t>(s.batch));
  for (int64_t r = 0; r < s.batch; ++r) {
    BatchRequest& row = batch.requests.emplace_back();
    row.params.seed = static_cast<uint64_t>(r);
    s.request(r, row, histories[static_cast<size_t>(r)]);
  }
  SamplerConfig config;
  config.vocab_size = s.vocab;
  config.max_batch = s.batch;
  config.threads = s.threads;
  config.backend = s.backend;
  const auto rows = static_cast<double>(s.batch);
  detail::ThreadPool pool(s.threads);
  std::vector<float> sink(static_cast<size_t>(s.batch));
  const void* roofline_data = view.data;
  auto roofline_row = [&](int64_t r, int) {
    const void* data = roofline_data;
    if (s.dtype == DType::f32)
      sink[r] = cpu::row_max(static_cast<const float*>(data) + r * s.vocab, s.vocab);
    else
      sink[r] = cpu::row_max_bits16(static_cast<const uint16_t*>(data) + r * s.vocab, s.vocab);
  };
  auto roofline = [&] {
    roofline_data = next_view().data;
    pool.run(s.batch, roofline_row);
  };
  // Ours and the roofline in turns: the machine's memory speed drifts within seconds, and their
  // ratio is the figure that matters.
  std::vector<double> medians;
  if (s.stateful) {
    RequestBatch requests(config), no_history(config);
    for (int64_t r = 0; r < s.batch; ++r) {
      const BatchRequest& row = batch.requests[static_cast<size_t>(r)];
      requests.add(std::to_string(r), row.params, row.prompt_token_ids);
      no_history.add(std::to_string(r), row.params);
    }
    std::vector<std::function<void()>> calls = {[&] { requests.step(view); }, roofline};
    if (s.twin == Scenario::Twin::empty_history) calls.push_back([&] { no_history.step(view); });
    medians = median_seconds_in_turns(calls);
  } else {
    Sampler sampler(config);
    std::vector<std::function<void()>> calls = {[&] { sampler.sample(next_view(), batch); },
                                                roofline};
    std::optional<Sampler> twin_sampler;
    std::vector<unsigned char> twin_bytes;
    if (s.twin == Scenario::Twin::llm_shaped) {
      Scenario llm_shaped = s;
      llm_shaped.shape = LogitsShape::llm;
      twin_bytes = make_logits(llm_shaped);
      twin_sampler.emplace(config);
      calls.push_back([&] {
        twin_sampler->sample({twin_bytes.data(), s.batch, s.vocab, s.vocab, s.dtype}, batch);
      });
    } else if (s.twin == Scenario::Twin::one_thread) {
      SamplerConfig one_thread = config;
      one_thread.threads = 1;
      twin_sampler.emplace(one_thread);
      calls.push_back([&] { twin_sampler->sample(next_view(), batch); });
    }
    medians = median_seconds_in_turns(calls, s.pause);
  }
  if (s.twin != Scenario::Twin::none) result.twin_us = medians[2] / rows * 1e6;
  result.ours_us = medians[0] / rows * 1e6;
  result.roofline_us = medians[1] / rows * 1e6;

  // The baseline reads the first copy back to back, with no pause: its full sort dominates.
  std::vector<bench::BaselineScratch> scratch(static_cast<size_t>(pool.num_threads()));
  auto baseline = [&](int64_t r, int worker) {
    sink[r] = static_cast<float>(bench::baseline_sample_row(
        view, r, batch.requests[static_cast<size_t>(r)], s.num_logprobs.value_or(-1),
        static_cast<uint64_t>(r), scratch[static_cast<size_t>(worker)]));
  };
  result.baseline_us = median_seconds([&] { pool.run(s.batch, baseline); }) / rows * 1e6;
  Sampler checked(config);  // sink holds the baseline's tokens from its last call
  check_tokens(s, view, batch, checked.sample(view, batch), sink);
  return result;
}

// A scenario's dtype as the table and the JSON name it.
const char* dtype_label(DType dtype) {
  return dtype == DType::f32 ? "fp32" : dtype == DType::f16 ? "fp16" : "bf16";
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

// How late a worker asleep for a decode step's 1 ms starts a run: ThreadPool's
// last_worker_delay_ns (the first worker to claim a task) over kRuns runs, each of 8 tasks a thread
// of 25 us. A run the caller finished before any worker came measures nothing. Every call that
// spreads its rows pays this once: on the README's 2-core VM a median of 32-44 us in five bench
// runs, of a 64-row call of 32k tokens that took about 270 us (the waking caller also spends some
// 14 us in the system call); a call of 64 rows of 256k tokens took 1.4-1.6 ms.
struct WorkerStart {
  static constexpr size_t kRuns = 30;
  size_t measured = 0;  // runs that a worker joined
  double median_us = 0;
};

std::optional<WorkerStart> worker_start(int threads) {
  if (threads < 2) return std::nullopt;
  detail::ThreadPool pool(threads);
  // Tasks long enough that the caller cannot take them all before a worker comes.
  auto task = [](int64_t, int) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(25);
    while (std::chrono::steady_clock::now() < until) {
    }
  };
  std::vector<double> delays;
  for (size_t run = 0; run < WorkerStart::kRuns; ++run) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    pool.run(8 * threads, task);
    if (pool.last_worker_delay_ns() >= 0)
      delays.push_back(static_cast<double>(pool.last_worker_delay_ns()) / 1000);
  }
  WorkerStart start;
  start.measured = delays.size();
  if (!delays.empty()) start.median_us = median(delays);
  return start;
}

// The line under the bench's header: how late a sleeping worker joins a run, or that none did.
void print_worker_start(const WorkerStart& start, int threads) {
  std::printf("a worker asleep 1 ms ");
  if (start.measured == 0) {
    std::printf("came after the caller had run every task, in all %zu runs", WorkerStart::kRuns);
  } else {
    std::printf("starts a run %.0f us after it is posted (median of %zu runs", start.median_us,
                start.measured);
    if (start.measured < WorkerStart::kRuns)
      std::printf("; in %zu more the caller ran every task first",
                  WorkerStart::kRuns - start.measured);
    std::printf(")");
  }
  const unsigned hardware = std::thread::hardware_concurrency();
  if (hardware > 0 && static_cast<unsigned>(threads) > hardware)
    std::printf("; %d threads on %u hardware threads", threads, hardware);
  std::printf("\n");
}

// Least-squares slope of log(time per call) against log(x).
double fitted_exponent(const std::vector<std::pair<double, double>>& points) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : points) {
    sx += std::log(x), sy += std::log(y), sxx += std::log(x) * std::log(x),
        sxy += std::log(x) * std::log(y);
  }
  const double n = static_cast<double>(points.size());
  return (n * sxy - sx * sy) / (n * sxx - sx * sx);
}

// Issue #3's targets that this run's scenarios allow, printed met or not, and returned for the
// JSON: ratios to the roofline, to the baseline and to a twin timed in turns, and the exponents.
nlohmann::json report_targets(const std::vector<Result>& results, const nlohmann::json& scaling) {
  struct Target {
    std::string name;
    double value, low, high;
    bool met() const { return value >= low && value <= high; }
  };
  std::vector<Target> targets;
  auto find = [&](const std::string& name) -> const Result* {
    for (const Result& r : results)
      if (r.scenario.name == name) return &r;
    return nullptr;
  };
  const double inf = std::numeric_limits<double>::infinity();
  for (const auto& [name, limit] :
       std::vector<std::pair<std::string, double>>{{"greedy", 1.5},
                                                   {"temperature", 3},
                                                   {"topk_topp", 3},
                                                   {"topp", 3},
                                                   {"minp", 3},
                                                   {"serving_mix", 4},
                                                   {"serving_mix_qwen", 4}})
    if (const Result* r = find(name))
      targets.push_back({name + " ours/roofline", r->ours_us / r->roofline_us, 0, limit});
  for (const std::string name : {"topk_topp", "topp"})
    if (const Result* r = find(name))
      targets.push_back({name + " baseline/ours", r->baseline_us / r->ours_us, 50, inf});
  if (const Result* r = find("topp_flat"))
    targets.push_back({"topp_flat / topp (in turns)", r->ours_us / r->twin_us, 0, 2});
  if (const Result* r = find("serving_mix"))
    targets.push_back({"serving_mix 2 vs 1 thread (in turns)", r->twin_us / r->ours_us, 1.7, inf});
  if (const Result* r = find("stateful_history_32k"))
    targets.push_back({"stateful 32k / no history (in turns)", r->ours_us / r->twin_us, 0, 1.2});
  for (const char* exponent : {"batch_exponent", "vocab_exponent"})
    if (scaling.contains(exponent))
      targets.push_back(
          {std::string("scaling ") + exponent, scaling[exponent].get<double>(), 0.85, 1.15});
  nlohmann::json json = nlohmann::json::array();
  if (targets.empty()) return json;
  int met = 0;
  for (const Target& t : targets) met += t.met();
  std::printf("\ntargets (issue #3): %d of %zu met\n", met, targets.size());
  // Two decimals, or three where two would print the value as a bound it lies beyond or within
  // (an exponent of 1.153 shown as 1.15 beside 0.85-1.15, NOT MET).
  auto at_bound = [inf](const Target& t) {
    auto two = [](double x) { return std::round(x * 100) / 100; };
    return two(t.value) == two(t.low) || (t.high != inf && two(t.value) == two(t.high));
  };
  for (const Target& t : targets) {
    const bool ok = t.met();
    char range[32];
    if (t.high == inf)
      std::snprintf(range, sizeof range, ">= %.2g", t.low);
    else if (t.low == 0)
      std::snprintf(range, sizeof range, "<= %.2g", t.high);
    else
      std::snprintf(range, sizeof range, "%.2f-%.2f", t.low, t.high);
    std::printf(at_bound(t) ? "  %-38s %8.3f  %-10s %s\n" : "  %-38s %8.2f  %-10s %s\n",
                t.name.c_str(), t.value, range, ok ? "met" : "NOT MET");
    json.push_back({{"name", t.name}, {"value", t.value}, {"target", range}, {"met", ok}});
  }
  return json;
}

}  // namespace

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
  std::vector<Scenario> all = all_scenarios(threads), chosen;
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

// The table of scenarios on stdout; its rows as JSON.
nlohmann::json print_table(const std::vector<Result>& results) {
  std::printf("%-22s %6s %7s %5s %3s %12s %12s %13s %9s %10s\n", "scenario", "batch", "vocab",
              "dtype", "thr", "ours_us/row", "roofline_us", "baseline_us", "ours/roof",
              "base/ours");
  nlohmann::json rows = nlohmann::json::array();
  for (const Result& r : results) {
    const Scenario& s = r.scenario;
    const char* dtype = dtype_label(s.dtype);
    std::printf("%-22s %6lld %7lld %5s %3d %12.1f %12.1f %13.1f %9.2f %10.2f\n", s.name.c_str(),
                static_cast<long long>(s.batch), static_cast<long long>(s.vocab), dtype, s.threads,
                r.ours_us, r.roofline_us, r.baseline_us, r.ours_us / r.roofline_us,
                r.baseline_us / r.ours_us);
    rows.push_back({{"name", s.name},
                    {"batch", s.batch},
                    {"vocab", s.vocab},
                    {"dtype", dtype},
                    {"threads", s.threads},
                    {"median_us_per_row", r.ours_us},
                    {"roofline_us_per_row", r.roofline_us},
                    {"baseline_us_per_row", r.baseline_us}});
    if (s.twin != Scenario::Twin::none) rows.back()["twin_us_per_row"] = r.twin_us;
  }
  return rows;
}

// The scaling scenarios' fitted exponents, the roofline's own beside ours: printed, and as JSON.
// Where a batch outgrows a cache level its read slows per byte (on a Xeon's 105 MB L3, 64 rows of
// 256000 fp32 tokens read 2-2.5x slower a token than 64 of 32000), and ours grows with it.
nlohmann::json report_scaling(const std::vector<Result>& results) {
  std::vector<std::pair<double, double>> by_batch, by_vocab, roof_by_batch, roof_by_vocab;
  for (const Result& r : results) {
    const auto batch = static_cast<double>(r.scenario.batch);
    const double per_call = r.ours_us * batch, roofline_per_call = r.roofline_us * batch;
    if (r.scenario.name.rfind("scaling_b", 0) == 0) {
      by_batch.emplace_back(batch, per_call);
      roof_by_batch.emplace_back(batch, roofline_per_call);
    }
    if (r.scenario.name.rfind("scaling_v", 0) == 0) {
      by_vocab.emplace_back(r.scenario.vocab, per_call);
      roof_by_vocab.emplace_back(r.scenario.vocab, roofline_per_call);
    }
  }
  nlohmann::json scaling = nlohmann::json::object();
  std::vector<std::string> fits;  // "batch^1.10 (roofline ^1.15)", then the vocab's
  auto fit = [&](const char* what, const auto& ours, const auto& roofline) {
    if (ours.size() < 2) return;
    const double exponent = fitted_exponent(ours), roofline_exponent = fitted_exponent(roofline);
    scaling[std::string(what) + "_exponent"] = exponent;
    scaling[std::string(what) + "_roofline_exponent"] = roofline_exponent;
    char text[64];
    std::snprintf(text, sizeof text, "%s^%.2f (roofline ^%.2f)", what, exponent, roofline_exponent);
    fits.emplace_back(text);
  };
  fit("batch", by_batch, roof_by_batch);
  fit("vocab", by_vocab, roof_by_vocab);
  for (size_t i = 0; i < fits.size(); ++i)
    std::printf("%s%s", i == 0 ? "\nscaling: time per call ~ " : ", ~ ", fits[i].c_str());
  if (!fits.empty()) std::printf("\n");
  return scaling;
}

// A line for each scenario timed in turns with a twin: its time as a multiple of the twin's.
void print_twins(const std::vector<Result>& results) {
  for (const Result& r : results) {
    const char* twin = nullptr;
    switch (r.scenario.twin) {
      case Scenario::Twin::none:
        continue;
      case Scenario::Twin::empty_history:
        twin = "requests with no history";
        break;
      case Scenario::Twin::llm_shaped:
        twin = "on LLM-shaped logits";
        break;
      case Scenario::Twin::one_thread:
        twin = "on one thread";
        break;
    }
    std::printf("%s: %.2fx the time of the same %s (%.1f us/row; timed in turns)\n",
                r.scenario.name.c_str(), r.ours_us / r.twin_us, twin, r.twin_us);
  }
}

void write_json(const std::string& path, const nlohmann::json& doc) {
  std::ofstream out(path);
  out << doc.dump(2) << '\n';
  out.close();  // a full disk shows at the flush: checked after it
  if (!out) throw Error(ErrorCode::internal, path + ": write failed");
}

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
                 static_cast<long long>(s.vocab), dtype_label(s.dtype), s.threads);
    results.push_back(run_scenario(s));
  }

  const std::string cpu_name = cpu_model();  // read once: the header and the JSON
  std::printf("lastmile bench: backend %s, %s, medians per row\n", backend.c_str(),
              cpu_name.c_str());
  const std::optional<WorkerStart> wake = worker_start(threads);
  if (wake) print_worker_start(*wake, threads);
  std::printf("\n");
  const nlohmann::json scenario_json = print_table(results);
  const nlohmann::json scaling_json = report_scaling(results);
  print_twins(results);
  const nlohmann::json targets_json = report_targets(results, scaling_json);
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
