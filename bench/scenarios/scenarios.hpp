// lastmile bench — the scenarios `lastmile bench` times (issue #3's list, and a few without a
// target that show where the bench's LLM shape is kind), and the logits each reads.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "lastmile/lastmile.hpp"
#include "llm_logits.hpp"

namespace lastmile::bench {

struct Scenario {
  std::string name;
  int64_t batch;
  int64_t vocab;
  DType dtype = DType::f32;
  cli::LogitsShape shape = cli::LogitsShape::llm;  // llm_logits.hpp
  int threads;
  std::function<void(int64_t row, BatchRequest&, std::vector<TokenId>& history)> request;
  std::optional<int32_t> num_logprobs;
  bool stateful = false;  // RequestBatch::step with the request's history as its prompt
  // A twin timed in turns with this scenario, for a target that is a ratio of the two (two
  // scenarios timed apart moved with the machine's memory speed: 1.03-1.6 for one build).
  enum class Twin { none, empty_history, llm_shaped, one_thread } twin = Twin::none;
  BackendKind backend = BackendKind::automatic;
  // > 0: all but this many entries of each row -inf, as an engine's grammar mask leaves them.
  int64_t finite = 0;
  // > 0: every timed call follows an idle wait this long, as an engine's decode steps follow its
  // forward pass (the pool's workers then sleep). This and fresh_rows: stateless scenarios only.
  std::chrono::microseconds pause{0};
  // Each call reads its own copy of the batch's logits, none read by the calls of the last 512 MiB
  // (above the L3 of today's server CPUs: the Xeon in docs/performance-log.md shares 260 MB), so
  // rows come from memory as a decode step's do (one row read again stays in a core's L2).
  bool fresh_rows = false;
};

// Bytes of logits a fresh_rows scenario cycles through.
inline constexpr size_t kFreshBytes = size_t{512} << 20;

// `base`'s requests on rows of another shape, under another name.
Scenario reshaped(Scenario base, std::string name, cli::LogitsShape shape);

// Every scenario, in the order the bench runs and prints them, on `threads` threads.
std::vector<Scenario> all_scenarios(int threads);

// A dtype as the table, the progress lines and the JSON name it.
const char* dtype_label(DType dtype);

// The scenario's batch of logits (seeded: the same bytes in every run), in its dtype.
std::vector<unsigned char> make_logits(const Scenario& s);

}  // namespace lastmile::bench
