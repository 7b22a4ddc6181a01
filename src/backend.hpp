// lastmile — the backend seam: the row kernels a backend provides (DESIGN "Backends and kernels").
// A kernel works on one float32 row with caller-owned scratch. It never allocates, throws, logs or
// sees a request. `reference/` implements every kernel in plain scalar C++: the oracle that fast
// backends are tested against.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include "lastmile/logits_view.hpp"
#include "lastmile/params.hpp"

namespace lastmile::detail {

// Bytes per logit of a dtype.
inline size_t element_size(DType dtype) { return dtype == DType::f32 ? 4 : 2; }

// Elements from one row's start to the next (LogitsView: 0 means packed rows).
inline int64_t row_stride(const LogitsView& logits) {
  return logits.row_stride != 0 ? logits.row_stride : logits.vocab_size;
}

// A token's history on one row, for penalties (spec §7.1).
struct TokenCount {
  TokenId token_id = 0;
  int32_t output_count = 0;  // occurrences in output (+ drafts when predicting the bonus token)
  bool in_prompt = false;
};

// Scratch for selection and sorting: ids and floats for lists of up to a backend's list_room(n)
// entries, and sort_keys_size(n) 64-bit keys (lists longer than that are sorted by chunks,
// capped_keys.hpp). Entries past the room that ids and values must also hold: SIMD kernels store
// whole vectors there, and a row split in chunks lists each chunk a vector's worth apart.
inline constexpr size_t kSortSlack = 1024;
// apply_top_k_top_p listed no survivors (see there).
inline constexpr size_t kNotListed = SIZE_MAX;

// An eighth of a row of n (a quarter of a float row's bytes), at least 64: room for every list
// a hot path sorts, and for a bitmap of the row (n / 64 words).
inline size_t sort_keys_size(size_t n) { return std::max<size_t>(n / 8, 64); }

// Entries of SortScratch::histogram: 32 buckets per octave of [0, 1] (a probability's float
// bits >> kHistogramShift, from 0 to those of 1.0), the cpu backend's mask_band. 32 KB: 64
// buckets an octave took half a float32 row of 32000 tokens, for crossing buckets half as long.
inline constexpr int kHistogramShift = 18;
inline constexpr size_t kHistogramSize = (0x3f800000u >> kHistogramShift) + 1;

// Words of storage under SortScratch's keys and histogram, which share it: mask_band reads its
// histogram before it writes a key. Whatever else a kernel keeps in the keys (draw_top_p's band
// bitmap) is dead before mask_band runs.
inline size_t key_storage_size(size_t n) { return std::max(sort_keys_size(n), kHistogramSize); }

struct SortScratch {
  std::span<int32_t> ids;  // list_room() entries, then kSortSlack
  std::span<float> values;
  std::span<uint64_t> keys;
  // kHistogramSize masses as doubles' bits (the cpu backend's top-p masses), in the keys' storage.
  std::span<uint64_t> histogram;

  // The longest list ids / values hold (Backend::list_room of the row's length).
  size_t list_room() const { return ids.size() - kSortSlack; }

  // Lists of up to `room` entries of a row of n, over ids and values of room + kSortSlack entries
  // at least, and one key_storage_size(n) storage: the keys in its first sort_keys_size(n) words.
  static SortScratch over(std::span<int32_t> ids, std::span<float> values,
                          std::span<uint64_t> key_storage, size_t n, size_t room) {
    if (ids.size() < room + kSortSlack || values.size() < room + kSortSlack ||
        key_storage.size() < key_storage_size(n))  // a scratch never reserved for n
      throw std::logic_error("SortScratch: storage smaller than the room for a row of n");
    return {ids.first(room + kSortSlack), values.first(room + kSortSlack),
            key_storage.first(sort_keys_size(n)), key_storage.first(kHistogramSize)};
  }
};

// What a random row samples with after temperature (spec §8, §9), for Backend::draw_from_input.
struct DrawParams {
  float temperature = 1.0f;
  int64_t top_k = 0;         // the vocabulary size when off
  bool apply_top_p = false;  // the batch applies top-p (p = 1 rows still mask underflows, §9.3)
  float top_p = 1.0f;
  float min_p = 0.0f;
};
// How a kernel may split one row's passes over threads: run(context, count, task, call) calls
// call(task, i) once for each i in [0, count) and returns when all have returned. The default
// (no run) calls them in order on the caller's thread. A kernel splits a row into fixed vocab
// chunks whose results it merges in chunk order, so the split never changes a result.
struct ParallelFor {
  void* context = nullptr;
  void (*run)(void* context, int64_t count, void* task, void (*call)(void*, int64_t)) = nullptr;

  template <class Fn>
  void operator()(int64_t count, Fn& fn) const {
    if (run == nullptr || count <= 1) {
      for (int64_t i = 0; i < count; ++i) fn(i);
      return;
    }
    run(context, count, &fn, [](void* f, int64_t i) { (*static_cast<Fn*>(f))(i); });
  }
};

// Backend::draw_from_input has no answer: run the steps.
inline constexpr TokenId kNoInputDraw = -1;

// The longest block of a PenalisedRow read at a time (block_size for vocabularies up to 2^20).
inline constexpr int64_t kPenalisedBlock = 2048;

// A random row's working row after step 6, with no working row
// (Backend::draw_from_penalised_input): read(context, start, count, out) writes its entries [start,
// start + count), a range within one block of kPenalisedBlock entries, as steps 2-6 leave them;
// lower(context, ids, values, count) takes values[i], the caller's float32 view at ids[i] (ids
// ascending), to what steps 2-6 leave there; seen(context, spans), if not null, puts in spans
// every token steps 2-6 may change (duplicates allowed; unused spans empty), or returns false
// where they are not at hand as lists. Step 6 only lowers entries, so none exceeds the caller's
// row src's.
struct PenalisedRow {
  const void* src = nullptr;  // the caller's row
  DType dtype = DType::f32;
  void* context = nullptr;
  void (*read)(void* context, int64_t start, int64_t count, float* out) = nullptr;
  void (*lower)(void* context, const int32_t* ids, float* values, size_t count) = nullptr;
  bool (*seen)(void* context, std::span<const TokenId> spans[3]) = nullptr;
};

// A raw mode's active values (spec §3.1) as a map of the caller's float32 view x, which no step
// edits: log_softmax's (x - max) - log_sum, the float32 arithmetic of Backend::log_softmax (the
// log-sum as the backend's input_raw_logprobs computes it), or x itself for raw_logits (max =
// log_sum = 0: x - 0 - 0 is x, -0 included). An all -inf row (max -inf) keeps x, as log_softmax
// leaves it. Monotone: a larger x never has a smaller value.
struct RawValues {
  float max = 0.0f;
  float log_sum = 0.0f;
  float operator()(float x) const {
    return max == -std::numeric_limits<float>::infinity() ? x : (x - max) - log_sum;
  }
};
struct RawLogprobs {
  RawValues values;
  int64_t rank = 0;
};

// Each block's max of a caller's row, in blocks of `block` entries: a question about the entries
// at or above a threshold need read only the blocks whose max reaches it.
struct BlockMaxima {
  static constexpr size_t kMaxBlocks = 512;
  size_t block = 0, blocks = 0;
  float max[kMaxBlocks];
};

// What a backend learned of a caller's row while converting it (convert_row_summarised), so that
// input_raw_logprobs need not read the row again: log_softmax's terms and the block maxima, as
// input_raw_logprobs would compute them. `known` false: nothing learned.
struct RawRowSummary {
  bool known = false;
  RawValues values;
  BlockMaxima maxima;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual std::string_view description() const = 0;

  // Widens src[0, n) of `dtype` into dst exactly (f16 and bf16 are subsets of float32). Returns
  // the first token id holding NaN or +inf, or -1 when there is none.
  virtual int64_t convert_row(const void* src, DType dtype, float* dst, int64_t n) const = 0;
  // convert_row, then divide(dst, n, t), in one pass: the first index of dst holding NaN or
  // +inf (from the input or from the division), or -1.
  virtual int64_t convert_row_divided(const void* src, DType dtype, float* dst, int64_t n,
                                      float t) const = 0;

  // convert_row, then apply_repetition_dense(dst, n, seen, repetition_penalty), in one pass: the
  // first index of dst holding NaN or +inf (from the input or from the penalty), or -1.
  virtual int64_t convert_row_repeated(const void* src, DType dtype, float* dst, int64_t n,
                                       const uint64_t* seen, float repetition_penalty) const = 0;

  // convert_row_repeated (seen null: convert_row), and in the same read what input_raw_logprobs
  // with log_softmax needs to know of src, into *summary (known false: the backend has no such
  // pass, or src holds NaN / +inf). src and dst must not overlap: the summary is of src, which
  // the pass may read again after writing dst.
  virtual int64_t convert_row_summarised(const void* src, DType dtype, float* dst, int64_t n,
                                         const uint64_t* seen, float repetition_penalty,
                                         RawRowSummary* summary) const = 0;
  // The same summary of src without converting it (no row written), `parallel` splitting the
  // read; false (summary->known false) when the backend has no such pass or src holds NaN /
  // +inf.
  virtual bool summarise_row(const void* src, DType dtype, int64_t n, RawRowSummary* summary,
                             const ParallelFor& parallel) const = 0;
  // Only the block maxima that summary holds, in one read without the softmax's Exp (blocks of
  // the same size), `parallel` splitting the read; false when the backend has no such pass or
  // src holds NaN / +inf.
  virtual bool block_maxima(const void* src, DType dtype, int64_t n, BlockMaxima* maxima,
                            const ParallelFor& parallel) const = 0;

  // Entries a list in SortScratch's ids and values may hold for a row of n (a worker reserves
  // that much): every kernel that lists keeps within it, deciding longer lists on the row itself
  // or, on an input path, declining. Depends on n alone, so results never depend on a worker.
  virtual size_t list_room(int64_t n) const = 0;

  // Lowest index of the largest value (PyTorch's argmax contract on NaN-free rows).
  virtual TokenId row_argmax(const float* x, int64_t n) const = 0;
  // row_argmax of a caller's unchecked float32 row, in one read: *first_bad gets the first
  // NaN / +inf index, or -1. `parallel` may split the read (fixed vocab chunks: the same token).
  virtual TokenId argmax_checked(const float* x, int64_t n, int64_t* first_bad,
                                 const ParallelFor& parallel) const = 0;
  virtual float row_max(const float* x, int64_t n) const = 0;

  // x := log_softmax(x) in float32 as torch computes it: (x - max) - log(sum(exp(x - max))).
  // An all -inf row stays all -inf.
  virtual void log_softmax(float* x, int64_t n) const = 0;

  // x := x / t (spec §8.1); float32 division, as torch's in-place div_. Returns the first index
  // whose quotient is NaN or +inf (a tiny t overflows large logits), or -1.
  virtual int64_t divide(float* x, int64_t n, float t) const = 0;

  // The first index holding NaN or +inf, or -1.
  virtual int64_t find_nan_or_inf(const float* x, int64_t n) const = 0;

  // Spec §6.5: mask tokens whose softmax probability is < min_p * the largest probability.
  virtual void apply_min_p(float* x, int64_t n, float min_p) const = 0;

  // Spec §9.2-9.4: keep the top_k largest values (every tie at the k-th value kept; top_k >= n
  // disables), then, if apply_top_p, mask where the ascending float32 cumulative softmax is
  // <= 1 - top_p, never the largest. Ties are ordered by ascending token id ranking as larger.
  // Returns m when scratch.ids[0, m) lists, in id order, every token that may still be finite
  // (a superset of the kept ones: a top-p band's list may hold some that top-p masked since);
  // else kNotListed.
  virtual size_t apply_top_k_top_p(float* x, int64_t n, int64_t top_k, bool apply_top_p,
                                   float top_p, SortScratch scratch) const = 0;

  // A draw from softmax(x) by inverse CDF over a uniform u in (0, 1) (DESIGN "Randomness").
  // An all -inf row returns 0, as vLLM's NaN probabilities do. `listed`: what
  // apply_top_k_top_p returned, when nothing edited x or scratch since (the draw then walks the
  // list instead of the row); kNotListed otherwise. Same token either way.
  virtual TokenId draw(const float* x, int64_t n, double u, SortScratch scratch,
                       size_t listed = kNotListed) const = 0;

  // Steps 2 and 7b-e for a random row that steps 3-6 leave alone and no logprob reads: the token
  // the steps would draw with uniform u (the same one, unless u sits within rounding of a CDF
  // step), reading the caller's row in place and writing no working row. kNoInputDraw when the
  // backend has no such path for these parameters, or the row holds NaN / +inf or the division
  // makes one: the caller then runs the steps, which report it.
  // `parallel` may split the passes over the row (fixed vocab chunks: the same token). With
  // `summary`, also what summarise_row learns of src when a pass of the draw learns it on the way
  // (a statistics pass at temperature 1: the same one), else known false.
  virtual TokenId draw_from_input(const void* src, DType dtype, int64_t n, const DrawParams& params,
                                  double u, SortScratch scratch, const ParallelFor& parallel,
                                  RawRowSummary* summary = nullptr) const = 0;

  // draw_from_input over a random row's working row after step 6 when only step 6 edits it,
  // lowering entries (repetition >= 1, frequency and presence >= 0), read through `row`'s blocks
  // or lowered through its list instead: the same token, or kNoInputDraw when the backend has no
  // such path for these parameters, or the row holds NaN / +inf, or the division makes one (the
  // caller then runs the steps, which report it). With `summary`, also what summarise_row learns of
  // the caller's row (known false when not learned), which step 2 then need not learn again.
  virtual TokenId draw_from_penalised_input(const PenalisedRow& row, int64_t n,
                                            const DrawParams& params, double u, SortScratch scratch,
                                            RawRowSummary* summary,
                                            const ParallelFor& parallel) const = 0;

  // Step 8 of a raw mode read from the caller's row src of n `dtype` logits in place, instead of
  // a snapshot (step 2 or an input path checked it: no NaN or +inf): the map of its float32 view
  // to the mode's values (log_softmax's max and log-sum when `log_softmax`, else the identity),
  // the number of entries whose value is >= token_id's (its rank, as rank_of), and top_n of the
  // values: the k largest, descending, equal values in ascending id order, into ids / out.
  // `summary`: what convert_row_summarised learned of src (log_softmax only), or null.
  // `parallel` may split the reads (fixed vocab chunks: the same values).
  virtual RawLogprobs input_raw_logprobs(const void* src, DType dtype, int64_t n, bool log_softmax,
                                         TokenId token_id, int64_t k, TokenId* ids, float* out,
                                         SortScratch scratch,
                                         const RawRowSummary* summary = nullptr,
                                         const ParallelFor& parallel = {}) const = 0;

  // Spec §7.2: repetition (prompt or output), then frequency and presence (output), sparse.
  virtual void apply_penalties(float* x, std::span<const TokenCount> counts,
                               float repetition_penalty, float frequency_penalty,
                               float presence_penalty) const = 0;

  // Spec §7.2's repetition factor, dense: x[i] scaled (as apply_penalties does) wherever bit i
  // of `seen` is set (bit i % 64 of word i / 64: the prompt and output tokens). Returns the first
  // index left +inf (a penalty below 1 can overflow), or -1.
  virtual int64_t apply_repetition_dense(float* x, int64_t n, const uint64_t* seen,
                                         float repetition_penalty) const = 0;

  // Number of entries >= x[token_id] (spec §4 step 3): the token's pessimistic rank.
  virtual int64_t rank_of(const float* x, int64_t n, TokenId token_id) const = 0;

  // The k largest entries, descending; equal values in ascending token id order.
  virtual void top_n(const float* x, int64_t n, int64_t k, TokenId* ids, float* values,
                     SortScratch scratch) const = 0;
};

// "cpu (AVX3)", "reference (scalar C++)": what Sampler::backend_name reports.
inline std::string describe(const Backend& backend) {
  return std::string(backend.name()) + " (" + std::string(backend.description()) + ")";
}

// The bitmap Backend::apply_repetition_dense reads: bit id % 64 of word id / 64.
inline size_t seen_words(int64_t vocab_size) { return static_cast<size_t>((vocab_size + 63) / 64); }
inline void mark_seen(std::span<uint64_t> seen, TokenId id) {
  seen[static_cast<size_t>(id) / 64] |= uint64_t{1} << (id % 64);
}

// The scalar oracle.
const Backend& reference_backend();
// Highway SIMD and selection instead of sorting (src/cpu/).
const Backend& cpu_backend();

}  // namespace lastmile::detail
