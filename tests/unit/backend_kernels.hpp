// lastmile tests — the fixture of every backend's row kernel tests (backend_*kernels_test.cpp):
// each test runs on the scalar reference and the Highway CPU backend, at awkward sizes (vocab 1,
// 7, 111, 32001 hit every vector tail), instantiated once in backend_kernels_test.cpp.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <tuple>

#include "backend.hpp"
#include "unit/test_util.hpp"

namespace lastmile_test {

using lastmile::detail::Backend;
using lastmile::detail::SortScratch;
using lastmile::detail::TokenCount;

using KernelParam = std::tuple<std::string, int64_t>;  // backend name, vocab

class BackendKernels : public ::testing::TestWithParam<KernelParam> {
 protected:
  const Backend& backend() const {
    return std::get<0>(GetParam()) == "cpu" ? lastmile::detail::cpu_backend()
                                            : lastmile::detail::reference_backend();
  }
  int64_t n() const { return std::get<1>(GetParam()); }
  std::vector<float> logits(uint64_t seed) const {
    return lcg_logits(static_cast<size_t>(n()), seed);
  }
  // Pairwise distinct logits in [-4, 4) (an evenly spaced grid, shuffled): no ties anywhere.
  std::vector<float> distinct_logits(uint64_t seed) const {
    std::vector<float> x(static_cast<size_t>(n()));
    for (int64_t i = 0; i < n(); ++i)
      x[i] = -4.0f + 8.0f * static_cast<float>(i) / static_cast<float>(n());
    std::shuffle(x.begin(), x.end(), std::mt19937_64(seed));
    return x;
  }
  // A row for the fused conversions: fp32 logits, 16-bit patterns (finite, both signs) for
  // bf16 / fp16, and a seen-token bitmap with empty words, full words and mixed ones.
  struct RepeatedRow {
    std::vector<float> wide;
    std::vector<uint16_t> halves;
    std::vector<uint64_t> seen;
  };
  RepeatedRow repeated_row(uint64_t seed) const {
    std::mt19937_64 rng(seed);
    RepeatedRow row{logits(seed + 1), std::vector<uint16_t>(static_cast<size_t>(n())),
                    std::vector<uint64_t>(lastmile::detail::seen_words(n()))};
    for (uint16_t& b : row.halves) b = static_cast<uint16_t>(rng() & 0xbfffu);
    for (size_t w = 0; w < row.seen.size(); ++w)
      row.seen[w] = w % 3 == 0 ? 0 : w % 3 == 1 ? ~0ull : rng();
    return row;
  }
  // BlockMaximaAreEachBlocksLargestEntry's checks on one row.
  void expect_block_maxima_of(const RepeatedRow& row);
  // A worker's: lists of up to the backend's list_room(n) entries, exactly.
  SortScratch scratch() {
    const size_t room = backend().list_room(n());
    ids_.assign(room + lastmile::detail::kSortSlack, 0);
    values_.assign(room + lastmile::detail::kSortSlack, 0.0f);
    // A worker's, holding what earlier rows left (NaN's bits as doubles): no kernel may rely on it.
    keys_.assign(lastmile::detail::key_storage_size(static_cast<size_t>(n())), ~uint64_t{0});
    return SortScratch::over(ids_, values_, keys_, static_cast<size_t>(n()), room);
  }
  // For u over (0, 1): the draw given apply_top_k_top_p's `listed` (with its scratch s) is the
  // draw over the whole row.
  void expect_listed_draws_equal_full_draws(const std::vector<float>& x, SortScratch s,
                                            size_t listed) {
    const std::vector<int32_t> ids(s.ids.begin(), s.ids.end());
    const std::vector<float> values(s.values.begin(), s.values.end());
    for (double u = 0.005; u < 1.0; u += 0.01) {
      const TokenId full = backend().draw(x.data(), n(), u, scratch());  // reuses the storage
      std::copy(ids.begin(), ids.end(), s.ids.begin());
      std::copy(values.begin(), values.end(), s.values.begin());
      EXPECT_EQ(backend().draw(x.data(), n(), u, s, listed), full) << "u " << u;
    }
  }

 private:
  std::vector<int32_t> ids_;
  std::vector<float> values_;
  std::vector<uint64_t> keys_;
};

// Token ids by descending value, ties by ascending id.
inline std::vector<int32_t> descending_order(const std::vector<float>& x) {
  std::vector<int32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
  return order;
}

}  // namespace lastmile_test
