// lastmile — top-p alone over a penalised row, from the caller's row, its raw summary and a list
// (part of Backend::draw_from_penalised_input).
// Through the steps, such a row costs two Exp passes: the raw row's for its logprobs, and the
// working row's (penalised, divided) for top-p's total. On an LLM-shaped row the entries far below
// the max hold a tiny share of that total, and the raw summary bounds it (one Exp pass, which a
// batch without raw logprobs makes for this alone, writing no row): with a = 1 / t,
// M the raw max and M' the penalised one (step 6 only lowers, x' <= x), an entry x < L weighs
// exp((x' - M') a) <= exp(x - M) exp((M - M') a) exp((L - M)(a - 1)) when a >= 1, and the raw
// summary gives the sum of exp(x - M). So the entries x >= L are listed from the caller's row,
// lowered as step 6 lowers them (PenalisedRow::lower) and divided, and weighed with the vector
// Exp the steps use (the same bits); the unlisted weight lies in [0, bound]. Top-p's rule (spec
// §9.3) is decided over the listed entries above L for both ends of that range, with a margin for
// the steps' rounding, and the draw walks the survivors; a decision or a draw that the range or
// the margin leaves open is declined, and the steps decide it. So every token given is the one
// the steps give.
// The bound is loose where the max stands low (hundreds listed, the walk close to the cut: two of
// the bench mix's 16 top-p rows, 113 and 97 us each through the steps against some 27). Where the
// row's seen tokens are at hand (PenalisedRow::seen), such a call is retried with the unlisted
// weight itself: one more Exp pass over the caller's row gives the unlisted entries' weights (step
// 6 only lowers: at most that), less the seen tokens' among them (at least that). Those two rows
// then took 80 and 64 us, the bench's bf16 mix 0.93-0.95x (one thread, Zen 4, three runs in turns).
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <span>

#include "cpu/input_draw.hpp"
#include "float_keys.hpp"

namespace lastmile::detail::cpu_selection {
namespace {

// L = M - kListedBelowMax, in raw logits: on the bench's LLM-shaped rows the body's top lies some
// 10 below the max, so a few hundred entries are listed.
constexpr float kListedBelowMax = 10.0f;
// Lists up to it, weighed on the stack.
constexpr size_t kMaxListed = 4096;
// How far, relative, a computed sum of positive weights may lie from its exact one: the summary's
// total adds each block's 2048 weights in 16 float partial sums (127 roundings, 7.6e-6 at worst),
// its log-sum is a float (4.8e-7), and each weight holds the vector Exp's error (4.6e-7 at t = 1).
constexpr double kSumError = 2e-5;
// The margin, relative to the total, by which a decision or a draw must be clear: the steps'
// probabilities divide by their own total (the same float partial sums, 7.6e-6 at worst) and
// round each q and the cumulative sum's compare to float.
constexpr double kMargin = 1e-4;
// sum_exp_scaled_below's error, relative to the exact sum of its terms (its Exp's included), and
// the steps' vector Exp's a weight (4.1e-7).
constexpr double kScaledSumError = 2e-5, kExpError = 5e-7;
// Seen tokens' entries gathered at a time on the stack.
constexpr size_t kGatheredSeen = 1024;

// The sum of the unlisted entries' weights exp(z - max_z), z = x' / t, at most. unlisted_mass
// bounds the sum of exp(x - raw_max) over them, from: the raw max, L. Terms as the header; for
// a < 1 the sum of N terms s^a is at most N^(1-a) (sum of s)^a (Hölder), and any term is at most
// exp((L - M') a). `slack`: the exponent's rounding (the quotients', the max's). In logs, so that
// no product underflows to 0 or overflows (a bound past DBL_MAX is declined).
double unlisted_weight_bound(double unlisted_mass, size_t unlisted, float raw_max,
                             float penalised_max, float from, float t, double slack) {
  const double a = 1.0 / t;
  const double below = static_cast<double>(from) - raw_max;                 // <= 0
  const double shift = (static_cast<double>(raw_max) - penalised_max) * a;  // >= 0
  const double log_count = std::log(static_cast<double>(unlisted)),
               log_mass = std::log(unlisted_mass);
  double log_bound = log_count + below * a;
  if (a >= 1.0)
    log_bound = std::min(log_bound, log_mass + below * (a - 1.0));
  else
    log_bound = std::min(log_bound, (1.0 - a) * log_count + a * log_mass);
  return std::exp(log_bound + shift + slack) * (1.0 + kSumError);
}

}  // namespace

TokenId draw_top_p_from_penalised_row(const PenalisedRow& row, size_t n, const DrawParams& params,
                                      double u, SortScratch scratch, const RawRowSummary& summary,
                                      const ParallelFor& parallel, QuotientMaxima groups) {
  const float raw_max = summary.values.max;
  if (!(raw_max > -FLT_MAX) || summary.maxima.block != block_size(static_cast<int64_t>(n)))
    return kNoInputDraw;
  const float from = raw_max - kListedBelowMax;
  bool past_room = false;
  if (groups.max == nullptr) groups = {summary.maxima.max, summary.maxima.block};
  const size_t listed = list_scaled_at_least(row.src, row.dtype, n, 1.0f, from, scratch, parallel,
                                             groups, &past_room);
  if (listed == kNotListed || listed == 0 || listed > kMaxListed) return kNoInputDraw;
  int32_t* const ids = scratch.ids.data();
  float* const values = scratch.values.data();
  // The raw mass of the unlisted: the summary's total less the listed part (its weights added in
  // double, so only the Exp's error), each with its error allowed for.
  float weights[kMaxListed];
  double unused;
  cpu::exp_with_block_sums(values, weights, listed, raw_max, listed, &unused);
  double listed_mass = 0;
  for (size_t i = 0; i < listed; ++i) listed_mass += weights[i];
  const double unlisted_mass =
      std::max(0.0, std::exp(static_cast<double>(summary.values.log_sum)) * (1.0 + kSumError) -
                        listed_mass * (1.0 - kSumError));
  const float t = params.temperature;
  float quotient_from = from, penalised_max = 0.0f;
  if (!lower_and_divide(row, scratch, listed, t, &quotient_from, &penalised_max))
    return kNoInputDraw;
  if (!(penalised_max >= from)) return kNoInputDraw;  // the max may be unlisted
  const float max = cpu::row_max(values, listed);     // the working row's quotient max
  cpu::exp_with_block_sums(values, weights, listed, max, listed, &unused);
  // The band: the listed quotients above L's (every unlisted one is at most L's), in id order.
  size_t band = 0;
  double band_mass = 0, listed_below = 0;
  for (size_t i = 0; i < listed; ++i) {
    if (!(values[i] > quotient_from)) {
      listed_below += weights[i];
      continue;
    }
    ids[band] = ids[i];
    values[band] = values[i];
    weights[band] = weights[i];
    band_mass += weights[i];
    ++band;
  }
  // Weighed entries lie within 87 of the max (the Exp flushes below): their quotients' rounding.
  const double slack = 2.0 * FLT_EPSILON * (2.0 * std::fabs(max) + 87.0);
  if (band == 0 || band > scratch.keys.size()) return kNoInputDraw;
  const double cut = 1.0f - params.top_p;  // the steps' float cut
  uint64_t* const keys = scratch.keys.data();
  for (size_t i = 0; i < band; ++i) keys[i] = ascending_key(values[i], static_cast<int32_t>(i));
  cpu::sort_keys(keys, band);  // the oracle's order: ascending, the larger id first
  // Top-p's rule and the draw over the band, the unlisted weight in [unlisted_lo, unlisted_hi];
  // *open: declined where a narrower range could decide.
  auto decide = [&](double unlisted_lo, double unlisted_hi, bool* open) {
    *open = false;
    const double below_lo = listed_below + unlisted_lo, below_hi = listed_below + unlisted_hi;
    // Spec §9.3: an entry is masked when the ascending cumulative sum through it is <= cut times
    // the total. Over the band, `cumulative` its part; > 0: kept.
    auto excess = [&](double below, double cumulative) {
      return below + cumulative - cut * (band_mass + below);
    };
    const double margin_lo = kMargin * (band_mass + below_lo);
    const double margin_hi = kMargin * (band_mass + below_hi);
    if (excess(below_hi, 0.0) > -margin_hi) {  // one below the band may stay
      *open = unlisted_hi > unlisted_lo;
      return kNoInputDraw;
    }
    double cumulative = 0;
    size_t walked = 0;
    for (; walked < band; ++walked) {
      const auto i = static_cast<size_t>(key_id(keys[walked]));
      cumulative += weights[i];
      if (excess(below_lo, cumulative) > margin_lo) break;  // kept, as is every later one
      if (excess(below_hi, cumulative) > -margin_hi) {      // too close to call
        *open = unlisted_hi > unlisted_lo;
        return kNoInputDraw;
      }
    }
    // The largest is never masked; a top-p within the margin of 0 declines there.
    if (walked == band) return kNoInputDraw;
    // The draw: the survivors (keys[walked, band)) in id order, weights proportional to the
    // steps' q; a target within the margin of a boundary could fall on either side there. The
    // margin is the total's: a flat row's steps find their kept total as the blocks' totals less
    // what they mask.
    auto kept = [&](size_t i) {
      return ascending_key(values[i], static_cast<int32_t>(i)) >= keys[walked];
    };
    double kept_mass = 0;
    for (size_t i = 0; i < band; ++i)
      if (kept(i)) kept_mass += weights[i];
    const double target = u * kept_mass, margin = margin_hi;
    double reached = 0;
    for (size_t i = 0; i < band; ++i) {
      if (!kept(i)) continue;
      const double before = reached;
      reached += weights[i];
      if (reached > target)
        return reached - target > margin && target - before > margin ? ids[i] : kNoInputDraw;
    }
    return kNoInputDraw;  // rounding left the target past the last survivor
  };
  const double unlisted_bound =
      unlisted_weight_bound(unlisted_mass, n - listed, raw_max, penalised_max, from, t, slack);
  bool open = true;
  if (unlisted_bound < DBL_MAX) {
    const TokenId token = decide(0.0, unlisted_bound, &open);
    if (token != kNoInputDraw || !open) return token;
  }
  // The bound left it open (rows whose max stands lowest: hundreds listed, their walk close to
  // the cut). Retried with the unlisted weight itself: the caller's unlisted quotients' weights
  // (step 6 only lowers, so at most that), less those of the tokens step 6 may change (so at
  // least that).
  std::span<const TokenId> seen[3];
  if (row.seen == nullptr || !row.seen(row.context, seen)) return kNoInputDraw;
  const float a = 1.0f / t;
  const double unlisted = cpu::sum_exp_scaled_below(row.src, row.dtype, n, a, from, max);
  double changed = 0;
  float gathered[kGatheredSeen];
  for (const std::span<const TokenId>& span : seen) {
    for (size_t start = 0; start < span.size(); start += kGatheredSeen) {
      const size_t count = std::min(kGatheredSeen, span.size() - start);
      for (size_t i = 0; i < count; ++i)
        gathered[i] = scaled_entry(row.src, row.dtype, static_cast<size_t>(span[start + i]), 1.0f);
      changed += cpu::sum_exp_scaled_below(gathered, DType::f32, count, a, from, max);
    }
  }
  // Against the steps' weights of the same entries: each sum within kScaledSumError of its
  // rounded terms, whose exponents differ from the steps' by roundings (a = 1 / t, and x a -
  // max once with FMA or twice without, here; the quotient and the subtraction there: twice the
  // steps' slack covers both), and the steps' Exp within kExpError. An entry flushed by one and
  // not the other, and the steps' direct sums' flush (at x < -86.9, 46.9 or more below a block's
  // max), add e^-46.9 a entry at most: some 1e-15 of the max's weight for a 152k row, far inside
  // kMargin. The bound above still holds.
  const double error = std::expm1(2.0 * slack) + kScaledSumError + kExpError;
  const double flushed = static_cast<double>(n) * std::exp(-46.9);
  return decide(std::max(0.0, unlisted * (1.0 - error) - changed * (1.0 + error) - flushed),
                std::min(unlisted * (1.0 + error) + flushed, unlisted_bound), &open);
}

}  // namespace lastmile::detail::cpu_selection
