// Google Benchmark micro-benchmarks of the row kernels, one row of LLM-shaped logits, cache-hot:
// the scalar reference backend (the oracle; the fast CPU backend of issue #3 will sit beside it)
// and the Highway read roofline.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "backend.hpp"
#include "cpu/kernels.hpp"
#include "llm_logits.hpp"

namespace {

std::vector<float> llm_row(int64_t vocab) {
  std::mt19937_64 rng(42);
  std::vector<float> row(static_cast<size_t>(vocab));
  lastmile::cli::fill_llm_row(rng, row.data(), vocab);
  return row;
}

const lastmile::detail::Backend& oracle() { return lastmile::detail::reference_backend(); }

void BM_RooflineRowMax(benchmark::State& state) {
  const auto row = llm_row(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(lastmile::cpu::row_max(row.data(), row.size()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0) * 4);
}

void BM_ReferenceArgmax(benchmark::State& state) {
  const auto row = llm_row(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(oracle().row_argmax(row.data(), state.range(0)));
}

void BM_ReferenceLogSoftmax(benchmark::State& state) {
  const auto row = llm_row(state.range(0));
  std::vector<float> work(row.size());
  for (auto _ : state) {
    work = row;
    oracle().log_softmax(work.data(), state.range(0));
    benchmark::DoNotOptimize(work.data());
  }
}

void BM_ReferenceTopKTopP(benchmark::State& state) {
  const auto row = llm_row(state.range(0));
  std::vector<float> work(row.size()), values(row.size());
  std::vector<int32_t> ids(row.size());
  for (auto _ : state) {
    work = row;
    oracle().apply_top_k_top_p(work.data(), state.range(0), 50, true, 0.9f, {ids, values});
    benchmark::DoNotOptimize(work.data());
  }
}

void BM_ReferenceDraw(benchmark::State& state) {
  const auto row = llm_row(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(oracle().draw(row.data(), state.range(0), 0.5));
}

BENCHMARK(BM_RooflineRowMax)->Arg(32000)->Arg(128256);
BENCHMARK(BM_ReferenceArgmax)->Arg(32000)->Arg(128256);
BENCHMARK(BM_ReferenceLogSoftmax)->Arg(32000)->Arg(128256);
BENCHMARK(BM_ReferenceTopKTopP)->Arg(32000)->Arg(128256);
BENCHMARK(BM_ReferenceDraw)->Arg(32000)->Arg(128256);

}  // namespace

BENCHMARK_MAIN();
