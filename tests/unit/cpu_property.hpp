// lastmile tests — what the CPU backend's property tests share (cpu_*_test.cpp): the two
// backends, a caller's row in each dtype, a worker's scratch, random rows, the checks of a draw
// and of top-p against the oracle, and a Sampler batch of penalised rows.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>

#include "backend.hpp"
#include "cpu/input_draw.hpp"
#include "cpu/selection.hpp"
#include "unit/backwards_chunks.hpp"
#include "unit/test_util.hpp"

namespace lastmile_test {

using lastmile::detail::Backend;
using lastmile::detail::SortScratch;

inline const Backend& cpu() { return lastmile::detail::cpu_backend(); }
inline const Backend& oracle() { return lastmile::detail::reference_backend(); }

// A float32 row as the caller's logits of `dtype`: itself for fp32; else its 16-bit patterns in
// `halves` (bf16 by truncation; f16 of row / f16_scale, scaled down to stay in f16's range).
inline const void* caller_row(const std::vector<float>& row, lastmile::DType dtype,
                              std::vector<uint16_t>& halves, float f16_scale) {
  if (dtype == lastmile::DType::f32) return row.data();
  halves.resize(row.size());
  for (size_t i = 0; i < row.size(); ++i)
    halves[i] = dtype == lastmile::DType::bf16
                    ? static_cast<uint16_t>(std::bit_cast<uint32_t>(row[i]) >> 16)
                    : f16_bits(row[i] / f16_scale);
  return halves.data();
}

// A backend's scratch for a row of n, as a worker's: lists of up to the backend's list_room(n)
// entries, exactly (a kernel that lists more writes past the storage, which ASan reports).
struct Scratch {
  explicit Scratch(const Backend& owner) : backend(&owner) {}
  const Backend* backend;
  std::vector<int32_t> ids;
  std::vector<float> values;
  std::vector<uint64_t> keys;
  SortScratch get(size_t n) {
    const size_t room = backend->list_room(static_cast<int64_t>(n));
    ids.assign(room + lastmile::detail::kSortSlack, 0);
    values.assign(room + lastmile::detail::kSortSlack, 0.0f);
    // As a worker's, holding what earlier rows left (NaN's bits as doubles): no kernel may rely
    // on it.
    keys.assign(lastmile::detail::key_storage_size(n), ~uint64_t{0});
    return SortScratch::over(ids, values, keys, n, room);
  }
};

// A random row: LLM-shaped (a peaked head over a normal body) or flat, some entries -inf, and
// some values repeated to make ties.
inline std::vector<float> random_row(std::mt19937_64& rng) {
  const int64_t sizes[] = {1, 2, 7, 64, 111, 1000, 4097, 40000};
  const int64_t n = sizes[rng() % 8];
  std::normal_distribution<float> body(0.0f, rng() % 2 ? 2.5f : 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = body(rng);
  for (int i = 0; i < 30 && n > 1; ++i) x[rng() % n] += 8.0f;
  const int mask_percent = static_cast<int>(rng() % 3) * 45;  // 0, 45 or 90 % masked
  for (float& v : x)
    if (static_cast<int>(rng() % 100) < mask_percent) v = -kInf;
  for (int i = 0; i < 10 && n > 1; ++i) x[rng() % n] = x[rng() % n];  // ties
  return x;
}

// Dense rows are drawn with Highway's Exp: the token must equal the oracle's unless u sits
// within 1e-6 of a CDF step (computed here in double), where either neighbour is right.
inline void expect_consistent_draw(const std::vector<float>& x, double u, TokenId fast,
                                   TokenId slow) {
  if (fast == slow) return;
  const float max = *std::max_element(x.begin(), x.end());
  double total = 0;
  for (float v : x) total += std::exp(static_cast<double>(v) - max);
  double below = 0;
  for (TokenId i = 0; i < fast; ++i) below += std::exp(static_cast<double>(x[i]) - max) / total;
  const double at = below + std::exp(static_cast<double>(x[fast]) - max) / total;
  EXPECT_TRUE(below <= u + 1e-6 && u - 1e-6 <= at) << "fast " << fast << " oracle " << slow << " u "
                                                   << u << " step [" << below << ", " << at << "]";
}

// Top-p alone on x with the cpu backend and the oracle: the largest token stays, and the kept
// sets differ only at tokens whose cumulative probability is within 1e-6 of 1 - p. Returns how
// many tokens the oracle kept.
inline int64_t expect_top_p_matches(const std::vector<float>& x, float p, int trial) {
  Scratch a(cpu()), b(oracle());
  const auto n = static_cast<int64_t>(x.size());
  std::vector<float> fast = x, slow = x;
  cpu().apply_top_k_top_p(fast.data(), n, n, true, p, a.get(x.size()));
  oracle().apply_top_k_top_p(slow.data(), n, n, true, p, b.get(x.size()));
  const auto top = std::max_element(x.begin(), x.end()) - x.begin();  // the first largest
  if (x[top] != -kInf) {
    EXPECT_EQ(fast[top], x[top]) << "trial " << trial << " p " << p;
  }
  // The oracle's ascending cumulative probability of each token, in double.
  std::vector<int32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int32_t i, int32_t j) { return x[i] < x[j] || (x[i] == x[j] && i > j); });
  const float max = x[order.back()];
  if (max == -kInf) return 0;
  double total = 0;
  for (float v : x) total += std::exp(static_cast<double>(v) - max);
  double cumulative = 0;
  int64_t kept = 0;
  for (int32_t id : order) {
    cumulative += std::exp(static_cast<double>(x[id]) - max) / total;
    if (std::isinf(fast[id]) != std::isinf(slow[id])) {
      EXPECT_NEAR(cumulative, 1.0 - p, 1e-6) << "trial " << trial << " token " << id;
    }
    kept += !std::isinf(slow[id]);
  }
  return kept;
}

// A ParallelFor that runs every task in order on the calling thread.
inline const lastmile::detail::ParallelFor kSerial{};

// A Sampler's config for `rows` rows of `vocab` on `backend`.
inline lastmile::SamplerConfig backend_config(int64_t vocab, int64_t rows,
                                              lastmile::BackendKind backend) {
  lastmile::SamplerConfig config;
  config.vocab_size = vocab;
  config.max_batch = rows;
  config.backend = backend;
  return config;
}

// Rows of logits for a Sampler, their histories and the batch to fill: the penalised rows'
// tests' set-up. view() reads them as fp32, or as bf16 by truncation.
struct PenalisedBatch {
  PenalisedBatch(int64_t vocab_size, int num_rows)
      : vocab(vocab_size),
        rows(num_rows),
        logits(static_cast<size_t>(vocab_size * num_rows)),
        histories(static_cast<size_t>(num_rows)) {}
  float* row(int r) { return logits.data() + r * vocab; }
  // The ids of row r's `count` largest entries, largest first.
  std::vector<int64_t> largest(int r, int count) {
    std::vector<int64_t> order(static_cast<size_t>(vocab));
    std::iota(order.begin(), order.end(), 0);
    const float* x = row(r);
    std::partial_sort(order.begin(), order.begin() + count, order.end(),
                      [x](int64_t a, int64_t b) { return x[a] > x[b]; });
    return order;
  }
  lastmile::LogitsView view(bool bf16) {
    if (!bf16) return lastmile::LogitsView::f32(logits.data(), rows, vocab);
    halves.clear();
    for (float v : logits)
      halves.push_back(static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16));
    return lastmile::LogitsView::bf16(halves.data(), rows, vocab);
  }

  int64_t vocab;
  int rows;
  std::vector<float> logits;
  std::vector<std::vector<lastmile::TokenId>> histories;
  lastmile::Batch batch;
  std::vector<uint16_t> halves;
};

// Has the batch ask `count` logprobs in `mode`, or none.
inline void ask_logprobs(lastmile::Batch& batch, std::optional<lastmile::LogprobsMode> mode,
                         int count) {
  batch.num_logprobs.reset();
  if (mode) batch.num_logprobs = count;
  batch.logprobs_mode = mode;
}

}  // namespace lastmile_test
