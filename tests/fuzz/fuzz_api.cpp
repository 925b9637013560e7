// An API-sequence fuzzer: the input is read as a small program that builds a graph through the
// K:: API (sources of random small shapes and dtypes, then random ops with random axes and
// options, gradients, updates), compiles it with K::function on a random backend and calls it
// with fed arrays of random — sometimes mismatching — shapes. Every step must either throw a
// ktape::Error or succeed; a successful call must return, for each output, an array of the
// output's dtype whose shape agrees with the static shape, and finite values wherever the
// program tracks that finiteness is guaranteed (bounded inputs through bounded ops). Anything
// else — a crash, a sanitizer report, another exception, a wrong shape — aborts.
#include <spdlog/spdlog.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "ktape/ktape.hpp"

namespace K = ktape::backend;
using ktape::DType;
using ktape::NDArray;
using ktape::Shape;
using ktape::Tensor;

namespace {

class Input {
 public:
  Input(const std::uint8_t* d, std::size_t n) : d_(d), n_(n) {}
  std::uint8_t byte() { return i_ < n_ ? d_[i_++] : 0; }
  int pick(int n) { return n <= 1 ? 0 : byte() % n; }
  bool flag() { return byte() & 1; }
  bool done() const { return i_ >= n_; }
  double real() { return (static_cast<int>(byte()) - 128) / 32.0; }  // [-4, 4)

 private:
  const std::uint8_t* d_;
  std::size_t n_, i_ = 0;
};

constexpr double kInf = std::numeric_limits<double>::infinity();

// KTAPE_FUZZ_TRACE=1: print the program as it is built and run (to minimise a finding by hand).
const bool g_trace = std::getenv("KTAPE_FUZZ_TRACE") != nullptr;
void trace(const std::string& s) {
  if (g_trace) std::fprintf(stderr, "%s\n", s.c_str());
}
std::string desc(const Tensor& t) {
  return std::string(ktape::op_name(t.op())) + " " + t.shape().str() + " " +
         std::string(dtype_name(t.dtype()));
}

// A tensor of the program, with a bound on the magnitude of its values when the program can
// prove one (inf: unknown, so finiteness is not checked).
struct Value {
  Tensor t;
  double bound = kInf;
};

bool is_float(DType d) { return d == DType::float32 || d == DType::float64; }

// The bound of an op that maps finite values into [-b, b]: only when its input is finite.
double squash(const Value& v, double b) { return v.bound < 1e30 ? b : kInf; }

const char* kDtypes[] = {"float32", "float64", "int32", "bool"};

Shape random_shape(Input& in, bool allow_none) {
  const int rank = in.pick(4);
  std::vector<std::int64_t> dims;
  for (int i = 0; i < rank; ++i) {
    const int d = in.pick(allow_none ? 6 : 5);
    dims.push_back(d == 5 ? ktape::None : d);
  }
  return Shape(dims);
}

NDArray random_array(Input& in, const Shape& shape, DType dt) {
  NDArray a(shape, dt);
  for (std::int64_t i = 0; i < a.size(); ++i)
    a.set_item(i, dt == DType::bool_ ? in.byte() & 1 : in.real());
  return a;
}

// A concrete shape for a placeholder: its known dims, random small ones for None, and now and
// then a deliberately different shape.
Shape feed_shape(Input& in, const Shape& s) {
  if (in.pick(8) == 0) return random_shape(in, false);
  std::vector<std::int64_t> dims;
  for (auto d : s) dims.push_back(d >= 0 ? d : in.pick(4));
  return Shape(dims);
}

int axis_of(Input& in, const Tensor& t) {
  const int r = std::max(t.ndim(), 1);
  return in.pick(2 * r + 1) - r;  // includes one out-of-range value: -r-1 .. r-1
}

double bound_of_sum(const Value& v, const Tensor& t) {
  double n = 1;
  for (auto d : t.shape()) n *= d >= 0 ? static_cast<double>(d) : kInf;
  return v.bound * std::max(n, 1.0);
}

// Applies op `k` to values from the pool; returns false when it threw a ktape::Error.
bool apply(Input& in, std::vector<Value>& pool, std::vector<Tensor>& variables) {
  const Value& a = pool[static_cast<std::size_t>(in.pick(static_cast<int>(pool.size())))];
  const Value& b = pool[static_cast<std::size_t>(in.pick(static_cast<int>(pool.size())))];
  const int op = in.pick(45);
  Value r;
  try {
    switch (op) {
      case 0:
        r = {a.t + b.t, a.bound + b.bound};
        break;
      case 1:
        r = {a.t - b.t, a.bound + b.bound};
        break;
      case 2:
        r = {a.t * b.t, a.bound * b.bound};
        break;
      case 3:
        r = {a.t / b.t};
        break;
      case 4:
        r = {-a.t, a.bound};
        break;
      case 5:
        r = {K::square(a.t), a.bound * a.bound};
        break;
      case 6:
        r = {K::sqrt(a.t), std::sqrt(a.bound)};
        break;  // sqrt(clip(x, 0, inf))
      case 7:
        r = {K::exp(a.t), a.bound < 80 ? std::exp(a.bound) : kInf};
        break;
      case 8:
        r = {K::log(a.t)};
        break;
      case 9:
        r = {K::abs(a.t), a.bound};
        break;
      // Bounded ops give a bounded result only from a finite input (NaN stays NaN).
      case 10:
        r = {K::tanh(a.t), squash(a, 1.0)};
        break;
      case 11:
        r = {K::sigmoid(a.t), squash(a, 1.0)};
        break;
      case 12:
        r = {K::relu(a.t, {.alpha = in.real()}), a.bound * 4};
        break;
      case 13:
        r = {K::softmax(a.t, axis_of(in, a.t)), squash(a, 1.0)};
        break;
      case 14:
        r = {K::clip(a.t, in.real(), in.real()), squash(a, 4.0)};
        break;
      case 15:
        r = {K::maximum(a.t, b.t), std::max(a.bound, b.bound)};
        break;
      case 16:
        r = {K::minimum(a.t, b.t), std::max(a.bound, b.bound)};
        break;
      case 17:
        r = {K::sum(a.t, axis_of(in, a.t), in.flag()), bound_of_sum(a, a.t)};
        break;
      case 18: {  // the mean of an empty axis is NaN, as in TF
        const bool full = a.t.shape().is_fully_defined() && a.t.shape().num_elements() > 0;
        r = {K::mean(a.t, axis_of(in, a.t), in.flag()), full ? a.bound : kInf};
        break;
      }
      case 19:
        r = {K::max(a.t, axis_of(in, a.t), in.flag())};
        break;  // -inf on empty axes
      case 20:
        r = {K::argmax(a.t, axis_of(in, a.t)), kInf};
        break;
      case 21:
        r = {K::dot(a.t, b.t), bound_of_sum({Tensor(), a.bound * b.bound}, a.t)};
        break;
      case 22:
        r = {K::transpose(a.t), a.bound};
        break;
      case 23: {
        std::vector<int> perm;
        for (int i = 0; i < a.t.ndim(); ++i) perm.push_back(in.pick(a.t.ndim() + 1));
        r = {K::permute_dimensions(a.t, perm), a.bound};
        break;
      }
      case 24: {
        std::vector<std::int64_t> shape;
        const int rank = in.pick(4);
        for (int i = 0; i < rank; ++i) shape.push_back(in.pick(6) - 1);  // -1 .. 4
        r = {K::reshape(a.t, shape), a.bound};
        break;
      }
      case 25:
        r = {K::expand_dims(a.t, axis_of(in, a.t)), a.bound};
        break;
      case 26:
        r = {K::squeeze(a.t, axis_of(in, a.t)), a.bound};
        break;
      case 27:
        r = {K::concatenate({a.t, b.t}, axis_of(in, a.t)), std::max(a.bound, b.bound)};
        break;
      case 28: {
        std::vector<std::int64_t> start, size;
        for (int i = 0; i < a.t.ndim(); ++i) {
          start.push_back(in.pick(4));
          size.push_back(in.pick(5) - 1);
        }
        if (in.pick(4) == 0 && !start.empty()) start.pop_back();
        r = {K::slice(a.t, start, size), a.bound};
        break;
      }
      case 29:
        r = {K::stack({a.t, b.t}, axis_of(in, a.t)), std::max(a.bound, b.bound)};
        break;
      case 30:
        r = {K::cast(a.t, kDtypes[in.pick(4)]), a.bound};
        break;
      case 31:
        r = {K::one_hot(a.t, in.pick(6)), 1.0};
        break;
      case 32:
        r = {K::categorical_crossentropy(a.t, b.t, {.from_logits = in.flag()})};
        break;
      case 33:
        r = {K::sparse_categorical_crossentropy(a.t, b.t, {.from_logits = in.flag()})};
        break;
      case 34:
        r = {K::switch_(a.t, b.t, a.t), std::max(a.bound, b.bound)};
        break;
      case 35:
        r = {K::greater(a.t, b.t), 1.0};
        break;
      case 36:
        r = {K::stop_gradient(a.t), a.bound};
        break;
      case 37:
        r = {K::pow(a.t, in.real())};
        break;
      case 38:
        r = {K::dropout(a.t, in.pick(4) / 4.0, {.seed = in.byte()}), a.bound * 4};
        break;
      case 39: {
        // A scalar loss's gradients with respect to the variables: null or shaped like them.
        const auto gs = K::gradients(K::sum(a.t), variables);
        for (std::size_t i = 0; i < gs.size(); ++i)
          if (gs[i].defined()) {
            if (gs[i].shape() != variables[i].shape()) std::abort();
            r = {gs[i]};
          }
        if (!r.t.defined()) return false;
        break;
      }
      case 40:  // a loop over axis 0
        r = {K::map_fn([](const Tensor& e) { return K::tanh(e) * 2.0; }, a.t), squash(a, 2.0)};
        break;
      case 41:
        r = {K::foldl([](const Tensor& acc, const Tensor& e) { return acc + e; }, a.t),
             bound_of_sum(a, a.t)};
        break;
      case 42: {  // K::rnn over (samples, time, features), with options and a mask
        const bool masked = in.flag();
        K::RnnOptions o{
            .go_backwards = in.flag(), .unroll = in.flag(), .zero_output_for_mask = in.flag()};
        if (masked) o.mask = K::greater(K::sum(b.t, -1), 0.0);
        const Tensor h0 = K::sum(a.t, 1) * 0.0;
        auto res = K::rnn(
            [](const Tensor& x,
               const std::vector<Tensor>& st) -> std::pair<Tensor, std::vector<Tensor>> {
              const Tensor h = K::tanh(x + st[0]);
              return {h, {h}};
            },
            a.t, {h0}, o);
        r = {in.flag() ? res.last_output : res.outputs, squash(a, 1.0)};
        break;
      }
      case 43: {  // second order: gradients of a gradient
        const auto g1 = K::gradients(K::sum(a.t * a.t * b.t), variables);
        Tensor acc;
        for (const auto& g : g1)
          if (g.defined()) acc = acc.defined() ? acc + K::sum(g) : K::sum(g);
        if (!acc.defined()) return false;
        const auto g2 = K::gradients(acc, variables);
        for (std::size_t i = 0; i < g2.size(); ++i)
          if (g2[i].defined()) {
            if (g2[i].shape() != variables[i].shape()) std::abort();
            r = {g2[i]};
          }
        if (!r.t.defined()) return false;
        break;
      }
      case 44:
        r = {K::in_train_phase(a.t, b.t), std::max(a.bound, b.bound)};
        break;
    }
  } catch (const ktape::Error& e) {
    trace("op " + std::to_string(op) + " on [" + desc(a.t) + "], [" + desc(b.t) + "]: " + e.what());
    return false;
  }
  if (!r.t.defined()) std::abort();  // a K:: function returned a null tensor without throwing
  trace("op " + std::to_string(op) + " on [" + desc(a.t) + "] bound " + std::to_string(a.bound) +
        ", [" + desc(b.t) + "] bound " + std::to_string(b.bound) + " -> " + desc(r.t) + " bound " +
        std::to_string(r.bound));
  if (!is_float(r.t.dtype()) || !(r.bound < 1e30)) r.bound = kInf;
  pool.push_back(r);
  return true;
}

void check_output(const Tensor& t, const NDArray& got, bool finite) {
  if (!got.defined() || got.dtype() != t.dtype() || got.ndim() != t.ndim()) std::abort();
  for (int d = 0; d < t.ndim(); ++d)
    if (t.shape()[d] >= 0 && t.shape()[d] != got.shape()[d]) std::abort();
  if (finite)
    for (std::int64_t i = 0; i < got.size(); ++i)
      if (!std::isfinite(got.item(i))) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Input in(data, size);
  K::clear_session();
  std::vector<Value> pool;
  std::vector<Tensor> placeholders, variables;
  const int n_sources = 1 + in.pick(3);
  for (int i = 0; i < n_sources; ++i) {
    const DType dt = ktape::dtype_from_name(kDtypes[in.pick(4)]);
    const int kind = in.pick(3);
    try {
      if (kind == 0) {
        Tensor p = K::placeholder(random_shape(in, true), {.dtype = std::string(dtype_name(dt))});
        placeholders.push_back(p);
        pool.push_back({p, dt == DType::bool_ ? 1.0 : 4.0});
        trace("placeholder " + desc(p));
      } else {
        const NDArray v = random_array(in, random_shape(in, false), dt);
        Tensor t = kind == 1 ? K::variable(v, {.dtype = std::string(dtype_name(dt))})
                             : K::constant(v, {.dtype = std::string(dtype_name(dt))});
        if (kind == 1) variables.push_back(t);
        pool.push_back({t, 4.0});
        trace((kind == 1 ? "variable " : "constant ") + v.str());
      }
    } catch (const ktape::Error&) {
    }
  }
  if (pool.empty()) return 0;
  const int n_ops = in.pick(10);
  for (int i = 0; i < n_ops && !in.done(); ++i) apply(in, pool, variables);

  // Outputs: the last one or two values; an update of a variable by a value of the pool.
  std::vector<Value> outs{pool.back()};
  if (pool.size() > 1 && in.flag()) outs.push_back(pool[pool.size() - 2]);
  std::vector<Tensor> updates;
  if (!variables.empty() && in.flag()) {
    const Tensor& v =
        variables[static_cast<std::size_t>(in.pick(static_cast<int>(variables.size())))];
    const Tensor& x = pool[static_cast<std::size_t>(in.pick(static_cast<int>(pool.size())))].t;
    try {
      const int kind = in.pick(3);
      updates.push_back(kind == 0   ? K::update(v, x)
                        : kind == 1 ? K::update_add(v, x)
                                    : K::moving_average_update(v, x, in.pick(10) / 10.0));
    } catch (const ktape::Error&) {
    }
  }
  std::vector<Tensor> out_tensors;
  for (const auto& o : outs) out_tensors.push_back(o.t);
  try {
    auto f = K::function(placeholders, out_tensors, updates,
                         {.backend = in.flag() ? "reference" : "cpu", .fuse = in.flag()});
    for (int call = 0; call < 2; ++call) {
      std::vector<NDArray> fed;
      for (const auto& p : placeholders)
        fed.push_back(random_array(in, feed_shape(in, p.shape()), p.dtype()));
      std::vector<NDArray> got;
      for (const auto& a : fed) trace("feed " + a.str());
      try {
        got = f(fed);
      } catch (const ktape::Error& e) {
        trace(std::string("call: ") + e.what());
        continue;
      }
      for (const auto& g : got) trace("got " + g.str());
      if (got.size() != outs.size()) std::abort();
      for (std::size_t i = 0; i < outs.size(); ++i)
        check_output(outs[i].t, got[i], outs[i].bound < 1e30 && updates.empty());
    }
  } catch (const ktape::Error&) {
  }
  return 0;
}
