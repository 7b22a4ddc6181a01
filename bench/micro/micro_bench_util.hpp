// lastmile micro-benchmarks — what every kernel benchmark needs: LLM-shaped rows (tools/
// llm_logits.hpp) and selection scratch sized as the Sampler sizes it.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "backend.hpp"
#include "llm_logits.hpp"

namespace lastmile::micro {

inline std::vector<float> llm_row(int64_t vocab) {
  std::mt19937_64 rng(42);
  std::vector<float> row(static_cast<size_t>(vocab));
  cli::fill_llm_row(rng, row.data(), vocab);
  return row;
}

// SortScratch for rows of up to `vocab` entries, as a worker's (backend.hpp: one row each of ids
// and floats plus kSortSlack, and sort_keys_size keys).
struct Scratch {
  std::vector<int32_t> ids;
  std::vector<float> values;
  std::vector<uint64_t> keys;
  std::vector<double> histogram;
  explicit Scratch(int64_t vocab)
      : ids(static_cast<size_t>(vocab) + detail::kSortSlack),
        values(static_cast<size_t>(vocab) + detail::kSortSlack),
        keys(detail::sort_keys_size(static_cast<size_t>(vocab))),
        histogram(detail::kHistogramSize) {}
  detail::SortScratch view() { return {ids, values, keys, histogram}; }
};

}  // namespace lastmile::micro
