// The one driver of the op rows (tests/op_rows/op_row.hpp): every row of every family through
// Forward, Gradcheck, GradcheckReference, SecondOrder, Parity, UnknownDims and Errors, named
// <Family>/<Suite>.<Test>/<row>. Rows without forward values or error cases show up as skipped
// "gap: ..." instances. OpRowCoverage checks that the rows reach every op kind a K:: function
// can build (white-box: it walks the built graphs, engine/graph_walk.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <iostream>
#include <ostream>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/graph.hpp"       // white-box: the op kind of each node
#include "engine/graph_walk.hpp"  // white-box: the nodes a row's graph reaches
#include "ktape/ktape.hpp"
#include "op_rows/op_row.hpp"
#include "test_util.hpp"

namespace {

using namespace ktape::op_rows;  // NOLINT(google-build-using-namespace): the row vocabulary
using ktape::testing_util::Close;

// Each family's rows, built once.
template <std::vector<OpRow> (*F)()>
const std::vector<OpRow>& cached() {
  static const std::vector<OpRow> rows = F();
  return rows;
}

// Every row of every family.
std::vector<const OpRow*> all_rows() {
  std::vector<const OpRow*> r;
  for (const auto* fam :
       {&cached<core_rows>(), &cached<elementwise_rows>(), &cached<reductions_rows>(),
        &cached<nn_rows>(), &cached<layout_rows>(), &cached<control_rows>(), &cached<loops_rows>(),
        &cached<conv_rows>(), &cached<pool_rows>(), &cached<indexing_rows>(), &cached<ctc_rows>(),
        &cached<sparse_rows>(), &cached<collective_rows>()})
    for (const OpRow& row : *fam) r.push_back(&row);
  return r;
}

// The test parameter: a row by reference (the rows live as long as the program, and each test
// process would otherwise copy every row once per suite).
struct RowRef {
  const OpRow* row;
  const OpRow& operator*() const { return *row; }
};
void PrintTo(const RowRef& r, std::ostream* os) { PrintTo(*r.row, os); }

std::vector<RowRef> refs(const std::vector<OpRow>& rows, bool (*keep)(const Checks&)) {
  std::vector<RowRef> r;
  for (const auto& row : rows)
    if (keep(row.checks)) r.push_back({&row});
  return r;
}
// The rows with forward values, and those with error cases. A row without either is a gradient
// or parity case of an op whose values and errors live in another row; what no row covers shows
// in OpRowCoverage (every op kind needs forward values; error cases are listed as gaps).
std::vector<RowRef> with_values(const std::vector<OpRow>& rows) {
  std::vector<RowRef> r;
  for (const auto& row : rows)
    if (row.expected) r.push_back({&row});
  return r;
}
std::vector<RowRef> with_errors(const std::vector<OpRow>& rows) {
  std::vector<RowRef> r;
  for (const auto& row : rows)
    if (!row.errors.empty()) r.push_back({&row});
  return r;
}
bool gradcheck(const Checks& c) { return c.gradcheck; }
bool ref_gradcheck(const Checks& c) { return c.ref_gradcheck; }
bool second_order(const Checks& c) { return c.second_order; }
bool parity(const Checks& c) { return c.parity; }
bool unknown_dims(const Checks& c) { return c.gradcheck && c.unknown_dims; }

std::string row_name(const ::testing::TestParamInfo<RowRef>& info) { return info.param.row->name; }

std::string dtype_str(DType dt) { return std::string(ktape::dtype_name(dt)); }

// Placeholders for a row's inputs in a run of float dtype `dt` (None leading dims when asked),
// and the inputs to feed them.
struct Built {
  V phs;
  std::vector<NDArray> feed;
  Tensor y;
};
Built build(const OpRow& r, DType dt, bool none_batch) {
  Built b;
  for (std::size_t i = 0; i < r.inputs().size(); ++i) {
    const DType di = r.input_dtype(i, dt);
    Shape s = r.inputs()[i].shape();
    if (none_batch && s.ndim() > 0) s[0] = K::None;
    b.phs.push_back(K::placeholder(s, {.dtype = dtype_str(di)}));
    b.feed.push_back(r.inputs()[i].astype(di));
  }
  b.y = r.f(b.phs);
  return b;
}

// The gradient of a fixed random projection of y (cotangent r) with respect to every input.
std::vector<Tensor> projected_gradients(const Tensor& y, const V& phs, const Shape& y_shape,
                                        std::uint64_t seed) {
  Gen g(seed);
  const Tensor r = const_like(y, g.uniform(y_shape, 0.5, 1.5));
  return K::gradients(K::sum(y * r), phs);
}

// ---- Forward ------------------------------------------------------------------------------------

class Forward : public ::testing::TestWithParam<RowRef> {};

TEST_P(Forward, Values) {
  const OpRow& r = *GetParam();
  const Expected& e = *r.expected;
  for (const std::string backend : {"cpu", "reference"})
    for (const DType dt : {DType::float32, DType::float64}) {
      SCOPED_TRACE(backend + " " + dtype_str(dt));
      const Built b = build(r, dt, r.checks.none_batch);
      ASSERT_TRUE(b.y.defined());
      const std::string want_dtype = e.dtype.empty() ? dtype_str(dt) : e.dtype;
      EXPECT_EQ(K::dtype(b.y), want_dtype);
      std::vector<double> want = e.values;
      Shape shape = e.shape;
      if (e.formula) {
        In in;
        for (const NDArray& f : b.feed) in.push_back(f.astype(DType::float64));
        const naive::Arr a = e.formula(in);
        want = a.v;
        shape = Shape(a.shape);
      }
      // The static shape: as given, or else compatible with the value's.
      const Shape st = K::int_shape(b.y);
      if (e.static_shape) {
        EXPECT_EQ(st, *e.static_shape) << st.str();
      } else {
        bool ok = st.ndim() == shape.ndim();
        for (int d = 0; ok && d < st.ndim(); ++d) ok = st[d] == K::None || st[d] == shape[d];
        EXPECT_TRUE(ok) << "static shape " << st.str() << ", value shape " << shape.str();
      }
      const NDArray out = K::function(b.phs, {b.y}, {}, {.backend = backend})(b.feed)[0];
      EXPECT_EQ(dtype_str(out.dtype()), want_dtype);
      // float32 tolerances when the run or the output is float32 (mean of bool is floatx).
      const Tol tol = dt == DType::float32 || out.dtype() == DType::float32 ? e.tol32 : e.tol64;
      EXPECT_TRUE(Close(out, want, shape, tol.rtol, tol.atol));
      for (const Expected::Spot& sp : e.spots) {
        SCOPED_TRACE("spot value at flat index " + std::to_string(sp.flat));
        ASSERT_LT(sp.flat, static_cast<std::int64_t>(want.size()));
        const double atol = sp.atol >= 0 ? sp.atol : tol.rtol * std::abs(sp.value) + tol.atol;
        EXPECT_NEAR(want[static_cast<std::size_t>(sp.flat)], sp.value, atol);
        EXPECT_NEAR(out.item(sp.flat), sp.value,
                    std::max(atol, tol.rtol * std::abs(sp.value) + tol.atol));
      }
      if (e.signed_zeros && out.size() == static_cast<std::int64_t>(want.size())) {
        for (std::size_t i = 0; i < want.size(); ++i) {
          if (want[i] != 0.0) continue;
          EXPECT_EQ(std::signbit(out.item(static_cast<std::int64_t>(i))), std::signbit(want[i]))
              << "the sign of zero at " << i;
        }
      }
    }
}

// ---- Gradcheck, GradcheckReference --------------------------------------------------------------

class Gradcheck : public ::testing::TestWithParam<RowRef> {};

TEST_P(Gradcheck, MatchesFiniteDifferences) {
  const OpRow& r = *GetParam();
  const auto res = ktape::gradcheck(r.f, r.inputs());
  EXPECT_TRUE(res.ok) << res.report << " (max_error " << res.max_error << ")";
}

class GradcheckReference : public ::testing::TestWithParam<RowRef> {};

TEST_P(GradcheckReference, MatchesFiniteDifferences) {
  const OpRow& r = *GetParam();
  const auto res = ktape::gradcheck(r.f, r.inputs(), {.backend = "reference"});
  EXPECT_TRUE(res.ok) << res.report << " (max_error " << res.max_error << ")";
}

// ---- SecondOrder: the gradcheck of d/dx0 sum(f(x)) ----------------------------------------------

class SecondOrder : public ::testing::TestWithParam<RowRef> {};

TEST_P(SecondOrder, GradientOfGradientMatchesFiniteDifferences) {
  const OpRow& r = *GetParam();
  const Fn op = r.f;
  const auto grad_fn = [op](const V& xs) {
    const Tensor gx = K::gradients(K::sum(op(xs)), {xs[0]})[0];
    if (!gx.defined()) throw std::runtime_error("first-order gradient is null");
    return gx;
  };
  auto res = ktape::gradcheck(grad_fn, r.inputs());
  EXPECT_TRUE(res.ok) << res.report << " (max_error " << res.max_error << ")";
  if (r.checks.second_order_ref) {
    res = ktape::gradcheck(grad_fn, r.inputs(), {.backend = "reference"});
    EXPECT_TRUE(res.ok) << "reference: " << res.report << " (max_error " << res.max_error << ")";
  }
}

// ---- Parity: cpu vs reference -------------------------------------------------------------------

class Parity : public ::testing::TestWithParam<RowRef> {};

TEST_P(Parity, CpuMatchesReference) {
  const OpRow& r = *GetParam();
  for (const DType dt : {DType::float32, DType::float64}) {
    SCOPED_TRACE(dtype_str(dt));
    const double rtol = dt == DType::float32 ? r.checks.parity_rtol32 : 1e-12;
    const Built b = build(r, dt, r.checks.none_batch);
    std::vector<Tensor> outs{b.y};
    std::vector<std::string> names{"forward"};
    if (ktape::is_floating(b.y.dtype())) {
      Shape ys = b.y.shape();
      if (!ys.is_fully_defined())
        ys = K::function(b.phs, {b.y}, {}, {.backend = "reference"})(b.feed)[0].shape();
      const auto grads = projected_gradients(b.y, b.phs, ys, 17);
      for (std::size_t i = 0; i < grads.size(); ++i)
        if (grads[i].defined()) {
          outs.push_back(grads[i]);
          names.push_back("gradient of input " + std::to_string(i));
        }
    }
    const auto cpu = K::function(b.phs, outs, {}, {.backend = "cpu"})(b.feed);
    const auto ref = K::function(b.phs, outs, {}, {.backend = "reference"})(b.feed);
    ASSERT_EQ(cpu.size(), ref.size());
    for (std::size_t i = 0; i < cpu.size(); ++i)
      EXPECT_TRUE(Agree(names[i], cpu[i], ref[i], rtol, i == 0 ? 1e-2 : 1.0));
  }
}

// ---- UnknownDims --------------------------------------------------------------------------------

// Gradients built on placeholders with a None leading dim must equal those built on fully known
// shapes (exercises SizeRatio, SumToLike, ReshapeLike and shape inference at compile time).
class UnknownDims : public ::testing::TestWithParam<RowRef> {};

TEST_P(UnknownDims, GradientsMatchKnownShapes) {
  const OpRow& k = *GetParam();
  auto run = [&](bool none) {
    V phs;
    for (const NDArray& in : k.inputs()) {
      Shape s = in.shape();
      if (none && s.ndim() >= 2) s[0] = K::None;
      phs.push_back(K::placeholder(s, {.dtype = "float64"}));
    }
    const Tensor y = k.f(phs);
    const NDArray y0 = K::function(phs, {y}, {}, {.backend = "reference"})(k.inputs())[0];
    std::vector<Tensor> outs{y};
    for (const Tensor& gr : projected_gradients(y, phs, y0.shape(), 23))
      outs.push_back(gr.defined() ? gr : K::constant(0.0, {.dtype = "float64"}));
    return K::function(phs, outs, {}, {.backend = "reference"})(k.inputs());
  };
  const auto known = run(false);
  const auto unknown = run(true);
  ASSERT_EQ(known.size(), unknown.size());
  for (std::size_t i = 0; i < known.size(); ++i) {
    SCOPED_TRACE(i == 0 ? std::string("forward") : "gradient " + std::to_string(i - 1));
    EXPECT_EQ(known[i].shape(), unknown[i].shape());
    for (std::int64_t j = 0; j < known[i].size(); ++j) {
      const double a = unknown[i].item(j), w = known[i].item(j);
      EXPECT_LE(std::abs(a - w), 1e-12 * std::max(1.0, std::abs(w))) << "element " << j;
    }
  }
}

// ---- Errors -------------------------------------------------------------------------------------

class Errors : public ::testing::TestWithParam<RowRef> {};

TEST_P(Errors, ThrowTheNamedError) {
  const OpRow& r = *GetParam();
  for (const ErrorCase& c : r.errors) {
    SCOPED_TRACE(c.label);
    std::string type = "nothing", msg;
    try {
      c.run();
    } catch (const ktape::ValueError& e) {
      type = err_name(Err::Value), msg = e.what();
    } catch (const ktape::TypeError& e) {
      type = err_name(Err::Type), msg = e.what();
    } catch (const ktape::NotImplementedError& e) {
      type = err_name(Err::NotImplemented), msg = e.what();
    } catch (const std::exception& e) {
      type = "another exception", msg = e.what();
    }
    EXPECT_EQ(type, err_name(c.type)) << msg;
    if (c.whole)
      EXPECT_EQ(msg, c.part);
    else
      EXPECT_HAS(msg, c.part);
  }
}

// ---- instantiation: every family through every suite --------------------------------------------

#define KTAPE_ROW_SUITES(Family, rows)                                                         \
  INSTANTIATE_TEST_SUITE_P(Family, Forward, ::testing::ValuesIn(with_values(rows)), row_name); \
  INSTANTIATE_TEST_SUITE_P(Family, Gradcheck, ::testing::ValuesIn(refs(rows, gradcheck)),      \
                           row_name);                                                          \
  INSTANTIATE_TEST_SUITE_P(Family, GradcheckReference,                                         \
                           ::testing::ValuesIn(refs(rows, ref_gradcheck)), row_name);          \
  INSTANTIATE_TEST_SUITE_P(Family, SecondOrder, ::testing::ValuesIn(refs(rows, second_order)), \
                           row_name);                                                          \
  INSTANTIATE_TEST_SUITE_P(Family, Parity, ::testing::ValuesIn(refs(rows, parity)), row_name); \
  INSTANTIATE_TEST_SUITE_P(Family, UnknownDims, ::testing::ValuesIn(refs(rows, unknown_dims)), \
                           row_name);                                                          \
  INSTANTIATE_TEST_SUITE_P(Family, Errors, ::testing::ValuesIn(with_errors(rows)), row_name)

KTAPE_ROW_SUITES(Core, cached<core_rows>());
KTAPE_ROW_SUITES(Elementwise, cached<elementwise_rows>());
KTAPE_ROW_SUITES(Reductions, cached<reductions_rows>());
KTAPE_ROW_SUITES(Nn, cached<nn_rows>());
KTAPE_ROW_SUITES(Layout, cached<layout_rows>());
KTAPE_ROW_SUITES(Control, cached<control_rows>());
KTAPE_ROW_SUITES(Loops, cached<loops_rows>());
KTAPE_ROW_SUITES(Conv, cached<conv_rows>());
KTAPE_ROW_SUITES(Pool, cached<pool_rows>());
KTAPE_ROW_SUITES(Indexing, cached<indexing_rows>());
KTAPE_ROW_SUITES(Ctc, cached<ctc_rows>());
KTAPE_ROW_SUITES(Sparse, cached<sparse_rows>());
KTAPE_ROW_SUITES(Collective, cached<collective_rows>());

// Families without rows for some suite instantiate it empty.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GradcheckReference);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(SecondOrder);

// ---- the table itself ---------------------------------------------------------------------------

TEST(OpRowTable, NamesAreUniqueIdentifiersAndEveryRowChecksSomething) {
  std::set<std::string> seen;
  int forward = 0, errors = 0, gradcheck = 0, ref_gradcheck = 0, second = 0, parity = 0,
      unknown = 0;
  std::vector<std::string> forward_gaps, error_gaps;
  for (const OpRow* row : all_rows()) {
    const OpRow& r = *row;
    SCOPED_TRACE(r.family + "/" + r.name);
    EXPECT_TRUE(seen.insert(r.name).second) << "duplicate row name";
    bool ident = !r.name.empty() && !std::isdigit(static_cast<unsigned char>(r.name[0]));
    for (char ch : r.name)
      ident = ident && (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_');
    EXPECT_TRUE(ident) << "not an identifier";
    const Checks& c = r.checks;
    EXPECT_TRUE(r.expected || c.gradcheck || c.parity || c.second_order || !r.errors.empty())
        << "the row checks nothing";
    if ((c.gradcheck || c.second_order || c.ref_gradcheck) &&
        !std::all_of(r.inputs().begin(), r.inputs().end(),
                     [](const NDArray& a) { return a.dtype() == DType::float64; }))
      ADD_FAILURE() << "gradcheck inputs must be float64";
    forward += r.expected.has_value();
    errors += static_cast<int>(r.errors.size());
    gradcheck += c.gradcheck;
    ref_gradcheck += c.ref_gradcheck;
    second += c.second_order;
    parity += c.parity;
    unknown += c.gradcheck && c.unknown_dims;
    if (!r.expected) forward_gaps.push_back(r.name);
    if (r.errors.empty()) error_gaps.push_back(r.name);
  }
  std::cout << all_rows().size() << " rows: " << forward << " with forward values, " << errors
            << " error cases, " << gradcheck << " gradcheck, " << ref_gradcheck
            << " reference gradcheck, " << second << " second order, " << parity << " parity, "
            << unknown << " unknown dims\n"
            << forward_gaps.size() << " rows without forward values:";
  for (const auto& n : forward_gaps) std::cout << " " << n;
  std::cout << "\n" << error_gaps.size() << " rows without error cases\n";
}

// ---- coverage: the op kinds the rows reach ------------------------------------------------------

void collect(const std::vector<Tensor>& roots, std::set<ktape::Op>& kinds) {
  std::vector<ktape::Node*> nodes;
  for (const Tensor& t : roots)
    if (t.defined()) nodes.push_back(t.node_ptr().get());
  for (ktape::Node* n : ktape::reachable_in_tape_order(nodes)) kinds.insert(n->op);
}

// Internal kinds that no K:: function builds: only gradients do. They must be reached by the
// gradient graphs of the gradcheck / second-order rows instead, and have no argument errors.
const std::set<ktape::Op>& gradient_only_kinds() {
  static const std::set<ktape::Op> kinds = {
      ktape::Op::ReluGrad,            // relu's gradient
      ktape::Op::SigmoidGrad,         // sigmoid's gradient
      ktape::Op::TanhGrad,            // tanh's gradient
      ktape::Op::ClipGrad,            // clip's gradient
      ktape::Op::SumToLike,           // the gradient of a broadcast operand
      ktape::Op::BroadcastToLike,     // the gradient of sum / mean / max / min
      ktape::Op::AddN,                // gradient accumulation
      ktape::Op::ReshapeLike,         // reshape's gradient
      ktape::Op::ConcatPart,          // concatenate's gradient
      ktape::Op::SlicePad,            // slice's gradient
      ktape::Op::GatherGrad,          // gather's gradient
      ktape::Op::CtcLossGrad,         // ctc_batch_cost's gradient
      ktape::Op::ScanEmbed,           // a loop's incoming gradient
      ktape::Op::ConvBackpropFilter,  // conv's kernel gradient
      ktape::Op::MaxPoolGrad,         // max pooling's gradient
      ktape::Op::MaxPoolGradGrad,     // the gradient of max pooling's gradient
      ktape::Op::MaxPoolReluGrad,     // relu's gradient of max pooling's gradient of its output
      ktape::Op::AvgPoolGrad,         // average pooling's gradient
      ktape::Op::SparseGather,        // the gradient of a sparse tensor's values
  };
  return kinds;
}

TEST(OpRowCoverage, EveryOpKindHasARowWithForwardValues) {
  const auto& gradient_only = gradient_only_kinds();
  std::set<ktape::Op> forward, gradient;
  for (const OpRow* row : all_rows()) {
    const OpRow& r = *row;
    SCOPED_TRACE(r.name);
    const Built b = build(r, DType::float64, r.checks.none_batch);
    if (r.expected) collect({b.y}, forward);
    if ((r.checks.gradcheck || r.checks.second_order) && ktape::is_floating(b.y.dtype())) {
      Shape ys = b.y.shape();
      if (!ys.is_fully_defined())
        ys = K::function(b.phs, {b.y}, {}, {.backend = "reference"})(b.feed)[0].shape();
      // The inputs, and every loop node: a loop's incoming gradient (ScanEmbed) is consumed by
      // the loop's own gradient rule, so it is reachable only as the gradient at the loop.
      V wrt = b.phs;
      for (ktape::Node* n : ktape::reachable_in_tape_order({b.y.node_ptr().get()}))
        if (n->op == ktape::Op::Scan) wrt.emplace_back(n->shared_from_this());
      const auto g1 = projected_gradients(b.y, wrt, ys, 5);
      collect(g1, gradient);
      if (r.checks.second_order && g1[0].defined())
        collect(K::gradients(K::sum(g1[0]), b.phs), gradient);
    }
  }
  std::string missing;
  for (int k = 0; k < ktape::kNumOps; ++k) {
    const auto op = static_cast<ktape::Op>(k);
    const bool ok = forward.count(op) || (gradient_only.count(op) && gradient.count(op));
    if (!ok) missing += std::string(" ") + ktape::op_name(op);
  }
  EXPECT_TRUE(missing.empty()) << "op kinds without a row with forward values (or, for the "
                                  "gradient-only kinds, without a gradient row):"
                               << missing;
}

}  // namespace

// Error cases by op kind: a kind that is the output of some row but of no row with error cases
// is a gap, listed (and the test skipped) so that it stays visible. Kinds with no error path
// beyond the null tensor every op refuses are exempt.
TEST(OpRowCoverage, ErrorCasesByOpKind) {
  const std::set<ktape::Op> no_error_path = {
      ktape::Op::Identity, ktape::Op::StopGradient, ktape::Op::PrintTensor, ktape::Op::Transpose,
      ktape::Op::ShapeOf,
      // Sources and groups built by other K:: functions (zeros of a zero size is a constant,
      // moving_average_update a group of updates), whose errors live in those functions' rows.
      ktape::Op::Constant, ktape::Op::Group,
      // Its one error, an index out of range, needs fed sparse values: tests/test_sparse.cpp.
      ktape::Op::SparseToDense};
  std::set<ktape::Op> with, without;
  for (const OpRow* row : all_rows()) {
    const Built b = build(*row, DType::float64, row->checks.none_batch);
    (row->errors.empty() ? without : with).insert(b.y.node().op);
  }
  std::string gaps;
  for (ktape::Op op : without)
    if (!with.count(op) && !no_error_path.count(op) && !gradient_only_kinds().count(op))
      gaps += std::string(" ") + ktape::op_name(op);
  if (!gaps.empty()) GTEST_SKIP() << "gap: op kinds whose rows have no error cases:" << gaps;
}
