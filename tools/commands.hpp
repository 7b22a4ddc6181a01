// lastmile CLI — one function per subcommand, each in its own file.
#pragma once

#include <optional>
#include <string>

#include "lastmile/sampler.hpp"

namespace lastmile::cli {

struct RunOptions {
  std::string case_dir;
  std::string out_dir;
  std::optional<std::string> logprobs_mode;
  std::optional<int> num_logprobs;
  int repeat = 0;
  int threads = 0;
  BackendKind backend = BackendKind::automatic;
};

// The golden runner contract (../shared/golden/README.md). Throws lastmile::Error on bad input.
int run_case(const RunOptions& options);

struct DemoOptions {
  int steps = 8;
  int threads = 0;
  BackendKind backend = BackendKind::automatic;
};

struct BenchOptions {
  std::string scenario;  // a name or prefix; empty: all
  int threads = 0;
  BackendKind backend = BackendKind::automatic;
  std::string json_path;
};

// `lastmile bench`: scenarios timed against the roofline and the full-sort baseline.
int run_bench(const BenchOptions& options);

// The README's main job: an embedded LLM-shaped batch sampled for a few steps.
int run_demo(const DemoOptions& options);

}  // namespace lastmile::cli
