// Google Benchmark micro-benchmarks of the fast CPU backend's kernels (cpu/kernels.hpp) and of its
// input draw per kind of row, one row of LLM-shaped logits, cache-hot, on the Highway target this
// machine dispatches to. bytes_per_second counts the row's fp32 bytes once, so each kernel reads
// against BM_CpuRowMax, the read roofline; a slowdown of one kernel on one target (the AVX2
// compress that copied its lane table per vector, 16x) shows here first. This VM has slow phases
// in which the same binary runs up to 2x slower: compare builds run alternately.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "backend.hpp"
#include "cpu/kernels.hpp"
#include "micro_bench_util.hpp"

namespace {

namespace cpu = lastmile::cpu;
using lastmile::DType;
using lastmile::micro::llm_row;
using lastmile::micro::Scratch;

constexpr size_t kBlock = 2048;  // the softmax statistics' block for vocabularies up to 2^20

void count_row_bytes(benchmark::State& state) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0) * 4);
}

// The value `percent` of the row's entries are at or above (0 < percent <= 100).
float value_keeping(std::vector<float> row, int64_t percent) {
  const auto k = static_cast<size_t>(std::max<int64_t>(1, percent * std::ssize(row) / 100));
  std::nth_element(row.begin(), row.begin() + (k - 1), row.end(), std::greater<float>());
  return row[k - 1];
}

void BM_CpuRowMax(benchmark::State& state) {
  const auto row = llm_row(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(cpu::row_max(row.data(), row.size()));
  count_row_bytes(state);
}

// The bf16 row of `row`, each value's top half (truncated).
std::vector<uint16_t> bf16_row(const std::vector<float>& row) {
  std::vector<uint16_t> half(row.size());
  for (size_t i = 0; i < row.size(); ++i)
    half[i] = static_cast<uint16_t>(std::bit_cast<uint32_t>(row[i]) >> 16);
  return half;
}

// Each group's max with the NaN / +inf check (range(1): the group size): top-k's groups of 64 to
// 1024 entries and the statistics' blocks of 2048, against the plain read of the same dtype
// (BM_CpuRowMax, BM_CpuRowMaxBits16). bytes_per_second counts the row's own bytes.
template <DType kDType>
void BM_CpuBlockMax(benchmark::State& state) {
  const auto llm = llm_row(state.range(0));
  const auto row = [&] {
    if constexpr (kDType == DType::bf16)
      return bf16_row(llm);
    else
      return llm;
  }();
  const auto group = static_cast<size_t>(state.range(1));
  std::vector<float> maxima(row.size() / group + 1);
  for (auto _ : state)
    benchmark::DoNotOptimize(
        cpu::source_block_max(row.data(), kDType, row.size(), group, maxima.data()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * row.size() * sizeof(row[0])));
}

void BM_CpuRowMaxBits16(benchmark::State& state) {
  const std::vector<uint16_t> row = bf16_row(llm_row(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(cpu::row_max_bits16(row.data(), row.size()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * row.size() * 2));
}

void BM_CpuArgmaxChecked(benchmark::State& state) {
  const auto row = llm_row(state.range(0));
  int64_t bad = 0;
  for (auto _ : state) benchmark::DoNotOptimize(cpu::argmax_checked(row.data(), row.size(), &bad));
  count_row_bytes(state);
}

void BM_CpuExpBlockSums(benchmark::State& state) {
  const auto row = llm_row(state.range(0));
  const float max = cpu::row_max(row.data(), row.size());
  std::vector<double> sums(row.size() / kBlock + 1);
  for (auto _ : state)
    benchmark::DoNotOptimize(cpu::exp_block_sums(row.data(), row.size(), max, kBlock, sums.data()));
  count_row_bytes(state);
}

// A cached row divided by 0.8 in place, range(1) the way (cpu::Division: 0 this CPU's, 1 the
// reciprocal, 2 the vector divide); the row divided back and forth, so it stays finite.
void BM_CpuDivide(benchmark::State& state) {
  auto row = llm_row(state.range(0));
  const auto how = static_cast<cpu::Division>(state.range(1));
  for (auto _ : state) {
    benchmark::DoNotOptimize(cpu::divide(row.data(), row.size(), 0.8f, how));
    benchmark::DoNotOptimize(cpu::divide(row.data(), row.size(), 1.25f, how));
  }
  state.SetBytesProcessed(2 * static_cast<int64_t>(state.iterations()) * state.range(0) *
                          static_cast<int64_t>(sizeof(float)));
}

// range(1): the temperature times 10 (10: undivided, the row read in place).
void BM_CpuBlockSoftmaxStats(benchmark::State& state) {
  const auto row = llm_row(state.range(0));
  const float t = static_cast<float>(state.range(1)) / 10.0f;
  std::vector<float> buffer(kBlock + 64), block_max(row.size() / kBlock + 1);
  std::vector<double> block_sums(block_max.size());
  for (auto _ : state) {
    cpu::NearMax none;
    benchmark::DoNotOptimize(cpu::block_softmax_stats(row.data(), DType::f32, row.size(), t, kBlock,
                                                      buffer.data(), block_max.data(),
                                                      block_sums.data(), &none));
  }
  count_row_bytes(state);
}

// The raw summary's pass over a caller's bf16 row (serving_mix_qwen's every row); range(1) rows
// taken in turn (64: a batch out of cache, as the scenario reads it).
void BM_CpuBlockSoftmaxStatsBf16(benchmark::State& state) {
  const auto row = llm_row(state.range(0));
  const auto rows = static_cast<size_t>(state.range(1));
  const std::vector<uint16_t> one = bf16_row(row);
  std::vector<uint16_t> half;
  for (size_t r = 0; r < rows; ++r) half.insert(half.end(), one.begin(), one.end());
  std::vector<float> buffer(kBlock + 64), block_max(row.size() / kBlock + 1);
  std::vector<double> block_sums(block_max.size());
  size_t next = 0;
  for (auto _ : state) {
    cpu::NearMax none;
    benchmark::DoNotOptimize(cpu::block_softmax_stats(half.data() + next * row.size(), DType::bf16,
                                                      row.size(), 1.0f, kBlock, buffer.data(),
                                                      block_max.data(), block_sums.data(), &none));
    next = (next + 1) % rows;
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * row.size() * 2));
}

// range(1): the percent of entries kept.
void BM_CpuCompressAtLeast(benchmark::State& state) {
  const auto row = llm_row(state.range(0));
  const float threshold = value_keeping(row, state.range(1));
  std::vector<int32_t> ids(row.size() + cpu::kCompressSlack);
  std::vector<float> values(row.size() + cpu::kCompressSlack);
  for (auto _ : state)
    benchmark::DoNotOptimize(cpu::compress_at_least(row.data(), row.size(), threshold, false,
                                                    ids.data(), values.data()));
  count_row_bytes(state);
}

void BM_CpuCompressSourceBf16(benchmark::State& state) {
  const auto row = llm_row(state.range(0));
  const float threshold = value_keeping(row, state.range(1));
  const std::vector<uint16_t> half = bf16_row(row);
  std::vector<int32_t> ids(row.size() + cpu::kCompressSlack);
  std::vector<float> values(row.size() + cpu::kCompressSlack);
  bool bad = false;
  for (auto _ : state)
    benchmark::DoNotOptimize(cpu::compress_source(half.data(), DType::bf16, half.size(), threshold,
                                                  ids.data(), values.data(), &bad));
  count_row_bytes(state);
}

// The band of probabilities between the entries kept at range(1) / 2 and range(1) percent.
void BM_CpuProbabilityBand(benchmark::State& state) {
  const auto row = llm_row(state.range(0));
  const float max = cpu::row_max(row.data(), row.size());
  std::vector<float> w(row.size());
  double block_sum = 0;
  const double total =
      cpu::exp_with_block_sums(row.data(), w.data(), row.size(), max, row.size() + 64, &block_sum);
  const auto inv_sum = static_cast<float>(1.0 / total);
  const float lo = std::exp(value_keeping(row, state.range(1)) - max) * inv_sum;
  const float hi = std::exp(value_keeping(row, state.range(1) / 2 + 1) - max) * inv_sum;
  std::vector<int32_t> ids(row.size() + cpu::kCompressSlack);
  double below = 0, above = 0;
  for (auto _ : state)
    benchmark::DoNotOptimize(
        cpu::probability_band(w.data(), w.size(), inv_sum, lo, hi, ids.data(), &below, &above));
  count_row_bytes(state);
}

// The cpu backend's draw from the caller's row (Backend::draw_from_input), one kind of row per
// benchmark: range(1) picks temperature 0.8, top-k 50 + top-p 0.9 + T 0.7, top-p 0.95, min-p 0.05.
void BM_CpuDrawFromInput(benchmark::State& state) {
  const auto row = llm_row(state.range(0));
  Scratch scratch(state.range(0), lastmile::detail::cpu_backend());
  lastmile::detail::DrawParams params;
  params.top_k = state.range(0);
  switch (state.range(1)) {
    case 0:
      params.temperature = 0.8f;
      break;
    case 1:
      params = {0.7f, 50, true, 0.9f, 0.0f};
      break;
    case 2:
      params.apply_top_p = true;
      params.top_p = 0.95f;
      break;
    default:
      params.min_p = 0.05f;
  }
  const auto& backend = lastmile::detail::cpu_backend();
  for (auto _ : state)
    benchmark::DoNotOptimize(backend.draw_from_input(row.data(), DType::f32, state.range(0), params,
                                                     0.5, scratch.view(), {}));
  count_row_bytes(state);
}

// The selection lists' key sort (cpu::sort_keys: vqsort's network, merged runs of it, or its
// partitions) against std::sort (kStd), on n keys as the lists make them: a random value's bits
// above a distinct id. Each call sorts a fresh copy of one of 64 lists in turn (the copy timed on
// both sides), so that no branch predictor learns one list's comparisons.
template <bool kStd>
void BM_CpuSortKeys(benchmark::State& state) {
  const auto n = static_cast<size_t>(state.range(0));
  constexpr size_t kLists = 64;
  std::mt19937_64 rng(5);
  std::vector<uint64_t> lists(kLists * n), sorted(n);
  for (size_t i = 0; i < lists.size(); ++i) lists[i] = (rng() >> 32 << 32) | (i % n);
  size_t list = 0;
  for (auto _ : state) {
    const uint64_t* keys = lists.data() + list * n;
    list = (list + 1) % kLists;
    std::copy(keys, keys + n, sorted.begin());
    if constexpr (kStd)
      std::sort(sorted.begin(), sorted.end());
    else
      cpu::sort_keys(sorted.data(), n);
    benchmark::DoNotOptimize(sorted.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

BENCHMARK(BM_CpuRowMax)->Arg(32000)->Arg(128256);
BENCHMARK(BM_CpuBlockMax<DType::f32>)->ArgsProduct({{32000, 128256}, {64, 128, 256, 2048}});
BENCHMARK(BM_CpuBlockMax<DType::bf16>)->ArgsProduct({{151936}, {256, 2048}});
BENCHMARK(BM_CpuRowMaxBits16)->Arg(151936);
BENCHMARK(BM_CpuArgmaxChecked)->Arg(32000)->Arg(128256);
BENCHMARK(BM_CpuExpBlockSums)->Arg(32000)->Arg(128256);
BENCHMARK(BM_CpuDivide)->ArgsProduct({{128256}, {0, 1, 2}});
BENCHMARK(BM_CpuBlockSoftmaxStats)->ArgsProduct({{32000, 128256}, {10, 8}});
BENCHMARK(BM_CpuBlockSoftmaxStatsBf16)->ArgsProduct({{151936}, {1, 64}});
BENCHMARK(BM_CpuCompressAtLeast)->ArgsProduct({{32000, 128256}, {1, 25}});
BENCHMARK(BM_CpuCompressSourceBf16)->ArgsProduct({{128256}, {1, 25}});
BENCHMARK(BM_CpuProbabilityBand)->ArgsProduct({{128256}, {10, 40}});
BENCHMARK(BM_CpuDrawFromInput)->ArgsProduct({{32000, 128256}, {0, 1, 2, 3}});
BENCHMARK(BM_CpuSortKeys<false>)->Arg(50)->Arg(200)->Arg(843)->Arg(4096);
BENCHMARK(BM_CpuSortKeys<true>)->Arg(50)->Arg(200)->Arg(843)->Arg(4096);

}  // namespace
