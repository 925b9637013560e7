// The op rows: one row per op case, in one file per op family (core, elementwise, reductions,
// nn, layout, control, loops). A row names a graph builder and its float64 inputs, and says what
// to check about it; one driver (tests/test_op_rows.cpp) runs every row:
//
//   Forward             expected values on cpu and reference, float32 and float64
//   Gradcheck           float64 finite differences (ktape::gradcheck, eps 1e-6, atol 1e-5, rtol
//   1e-3) GradcheckReference  the same with .backend = "reference" SecondOrder         gradcheck of
//   d/dx0 sum(f) (and on reference for second_order_ref rows) Parity              cpu vs reference,
//   forward and gradients, float32 and float64 UnknownDims         gradients with None leading dims
//   equal those with known shapes Errors              each error case throws the named ktape
//   exception with the named message
//
// A row without expected values or without error cases is a visible gap: its Forward or Errors
// instance is skipped with "gap: <row> has no ...".
//
// Expected values never come from ktape. Each row says where its values come from in a comment:
// a hand calculation written next to the values, a <cmath> formula, the naive float64 reference
// of tests/op_rows/naive.hpp (plain loops, see there) applied to the row's inputs, or NumPy.
//
// Adding a row: in the family's file,
//   t.op("name", [](const V& x) { return K::foo(x[0]); }, {g.normal({3, 4})})  // gradcheck+parity
//       .formula([](const In& in) { return naive::foo(in[0]); });             // naive reference
//   t.values("name_by_hand", [](const V& x) { return K::foo(x[0]); }, {f64({1, 2}, {2})})
//       .expect({3, 4}, {2})                                                // by hand: ...
//       .error("bad_axis", Err::Value, "K::foo: axis", [] { K::foo(cst({1}, {1}), 5); });
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ktape/ktape.hpp"
#include "op_rows/naive.hpp"
#include "test_util.hpp"

namespace ktape::op_rows {

namespace K = ktape::backend;
using ktape::DType;
using ktape::NDArray;
using ktape::Shape;
using ktape::Tensor;
using V = std::vector<Tensor>;
using Fn = std::function<Tensor(const V&)>;
using In = std::vector<NDArray>;  // a row's inputs as a formula sees them (float64)

// ---- input generation -------------------------------------------------------------------------

// Deterministic float64 inputs (std::mt19937_64 with a fixed seed).
class Gen {
 public:
  explicit Gen(std::uint64_t seed) : gen_(seed) {}

  double u(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(gen_); }

  NDArray uniform(const Shape& s, double lo, double hi) {
    NDArray a(s, DType::float64);
    for (std::int64_t i = 0; i < a.size(); ++i) a.set_item(i, u(lo, hi));
    return a;
  }
  NDArray normal(const Shape& s, double stddev = 1.0) {
    NDArray a(s, DType::float64);
    std::normal_distribution<double> d(0.0, stddev);
    for (std::int64_t i = 0; i < a.size(); ++i) a.set_item(i, d(gen_));
    return a;
  }
  // Uniform in [lo, hi) but at least `margin` away from every kink (so that central differences
  // never straddle a non-differentiable point).
  NDArray away(const Shape& s, double lo, double hi, const std::vector<double>& kinks,
               double margin = 0.1) {
    NDArray a(s, DType::float64);
    for (std::int64_t i = 0; i < a.size(); ++i) {
      double v;
      bool ok;
      do {
        v = u(lo, hi);
        ok = true;
        for (double k : kinks) ok = ok && std::abs(v - k) >= margin;
      } while (!ok);
      a.set_item(i, v);
    }
    return a;
  }
  // Distinct values on an evenly spaced grid over [lo, hi], shuffled (no ties for max/min).
  NDArray distinct(const Shape& s, double lo, double hi) {
    NDArray a(s, DType::float64);
    const std::int64_t n = a.size();
    std::vector<double> v(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i)
      v[static_cast<std::size_t>(i)] =
          n == 1 ? lo : lo + (hi - lo) * static_cast<double>(i) / static_cast<double>(n - 1);
    std::shuffle(v.begin(), v.end(), gen_);
    for (std::int64_t i = 0; i < n; ++i) a.set_item(i, v[static_cast<std::size_t>(i)]);
    return a;
  }
  // Pairs (x, y) with |x - y| >= margin everywhere (for maximum/minimum).
  std::vector<NDArray> separated(const Shape& sx, const Shape& sy, double margin = 0.2) {
    for (;;) {
      NDArray x = uniform(sx, -2, 2), y = uniform(sy, -2, 2);
      // Check with broadcasting: the shapes used here are equal or y is a trailing suffix.
      bool ok = true;
      for (std::int64_t i = 0; ok && i < x.size(); ++i)
        ok = std::abs(x.item(i) - y.item(i % y.size())) >= margin;
      if (ok) return {x, y};
    }
  }

 private:
  std::mt19937_64 gen_;
};

inline NDArray f64(const std::vector<double>& v, const Shape& s) {
  return NDArray::from_values(v, s, DType::float64);
}

// A constant of the given dtype (K::constant would otherwise cast to floatx).
inline Tensor cst(const std::vector<double>& v, const Shape& s,
                  const std::string& dtype = "float32") {
  return K::constant(NDArray::from_values(v, s, DType::float64), {.dtype = dtype});
}

// A constant with the dtype of `like` (so that one builder serves float32 and float64 graphs).
inline Tensor const_like(const Tensor& like, const NDArray& value) {
  return K::constant(value, {.dtype = K::dtype(like)});
}

inline Tensor int_target(const std::vector<double>& ids, const Shape& s) {
  return K::constant(NDArray::from_values(ids, s, DType::float64), {.dtype = "int32"});
}

// ---- comparisons ------------------------------------------------------------------------------

// |cpu - ref| <= rtol * max(|cpu|, |ref|) + floor_frac * rtol * max|ref|; NaN/inf must match;
// non-float arrays must be equal.
inline double max_abs(const NDArray& a) {
  double m = 0;
  for (std::int64_t i = 0; i < a.size(); ++i)
    if (std::isfinite(a.item(i))) m = std::max(m, std::abs(a.item(i)));
  return m;
}
inline ::testing::AssertionResult Agree(const std::string& what, const NDArray& cpu,
                                        const NDArray& ref, double rtol, double floor_frac) {
  if (cpu.shape() != ref.shape() || cpu.dtype() != ref.dtype())
    return ::testing::AssertionFailure()
           << what << ": cpu " << cpu.shape().str() << " " << ktape::dtype_name(cpu.dtype())
           << " vs reference " << ref.shape().str() << " " << ktape::dtype_name(ref.dtype());
  const bool exact = !ktape::is_floating(ref.dtype());
  const double floor = floor_frac * rtol * max_abs(ref);
  for (std::int64_t i = 0; i < ref.size(); ++i) {
    const double a = cpu.item(i), b = ref.item(i);
    bool ok;
    if (exact)
      ok = a == b;
    else if (std::isnan(a) || std::isnan(b))
      ok = std::isnan(a) && std::isnan(b);
    else if (std::isinf(a) || std::isinf(b))
      ok = a == b;
    else
      ok = std::abs(a - b) <= rtol * std::max(std::abs(a), std::abs(b)) + floor;
    if (!ok)
      return ::testing::AssertionFailure()
             << what << ": element " << i << " cpu " << a << " vs reference " << b << " (diff "
             << std::abs(a - b) << ", rtol " << rtol << ")";
  }
  return ::testing::AssertionSuccess();
}

// ---- the row type -----------------------------------------------------------------------------

enum class Err { Value, Type, NotImplemented };
inline const char* err_name(Err e) {
  switch (e) {
    case Err::Value:
      return "ktape::ValueError";
    case Err::Type:
      return "ktape::TypeError";
    case Err::NotImplemented:
      return "ktape::NotImplementedError";
  }
  return "?";
}

// A call that must throw `type` with a message containing `part` (or equal to it, `whole`).
struct ErrorCase {
  std::string label;
  Err type = Err::Value;
  std::string part;
  std::function<void()> run;
  bool whole = false;
};

// Forward tolerances: |got - want| <= rtol * |want| + atol.
struct Tol {
  double rtol, atol;
};

struct Expected {
  // Either values and shape written in the row ...
  std::vector<double> values;
  Shape shape;
  // ... or a formula over the row's inputs (as fed: rounded to float32 in float32 runs).
  std::function<naive::Arr(const In&)> formula;
  std::string dtype;  // "" = the run's float dtype (float32 / float64); else exactly this
  // Values at flat indices, by hand: checked against the values (or formula) and the output,
  // within `atol` (negative: the run's tolerance).
  struct Spot {
    std::int64_t flat;
    double value, atol;
  };
  std::vector<Spot> spots;
  std::optional<Shape> static_shape;  // K::int_shape of the output, when it matters
  bool signed_zeros = false;          // a zero's sign must match too
  Tol tol32{1e-6, 1e-7};
  Tol tol64{1e-12, 1e-12};
};

struct Checks {
  bool gradcheck = false;
  bool ref_gradcheck = false;
  bool second_order = false;
  bool second_order_ref = false;
  bool parity = false;
  double parity_rtol32 = 1e-5;
  bool none_batch = false;   // Forward and Parity placeholders get a None leading dim
  bool unknown_dims = true;  // gradcheck rows: buildable with None leading dims (UnknownDims)
};

struct OpRow {
  std::string family;
  std::string name;                       // a gtest identifier, unique over all rows
  Fn f;                                   // placeholders -> output
  std::vector<std::string> input_dtypes;  // per input; "" or missing = the run's float dtype
  std::optional<Expected> expected;
  Checks checks;
  std::vector<ErrorCase> errors;

  // -- expected values
  OpRow& expect(std::vector<double> values, Shape shape) {
    ensure().values = std::move(values);
    ensure().shape = std::move(shape);
    return *this;
  }
  OpRow& formula(std::function<naive::Arr(const In&)> fn) {
    ensure().formula = std::move(fn);
    ensure().tol32 = {2e-5, 2e-5};
    ensure().tol64 = {1e-10, 1e-10};
    return *this;
  }
  OpRow& out_dtype(std::string d) {
    ensure().dtype = std::move(d);
    return *this;
  }
  OpRow& spot(std::int64_t flat, double value, double atol = -1) {
    ensure().spots.push_back({flat, value, atol});
    return *this;
  }
  OpRow& static_shape(Shape s) {
    ensure().static_shape = std::move(s);
    return *this;
  }
  OpRow& signed_zeros() {
    ensure().signed_zeros = true;
    return *this;
  }
  OpRow& tol32(double rtol, double atol) {
    ensure().tol32 = {rtol, atol};
    return *this;
  }
  OpRow& tol64(double rtol, double atol) {
    ensure().tol64 = {rtol, atol};
    return *this;
  }
  OpRow& exact() { return tol32(0, 0).tol64(0, 0); }
  // -- inputs
  OpRow& in_dtypes(std::vector<std::string> d) {
    input_dtypes = std::move(d);
    return *this;
  }
  // -- checks
  OpRow& gradcheck() {
    checks.gradcheck = true;
    return *this;
  }
  OpRow& ref_gradcheck() {
    checks.ref_gradcheck = true;
    return *this;
  }
  OpRow& second_order() {
    checks.second_order = true;
    return *this;
  }
  OpRow& second_order_ref() {
    checks.second_order_ref = true;
    return *this;
  }
  OpRow& parity(double rtol32 = 1e-5) {
    checks.parity = true;
    checks.parity_rtol32 = rtol32;
    return *this;
  }
  OpRow& none_batch() {
    checks.none_batch = true;
    return *this;
  }
  OpRow& no_unknown_dims() {
    checks.unknown_dims = false;
    return *this;
  }
  // -- errors
  OpRow& error(std::string label, Err type, std::string part, std::function<void()> run) {
    errors.push_back({std::move(label), type, std::move(part), std::move(run)});
    return *this;
  }
  OpRow& error_exactly(std::string label, Err type, std::string message,
                       std::function<void()> run) {
    errors.push_back({std::move(label), type, std::move(message), std::move(run), true});
    return *this;
  }

  // The float64 inputs. A row given a generator instead (the big parity rows) makes them on first
  // use, so that every test process does not pay for every big array.
  const std::vector<NDArray>& inputs() const {
    if (!inputs_->made) {
      inputs_->values = inputs_->make();
      inputs_->made = true;
    }
    return inputs_->values;
  }
  void set_inputs(std::vector<NDArray> values) {
    inputs_->values = std::move(values);
    inputs_->made = true;
  }
  void set_inputs(std::function<std::vector<NDArray>()> make) {
    inputs_->make = std::move(make);
    inputs_->made = false;
  }

  // The dtype input i is fed in during a run of float dtype `run`.
  DType input_dtype(std::size_t i, DType run) const {
    if (i < input_dtypes.size() && !input_dtypes[i].empty())
      return ktape::dtype_from_name(input_dtypes[i], "op row");
    return run;
  }

 private:
  Expected& ensure() {
    if (!expected) expected.emplace();
    return *expected;
  }
  struct Inputs {
    std::function<std::vector<NDArray>()> make;
    std::vector<NDArray> values;
    bool made = true;
  };
  std::shared_ptr<Inputs> inputs_ = std::make_shared<Inputs>();  // shared by copies of the row
};

inline void PrintTo(const OpRow& r, std::ostream* os) { *os << r.family << "/" << r.name; }

// The rows of one family, in the order they are added (a deque keeps references valid).
class Rows {
 public:
  explicit Rows(std::string family) : family_(std::move(family)) {}

  // Inputs made on first use by a generator seeded from the row's name.
  using Maker = std::function<std::vector<NDArray>(Gen&)>;

  // Forward values and errors only (add checks with the setters).
  OpRow& values(std::string name, Fn f, std::vector<NDArray> inputs) {
    OpRow& r = add(std::move(name), std::move(f));
    r.set_inputs(std::move(inputs));
    return r;
  }
  OpRow& values(std::string name, Fn f, Maker make) {
    OpRow& r = add(std::move(name), std::move(f));
    std::uint64_t seed = 14695981039346656037ULL;  // FNV-1a of the name
    for (unsigned char ch : r.name) seed = (seed ^ ch) * 1099511628211ULL;
    r.set_inputs([make = std::move(make), seed] {
      Gen g(seed);
      return make(g);
    });
    return r;
  }
  // A differentiable case: gradcheck, parity and unknown dims by default.
  OpRow& op(std::string name, Fn f, std::vector<NDArray> inputs) {
    return values(std::move(name), std::move(f), std::move(inputs)).gradcheck().parity();
  }
  // Parity only (bigger shapes for the parallel kernels, zero sizes, scalars, non-float outputs).
  OpRow& parity_only(std::string name, Fn f, std::vector<NDArray> inputs) {
    return values(std::move(name), std::move(f), std::move(inputs)).parity();
  }
  OpRow& parity_only(std::string name, Fn f, Maker make) {
    return values(std::move(name), std::move(f), std::move(make)).parity();
  }

  std::vector<OpRow> take() { return {rows_.begin(), rows_.end()}; }

 private:
  OpRow& add(std::string name, Fn f) {
    OpRow r;
    r.family = family_;
    r.name = std::move(name);
    r.f = std::move(f);
    rows_.push_back(std::move(r));
    return rows_.back();
  }

  std::string family_;
  std::deque<OpRow> rows_;
};

// The inputs of tests/data/conv_reference.py (conv and pool rows): ((i * 7) % mod - mod / 2) *
// scale over the flat index i.
inline NDArray ramp(const Shape& s, int mod = 11, double scale = 0.25) {
  NDArray a(s, DType::float64);
  for (std::int64_t i = 0; i < a.size(); ++i)
    a.set_item(i, static_cast<double>((i * 7) % mod - mod / 2) * scale);
  return a;
}

// A placeholder of shape s and dtype dt (error rows).
inline Tensor ph(const Shape& s, const std::string& dt = "float32") {
  return K::placeholder(s, {.dtype = dt});
}

// The families (tests/op_rows/*_rows.cpp).
std::vector<OpRow> core_rows();
std::vector<OpRow> elementwise_rows();
std::vector<OpRow> reductions_rows();
std::vector<OpRow> nn_rows();
std::vector<OpRow> layout_rows();
std::vector<OpRow> control_rows();
std::vector<OpRow> loops_rows();
std::vector<OpRow> conv_rows();
std::vector<OpRow> pool_rows();
std::vector<OpRow> indexing_rows();
std::vector<OpRow> ctc_rows();
std::vector<OpRow> sparse_rows();
std::vector<OpRow> collective_rows();

}  // namespace ktape::op_rows
