// lastmile — Sampler::sample: the pipeline of spec §2.1, one step per line, run on every row.
#include "lastmile/sampler.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <new>
#include <string>
#include <thread>

#include "lastmile/error.hpp"
#include "moved_from.hpp"
#include "pipeline/steps.hpp"
#include "random/philox.hpp"
#include "sampler_impl.hpp"
#include "translate_bad_alloc.hpp"
#include "validate.hpp"

namespace lastmile {
namespace detail {
namespace {

int resolve_threads(int threads) {
  if (threads > 0) return threads;
  return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u,
                                     static_cast<unsigned>(SamplerConfig::kMaxThreads)));
}

RowSampling row_sampling(const RequestParams& p, int64_t vocab_size) {
  if (p.is_greedy()) return {true, 1.0f, vocab_size, 1.0f, 0.0f};
  const int64_t top_k = p.top_k > 0 && p.top_k < vocab_size ? p.top_k : vocab_size;
  return {false, p.temperature, top_k, p.top_p, p.min_p};
}

// A row's names in its errors: in a Batch "request 3" / "row 3"; a kept request (RequestBatch,
// whose callers never see the Batch) by its id beside the row. Appended piece by piece: g++ 12
// warns (-Wrestrict, a false positive) on "..." + std::string(...) here.
std::string request_name(int64_t row, std::span<const KeptRowState> kept) {
  std::string name = "request ";
  if (kept.empty()) return name += std::to_string(row);
  name += '\'';
  name += kept[static_cast<size_t>(row)].request_id;
  name += "' (row ";
  name += std::to_string(row);
  return name += ')';
}
std::string row_name(int64_t row, std::span<const KeptRowState> kept) {
  std::string name = "row ";
  name += std::to_string(row);
  if (kept.empty()) return name;
  name += " (request '";
  name += kept[static_cast<size_t>(row)].request_id;
  return name += "')";
}

// A ParallelFor that runs a row's chunks on the pool's threads (which then poll for the row's
// next pass).
ParallelFor chunks_over(ThreadPool& pool) {
  return {&pool, [](void* context, int64_t count, void* task, void (*call)(void*, int64_t)) {
            auto chunk = [&](int64_t i, int /*worker*/) { call(task, i); };
            static_cast<ThreadPool*>(context)->run(count, chunk, ThreadPool::Idle::poll);
          }};
}

// Whether the rows run one after another, each split over the threads (when it pays: see
// sample()), rather than side by side: a lone row always; a few rows only if each leaves two
// threads or more to itself and all of them split (a row the steps edit does not, and would lose
// the thread it had).
bool split_rows(const BatchPlan& plan, const Batch& batch, int threads) {
  if (plan.num_rows == 1) return true;
  if (plan.num_rows * 2 > threads) return false;
  return std::all_of(batch.requests.begin(), batch.requests.end(),
                     [&](const BatchRequest& r) { return reads_only_callers_row(plan, r); });
}

void store_sampled_token(RowStep& row) { row.out.sampled[row.row] = row.sampled_token; }

// The pipeline for one row (spec §2.1), steps 1-9. Rows are independent: any thread, any order.
void run_pipeline(RowStep& row) {
  // 1  raw modes: step 8 reads the caller's row, which no step edits (raw_logprobs.cpp)
  // 2-7 in one read (or two) for an unedited row whose working row nothing reads: greedy, random
  if (take_greedy_token_within_callers_bounds(row) || take_greedy_token_from_input(row) ||
      draw_token_from_input(row) || draw_token_from_penalised_input(row)) {
    if (!row.failed()) gather_logprobs(row);  // 8  raw modes only, from the caller's row
    return store_sampled_token(row);
  }
  if (!convert_to_float32(row)) return;  // 2  NaN / +inf: reported after the batch
  apply_allowed_token_ids(row);          // 3
  apply_bad_words(row);                  // 4
  apply_min_tokens(row);                 // 5  argmax-changing processors: built-ins,
  apply_logit_bias(row);                 //
  apply_custom_processors(row, false);   //    then custom ones (argmax_invariant = false)
  apply_penalties(row);                  // 6
  if (row.failed()) return;              //    +inf / NaN made by 5-6: reported after the batch
  sample_tokens(row);                    // 7  greedy, temperature, min_p, top-k/p, draw
  if (row.failed()) return;              //    +inf / NaN made by 7b-c
  gather_logprobs(row);                  // 8
  store_sampled_token(row);              // 9  the output
}

}  // namespace

SamplerImpl::SamplerImpl(SamplerConfig config)
    : config_((validate_config(config), std::move(config))),
      backend_(config_.backend == BackendKind::reference ? reference_backend() : cpu_backend()),
      pool_(resolve_threads(config_.threads)),
      scratch_(pool_.num_threads()) {}

void SamplerImpl::sample_row(const BatchPlan& plan, const LogitsView& logits, const Batch& batch,
                             std::span<const KeptRowState> kept, int64_t row, int worker,
                             const ParallelFor& split) {
  const BatchRequest& request = batch.requests[row];
  const KeptRowState* state = kept.empty() ? nullptr : &kept[row];
  uint64_t seed = 0;
  if (request.params.seed)
    seed = *request.params.seed;
  else if (state)
    seed = state->seed;
  else
    seed = derive_seed(derive_seed(plan.sampler_seed, plan.call_index), static_cast<uint64_t>(row));
  RowScratch& scratch = scratch_[worker];
  scratch.raw_summary.known = false;
  RowStep step{plan,
               backend_,
               logits,
               request,
               row,
               row_sampling(request.params, plan.vocab_size),
               seed,
               state ? state->seen : std::span<const uint64_t>{},
               state ? state->output_counts : std::span<const TokenCount>{},
               state != nullptr,
               scratch,
               out_,
               split,
               std::span<float>(scratch.logits.data(), plan.vocab_size),
               /*greedy_token=*/0,
               /*sampled_token=*/0,
               RowFailure{},
               /*divided_by_temperature=*/false,
               /*repetition_applied=*/false};
  run_pipeline(step);
  failures_[row] = step.failure;
}

// Sizes every worker's scratch for this batch before any row runs, so that which worker takes
// which row never decides whether a call allocates: steady state allocates nothing.
void SamplerImpl::reserve_scratch(const Batch& batch, std::span<const KeptRowState> kept) {
  if (batch.requests.empty()) return;
  size_t history = 0, allowed = 0, counts = 0;
  for (const BatchRequest& r : batch.requests) {
    if (kept.empty())  // else the counts are kept
      history = std::max(
          history, r.prompt_token_ids.size() + r.output_token_ids.size() + r.spec_token_ids.size());
    if (r.params.allowed_token_ids) allowed = std::max(allowed, r.params.allowed_token_ids->size());
  }
  for (const KeptRowState& state : kept)  // the capacity: counts that grow allocate nothing
    counts = std::max({counts, state.output_counts.size(), state.counts_capacity});
  for (RowScratch& s : scratch_) {
    if (!scratch_ready_)  // the first real call sizes the rows
      s.reserve(config_.vocab_size, backend_.list_room(config_.vocab_size));
    s.reserve_lists(history, allowed, std::max(history, counts));
  }
  scratch_ready_ = true;
}

void SamplerImpl::sample_rows(const BatchPlan& plan, const LogitsView& logits, const Batch& batch,
                              std::span<const KeptRowState> kept) {
  if (pool_.num_threads() == 1) {
    for (int64_t row = 0; row < plan.num_rows; ++row)
      sample_row(plan, logits, batch, kept, row, 0, ParallelFor{});
    return;
  }
  using Clock = std::chrono::steady_clock;
  const bool spread = rows_spread(plan.num_rows);
  Clock::duration caller_time{};
  int64_t caller_rows = 0;
  auto task = [&](int64_t row, int worker) {
    if (worker != 0) return sample_row(plan, logits, batch, kept, row, worker, ParallelFor{});
    const Clock::time_point start = Clock::now();
    sample_row(plan, logits, batch, kept, row, 0, ParallelFor{});
    caller_time += Clock::now() - start;
    ++caller_rows;
  };
  const Clock::time_point start = Clock::now();
  if (spread) {
    pool_.run(plan.num_rows, task);
  } else {
    for (int64_t row = 0; row < plan.num_rows; ++row) task(row, 0);
  }
  const auto ns = [](Clock::duration d) {
    return static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
  };
  schedule_.record(
      spread, caller_rows > 0 ? ns(caller_time) / static_cast<double>(caller_rows) : -1,
      static_cast<double>(spread ? pool_.last_worker_delay_ns() : -1), ns(Clock::now() - start));
}

SamplerImpl::Call::Call(std::atomic<bool>& in_call, const char* what, const char* owner)
    : in_call_(in_call) {
  if (in_call_.exchange(true, std::memory_order_acquire))
    throw InvalidArgument(std::string(what) + ": called while another call on this " + owner +
                          " runs (from a custom logits processor, or from another thread): one "
                          "call at a time");
}

const SamplerOutput& SamplerImpl::sample_within(const LogitsView& logits, const Batch& batch,
                                                std::span<const KeptRowState> kept) {
  // A sleeping worker starts some 40-90 us after it is woken (docs/performance-log.md): woken now,
  // it starts while the caller checks the batch (30-40 us for 64 requests of 2k-token histories).
  if (rows_spread(logits.num_rows)) pool_.wake();
  validate_batch(logits, batch, config_, !kept.empty());  // spec §12; throws InvalidArgument
  BatchPlan plan = plan_batch(batch, config_.vocab_size, config_.logprobs_mode);
  plan.sampler_seed = config_.seed;
  plan.call_index = calls_;  // counted below, once the call succeeds
  plan.processors = config_.logits_processors;
  reserve_scratch(batch, kept);
  out_.prepare(plan);
  failures_.resize(plan.num_rows);
  const SplitWindow::Clock::time_point start = SplitWindow::Clock::now();
  SplitWindow::LoneRow lone = SplitWindow::LoneRow::no;
  if (split_rows(plan, batch, pool_.num_threads())) {
    // A lone row over the pool only while its workers still poll from the last call, and while
    // that has been the faster choice (split_window.hpp). A few rows (4 threads or more) split as
    // before: their passes share one wake-up, which this 2-core machine cannot measure.
    if (plan.num_rows == 1) {  // one thread: no worker to split over, nothing to learn
      lone = pool_.num_threads() > 1 && split_window_.should_split(start)
                 ? SplitWindow::LoneRow::split
                 : SplitWindow::LoneRow::in_order;
    }
    const bool over_pool = lone != SplitWindow::LoneRow::in_order;
    const ParallelFor split = over_pool ? chunks_over(pool_) : ParallelFor{};
    for (int64_t row = 0; row < plan.num_rows; ++row)
      sample_row(plan, logits, batch, kept, row, /*worker=*/0, split);
  } else {
    sample_rows(plan, logits, batch, kept);
  }
  // Not reached when a row throws (a custom processor, bad_alloc): the window and the times it
  // learned then date from the last call that returned.
  split_window_.call_ended(start, SplitWindow::Clock::now(), lone);
  for (int64_t row = 0; row < plan.num_rows; ++row) {
    const RowFailure& failure = failures_[row];
    const int64_t bad = failure.token_id;
    if (bad < 0) continue;
    if (failure.made_by != nullptr)  // finite logits, parameters that overflow them
      throw InvalidArgument(request_name(row, kept) + ": " + failure.made_by + " made the logits " +
                            (failure.is_nan ? "NaN" : "+inf") + " at token_id " +
                            std::to_string(bad));
    float value = 0;
    backend_.convert_row(
        static_cast<const char*>(row_pointer(logits, row)) + bad * element_size(logits.dtype),
        logits.dtype, &value, 1);
    throw InvalidArgument(ErrorCode::invalid_logits, row_name(row, kept) + ": logits contain " +
                                                         (std::isnan(value) ? "NaN" : "+inf") +
                                                         " at token_id " + std::to_string(bad));
  }
  // Only a call that returns counts: a caller who retries after an error keeps its draws.
  ++calls_;
  return out_.finish(plan);  // 9  the output lives in the workspace
}

}  // namespace detail

Sampler::Sampler(SamplerConfig config)
    : impl_(detail::translating_bad_alloc(
          "Sampler", [&] { return std::make_unique<detail::SamplerImpl>(std::move(config)); })) {}
Sampler::~Sampler() = default;
Sampler::Sampler(Sampler&&) noexcept = default;
Sampler& Sampler::operator=(Sampler&&) noexcept = default;

const SamplerOutput& Sampler::sample(const LogitsView& logits, const Batch& batch) {
  return detail::translating_bad_alloc("sample", [&]() -> const SamplerOutput& {
    return detail::live(impl_, "Sampler").sample(logits, batch);
  });
}

const SamplerConfig& Sampler::config() const {
  return detail::translating_bad_alloc(
      "config", [&]() -> const SamplerConfig& { return detail::live(impl_, "Sampler").config(); });
}

std::string Sampler::backend_name() const {
  return detail::translating_bad_alloc(
      "backend_name", [&] { return detail::describe(detail::live(impl_, "Sampler").backend()); });
}

}  // namespace lastmile
