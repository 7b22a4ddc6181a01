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
#include <algorithm>
#include <cfloat>
#include <cmath>

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
  const double unlisted_bound =
      unlisted_weight_bound(unlisted_mass, n - listed, raw_max, penalised_max, from, t, slack);
  if (!(unlisted_bound < DBL_MAX) || band == 0 || band > scratch.keys.size()) return kNoInputDraw;
  const double below_lo = listed_below, below_hi = listed_below + unlisted_bound;
  const double cut = 1.0f - params.top_p;  // the steps' float cut
  // Spec §9.3: an entry is masked when the ascending cumulative sum through it is <= cut times the
  // total. Over the band, `cumulative` its part; > 0: kept.
  auto excess = [&](double below, double cumulative) {
    return below + cumulative - cut * (band_mass + below);
  };
  const double margin_lo = kMargin * (band_mass + below_lo);
  const double margin_hi = kMargin * (band_mass + below_hi);
  if (excess(below_hi, 0.0) > -margin_hi) return kNoInputDraw;  // one below the band may stay
  uint64_t* const keys = scratch.keys.data();
  for (size_t i = 0; i < band; ++i) keys[i] = ascending_key(values[i], static_cast<int32_t>(i));
  cpu::sort_keys(keys, band);  // the oracle's order: ascending, the larger id first
  double cumulative = 0;
  size_t walked = 0;
  for (; walked < band; ++walked) {
    const auto i = static_cast<size_t>(key_id(keys[walked]));
    cumulative += weights[i];
    if (excess(below_lo, cumulative) > margin_lo) break;  // kept, as is every later one
    if (excess(below_hi, cumulative) > -margin_hi) return kNoInputDraw;  // too close to call
    weights[i] = 0.0f;                                                   // masked
  }
  // The largest is never masked; a top-p within the margin of 0 declines there.
  if (walked == band) return kNoInputDraw;
  // The draw: the survivors in id order, weights proportional to the steps' q; a target within
  // the margin of a boundary could fall on either side there. The margin is the total's: a flat
  // row's steps find their kept total as the blocks' totals less what they mask.
  double kept_mass = 0;
  for (size_t i = 0; i < band; ++i) kept_mass += weights[i];
  const double target = u * kept_mass, margin = margin_hi;
  double reached = 0;
  for (size_t i = 0; i < band; ++i) {
    if (weights[i] == 0.0f) continue;
    const double before = reached;
    reached += weights[i];
    if (reached > target)
      return reached - target > margin && target - before > margin ? ids[i] : kNoInputDraw;
  }
  return kNoInputDraw;  // rounding left the target past the last survivor
}

}  // namespace lastmile::detail::cpu_selection
