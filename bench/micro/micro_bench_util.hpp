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

// SortScratch for rows of `vocab` entries, as a worker's of `backend` (backend.hpp: ids and
// floats for its list_room plus kSortSlack, and key_storage_size words for the keys and the
// histogram).
struct Scratch {
  std::vector<int32_t> ids;
  std::vector<float> values;
  std::vector<uint64_t> keys;
  int64_t vocab;
  size_t room;
  Scratch(int64_t vocab_size, const detail::Backend& backend)
      : ids(backend.list_room(vocab_size) + detail::kSortSlack),
        values(backend.list_room(vocab_size) + detail::kSortSlack),
        keys(detail::key_storage_size(static_cast<size_t>(vocab_size))),
        vocab(vocab_size),
        room(backend.list_room(vocab_size)) {}
  detail::SortScratch view() {
    return detail::SortScratch::over(ids, values, keys, static_cast<size_t>(vocab), room);
  }
};

}  // namespace lastmile::micro
