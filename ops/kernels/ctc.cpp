// CTC kernels (Graves et al. 2006), in log space, with the blank as the last class (TF's ctc_loss
// and decoders), for both backends: the same code per sample, the samples in order on the
// reference backend and split over threads on the cpu one (each sample its own task at these
// costs): the same bits for the same inputs. Every sample is checked before any is computed, so a
// call with bad samples reports the first of them whatever the thread count.
//
// CtcLoss(logp (N,T,C) log-softmaxed, labels (N,L) int32, input_length (N) int32, label_length
// (N) int32) -> (N): -log p(labels | logp). CtcLossGrad(same..., g (N)) -> (N,T,C): d loss / d
// logp times g, which is -g * gamma (the posterior of class k at step t); zero past a sample's
// input_length. CtcDecode(logits (N,T,C), input_length (N) int32) attrs ints = {greedy,
// beam_width, top_paths, merge_repeated} -> float64 (N, P, T+1): [.., 0] the path's log
// probability (greedy: minus the sum of the best logits, as TF), [.., 1 + i] its i-th label or
// -1.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "engine/backend.hpp"
#include "engine/errors.hpp"
#include "engine/parallel.hpp"
#include "ops/kernels/attrs.hpp"
#include "ops/kernels/common.hpp"
#include "ops/kernels/reference/reference.hpp"

namespace ktape::kernels {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

double log_add(double a, double b) {
  if (a == kNegInf) return b;
  if (b == kNegInf) return a;
  const double m = std::max(a, b);
  return m + std::log1p(std::exp(-std::abs(a - b)));
}

// One sample's extended label sequence (blank, l0, blank, l1, ..., blank), validated.
struct Sample {
  std::int64_t steps = 0;  // input_length
  std::vector<std::int64_t> ext;
};

Sample sample_of(const KernelCall& c, std::int64_t b) {
  const ArrayRef& lp = c.in[0];
  const ArrayRef& labels = c.in[1];
  const std::int64_t T = lp.dims[1], C = lp.dims[2], L = labels.dims[1];
  const std::int64_t blank = C - 1;
  Sample s;
  s.steps = read_index(c.in[2], b);
  const std::int64_t n = read_index(c.in[3], b);
  const std::string who = "K::ctc_batch_cost: sample " + std::to_string(b);
  if (s.steps < 0 || s.steps > T)
    throw ValueError(who + " has input_length " + std::to_string(s.steps) + " outside [0, " +
                     std::to_string(T) + "] (y_pred has " + std::to_string(T) + " time steps)");
  if (n < 0 || n > L)
    throw ValueError(who + " has label_length " + std::to_string(n) + " outside [0, " +
                     std::to_string(L) + "] (y_true has " + std::to_string(L) + " columns)");
  s.ext.push_back(blank);
  std::int64_t repeats = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t l = read_index(labels, b * L + i);
    if (l < 0 || l >= blank)
      throw ValueError(who + ": label " + std::to_string(l) + " at position " + std::to_string(i) +
                       " is out of range [0, " + std::to_string(blank) + ") (class " +
                       std::to_string(blank) + " is the blank)");
    if (i > 0 && l == s.ext[s.ext.size() - 2]) ++repeats;
    s.ext.push_back(l);
    s.ext.push_back(blank);
  }
  if (n + repeats > s.steps)
    throw ValueError(who + " needs " + std::to_string(n + repeats) + " time steps for its " +
                     std::to_string(n) + " labels (" + std::to_string(repeats) +
                     " repeats need a blank between them) but its input_length is " +
                     std::to_string(s.steps) +
                     " (TF: Not enough time for target transition sequence)");
  return s;
}

// Whether state s may be entered from s - 2 (skipping a blank between different labels).
bool can_skip(const std::vector<std::int64_t>& ext, std::size_t s) {
  return s >= 2 && ext[s] != ext[0] && ext[s] != ext[s - 2];
}

// alpha[t][s]: log probability of the prefixes of length t + 1 ending in state s.
template <class T>
std::vector<double> forward(const T* lp, std::int64_t C, const Sample& s) {
  const std::size_t S = s.ext.size();
  const std::int64_t steps = s.steps;
  std::vector<double> a(static_cast<std::size_t>(std::max<std::int64_t>(steps, 1)) * S, kNegInf);
  if (steps == 0) return a;
  a[0] = static_cast<double>(lp[s.ext[0]]);
  if (S > 1) a[1] = static_cast<double>(lp[s.ext[1]]);
  for (std::int64_t t = 1; t < steps; ++t) {
    const double* prev = &a[static_cast<std::size_t>(t - 1) * S];
    double* cur = &a[static_cast<std::size_t>(t) * S];
    for (std::size_t k = 0; k < S; ++k) {
      double v = prev[k];
      if (k >= 1) v = log_add(v, prev[k - 1]);
      if (can_skip(s.ext, k)) v = log_add(v, prev[k - 2]);
      cur[k] = v == kNegInf ? kNegInf : v + static_cast<double>(lp[t * C + s.ext[k]]);
    }
  }
  return a;
}

// Runs f(b) for samples [0, n), each costing `cost` (an add's element is 1: a log_add with its
// exp and log1p in double is taken as 300, an estimate from libm's exp and log at ~20 ns), in
// order or split over threads.
template <bool Parallel, class F>
void for_samples(std::int64_t n, double cost, F&& f) {
  if constexpr (Parallel) {
    parallel_for(
        n, cost,
        [&](std::int64_t b0, std::int64_t b1) {
          for (std::int64_t b = b0; b < b1; ++b) f(b);
        },
        1);
  } else {
    for (std::int64_t b = 0; b < n; ++b) f(b);
  }
}
constexpr double kLogAddCost = 300.0;

std::vector<Sample> samples_of(const KernelCall& c) {
  std::vector<Sample> all;
  for (std::int64_t b = 0; b < c.in[0].dims[0]; ++b) all.push_back(sample_of(c, b));
  return all;
}

double log_likelihood(const std::vector<double>& a, const Sample& s) {
  const std::size_t S = s.ext.size();
  if (s.steps == 0) return S == 1 ? 0.0 : kNegInf;
  const double* last = &a[static_cast<std::size_t>(s.steps - 1) * S];
  return S > 1 ? log_add(last[S - 1], last[S - 2]) : last[0];
}

template <class T, bool Parallel>
void ctc_loss_kernel(const KernelCall& c) {
  const ArrayRef& lp = c.in[0];
  const std::int64_t N = lp.dims[0], T_ = lp.dims[1], C = lp.dims[2];
  T* y = ptr<T>(c.out);
  const std::vector<Sample> all = samples_of(c);
  const double cost = 2.0 * kLogAddCost * static_cast<double>(T_ * (2 * c.in[1].dims[1] + 1));
  for_samples<Parallel>(N, cost, [&](std::int64_t b) {
    const Sample& s = all[static_cast<std::size_t>(b)];
    const T* x = ptr<T>(lp) + b * T_ * C;
    y[b] = static_cast<T>(-log_likelihood(forward(x, C, s), s));
  });
}

template <class T, bool Parallel>
void ctc_loss_grad_kernel(const KernelCall& c) {
  const ArrayRef& lp = c.in[0];
  const std::int64_t N = lp.dims[0], T_ = lp.dims[1], C = lp.dims[2];
  const T* g = ptr<T>(c.in[4]);
  T* y = ptr<T>(c.out);
  const std::vector<Sample> all = samples_of(c);
  const double cost = 5.0 * kLogAddCost * static_cast<double>(T_ * (2 * c.in[1].dims[1] + 1));
  for_samples<Parallel>(N, cost, [&](std::int64_t b) {
    const Sample& s = all[static_cast<std::size_t>(b)];
    const T* x = ptr<T>(lp) + b * T_ * C;
    T* out = y + b * T_ * C;
    std::fill(out, out + T_ * C, T(0));
    const std::vector<double> a = forward(x, C, s);
    const double logp = log_likelihood(a, s);
    if (logp == kNegInf) return;  // no alignment: an infinite loss, no gradient
    const std::size_t S = s.ext.size();
    // beta[s]: log probability of the rest of the sequence after step t, from state s.
    std::vector<double> beta(S, kNegInf), next(S);
    beta[S - 1] = 0;
    if (S > 1) beta[S - 2] = 0;
    for (std::int64_t t = s.steps - 1; t >= 0; --t) {
      std::vector<double> gamma(static_cast<std::size_t>(C), kNegInf);
      for (std::size_t k = 0; k < S; ++k) {
        const double v = a[static_cast<std::size_t>(t) * S + k] + beta[k];
        auto& gk = gamma[static_cast<std::size_t>(s.ext[k])];
        gk = log_add(gk, v);
      }
      for (std::int64_t k = 0; k < C; ++k)
        out[t * C + k] = static_cast<T>(-static_cast<double>(g[b]) *
                                        std::exp(gamma[static_cast<std::size_t>(k)] - logp));
      if (t == 0) break;
      // beta at t - 1: enter state k' at t from k (k' in {k, k + 1, k + 2 when skippable}).
      for (std::size_t k = 0; k < S; ++k) {
        auto step = [&](std::size_t to) {
          return beta[to] + static_cast<double>(x[t * C + s.ext[to]]);
        };
        double v = step(k);
        if (k + 1 < S) v = log_add(v, step(k + 1));
        if (k + 2 < S && can_skip(s.ext, k + 2)) v = log_add(v, step(k + 2));
        next[k] = v;
      }
      beta.swap(next);
    }
  });
}

// log_softmax of one row.
template <class T>
std::vector<double> log_softmax_row(const T* x, std::int64_t C) {
  double m = kNegInf;
  for (std::int64_t k = 0; k < C; ++k) m = std::max(m, static_cast<double>(x[k]));
  double s = 0;
  for (std::int64_t k = 0; k < C; ++k) s += std::exp(static_cast<double>(x[k]) - m);
  std::vector<double> r(static_cast<std::size_t>(C));
  for (std::int64_t k = 0; k < C; ++k)
    r[static_cast<std::size_t>(k)] = static_cast<double>(x[k]) - m - std::log(s);
  return r;
}

struct Beam {
  double blank = kNegInf, label = kNegInf;  // log p of the prefix ending in a blank / a label
  double total() const { return log_add(blank, label); }
};

template <class T, bool Parallel>
void ctc_decode_kernel(const KernelCall& c) {
  const ArrayRef& in = c.in[0];
  const std::int64_t N = in.dims[0], T_ = in.dims[1], C = in.dims[2];
  const auto a = attrs::IntList::of(*c.attrs).values;
  const bool greedy = a[0] != 0, merge = a[3] != 0;
  const auto width = static_cast<std::size_t>(a[1]);
  const std::int64_t P = greedy ? 1 : a[2];
  const std::int64_t blank = C - 1;
  double* y = ptr<double>(c.out);
  for (std::int64_t b = 0; b < N; ++b) {
    const std::int64_t steps = read_index(c.in[1], b);
    if (steps < 0 || steps > T_)
      throw ValueError("K::ctc_decode: sample " + std::to_string(b) + " has input_length " +
                       std::to_string(steps) + " outside [0, " + std::to_string(T_) + "]");
  }
  // A beam step extends every beam by every class and ranks them in a map: thousands of adds.
  const double cost = static_cast<double>(T_ * C) *
                      (greedy ? 1.0 : 50.0 * kLogAddCost * static_cast<double>(width));
  for_samples<Parallel>(N, cost, [&](std::int64_t b) {
    const std::int64_t steps = read_index(c.in[1], b);
    const T* x = ptr<T>(in) + b * T_ * C;
    double* row = y + b * P * (T_ + 1);
    std::fill(row, row + P * (T_ + 1), -1.0);
    if (greedy) {  // best class per step; repeats merged, then blanks dropped (TF)
      double neg_sum = 0;
      std::int64_t prev = -1, n = 0;
      for (std::int64_t t = 0; t < steps; ++t) {
        const T* xt = x + t * C;
        const std::int64_t k = std::max_element(xt, xt + C) - xt;
        neg_sum -= static_cast<double>(xt[k]);
        if (k != blank && k != prev) row[1 + n++] = static_cast<double>(k);
        prev = k;
      }
      row[0] = neg_sum;
      return;
    }
    // Prefix beam search over log-softmaxed logits (TF normalises them), keeping `width` beams.
    std::map<std::vector<std::int64_t>, Beam> beams{{{}, Beam{0.0, kNegInf}}};
    for (std::int64_t t = 0; t < steps; ++t) {
      const std::vector<double> lp = log_softmax_row(x + t * C, C);
      std::map<std::vector<std::int64_t>, Beam> next;
      for (const auto& [prefix, beam] : beams) {
        const double total = beam.total();
        Beam& same = next[prefix];
        same.blank = log_add(same.blank, total + lp[static_cast<std::size_t>(blank)]);
        if (!prefix.empty())
          same.label =
              log_add(same.label, beam.label + lp[static_cast<std::size_t>(prefix.back())]);
        for (std::int64_t k = 0; k < C; ++k) {
          if (k == blank) continue;
          std::vector<std::int64_t> longer = prefix;
          longer.push_back(k);
          const double from = !prefix.empty() && prefix.back() == k ? beam.blank : total;
          Beam& ext = next[longer];
          ext.label = log_add(ext.label, from + lp[static_cast<std::size_t>(k)]);
        }
      }
      std::vector<std::pair<std::vector<std::int64_t>, Beam>> ranked(next.begin(), next.end());
      std::stable_sort(ranked.begin(), ranked.end(), [](const auto& l, const auto& r) {
        return l.second.total() > r.second.total();
      });
      if (ranked.size() > width) ranked.resize(width);
      beams = std::map<std::vector<std::int64_t>, Beam>(ranked.begin(), ranked.end());
    }
    std::vector<std::pair<std::vector<std::int64_t>, Beam>> best(beams.begin(), beams.end());
    std::stable_sort(best.begin(), best.end(), [](const auto& l, const auto& r) {
      return l.second.total() > r.second.total();
    });
    for (std::int64_t p = 0; p < P; ++p) {
      double* out = row + p * (T_ + 1);
      if (p >= static_cast<std::int64_t>(best.size())) {  // fewer distinct paths than asked
        out[0] = kNegInf;
        continue;
      }
      out[0] = best[static_cast<std::size_t>(p)].second.total();
      std::int64_t n = 0, prev = -1;
      for (std::int64_t k : best[static_cast<std::size_t>(p)].first) {
        if (merge && k == prev) continue;
        out[1 + n++] = static_cast<double>(k);
        prev = k;
      }
    }
  });
}

template <bool Parallel>
void register_ctc(Backend& b) {
  b.set(Op::CtcLoss, DType::float32, &ctc_loss_kernel<float, Parallel>);
  b.set(Op::CtcLoss, DType::float64, &ctc_loss_kernel<double, Parallel>);
  b.set(Op::CtcLossGrad, DType::float32, &ctc_loss_grad_kernel<float, Parallel>);
  b.set(Op::CtcLossGrad, DType::float64, &ctc_loss_grad_kernel<double, Parallel>);
  b.set(Op::CtcDecode, DType::float32, &ctc_decode_kernel<float, Parallel>);
  b.set(Op::CtcDecode, DType::float64, &ctc_decode_kernel<double, Parallel>);
}

}  // namespace

void register_reference_ctc(Backend& b) { register_ctc<false>(b); }
void register_cpu_ctc(Backend& b) { register_ctc<true>(b); }

}  // namespace ktape::kernels
