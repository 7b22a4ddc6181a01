// lastmile bench — the scenarios (see the header): issue #3's list in its order, each family built
// by a function of its own.
#include "scenarios.hpp"

#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <utility>

namespace lastmile::bench {
namespace {

constexpr int64_t kLlama = 128256, kQwen = 151936;

using Request = decltype(Scenario::request);

// A scenario of `batch` LLM-shaped float32 rows, each request set by `request`.
Scenario llm_scenario(std::string name, int64_t batch, int64_t vocab, int threads,
                      Request request) {
  return {std::move(name),    batch, vocab, DType::f32, cli::LogitsShape::llm, threads,
          std::move(request), {}};
}

void topk_topp(BatchRequest& r) {
  r.params.temperature = 0.7f;
  r.params.top_k = 50;
  r.params.top_p = 0.9f;
}
void topk_topp_row(int64_t, BatchRequest& r, std::vector<TokenId>&) { topk_topp(r); }

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

// One sampling mode a scenario, 64 rows of 128k: greedy, temperature, top-k/top-p, top-p (on LLM
// and flat rows), min-p; then, with no target, the shapes that are hard for top-p and min-p.
void add_sampling_modes(int threads, std::vector<Scenario>& s) {
  auto each_row = [](auto set) {
    return [set](int64_t, BatchRequest& r, std::vector<TokenId>&) { set(r.params); };
  };
  s.push_back(llm_scenario("greedy", 64, kLlama, threads,
                           each_row([](RequestParams& p) { p.temperature = 0.0f; })));
  s.push_back(llm_scenario("temperature", 64, kLlama, threads,
                           each_row([](RequestParams& p) { p.temperature = 0.8f; })));
  s.push_back(llm_scenario("topk_topp", 64, kLlama, threads, topk_topp_row));
  const Scenario topp = llm_scenario("topp", 64, kLlama, threads,
                                     each_row([](RequestParams& p) { p.top_p = 0.95f; }));
  s.push_back(topp);
  s.push_back(reshaped(topp, "topp_flat", cli::LogitsShape::flat));
  s.back().twin = Scenario::Twin::llm_shaped;  // topp, in turns
  const Scenario minp = llm_scenario("minp", 64, kLlama, threads,
                                     each_row([](RequestParams& p) { p.min_p = 0.05f; }));
  s.push_back(minp);
  // No targets: where the bench's LLM shape is kind to top-p and min-p (README, Performance).
  s.push_back(reshaped(topp, "topp_long_tail", cli::LogitsShape::long_tail));
  s.push_back(reshaped(minp, "minp_flat", cli::LogitsShape::flat));
}

// The serving mix on `threads` threads and on one (in turns), on bf16 Qwen-sized rows, and those
// rows asking no logprobs, as most engines' requests do: none needs the raw log-sum's Exp pass but
// the top-p rows, whose draw bounds its list by it (no target).
void add_serving_mixes(int threads, std::vector<Scenario>& s) {
  auto mix = [](int64_t vocab) {
    return [vocab](int64_t row, BatchRequest& r, std::vector<TokenId>& h) {
      serving_mix(row, r, h, vocab);
    };
  };
  s.push_back(llm_scenario("serving_mix", 64, kLlama, threads, mix(kLlama)));
  s.back().num_logprobs = 5;
  s.back().twin = Scenario::Twin::one_thread;  // serving_mix_1thread, in turns
  s.push_back(llm_scenario("serving_mix_1thread", 64, kLlama, 1, mix(kLlama)));
  s.back().num_logprobs = 5;
  s.push_back(llm_scenario("serving_mix_qwen", 64, kQwen, threads, mix(kQwen)));
  s.back().dtype = DType::bf16;
  s.back().num_logprobs = 5;
  s.push_back(s.back());
  s.back().name = "mix_qwen_no_logprobs";
  s.back().num_logprobs.reset();
}

// One top-k/top-p row a call: split over the threads (against one, in turns), and after a 2 ms
// idle wait on rows from memory, as a decode step's.
void add_decode(int threads, std::vector<Scenario>& s) {
  s.push_back(llm_scenario("decode_b1", 1, kLlama, threads, topk_topp_row));
  s.back().twin = Scenario::Twin::one_thread;  // one row split over the threads, in turns
  s.push_back(s.back());
  s.back().name = "decode_b1_paused";
  s.back().pause = std::chrono::milliseconds(2);  // one row per decode step of 2 ms
  s.back().fresh_rows = true;
}

// Top-k/top-p over batches of 1-256 rows of 128k and over 64 rows of 32k-256k (the exponents).
void add_scaling(int threads, std::vector<Scenario>& s) {
  for (int64_t b : {1, 4, 16, 64, 256})
    s.push_back(llm_scenario("scaling_b" + std::to_string(b), b, kLlama, threads, topk_topp_row));
  for (int64_t v : {32000, 128256, 256000})
    s.push_back(llm_scenario("scaling_v" + std::to_string(v), 64, v, threads, topk_topp_row));
}

// Requests at the edges of an engine's: vLLM's default max_logprobs at a 32k vocabulary (more
// logprobs than the row has blocks), and a grammar's mask applied by the engine (16 tokens left,
// fewer than top-k's 50).
void add_edges(int threads, std::vector<Scenario>& s) {
  s.push_back(llm_scenario("logprobs20_v32000", 64, 32000, threads, topk_topp_row));
  s.back().num_logprobs = 20;
  s.push_back(llm_scenario("topk_topp_masked", 64, kLlama, threads, topk_topp_row));
  s.back().finite = 16;
}

// RequestBatch::step over 8 penalised rows with no history, and with 32k tokens each (in turns).
void add_stateful(int threads, std::vector<Scenario>& s) {
  for (int64_t h : {0, 32000}) {
    auto request = [h](int64_t row, BatchRequest& r, std::vector<TokenId>& history) {
      std::mt19937_64 rng(static_cast<uint64_t>(row) + 7);
      std::uniform_int_distribution<TokenId> token(0, 128255);
      history.resize(static_cast<size_t>(h));
      for (TokenId& t : history) t = token(rng);
      r.prompt_token_ids = history;
      topk_topp(r);
      r.params.repetition_penalty = 1.1f;
      r.params.frequency_penalty = 0.2f;
    };
    s.push_back(llm_scenario("stateful_history_" + std::to_string(h / 1000) + "k", 8, kLlama,
                             threads, request));
    s.back().stateful = true;
    if (h > 0) s.back().twin = Scenario::Twin::empty_history;
  }
}

}  // namespace

Scenario reshaped(Scenario base, std::string name, cli::LogitsShape shape) {
  base.name = std::move(name);
  base.shape = shape;
  return base;
}

std::vector<Scenario> all_scenarios(int threads) {
  std::vector<Scenario> s;
  add_sampling_modes(threads, s);
  add_serving_mixes(threads, s);
  add_decode(threads, s);
  add_scaling(threads, s);
  add_edges(threads, s);
  add_stateful(threads, s);
  return s;
}

const char* dtype_label(DType dtype) {
  return dtype == DType::f32 ? "fp32" : dtype == DType::f16 ? "fp16" : "bf16";
}

std::vector<unsigned char> make_logits(const Scenario& s) {
  std::mt19937_64 rng(1234);
  std::vector<float> row(static_cast<size_t>(s.vocab));
  const size_t element = s.dtype == DType::f32 ? 4 : 2;
  std::vector<unsigned char> bytes(static_cast<size_t>(s.batch * s.vocab) * element);
  for (int64_t r = 0; r < s.batch; ++r) {
    cli::fill_row(s.shape, rng, row.data(), s.vocab);
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

}  // namespace lastmile::bench
