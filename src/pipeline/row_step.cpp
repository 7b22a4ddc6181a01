// lastmile — RowStep and RowScratch helpers.
#include "pipeline/row_step.hpp"

namespace lastmile::detail {

void RowScratch::reserve(int64_t vocab_size, size_t backend_list_room) {
  const auto n = static_cast<size_t>(vocab_size);
  if (logits.size() < n) logits.resize(n);
  list_room = backend_list_room;
  // Compressing kernels store whole SIMD vectors past their count (cpu::kCompressSlack).
  if (sort_values.size() < list_room + kSortSlack) sort_values.resize(list_room + kSortSlack);
  if (sort_ids.size() < list_room + kSortSlack) sort_ids.resize(list_room + kSortSlack);
  if (sort_keys.size() < key_storage_size(n)) sort_keys.resize(key_storage_size(n));
  if (seen.size() < seen_words(vocab_size)) seen.assign(seen_words(vocab_size), 0);
}

void RowScratch::reserve_lists(size_t history_size, size_t allowed_size, size_t counts_size) {
  if (counts_by_block.size() < counts_size) counts_by_block.resize(counts_size);
  token_counts.reserve(history_size);
  history_index.clear();  // empty, so reserving rehashes nothing
  history_index.reserve(history_size, [](uint32_t) { return TokenId{0}; });
  saved.reserve(allowed_size);
}

const void* row_pointer(const LogitsView& logits, int64_t row) {
  const size_t element = element_size(logits.dtype);
  return static_cast<const char*>(logits.data) +
         static_cast<size_t>(row * row_stride(logits)) * element;
}

const void* RowStep::input_row() const { return row_pointer(input, row); }

bool edited_before_penalties(const BatchPlan& plan, const BatchRequest& request) {
  const RequestParams& p = request.params;
  const bool min_tokens_active =
      static_cast<int64_t>(request.output_token_ids.size()) < p.min_tokens &&
      !p.stop_token_ids.empty();
  return p.allowed_token_ids || !p.bad_words_token_ids.empty() || min_tokens_active ||
         !p.logit_bias.empty() || !plan.processors.empty();
}

bool penalised(const BatchPlan& plan, const RequestParams& p) {
  return plan.any_penalties && (p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f ||
                                p.presence_penalty != 0.0f);
}

bool edited_before_sampling(const BatchPlan& plan, const BatchRequest& request) {
  return edited_before_penalties(plan, request) || penalised(plan, request.params);
}

namespace {

// Whether step 6 can only lower entries: repetition >= 1 scales toward -inf on either sign,
// frequency and presence >= 0 subtract.
bool penalties_only_lower(const RequestParams& p) {
  return p.repetition_penalty >= 1.0f && p.frequency_penalty >= 0.0f && p.presence_penalty >= 0.0f;
}

}  // namespace

bool greedy_within_callers_bounds(const BatchPlan& plan, const BatchRequest& request) {
  const RequestParams& p = request.params;
  return p.is_greedy() && !plan.logprobs_read_working_row() &&
         !edited_before_penalties(plan, request) && penalties_only_lower(p);
}

bool random_penalised_from_callers_row(const BatchPlan& plan, const BatchRequest& request) {
  const RequestParams& p = request.params;
  return !p.is_greedy() && !plan.logprobs_read_working_row() && plan.processors.empty() &&
         !edited_before_penalties(plan, request) && penalised(plan, p) && penalties_only_lower(p);
}

const BlockMaxima* RowStep::callers_row_bounds() const {
  const RequestParams& p = params();
  const BlockMaxima& maxima = scratch.raw_summary.maxima;
  const bool bounded = scratch.raw_summary.known && p.logit_bias.empty() &&
                       plan.processors.empty() && penalties_only_lower(p) && maxima.block > 0 &&
                       maxima.blocks * maxima.block >= static_cast<size_t>(vocab_size());
  return bounded ? &maxima : nullptr;
}

bool reads_only_callers_row(const BatchPlan& plan, const BatchRequest& request) {
  return !plan.logprobs_read_working_row() && !edited_before_sampling(plan, request);
}

bool RowStep::edited_before_sampling() const {
  return detail::edited_before_sampling(plan, request);
}

History RowStep::history() const {
  if (plan.predict_bonus_token) return {request.output_token_ids, request.spec_token_ids};
  return {request.output_token_ids, {}};
}

std::span<const TokenCount> RowStep::count_history() {
  std::vector<TokenCount>& counts = scratch.token_counts;
  TokenIndex& index = scratch.history_index;
  counts.clear();
  const auto id_at = [&counts](uint32_t i) { return counts[i].token_id; };
  const History tokens = history();
  for (size_t i = 0; i < tokens.size(); ++i) {
    const TokenId id = tokens[i];
    const auto next = static_cast<uint32_t>(counts.size());
    const uint32_t at = index.find_or_insert(id, next, id_at);
    if (at == next) counts.push_back({id, 0, false});
    ++counts[at].output_count;
  }
  index.forget(counts.size(), id_at);
  return counts;
}

void RowStep::mark_prompt_and_history(bool set) {
  std::vector<uint64_t>& seen = scratch.seen;
  const auto mark = [&](TokenId id) {
    if (set)
      mark_seen(seen, id);
    else
      seen[static_cast<size_t>(id) / 64] = 0;
  };
  for (TokenId id : request.prompt_token_ids) mark(id);
  const History tokens = history();
  for (size_t i = 0; i < tokens.size(); ++i) mark(tokens[i]);
}

}  // namespace lastmile::detail
