// lastmile — PenalisedBlocks: step 6 block by block (penalised_blocks.hpp).
#include "pipeline/penalised_blocks.hpp"

#include <algorithm>
#include <bit>

namespace lastmile::detail {
namespace {

// Backend::apply_penalties over tokens handed in one at a time, 64 to a call.
class Batched {
 public:
  Batched(const Backend& backend, float* x, float repetition, float frequency, float presence)
      : backend_(backend), x_(x), penalties_{repetition, frequency, presence} {}
  void add(const TokenCount& c) {
    tokens_[size_++] = c;
    if (size_ == tokens_.size()) flush();
  }
  void flush() {
    backend_.apply_penalties(x_, std::span<const TokenCount>(tokens_.data(), size_), penalties_[0],
                             penalties_[1], penalties_[2]);
    size_ = 0;
  }

 private:
  const Backend& backend_;
  float* x_;
  std::array<float, 3> penalties_;
  std::array<TokenCount, 64> tokens_;
  size_t size_ = 0;
};

// Calls fn(id - start) for each id of `ids` in [start, start + count), in order. A chunk's ids
// are tested with one OR of in-range flags, which the compiler vectorises: a block holds only a
// few of a long history's tokens.
template <class Fn>
void for_each_in_range(std::span<const TokenId> ids, int64_t start, int64_t count, Fn fn) {
  constexpr size_t kChunk = 64;
  const auto from = static_cast<uint32_t>(start), size = static_cast<uint32_t>(count);
  for (size_t i = 0; i < ids.size(); i += kChunk) {
    const size_t end = std::min(ids.size(), i + kChunk);
    uint32_t any = 0;
    for (size_t j = i; j < end; ++j) any |= static_cast<uint32_t>(ids[j]) - from < size;
    if (any == 0) continue;
    for (size_t j = i; j < end; ++j)
      if (const uint32_t at = static_cast<uint32_t>(ids[j]) - from; at < size) fn(at);
  }
}

// A counting sort of `items` by bucket_of(item) into order (first: blocks + 1 offsets).
template <class Items, class BucketOf, class Entry>
void bucket_by_block(const Items& items, size_t blocks, BucketOf bucket_of, Entry entry,
                     uint32_t* first, uint32_t* order) {
  std::fill(first, first + blocks + 1, 0u);
  items([&](auto item) { ++first[bucket_of(item) + 1]; });
  for (size_t b = 0; b < blocks; ++b) first[b + 1] += first[b];
  std::array<uint32_t, BlockMaxima::kMaxBlocks> next;
  std::copy(first, first + blocks, next.begin());
  items([&](auto item) { order[next[bucket_of(item)]++] = entry(item); });
}

}  // namespace

PenalisedBlocks::PenalisedBlocks(RowStep& row, size_t block)
    : row_(row), block_of_{block, std::has_single_bit(block) ? std::countr_zero(block) : -1} {
  if (row.has_kept_counts) bucket_kept_counts();
}

void PenalisedBlocks::bucket_tokens() {
  const History history = row_.history();
  const std::span<const TokenId> prompt = row_.request.prompt_token_ids;
  const BlockOf block_of = block_of_;
  const size_t blocks = block_of(static_cast<size_t>(row_.vocab_size()) + block_of.block - 1);
  // Ids with kCounted set for the history's; reserve_lists made room for prompt and history.
  auto tokens = [&](auto fn) {
    for (TokenId id : prompt) fn(static_cast<uint32_t>(id));
    for (TokenId id : history.output) fn(static_cast<uint32_t>(id) | kCounted);
    for (TokenId id : history.drafts) fn(static_cast<uint32_t>(id) | kCounted);
  };
  const auto token_block = [block_of](uint32_t t) { return block_of(t & ~kCounted); };
  bucket_by_block(
      tokens, blocks, token_block,
      [&](uint32_t t) {
        const uint32_t id = t & ~kCounted;
        return static_cast<uint32_t>(id - block_of(id) * block_of.block) | (t & kCounted);
      },
      first_.data(), row_.scratch.counts_by_block.data());
  order_ = row_.scratch.counts_by_block.data();
  bucketed_ = true;
}

void PenalisedBlocks::bucket_kept_counts() {
  counts_ = row_.kept_output_counts;
  const std::span<const TokenCount> counts = counts_;
  const BlockOf block_of = block_of_;
  const size_t blocks = block_of(static_cast<size_t>(row_.vocab_size()) + block_of.block - 1);
  auto indices = [&](auto fn) {
    for (uint32_t i = 0; i < counts.size(); ++i) fn(i);
  };
  bucket_by_block(
      indices, blocks,
      [counts, block_of](uint32_t i) { return block_of(static_cast<size_t>(counts[i].token_id)); },
      [](uint32_t i) { return i; }, first_.data(), row_.scratch.counts_by_block.data());
  order_ = row_.scratch.counts_by_block.data();
}

void PenalisedBlocks::read(int64_t start, int64_t count, float* out) {
  const size_t element = element_size(row_.input.dtype);
  row_.backend.convert_row(static_cast<const char*>(row_.input_row()) + start * element,
                           row_.input.dtype, out, count);  // checked by the summary's read
  if (row_.has_kept_counts) return penalise_kept(start, count, out);
  if (!bucketed_ && ++reads_ > kScannedReads) bucket_tokens();
  penalise_tokens(start, count, out);
}

// The block's seen tokens into a bitmap, its history's counts tallied, from its bucket or a scan;
// repetition over the bitmap, then frequency and presence over the counted tokens.
void PenalisedBlocks::penalise_tokens(int64_t start, int64_t count, float* out) const {
  std::array<uint64_t, kPenalisedBlock / 64> seen{};
  std::array<int32_t, kPenalisedBlock> counts;        // zeroed for the block's `count` entries
  std::array<uint16_t, kPenalisedBlock> counted_ids;  // in order of first occurrence
  std::fill(counts.begin(), counts.begin() + count, 0);
  size_t distinct = 0;
  const auto mark = [&seen](uint32_t i) { seen[i / 64] |= uint64_t{1} << (i % 64); };
  const auto tally = [&](uint32_t i) {
    mark(i);
    if (counts[i]++ == 0) counted_ids[distinct++] = static_cast<uint16_t>(i);
  };
  if (bucketed_) {
    const size_t b = block_of_(static_cast<size_t>(start));
    const auto offset = static_cast<uint32_t>(static_cast<size_t>(start) - b * block_of_.block);
    for (uint32_t k = first_[b]; k < first_[b + 1]; ++k) {
      const uint32_t t = order_[k], at = (t & ~kCounted) - offset;  // a part of a block: offset
      if (at >= static_cast<uint32_t>(count)) continue;
      if (t & kCounted)
        tally(at);
      else
        mark(at);
    }
  } else {
    const History history = row_.history();
    for_each_in_range(row_.request.prompt_token_ids, start, count, mark);
    for_each_in_range(history.output, start, count, tally);
    for_each_in_range(history.drafts, start, count, tally);
  }
  const RequestParams& p = row_.params();
  if (p.repetition_penalty != 1.0f) {
    Batched repeated(row_.backend, out, p.repetition_penalty, 0.0f, 0.0f);
    for (size_t w = 0; w * 64 < static_cast<size_t>(count); ++w)
      for (uint64_t bits = seen[w]; bits != 0; bits &= bits - 1)
        repeated.add({static_cast<TokenId>(w * 64 + std::countr_zero(bits)), 0, true});
    repeated.flush();
  }
  if (p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f) return;
  Batched counted(row_.backend, out, 1.0f, p.frequency_penalty, p.presence_penalty);
  for (size_t k = 0; k < distinct; ++k)
    counted.add({static_cast<TokenId>(counted_ids[k]), counts[counted_ids[k]], false});
  counted.flush();
}

// A RequestBatch row: repetition over its kept seen bitmap, then its kept counts.
void PenalisedBlocks::penalise_kept(int64_t start, int64_t count, float* out) const {
  const RequestParams& p = row_.params();
  const int64_t end = start + count;
  if (p.repetition_penalty != 1.0f) {
    const uint64_t* seen = row_.kept_seen.data();
    Batched repeated(row_.backend, out, p.repetition_penalty, 0.0f, 0.0f);
    for (auto w = static_cast<size_t>(start) / 64; w * 64 < static_cast<size_t>(end); ++w)
      for (uint64_t bits = seen[w]; bits != 0; bits &= bits - 1) {
        const auto i = static_cast<int64_t>(w * 64) + std::countr_zero(bits);
        if (i >= start && i < end) repeated.add({static_cast<TokenId>(i - start), 0, true});
      }
    repeated.flush();
  }
  if (p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f) return;
  Batched counted(row_.backend, out, 1.0f, p.frequency_penalty, p.presence_penalty);
  const size_t b = block_of_(static_cast<size_t>(start));
  for (uint32_t k = first_[b]; k < first_[b + 1]; ++k) {
    const TokenCount& c = counts_[static_cast<size_t>(order_[k])];
    if (c.token_id >= start && c.token_id < end)
      counted.add({static_cast<TokenId>(c.token_id - start), c.output_count, false});
  }
  counted.flush();
}

// A list of a few hundred entries (top-k's candidates) against a history of thousands: a filter
// by id, 64 bits a listed entry (16384 to 131072 bits, 2 to 16 KB), passes each token that may be
// listed (one in 150 for the bench's 110-entry lists), and a binary search of the ids confirms
// it. At 4096 bits one token in 37 passed, and each pass's binary search mispredicts: a top-k row
// of the bf16 mix took 120.4 us instead of 117.1 (medians of five runs in turns). The bench mix's
// top-p rows list about a thousand entries: at a fixed 16384 bits one token in 16 passed, and
// this function took 5.9% of those rows' time instead of 4.4% (perf). Then repetition over the
// entries seen, frequency and presence over the counted ones, as penalise_tokens applies them to
// a block. A RequestBatch row's entries are distinct in its seen bitmap and counts; a stateless
// row's hits are noted once per occurrence in the scratch's token counts (index, 1 if counted),
// sorted and merged per entry.
void PenalisedBlocks::lower_listed(const int32_t* ids, float* values, size_t count) {
  constexpr uint32_t kMinFilterBits = 16384, kMaxFilterBits = 131072;
  const uint32_t filter_bits = std::clamp<uint32_t>(
      std::bit_ceil(static_cast<uint32_t>(std::min<size_t>(count, kMaxFilterBits)) * 64),
      kMinFilterBits, kMaxFilterBits);
  std::array<uint64_t, kMaxFilterBits / 64> filter;
  std::fill(filter.begin(), filter.begin() + filter_bits / 64, uint64_t{0});
  const auto bit = [filter_bits](TokenId id) {
    return static_cast<uint32_t>(id) & (filter_bits - 1);
  };
  for (size_t i = 0; i < count; ++i) filter[bit(ids[i]) / 64] |= uint64_t{1} << (bit(ids[i]) % 64);
  // The index of id in the list, or -1.
  const auto listed_at = [&](TokenId id) -> int64_t {
    if (((filter[bit(id) / 64] >> (bit(id) % 64)) & 1) == 0) return -1;
    const int32_t* at = std::lower_bound(ids, ids + count, id);
    return at != ids + count && *at == id ? at - ids : -1;
  };
  const RequestParams& p = row_.params();
  const bool repeats = p.repetition_penalty != 1.0f;
  const bool counts = p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
  if (row_.has_kept_counts) {
    if (repeats) {
      Batched repeated(row_.backend, values, p.repetition_penalty, 0.0f, 0.0f);
      for (size_t i = 0; i < count; ++i) {
        const auto id = static_cast<size_t>(ids[i]);
        if ((row_.kept_seen[id / 64] >> (id % 64)) & 1)
          repeated.add({static_cast<TokenId>(i), 0, true});
      }
      repeated.flush();
    }
    if (!counts) return;
    Batched counted(row_.backend, values, 1.0f, p.frequency_penalty, p.presence_penalty);
    for (const TokenCount& c : row_.kept_output_counts)
      if (const int64_t at = listed_at(c.token_id); at >= 0)
        counted.add({static_cast<TokenId>(at), c.output_count, false});
    counted.flush();
    return;
  }
  std::vector<TokenCount>& hits = row_.scratch.token_counts;  // reserved for prompt and history
  hits.clear();
  const auto note = [&](TokenId id, int32_t counted) {
    if (const int64_t at = listed_at(id); at >= 0)
      hits.push_back({static_cast<TokenId>(at), counted, false});
  };
  const History history = row_.history();
  for (TokenId id : row_.request.prompt_token_ids) note(id, 0);
  for (size_t i = 0; i < history.size(); ++i) note(history[i], 1);
  std::sort(hits.begin(), hits.end(),
            [](const TokenCount& a, const TokenCount& b) { return a.token_id < b.token_id; });
  size_t distinct = 0;  // merged in place: one per entry, its counts summed
  for (size_t k = 0; k < hits.size(); ++k) {
    if (distinct > 0 && hits[distinct - 1].token_id == hits[k].token_id)
      hits[distinct - 1].output_count += hits[k].output_count;
    else
      hits[distinct++] = hits[k];
  }
  hits.resize(distinct);
  if (repeats) {
    Batched repeated(row_.backend, values, p.repetition_penalty, 0.0f, 0.0f);
    for (const TokenCount& c : hits) repeated.add({c.token_id, 0, true});
    repeated.flush();
  }
  if (!counts) return;
  Batched counted(row_.backend, values, 1.0f, p.frequency_penalty, p.presence_penalty);
  for (const TokenCount& c : hits)
    if (c.output_count > 0) counted.add({c.token_id, c.output_count, false});
  counted.flush();
}

}  // namespace lastmile::detail
