// lastmile CLI — the demo (`lastmile` with no arguments): six requests of an imaginary Llama-3
// sized model (vocab 128256) decoded for a few steps through RequestBatch, with LLM-shaped logits
// made in-process: a broad normal body plus a short head of strong candidates per step.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "commands.hpp"
#include "lastmile/lastmile.hpp"
#include "llm_logits.hpp"

namespace lastmile::cli {
namespace {

constexpr int64_t kVocab = 128256;

struct DemoRequest {
  const char* id;
  const char* what;
  RequestParams params;
};

std::vector<DemoRequest> demo_requests() {
  std::vector<DemoRequest> r(6);
  r[0] = {"greedy", "temperature 0", {}};
  r[0].params.temperature = 0.0f;
  r[1] = {"topk_topp", "T 0.7, top-k 50, top-p 0.9", {}};
  r[1].params.temperature = 0.7f;
  r[1].params.top_k = 50;
  r[1].params.top_p = 0.9f;
  r[1].params.seed = 1;
  r[2] = {"min_p", "T 1.0, min-p 0.05", {}};
  r[2].params.min_p = 0.05f;
  r[2].params.seed = 2;
  r[3] = {"penalised", "T 0.8, rep 1.3, freq 0.5, pres 0.5", {}};
  r[3].params.temperature = 0.8f;
  r[3].params.repetition_penalty = 1.3f;
  r[3].params.frequency_penalty = 0.5f;
  r[3].params.presence_penalty = 0.5f;
  r[3].params.seed = 3;
  r[4] = {"logprobs", "T 1.0, top-p 0.95, 5 logprobs", {}};
  r[4].params.top_p = 0.95f;
  r[4].params.logprobs = 5;
  r[4].params.seed = 4;
  r[5] = {"scoring", "greedy, scores ids 13, 128000", {}};
  r[5].params.temperature = 0.0f;
  r[5].params.logprob_token_ids = std::vector<TokenId>{13, 128000};
  return r;
}

// One step's logits: LLM-shaped rows, with each request's last token made likely again (so
// penalties have something to do).
void fill_logits(std::mt19937_64& rng, std::span<const TokenId> last_tokens,
                 std::vector<float>& logits) {
  const size_t rows = logits.size() / kVocab;
  for (size_t r = 0; r < rows; ++r) {
    float* row = logits.data() + r * kVocab;
    fill_llm_row(rng, row, kVocab);
    if (last_tokens[r] >= 0) row[last_tokens[r]] += 14.0f;
  }
}

}  // namespace

int run_demo(const DemoOptions& options) {
  const std::vector<DemoRequest> requests = demo_requests();
  SamplerConfig config;
  config.vocab_size = kVocab;
  config.max_batch = static_cast<int64_t>(requests.size());
  config.threads = options.threads;
  config.seed = 2026;
  config.backend = options.backend;
  RequestBatch batch(config);
  const std::vector<TokenId> prompt = {128000, 791, 6864, 315, 9822, 374};  // an example prompt
  for (const DemoRequest& r : requests) batch.add(r.id, r.params, prompt);

  std::mt19937_64 rng(7);
  std::vector<float> logits(requests.size() * kVocab);
  std::vector<TokenId> last(requests.size(), -1);
  std::vector<double> step_seconds;
  const SamplerOutput* out = nullptr;
  for (int step = 0; step < options.steps; ++step) {
    fill_logits(rng, last, logits);
    const auto start = std::chrono::steady_clock::now();
    out = &batch.step(LogitsView::f32(logits.data(), batch.size(), kVocab));
    step_seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    for (size_t r = 0; r < requests.size(); ++r) last[r] = out->sampled_token_ids[r];
  }

  std::printf(
      "lastmile %s demo: %zu requests, vocab %lld, fp32 logits, %d steps (RequestBatch)\n\n",
      kVersion, requests.size(), static_cast<long long>(kVocab), options.steps);
  std::printf("last step:\n%-10s %-36s %-8s %-9s %s\n", "request", "sampling", "token", "logprob",
              "top-5 alternatives (id:logprob)");
  const LogprobsBlock& top = out->logprobs;
  for (size_t r = 0; r < requests.size(); ++r) {
    std::string alternatives;
    for (int64_t c = 1; c < top.width; ++c) {
      char cell[48];
      std::snprintf(cell, sizeof cell, "%s%d:%.2f", c > 1 ? " " : "",
                    top.token_ids[r * top.width + c],
                    static_cast<double>(top.logprobs[r * top.width + c]));
      alternatives += cell;
    }
    std::printf("%-10s %-36s %-8d %-9.3f %s\n", requests[r].id, requests[r].what,
                out->sampled_token_ids[r], static_cast<double>(top.logprobs[r * top.width]),
                alternatives.c_str());
  }
  std::printf("\nhistories:\n");
  for (const DemoRequest& r : requests) {
    std::printf("  %-10s", r.id);
    for (TokenId t : batch.output_token_ids(r.id)) std::printf(" %d", t);
    std::printf("\n");
  }
  const TokenLogprobsBlock& scored = out->token_logprobs;
  std::printf("\nscoring (explicit ids, last step): token %d: %.3f, id 13: %.3f, id 128000: %.3f\n",
              scored.token_ids[5 * scored.width],
              static_cast<double>(scored.logprobs[5 * scored.width]),
              static_cast<double>(scored.logprobs[5 * scored.width + 1]),
              static_cast<double>(scored.logprobs[5 * scored.width + 2]));
  std::nth_element(step_seconds.begin(), step_seconds.begin() + step_seconds.size() / 2,
                   step_seconds.end());
  const double median_us = step_seconds[step_seconds.size() / 2] * 1e6;
  std::printf(
      "\ntiming: median %.0f us per step, %.0f us per row, over %d steps (backend %s, %s "
      "threads)\n",
      median_us, median_us / static_cast<double>(requests.size()), options.steps,
      batch.backend_name().c_str(),
      options.threads ? std::to_string(options.threads).c_str() : "all");
  return 0;
}

}  // namespace lastmile::cli
