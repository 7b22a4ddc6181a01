// lastmile CLI — LLM-shaped logits for the demo and the benchmarks: a broad N(0, 2.5) body with a
// short head of 40 strong candidates lifted by 6..16 (peaked, like a trained model's output), or
// flat N(0, 1) logits where no head exists (the hard case for top-p).
#pragma once

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

inline void fill_flat_row(std::mt19937_64& rng, float* row, int64_t vocab) {
  std::normal_distribution<float> body(0.0f, 1.0f);
  for (int64_t v = 0; v < vocab; ++v) row[v] = body(rng);
}

}  // namespace lastmile::cli
