// Google Benchmark micro-benchmarks of the scalar reference backend's row kernels (the oracle),
// one row of LLM-shaped logits, cache-hot: what the fast CPU backend (cpu_kernels_bench.cpp) is
// measured against.
#include <benchmark/benchmark.h>

#include <vector>

#include "backend.hpp"
#include "micro_bench_util.hpp"

namespace {

using lastmile::micro::llm_row;
using lastmile::micro::Scratch;

const lastmile::detail::Backend& oracle() { return lastmile::detail::reference_backend(); }

void BM_ReferenceArgmax(benchmark::State& state) {
  const auto row = llm_row(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(oracle().row_argmax(row.data(), state.range(0)));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0) * 4);
}

void BM_ReferenceLogSoftmax(benchmark::State& state) {
  const auto row = llm_row(state.range(0));
  std::vector<float> work(row.size());
  for (auto _ : state) {
    work = row;
    oracle().log_softmax(work.data(), state.range(0));
    benchmark::DoNotOptimize(work.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0) * 4);
}

void BM_ReferenceTopKTopP(benchmark::State& state) {
  const auto row = llm_row(state.range(0));
  std::vector<float> work(row.size());
  Scratch scratch(state.range(0), oracle());
  for (auto _ : state) {
    work = row;
    oracle().apply_top_k_top_p(work.data(), state.range(0), 50, true, 0.9f, scratch.view());
    benchmark::DoNotOptimize(work.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0) * 4);
}

void BM_ReferenceDraw(benchmark::State& state) {
  const auto row = llm_row(state.range(0));
  Scratch scratch(state.range(0), oracle());
  for (auto _ : state)
    benchmark::DoNotOptimize(oracle().draw(row.data(), state.range(0), 0.5, scratch.view()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0) * 4);
}

BENCHMARK(BM_ReferenceArgmax)->Arg(32000)->Arg(128256);
BENCHMARK(BM_ReferenceLogSoftmax)->Arg(32000)->Arg(128256);
BENCHMARK(BM_ReferenceTopKTopP)->Arg(32000)->Arg(128256);
BENCHMARK(BM_ReferenceDraw)->Arg(32000)->Arg(128256);

}  // namespace
