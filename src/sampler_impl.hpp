// lastmile — the Sampler behind its public face: workspace, threads and the row pipeline.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "backend.hpp"
#include "float_environment.hpp"
#include "lastmile/sampler.hpp"
#include "pipeline/output_buffers.hpp"
#include "pipeline/row_step.hpp"
#include "threading/row_schedule.hpp"
#include "threading/split_window.hpp"
#include "threading/thread_pool.hpp"

namespace lastmile::detail {

// What a RequestBatch keeps for a row across steps.
struct KeptRowState {
  uint64_t seed = 0;                          // used when the request has no seed of its own
  std::span<const uint64_t> seen;             // bit t: token t is in the prompt or the output
  std::span<const TokenCount> output_counts;  // one entry per distinct output token
  size_t counts_capacity = 0;   // room the request keeps for them (scratch is sized to match)
  std::string_view request_id;  // named beside the row in a row's error
};

class SamplerImpl {
 public:
  explicit SamplerImpl(SamplerConfig config);

  // A call on this sampler, or on the RequestBatch that owns it, from entry to return (or throw):
  // a second one before it ends (from a custom processor, or another thread) would share the
  // first's scratch and output, or free the histories its rows read, and throws InvalidArgument
  // naming `what` and `owner` instead.
  class Call {
   public:
    Call(std::atomic<bool>& in_call, const char* what, const char* owner);
    ~Call() { in_call_.store(false, std::memory_order_release); }
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

   private:
    std::atomic<bool>& in_call_;
    DefaultFloatEnvironment float_environment_;  // the caller's, back when the call returns
  };
  Call enter(const char* what, const char* owner = "sampler") { return {in_call_, what, owner}; }

  // kept: empty (stateless), or one entry per row. sample_within: the same, inside a Call the
  // caller holds.
  const SamplerOutput& sample(const LogitsView& logits, const Batch& batch) {
    const Call call = enter("sample");
    return sample_within(logits, batch, {});
  }
  const SamplerOutput& sample_within(const LogitsView& logits, const Batch& batch,
                                     std::span<const KeptRowState> kept);
  const SamplerConfig& config() const { return config_; }
  const Backend& backend() const { return backend_; }

 private:
  void reserve_scratch(const Batch& batch, std::span<const KeptRowState> kept);
  void sample_row(const BatchPlan& plan, const LogitsView& logits, const Batch& batch,
                  std::span<const KeptRowState> kept, int64_t row, int worker,
                  const ParallelFor& split);
  // Whether sample_rows runs `num_rows` rows side by side over the pool (schedule_ decides; one
  // row never spreads: the pool would run it in order, a worker's delay unmeasured).
  bool rows_spread(int64_t num_rows) const {
    return num_rows > 1 && pool_.num_threads() > 1 && schedule_.spread(num_rows);
  }
  // The rows side by side over the pool, or in order on the caller (rows_spread).
  void sample_rows(const BatchPlan& plan, const LogitsView& logits, const Batch& batch,
                   std::span<const KeptRowState> kept);

  SamplerConfig config_;
  const Backend& backend_;
  ThreadPool pool_;
  RowSchedule schedule_;
  SplitWindow split_window_;          // whether a lone row splits over the pool
  std::vector<RowScratch> scratch_;   // one per worker
  std::vector<RowFailure> failures_;  // per row: first NaN / +inf, if any
  OutputBuffers out_;
  uint64_t calls_ = 0;
  bool scratch_ready_ = false;
  std::atomic<bool> in_call_{false};  // a Call is running
};

}  // namespace lastmile::detail
