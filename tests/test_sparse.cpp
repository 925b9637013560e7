// Sparse tensors (ops/sparse.hpp): placeholders fed K::SparseValues, to_dense, dot(sparse,
// dense) and its gradient, concatenate, ctc_label_dense_to_sparse, and the errors. Expected
// values are worked by hand (small cases) or computed from the dense matrix by a plain loop in
// double precision (the large case), never by the code under test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "ktape/ktape.hpp"
#include "op_rows/op_row.hpp"
#include "ops/op_util.hpp"
#include "test_util.hpp"

namespace K = ktape::backend;
using ktape::Feed;
using ktape::NDArray;
using ktape::Shape;
using ktape::SparseValue;
using ktape::Tensor;
using ktape::op_rows::f64;
using ktape::testing_util::Close;
using ktape::testing_util::error_of;

namespace {

NDArray i64(const std::vector<std::int64_t>& v, const Shape& s) {
  return NDArray::from_vector<std::int64_t>(v, s);
}
NDArray f32(const std::vector<double>& v, const Shape& s) {
  return NDArray::from_values(v, s, ktape::DType::float32);
}

// (2, 3) with entries (0, 1) = 1, (1, 0) = 2, (0, 1) = 3 again: dense [[0, 4, 0], [2, 0, 0]].
SparseValue small_value() {
  return {i64({0, 1, 1, 0, 0, 1}, {3, 2}), f32({1, 2, 3}, {3}), Shape{2, 3}};
}

const std::vector<std::string> kBackends = {"cpu", "reference"};

}  // namespace

TEST(Sparse, PlaceholderIsSparseAndToDenseIsNot) {
  const Tensor a = K::placeholder({2, 2});
  const Tensor b = K::placeholder({2, 2}, {.sparse = true});
  EXPECT_FALSE(K::is_sparse(a));
  EXPECT_TRUE(K::is_sparse(b));
  EXPECT_TRUE(K::is_placeholder(b));
  EXPECT_FALSE(K::is_sparse(K::to_dense(b)));
  EXPECT_EQ(K::to_dense(a), a);  // a dense tensor is returned as is
  EXPECT_EQ(K::int_shape(b), (Shape{2, 2}));
  EXPECT_EQ(K::ndim(b), 2);
  EXPECT_EQ(K::dtype(b), "float32");
  const Tensor c = K::placeholder({.ndim = 3, .dtype = "float64", .sparse = true});
  EXPECT_EQ(K::int_shape(c), (Shape{K::None, K::None, K::None}));
  EXPECT_EQ(K::dtype(c), "float64");
}

TEST(Sparse, ToDenseSumsRepeatedEntriesOnBothBackends) {
  for (const auto& be : kBackends) {
    SCOPED_TRACE(be);
    const Tensor x = K::placeholder({2, 3}, {.sparse = true});
    const auto f = K::function({x}, {K::to_dense(x), x}, {}, {.backend = be});
    const auto out = f(std::vector<Feed>{small_value()});
    EXPECT_TRUE(Close(out[0], {0, 4, 0, 2, 0, 0}, {2, 3}, 0, 0));
    EXPECT_TRUE(Close(out[1], {0, 4, 0, 2, 0, 0}, {2, 3}, 0, 0));  // a sparse output comes dense
  }
}

TEST(Sparse, Int32IndicesNoEntriesAndUnknownDims) {
  const Tensor x = K::placeholder({K::None, 2}, {.sparse = true});
  const auto f = K::function({x}, {K::to_dense(x)});
  const SparseValue v{NDArray::from_vector<std::int32_t>({2, 1}, {1, 2}), f32({5}, {1}),
                      Shape{3, 2}};
  EXPECT_TRUE(Close(f(std::vector<Feed>{v})[0], {0, 0, 0, 0, 0, 5}, {3, 2}, 0, 0));
  const SparseValue empty{i64({}, {0, 2}), f32({}, {0}), Shape{1, 2}};
  EXPECT_TRUE(Close(f(std::vector<Feed>{empty})[0], {0, 0}, {1, 2}, 0, 0));
}

TEST(Sparse, EntryCountsShareAPlanPerPowerOfTwo) {
  const Tensor x = K::placeholder({4, 4}, {.sparse = true});
  const auto f = K::function({x}, {K::sum(K::to_dense(x))});
  auto value = [](int nnz) {  // nnz entries on the diagonal-ish, each worth 1
    std::vector<std::int64_t> idx;
    std::vector<double> val;
    for (int k = 0; k < nnz; ++k) {
      idx.push_back(k % 4);
      idx.push_back((k / 4) % 4);
      val.push_back(1);
    }
    return SparseValue{i64(idx, {nnz, 2}), f32(val, {nnz}), Shape{4, 4}};
  };
  EXPECT_EQ(f(std::vector<Feed>{value(3)})[0].item(), 3);
  EXPECT_EQ(f(std::vector<Feed>{value(4)})[0].item(), 4);
  EXPECT_EQ(f.num_plans(), 1u);  // 3 and 4 entries both pad to 4
  EXPECT_EQ(f(std::vector<Feed>{value(5)})[0].item(), 5);
  EXPECT_EQ(f.num_plans(), 2u);
}

TEST(Sparse, ShapeAndSizeOfASparseTensor) {
  const Tensor x = K::placeholder({K::None, 3}, {.sparse = true});
  const auto f = K::function({x}, {K::shape(x), K::size(x)});
  const auto out = f(std::vector<Feed>{SparseValue{i64({}, {0, 2}), f32({}, {0}), Shape{5, 3}}});
  EXPECT_TRUE(Close(out[0], {5, 3}, {2}, 0, 0));
  EXPECT_EQ(out[1].item(), 15);
}

TEST(Sparse, DotByHandOnBothBackends) {
  // x = [[0, 4, 0], [2, 0, 0]], y = [[1, 2], [3, 4], [5, 6]]: x y = [[12, 16], [2, 4]].
  for (const auto& be : kBackends) {
    SCOPED_TRACE(be);
    const Tensor x = K::placeholder({2, 3}, {.sparse = true});
    const Tensor y = K::placeholder({3, 2});
    const Tensor z = K::dot(x, y);
    EXPECT_FALSE(K::is_sparse(z));
    EXPECT_EQ(K::int_shape(z), (Shape{2, 2}));
    const auto f = K::function({x, y}, {z}, {}, {.backend = be});
    const auto out = f(std::vector<Feed>{small_value(), f32({1, 2, 3, 4, 5, 6}, {3, 2})});
    EXPECT_TRUE(Close(out[0], {12, 16, 2, 4}, {2, 2}, 0, 0));
  }
}

TEST(Sparse, DotGradientGoesToTheDenseOperand) {
  // d sum(x y * c) / dy = x^T c. x = [[0, 4, 0], [2, 0, 0]], c = [[1, 2], [3, 4]]:
  // x^T c = [[6, 8], [4, 8], [0, 0]] by hand.
  const Tensor x = K::placeholder({2, 3}, {.sparse = true});
  const Tensor w = K::variable(f32({1, 2, 3, 4, 5, 6}, {3, 2}));
  const Tensor c = K::constant(f32({1, 2, 3, 4}, {2, 2}));
  const Tensor loss = K::sum(K::dot(x, w) * c);
  const auto g = K::gradients(loss, {w});
  for (const auto& be : kBackends) {
    const auto f = K::function({x}, {g[0]}, {}, {.backend = be});
    EXPECT_TRUE(Close(f(std::vector<Feed>{small_value()})[0], {6, 8, 4, 8, 0, 0}, {3, 2}, 0, 0))
        << be;
  }
  // The sparse operand gets no gradient (TF: sparse_tensor_dense_matmul's is to the values, and
  // a fed sparse tensor's values are not a variable).
  EXPECT_FALSE(K::gradients(loss, {x})[0].defined());
}

TEST(Sparse, DotGradcheckInFloat64) {
  // A sparse operand built from constant parts (the internal builder), so that gradcheck can
  // feed the dense one; 4 entries of a (3, 4) matrix, one position listed twice.
  const Tensor idx = K::constant(i64({0, 0, 2, 3, 1, 2, 2, 3}, {4, 2}), {.dtype = "int64"});
  const Tensor val = K::constant(f64({0.5, -1.5, 2.0, 0.25}, {4}), {.dtype = "float64"});
  const Tensor carrier = ktape::make_node(
      ktape::Op::ShapeCarrier, {K::constant(0.0, {.dtype = "float64", .shape = Shape{3, 4}})}, {},
      ktape::DType::float64);
  const Tensor sp = ktape::ops::sparse_from_parts(idx, val, carrier);
  ASSERT_TRUE(K::is_sparse(sp));
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> y(4 * 5);
  for (auto& v : y) v = u(rng);
  for (const auto& be : kBackends) {
    const auto r =
        ktape::gradcheck([&](const std::vector<Tensor>& in) { return K::tanh(K::dot(sp, in[0])); },
                         {f64(y, {4, 5})}, {.backend = be});
    EXPECT_TRUE(r.ok) << be << ": " << r.report;
  }
}

TEST(Sparse, LargeDotMatchesAPlainLoopOnBothBackendsAtAnyThreadCount) {
  // 200 x 300 with 600 entries (some repeated) times 300 x 130: the cpu kernel splits the
  // output's columns into tasks; each element still sums its terms in entry order, so the bits
  // match the reference kernel and do not depend on the thread count.
  const std::int64_t m = 200, k = 300, n = 130, nnz = 600;
  std::mt19937 rng(3);
  std::uniform_int_distribution<std::int64_t> ri(0, m - 1), ci(0, k - 1);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<std::int64_t> idx;
  std::vector<double> val, y(static_cast<std::size_t>(k * n));
  for (std::int64_t e = 0; e < nnz; ++e) {
    idx.push_back(e % 50 == 0 ? 7 : ri(rng));
    idx.push_back(e % 50 == 0 ? 11 : ci(rng));
    val.push_back(u(rng));
  }
  for (auto& v : y) v = u(rng);
  std::vector<double> want(static_cast<std::size_t>(m * n), 0.0);
  for (std::int64_t e = 0; e < nnz; ++e)
    for (std::int64_t j = 0; j < n; ++j)
      want[static_cast<std::size_t>(idx[2 * e] * n + j)] +=
          val[static_cast<std::size_t>(e)] * y[static_cast<std::size_t>(idx[2 * e + 1] * n + j)];
  const Tensor x = K::placeholder({m, k}, {.dtype = "float32", .sparse = true});
  const Tensor yp = K::placeholder({k, n});
  const Tensor g = K::placeholder({m, n});
  const Tensor z = K::dot(x, yp);
  const Tensor gy = K::gradients(K::sum(z * g), {yp})[0];  // x^T g: the adjoint kernel
  const std::vector<Feed> feed{SparseValue{i64(idx, {nnz, 2}), f32(val, {nnz}), Shape{m, k}},
                               f32(y, {k, n}), f32(want, {m, n})};
  const auto ref = K::function({x, yp, g}, {z, gy}, {}, {.backend = "reference"})(feed);
  EXPECT_TRUE(Close(ref[0], want, {m, n}, 1e-5, 1e-5));
  std::vector<double> want_gy(static_cast<std::size_t>(k * n), 0.0);  // x^T g, g = want
  for (std::int64_t e = 0; e < nnz; ++e)
    for (std::int64_t j = 0; j < n; ++j)
      want_gy[static_cast<std::size_t>(idx[2 * e + 1] * n + j)] +=
          val[static_cast<std::size_t>(e)] * want[static_cast<std::size_t>(idx[2 * e] * n + j)];
  EXPECT_TRUE(Close(ref[1], want_gy, {k, n}, 1e-4, 1e-4));
  const int threads = ktape::num_threads();
  for (int t : {1, 2, 8}) {
    ktape::set_num_threads(t);
    const auto cpu = K::function({x, yp, g}, {z, gy}, {}, {.backend = "cpu"})(feed);
    for (std::size_t o = 0; o < 2; ++o)
      EXPECT_EQ(0, std::memcmp(cpu[o].raw_data(), ref[o].raw_data(), ref[o].nbytes()))
          << "output " << o << " at " << t << " threads";
  }
  ktape::set_num_threads(threads);
}

TEST(Sparse, ConcatenateOfSparseIsSparse) {
  // a (2, 2) = [[1, 0], [0, 2]], b (2, 3) = [[0, 0, 3], [4, 0, 0]].
  const Tensor a = K::placeholder({2, 2}, {.sparse = true});
  const Tensor b = K::placeholder({2, K::None}, {.sparse = true});
  const Tensor ab = K::concatenate({a, b}, -1);
  EXPECT_TRUE(K::is_sparse(ab));
  EXPECT_EQ(K::int_shape(ab), (Shape{2, K::None}));
  const Tensor c = K::placeholder({1, 2}, {.sparse = true});
  const Tensor ac = K::concatenate({a, c}, 0);
  EXPECT_TRUE(K::is_sparse(ac));
  const Tensor d = K::placeholder({2, 1});
  const Tensor ad = K::concatenate({a, d});  // mixed: dense (Keras)
  EXPECT_FALSE(K::is_sparse(ad));
  const SparseValue va{i64({0, 0, 1, 1}, {2, 2}), f32({1, 2}, {2}), Shape{2, 2}};
  const SparseValue vb{i64({0, 2, 1, 0}, {2, 2}), f32({3, 4}, {2}), Shape{2, 3}};
  const SparseValue vc{i64({0, 1}, {1, 2}), f32({5}, {1}), Shape{1, 2}};
  for (const auto& be : kBackends) {
    SCOPED_TRACE(be);
    const auto f = K::function({a, b, c, d}, {ab, K::to_dense(ac), ad}, {}, {.backend = be});
    const auto out = f(std::vector<Feed>{va, vb, vc, f32({7, 8}, {2, 1})});
    EXPECT_TRUE(Close(out[0], {1, 0, 0, 0, 3, 0, 2, 4, 0, 0}, {2, 5}, 0, 0));
    EXPECT_TRUE(Close(out[1], {1, 0, 0, 2, 0, 5}, {3, 2}, 0, 0));
    EXPECT_TRUE(Close(out[2], {1, 0, 7, 0, 2, 8}, {2, 3}, 0, 0));
  }
  EXPECT_HAS(error_of([&] { K::concatenate({a, c}, 1); }), "K::concatenate");
}

TEST(Sparse, CtcLabelDenseToSparse) {
  // Rows [1, 2, 3] with length 2, [4, 5, 6] with 3, [7, 8, 9] with 0: [[1, 2, 0], [4, 5, 6],
  // [0, 0, 0]]; a length above the row takes the row, one below 0 none (Keras's mask).
  const Tensor labels = K::placeholder({K::None, 3}, {.dtype = "int32"});
  const Tensor lengths = K::placeholder({K::None}, {.dtype = "int32"});
  const Tensor sp = K::ctc_label_dense_to_sparse(labels, lengths);
  EXPECT_TRUE(K::is_sparse(sp));
  EXPECT_EQ(K::dtype(sp), "int32");
  EXPECT_EQ(K::int_shape(sp), (Shape{K::None, 3}));
  for (const auto& be : kBackends) {
    SCOPED_TRACE(be);
    const auto f = K::function({labels, lengths}, {K::to_dense(sp)}, {}, {.backend = be});
    const auto lab =
        NDArray::from_vector<std::int32_t>({1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 1, 1, 2, 2, 2}, {5, 3});
    const auto len = NDArray::from_vector<std::int32_t>({2, 3, 0, 9, -1}, {5});
    EXPECT_TRUE(
        Close(f({lab, len})[0], {1, 2, 0, 4, 5, 6, 0, 0, 0, 1, 1, 1, 0, 0, 0}, {5, 3}, 0, 0));
  }
  EXPECT_HAS(error_of([&] { K::ctc_label_dense_to_sparse(labels, K::expand_dims(lengths)); }),
             "label_lengths must be (samples,)");
  EXPECT_HAS(error_of([&] { K::ctc_label_dense_to_sparse(lengths, lengths); }),
             "labels must be (samples, max_label_length)");
}

TEST(Sparse, BadFeedsAreValueErrors) {
  const Tensor x = K::placeholder({2, 3}, {.sparse = true});
  const Tensor y = K::placeholder({3, 2});
  const auto f = K::function({x, y}, {K::dot(x, y)});
  const NDArray yv = f32({1, 2, 3, 4, 5, 6}, {3, 2});
  auto err = [&](const SparseValue& v) {
    return error_of<ktape::ValueError>([&] { f(std::vector<Feed>{v, yv}); });
  };
  EXPECT_HAS(err({i64({0, 3}, {1, 2}), f32({1}, {1}), Shape{2, 3}}),
             "indices[0] = (0, 3) is out of range for dense_shape (2, 3)");
  EXPECT_HAS(err({i64({-1, 0}, {1, 2}), f32({1}, {1}), Shape{2, 3}}), "out of range");
  EXPECT_HAS(err({i64({0, 1, 0}, {1, 3}), f32({1}, {1}), Shape{2, 3}}),
             "indices of shape (1, 3) for a rank-2 tensor");
  EXPECT_HAS(err({i64({0, 1}, {2}), f32({1}, {1}), Shape{2, 3}}), "indices of shape (2,)");
  EXPECT_HAS(err({i64({0, 1}, {1, 2}), f32({1, 2}, {2}), Shape{2, 3}}),
             "values of shape (2,) for indices of shape (1, 2)");
  EXPECT_HAS(err({i64({0, 1}, {1, 2}), f64({1}, {1}), Shape{2, 3}}), "values of dtype float64");
  EXPECT_HAS(err({i64({0, 1}, {1, 2}), f32({1}, {1}), Shape{2, 4}}), "dense_shape (2, 4)");
  EXPECT_HAS(err({i64({0, 1}, {1, 2}), f32({1}, {1}), Shape{2, 3, 1}}), "dense_shape (2, 3, 1)");
  EXPECT_HAS(err({NDArray::from_values({0, 1}, {1, 2}), f32({1}, {1}), Shape{2, 3}}),
             "indices must be int64 or int32");
  EXPECT_HAS(error_of<ktape::ValueError>([&] {
               f(std::vector<Feed>{yv, yv});
             }),
             "was fed a dense array; feed a K::SparseValue");
  EXPECT_HAS(error_of<ktape::ValueError>([&] { f({yv, yv}); }), "was fed a dense array");
  EXPECT_HAS(error_of<ktape::ValueError>([&] {
               f(std::vector<Feed>{small_value(), small_value()});
             }),
             "only a sparse placeholder takes one");
  EXPECT_HAS(error_of<ktape::ValueError>([&] { f(std::vector<Feed>{small_value()}); }),
             "expected 2 input value(s), got 1");
}

TEST(Sparse, OpsThatDoNotTakeASparseTensorAreTypeErrors) {
  const Tensor x = K::placeholder({2, 3}, {.sparse = true});
  const Tensor y = K::placeholder({3, 2});
  EXPECT_HAS(error_of<ktape::TypeError>([&] { K::exp(x); }), "is a sparse tensor");
  EXPECT_HAS(error_of<ktape::TypeError>([&] { K::sum(x); }), "K::to_dense");
  EXPECT_HAS(error_of<ktape::TypeError>([&] { K::dot(y, x); }), "only x may be");
  EXPECT_HAS(error_of<ktape::ValueError>([&] {
               K::dot(x, K::placeholder({3, 2, 2}));
             }),
             "a sparse x needs x and y of rank 2");
  EXPECT_HAS(error_of<ktape::ValueError>([&] {
               K::dot(x, K::placeholder({4, 2}));
             }),
             "not aligned");
  EXPECT_HAS(error_of<ktape::ValueError>([&] { K::placeholder(Shape{}, {.sparse = true}); }),
             "needs rank 1 to 11, got shape ()");
  EXPECT_HAS(error_of<ktape::ValueError>([&] { K::eval(x); }), "feed it through K::function");
}

TEST(Sparse, TrainsALinearModelOnSparseInputs) {
  // One SGD step on loss = mean((x w - t)^2) with x = [[0, 4, 0], [2, 0, 0]], w = 0, t = [1, 1]:
  // dw = 2/2 * x^T (x w - t) = -x^T [1, 1] = [-2, -4, 0], so w becomes 0.1 * [2, 4, 0].
  const Tensor x = K::placeholder({K::None, 3}, {.sparse = true});
  const Tensor t = K::placeholder({K::None, 1});
  const Tensor w = K::variable(f32({0, 0, 0}, {3, 1}));
  const Tensor loss = K::mean(K::square(K::dot(x, w) - t));
  const Tensor gw = K::gradients(loss, {w})[0];
  const auto step = K::function({x, t}, {loss}, {K::update_sub(w, gw * 0.1)});
  const auto out = step(std::vector<Feed>{small_value(), f32({1, 1}, {2, 1})});
  EXPECT_NEAR(out[0].item(), 1.0, 1e-7);
  EXPECT_TRUE(Close(K::get_value(w), {0.2, 0.4, 0}, {3, 1}, 1e-6, 1e-7));
}

TEST(Sparse, PaddingEntriesAreSkippedEvenNextToInfinities) {
  // 3 entries pad to 4. x = [[0, 0, 3], [0, 1, 5]] uses no row of y but 1 and 2, so y's row 0 of
  // NaN and inf must not reach the product: z = [[3 y2], [y1 + 5 y2]] by hand. The gradient
  // x^T c has a zero row 0 even where c's row 0 is infinite.
  const Tensor x = K::placeholder({2, 3}, {.sparse = true});
  const Tensor y = K::placeholder({3, 2});
  const Tensor c = K::placeholder({2, 2});
  const Tensor z = K::dot(x, y);
  const Tensor gy = K::gradients(K::sum(z * c), {y})[0];
  const double inf = std::numeric_limits<double>::infinity();
  const SparseValue v{i64({1, 1, 1, 2, 0, 2}, {3, 2}), f32({1, 5, 3}, {3}), Shape{2, 3}};
  for (const auto& be : kBackends) {
    SCOPED_TRACE(be);
    const auto f = K::function({x, y, c}, {z, gy, K::to_dense(x)}, {}, {.backend = be});
    const auto out = f(std::vector<Feed>{v, f32({std::nan(""), inf, 1, 2, 3, 4}, {3, 2}),
                                         f32({inf, inf, 1, 1}, {2, 2})});
    EXPECT_TRUE(Close(out[0], {9, 12, 16, 22}, {2, 2}, 0, 0));
    EXPECT_EQ(out[1].item(0), 0.0);
    EXPECT_EQ(out[1].item(1), 0.0);
    EXPECT_TRUE(Close(out[2], {0, 0, 3, 0, 1, 5}, {2, 3}, 0, 0));
  }
}

TEST(Sparse, CtcLabelsPastTheLengthsAreLeftOut) {
  // Positions past each length are padding: NaN there reaches neither to_dense nor dot.
  // labels [[1, NaN], [2, 3]], lengths [1, 2]: dense [[1, 0], [2, 3]]; times y = [[1], [inf]]:
  // [[1], [2 + 3 inf]] = [[1], [inf]].
  const Tensor labels = K::placeholder({2, 2});
  const Tensor y = K::placeholder({2, 1});
  const Tensor sp = K::ctc_label_dense_to_sparse(
      labels, K::constant(NDArray::from_vector<std::int32_t>({1, 2}, {2}), {.dtype = "int32"}));
  const double inf = std::numeric_limits<double>::infinity();
  for (const auto& be : kBackends) {
    SCOPED_TRACE(be);
    const auto out =
        K::function({labels, y}, {K::to_dense(sp), K::dot(sp, y)}, {},
                    {.backend = be})({f32({1, std::nan(""), 2, 3}, {2, 2}), f32({1, inf}, {2, 1})});
    EXPECT_TRUE(Close(out[0], {1, 0, 2, 3}, {2, 2}, 0, 0));
    EXPECT_TRUE(Close(out[1], {1, inf}, {2, 1}, 0, 0));
  }
}

TEST(Sparse, MoreErrors) {
  const Tensor x = K::placeholder({2, 3}, {.sparse = true});
  const Tensor y = K::placeholder({3, 2});
  const auto f = K::function({x, y}, {K::dot(x, y)});
  // int32 indices are range-checked too; a dense input's error names its own position.
  const SparseValue bad32{NDArray::from_vector<std::int32_t>({2, 0}, {1, 2}), f32({1}, {1}),
                          Shape{2, 3}};
  EXPECT_HAS(error_of<ktape::ValueError>([&] {
               f(std::vector<Feed>{bad32, f32({1, 2, 3, 4, 5, 6}, {3, 2})});
             }),
             "indices[0] = (2, 0) is out of range");
  EXPECT_HAS(error_of<ktape::ValueError>([&] {
               f(std::vector<Feed>{small_value(), f32({1, 2, 3}, {3, 1})});
             }),
             "K::function: input 1 for placeholder");
  // Rank 12 does not leave room for the carrier's extra dim.
  EXPECT_HAS(error_of<ktape::ValueError>([&] {
               K::placeholder(Shape(std::vector<std::int64_t>(12, 1)), {.sparse = true});
             }),
             "needs rank 1 to 11");
  // Only sparse placeholders are fed.
  const Tensor xx = K::concatenate({x, x}, 0);
  EXPECT_HAS(error_of<ktape::ValueError>([&] { K::function({xx}, {K::to_dense(xx)}); }),
             "is a sparse tensor computed in the graph");
  // Indices computed in the graph are checked by the kernels.
  const Tensor sp = ktape::ops::sparse_from_parts(
      K::constant(i64({0, 5}, {1, 2}), {.dtype = "int64"}), K::constant(f32({1}, {1})),
      ktape::make_node(ktape::Op::ShapeCarrier, {K::constant(0.0, {.shape = Shape{2, 3}})}, {},
                       ktape::DType::float32));
  EXPECT_HAS(error_of<ktape::ValueError>([&] { K::eval(K::to_dense(sp)); }),
             "K::to_dense: index 5 of entry 0 (dim 1) is out of range for a dense dim of 3");
}
