// lastmile CLI — logits for the demo and the benchmarks. LLM-shaped: a broad N(0, 2.5) body with
// a short head of 40 strong candidates lifted by 6..16 (peaked, like a trained model's confident
// output: top-p 0.95 keeps some 7 tokens at T = 1). Flat: N(0, 1), no head (top-p keeps 95000).
// Long-tailed: the logit falls with the log of a random rank, as Zipf's law has word frequencies
// fall (an uncertain model's output: top-p 0.95 keeps some 13000), the costliest for top-p.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace lastmile::cli {

inline void fill_llm_row(std::mt19937_64& rng, float* row, int64_t vocab) {
  std::normal_distribution<float> body(0.0f, 2.5f);
  std::uniform_int_distribution<int64_t> token(0, vocab - 1);
  std::uniform_real_distribution<float> lift(6.0f, 16.0f);
  for (int64_t v = 0; v < vocab; ++v) row[v] = body(rng);
  for (int i = 0; i < 40; ++i) row[token(rng)] += lift(rng);
}

inline void fill_long_tail_row(std::mt19937_64& rng, float* row, int64_t vocab) {
  std::normal_distribution<float> noise(0.0f, 0.5f);
  std::vector<int64_t> rank(static_cast<size_t>(vocab));
  for (int64_t v = 0; v < vocab; ++v) rank[static_cast<size_t>(v)] = v;
  std::shuffle(rank.begin(), rank.end(), rng);
  for (int64_t v = 0; v < vocab; ++v)
    row[v] =
        10.0f - 1.2f * std::log(static_cast<float>(rank[static_cast<size_t>(v)] + 1)) + noise(rng);
}

inline void fill_flat_row(std::mt19937_64& rng, float* row, int64_t vocab) {
  std::normal_distribution<float> body(0.0f, 1.0f);
  for (int64_t v = 0; v < vocab; ++v) row[v] = body(rng);
}

enum class LogitsShape { llm, flat, long_tail };

inline void fill_row(LogitsShape shape, std::mt19937_64& rng, float* row, int64_t vocab) {
  switch (shape) {
    case LogitsShape::llm:
      return fill_llm_row(rng, row, vocab);
    case LogitsShape::flat:
      return fill_flat_row(rng, row, vocab);
    case LogitsShape::long_tail:
      return fill_long_tail_row(rng, row, vocab);
  }
}

}  // namespace lastmile::cli
