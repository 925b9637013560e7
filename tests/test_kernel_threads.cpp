// Kernels split over threads by the grain policy that replaced the reference backend's serial
// loops on the cpu backend: the gradient of a sum (BroadcastToLike), Reverse and Pad, CTC, the
// random ops, an embedding's lookup and gradient (Gather, GatherGrad), and slices,
// concatenations and fills (Slice, SlicePad, Concat, ConcatPart, FillLike), arg ops, running
// sums and products, one_hot and casts (ArgMax, ArgMin, Cumsum, Cumprod, OneHot, Cast), the
// sparse ops (SparseToDense, SparseGather, SparseConcatIndices, DenseIndices). Each
// gives the reference's bits (or, for CTC, the same bits) at 1, 2 and 16 threads, in arenas of
// that many slots (tests/thread_util.hpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/graph.hpp"
#include "ktape/ktape.hpp"
#include "ops/op_util.hpp"
#include "test_util.hpp"
#include "thread_util.hpp"

namespace {

namespace K = ktape::backend;
using ktape::DType;
using ktape::NDArray;
using ktape::Shape;
using ktape::Tensor;
using ktape::thread_util::expect_reference_bits;
using ktape::thread_util::expect_same_bits;
using ktape::thread_util::in_arena;
using ktape::thread_util::pattern;

// The gradient of a sum over axes is the incoming gradient broadcast back (BroadcastToLike): on
// the cpu backend rows of the last axis copied from the gradient or filled with one of its values,
// split over threads by the grain policy. Every element checked against its definition (dx at i is
// dy at i with the summed axes' coordinates dropped), at 1, 2 and 16 threads, and against the
// reference's bits: one value to all (small, and in 3 tasks), a column to rows (small, and in 4
// tasks), a row to every row (3 tasks), a middle axis (small, and in 6 tasks, which start the
// odometer mid-array), and two outer axes with the last one summed (the task counts are the grain
// policy's for these sizes).
TEST(Threads, BroadcastGradientsCopyTheirRows) {
  struct Case {
    Shape shape;
    std::optional<std::vector<int>> axis;
  };
  const std::vector<Case> cases = {{Shape{4, 5}, std::nullopt},
                                   {Shape{400000}, std::nullopt},
                                   {Shape{6, 7}, std::vector<int>{1}},
                                   {Shape{4000, 64}, std::vector<int>{1}},
                                   {Shape{1000, 300}, std::vector<int>{0}},
                                   {Shape{3, 4, 5}, std::vector<int>{1}},
                                   {Shape{30, 40, 50}, std::vector<int>{0, 2}},
                                   {Shape{64, 100, 64}, std::vector<int>{1}}};
  for (const Case& cs : cases) {
    const std::string what =
        cs.shape.str() +
        (cs.axis ? " over " + std::to_string(cs.axis->size()) + " axes" : " over all");
    const int r = cs.shape.ndim();
    std::vector<bool> summed(static_cast<std::size_t>(r), !cs.axis);
    if (cs.axis)
      for (int a : *cs.axis) summed[static_cast<std::size_t>(a)] = true;
    std::vector<std::int64_t> kept;  // the incoming gradient's shape (keepdims)
    for (int d = 0; d < r; ++d)
      kept.push_back(summed[static_cast<std::size_t>(d)] ? 1 : cs.shape[d]);
    const Shape dy_shape(kept);
    const NDArray xv = NDArray::full(cs.shape, 0.0);
    const NDArray dyv = pattern(dy_shape);
    auto run = [&](const std::string& backend, int threads) {
      return in_arena(threads, [&] {
        auto x = K::placeholder(cs.shape);
        auto y = K::sum(x, {.axis = cs.axis, .keepdims = true});
        auto dy = K::placeholder(dy_shape);
        auto g = K::gradients({y}, {x}, {dy})[0];
        return K::function({x, dy}, {g}, {}, {.backend = backend})({xv, dyv});
      });
    };
    const auto ref = expect_reference_bits(run, {1, 2, 16}, what);
    const NDArray cpu = run("cpu", 2)[0];
    std::int64_t bad = 0;
    for (std::int64_t i = 0; i < xv.size(); ++i) {
      std::int64_t rest = i, at = 0, stride = 1;
      for (int d = r - 1; d >= 0; --d) {
        const std::int64_t coord = rest % cs.shape[d];
        rest /= cs.shape[d];
        if (!summed[static_cast<std::size_t>(d)]) at += coord * stride;
        stride *= kept[static_cast<std::size_t>(d)];
      }
      bad += cpu.item(i) != dyv.item(at);
    }
    EXPECT_EQ(bad, 0) << what;
  }
}

// Reverse and Pad on the cpu backend copy rows (the innermost flipped or padded axis with the
// axes after it), split over threads by the grain policy: the reference's bits at 1, 2 and 16
// threads, for flips of the last, a middle and outer axes (blocks of one element, small and in 8
// tasks; blocks of many, small and in 4 tasks (a time-major flip: one row of 28 blocks) or 3
// starting mid-row), padding in both data formats (small, and in 3 tasks), and padding's
// gradient (negative amounts: a crop, in 3 tasks), plus one hand case of each (the task counts
// are the grain policy's for these sizes).
TEST(Threads, ReverseAndPadMoveRows) {
  using Make = Tensor (*)(const Tensor&);
  struct Case {
    Shape shape;
    Make make;
    const char* what;
  };
  const std::vector<Case> cases = {
      {Shape{7}, [](const Tensor& x) { return K::reverse(x, 0); }, "reverse (7) axis 0"},
      {Shape{4, 6}, [](const Tensor& x) { return K::reverse(x, 1); }, "reverse (4, 6) axis 1"},
      {Shape{4, 6}, [](const Tensor& x) { return K::reverse(x, 0); }, "reverse (4, 6) axis 0"},
      {Shape{3, 4, 5},
       [](const Tensor& x) {
         return K::reverse(x, {0, 2});
       },
       "reverse axes 0, 2"},
      {Shape{3, 4, 5}, [](const Tensor& x) { return K::reverse(x, 1); },
       "reverse (3, 4, 5) axis 1"},
      {Shape{28, 128, 128}, [](const Tensor& x) { return K::reverse(x, 0); }, "reverse time-major"},
      {Shape{1000, 300}, [](const Tensor& x) { return K::reverse(x, -1); }, "reverse long rows"},
      {Shape{64, 40, 64},
       [](const Tensor& x) {
         return K::reverse(x, {0, 1});
       },
       "reverse outer"},
      {Shape{2, 5, 4, 3},
       [](const Tensor& x) {
         return K::spatial_2d_padding(x, {{{1, 2}, {3, 0}}});
       },
       "pad channels_last"},
      {Shape{2, 3, 5, 4},
       [](const Tensor& x) {
         return K::spatial_2d_padding(x, {{{2, 1}, {0, 3}}}, "channels_first");
       },
       "pad channels_first"},
      {Shape{128, 28, 28, 1},
       [](const Tensor& x) {
         return K::spatial_2d_padding(x, {{{2, 2}, {2, 2}}});
       },
       "pad a batch of images"},
      {Shape{600, 70, 8},
       [](const Tensor& x) {
         return K::temporal_padding(x, {3, 1});
       },
       "temporal pad"},
      {Shape{64, 26, 26, 8},
       [](const Tensor& x) {
         const Tensor p = K::spatial_2d_padding(x, {{{1, 2}, {2, 1}}});
         return K::gradients(K::sum(p * K::cos(p)), {x})[0];  // a crop of cos(p) - p sin(p)
       },
       "pad's gradient (a crop)"}};
  for (const Case& cs : cases) {
    const NDArray xv = pattern(cs.shape);
    auto run = [&](const std::string& backend, int threads) {
      return in_arena(threads, [&] {
        auto x = K::placeholder(cs.shape);
        return K::function({x}, {cs.make(x)}, {}, {.backend = backend})({xv});
      });
    };
    expect_reference_bits(run, {1, 2, 16}, cs.what);
  }
  // By hand: rows (1 2 3), (4 5 6) reversed along the last axis and along the first; a 1 x 2
  // image padded one row above and one column on each side.
  NDArray a(Shape{2, 3}, DType::float32);
  for (int i = 0; i < 6; ++i) a.set_item(i, i + 1.0);
  auto x = K::placeholder({2, 3});
  const auto rev = K::function({x}, {K::reverse(x, 1), K::reverse(x, 0)})({a});
  const std::vector<double> last{3, 2, 1, 6, 5, 4}, first{4, 5, 6, 1, 2, 3};
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(rev[0].item(i), last[static_cast<std::size_t>(i)]) << i;
    EXPECT_EQ(rev[1].item(i), first[static_cast<std::size_t>(i)]) << i;
  }
  auto img = K::placeholder({1, 1, 2, 1});
  NDArray iv(Shape{1, 1, 2, 1}, DType::float32);
  iv.set_item(0, 7.0);
  iv.set_item(1, 8.0);
  const NDArray padded =
      K::function({img}, {K::spatial_2d_padding(img, {{{1, 0}, {1, 1}}})})({iv})[0];
  ASSERT_EQ(padded.shape(), (Shape{1, 2, 4, 1}));
  const std::vector<double> want{0, 0, 0, 0, 0, 7, 8, 0};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(padded.item(i), want[static_cast<std::size_t>(i)]) << i;
}

// CTC on the cpu backend runs its samples as tasks (ops/kernels/ctc.cpp): the loss, its gradient
// and the beam decoder of 24 samples of varied lengths (24 tasks each; the greedy decoder, also
// checked, is one task at this size) give the same bits at 1, 2 and 16 threads, and a batch with
// two bad samples names the first of them at any count.
TEST(Threads, CtcSamplesAsTasks) {
  constexpr std::int64_t N = 24, T = 30, C = 12, L = 6;
  NDArray labels(Shape{N, L}, DType::float32), lengths(Shape{N, 1}, DType::float32),
      steps(Shape{N, 1}, DType::float32);
  for (std::int64_t b = 0; b < N; ++b) {
    for (std::int64_t i = 0; i < L; ++i)
      labels.set_item(b * L + i, static_cast<double>((b * 5 + i * 3) % (C - 1)));
    lengths.set_item(b, static_cast<double>(1 + b % L));
    steps.set_item(b, static_cast<double>(T - b % 7));
  }
  const NDArray logits = pattern(Shape{N, T, C}, 2.0);
  auto run = [&](const std::string& backend, int threads) {
    return in_arena(threads, [&] {
      auto yt = K::placeholder({N, L}), yp = K::placeholder({N, T, C});
      auto il = K::placeholder({N, 1}), ll = K::placeholder({N, 1});
      auto p = K::softmax(yp);
      auto loss = K::ctc_batch_cost(yt, p, il, ll);
      auto grad = K::gradients(K::sum(loss), {yp})[0];
      auto greedy = K::ctc_decode(p, K::flatten(il));
      auto beam =
          K::ctc_decode(p, K::flatten(il), {.greedy = false, .beam_width = 4, .top_paths = 2});
      return K::function({yt, yp, il, ll},
                         {loss, grad, greedy.decoded[0], greedy.log_probability, beam.decoded[0],
                          beam.decoded[1], beam.log_probability},
                         {}, {.backend = backend})({labels, logits, steps, lengths});
    });
  };
  // The same bits at every thread count; the reference's within 1e-6 relative (float rounding: its
  // log is libm's, the cpu backend's Eigen's vectorized one).
  const auto one = expect_same_bits(run, {2, 16}, "ctc"), ref = run("reference", 1);
  for (std::size_t k = 0; k < one.size(); ++k)
    for (std::int64_t i = 0; i < one[k].size(); ++i)
      EXPECT_NEAR(one[k].item(i), ref[k].item(i), 1e-6 * (1.0 + std::abs(ref[k].item(i))))
          << "output " << k << " element " << i;
  for (std::int64_t b = 0; b < N; ++b) EXPECT_GT(one[0].item(b), 0.0) << b;  // -log p > 0
  NDArray bad = labels;
  bad.set_item(5 * L, static_cast<double>(C - 1));   // sample 5: the blank as a label
  bad.set_item(17 * L, static_cast<double>(C + 3));  // sample 17: past the classes
  for (int threads : {1, 2, 16}) {
    const std::string msg = ktape::testing_util::error_of<ktape::ValueError>([&] {
      in_arena(threads, [&] {
        auto yt = K::placeholder({N, L}), yp = K::placeholder({N, T, C});
        auto il = K::placeholder({N, 1}), ll = K::placeholder({N, 1});
        return K::function({yt, yp, il, ll}, {K::ctc_batch_cost(yt, K::softmax(yp), il, ll)}, {},
                           {.backend = "cpu"})({bad, logits, steps, lengths});
      });
    });
    EXPECT_HAS(msg, "K::ctc_batch_cost: sample 5: label 11 at position 0") << threads;
  }
}

// The random ops on the cpu backend draw element i from (seed, call, i) alone (engine/random.hpp)
// and split the elements over threads: 300,000 values of each kind, float32 and float64, give the
// reference's bits at 1, 2 and 16 threads; their moments are the distributions' (uniform on
// [-1, 3): mean 1, variance 16/12; normal of mean 2 and deviation 0.5; truncated at two
// deviations: variance 0.774 of the untruncated one; Bernoulli 0.3: mean 0.3).
TEST(Threads, RandomDrawsAreTheReferences) {
  constexpr std::int64_t n = 300000;
  for (const char* dt : {"float32", "float64"}) {
    auto run = [&](const std::string& backend, int threads) {
      return in_arena(threads, [&] {
        const K::RandomOptions o{.dtype = dt, .seed = 7};
        const std::vector<Tensor> draws{
            K::random_uniform({n}, -1.0, 3.0, o), K::random_normal({n}, 2.0, 0.5, o),
            K::truncated_normal({n}, 0.0, 1.0, o), K::random_binomial({n}, 0.3, o)};
        return K::function({}, draws, {}, {.backend = backend})(std::vector<NDArray>{});
      });
    };
    const auto ref = expect_reference_bits(run, {1, 2, 16}, dt);
    auto moments = [&](std::size_t k) {
      double s = 0, s2 = 0;
      for (std::int64_t i = 0; i < n; ++i)
        s += ref[k].item(i), s2 += ref[k].item(i) * ref[k].item(i);
      const double m = s / n;
      return std::pair<double, double>{m, s2 / n - m * m};
    };
    EXPECT_NEAR(moments(0).first, 1.0, 0.01) << dt;
    EXPECT_NEAR(moments(0).second, 16.0 / 12.0, 0.01) << dt;
    EXPECT_NEAR(moments(1).first, 2.0, 0.005) << dt;
    EXPECT_NEAR(moments(1).second, 0.25, 0.005) << dt;
    EXPECT_NEAR(moments(2).first, 0.0, 0.005) << dt;
    EXPECT_NEAR(moments(2).second, 0.774, 0.01) << dt;
    EXPECT_NEAR(moments(3).first, 0.3, 0.005) << dt;
  }
}

// An embedding's lookup (Gather) and its gradient (GatherGrad) on the cpu backend: rows copied,
// split over threads; the gradient's zeros split, then slots of destination rows adding, each in
// index order. 8,000 lookups into a (5000, 128) table, every row once and 3,000 twice (10 copy
// tasks, 4 slots), float32 and float64: the reference's bits at 1, 2 and 16 threads, and the
// gradient's rows against their definition (the sum, in index order, of the incoming rows looked
// up there); a bad index is reported at its first position at any thread count.
TEST(Threads, EmbeddingLookupAndGradientAsTasks) {
  constexpr std::int64_t vocab = 5000, dim = 128, n = 8000;
  NDArray ids(Shape{n}, DType::int32);
  for (std::int64_t i = 0; i < n; ++i)
    ids.data<std::int32_t>()[i] = static_cast<int>((i * 7919) % vocab);
  for (const char* dt : {"float32", "float64"}) {
    const NDArray table =
        pattern(Shape{vocab, dim})
            .astype(dt == std::string("float32") ? DType::float32 : DType::float64);
    const NDArray dy = pattern(Shape{n, dim}, 0.5).astype(table.dtype());
    auto run = [&](const std::string& backend, int threads) {
      return in_arena(threads, [&] {
        auto w = K::placeholder({vocab, dim}, {.dtype = dt});
        auto i = K::placeholder({n}, {.dtype = "int32"});
        auto g = K::placeholder({n, dim}, {.dtype = dt});
        auto e = K::gather(w, i);
        return K::function({w, i, g}, {e, K::gradients({e}, {w}, {g})[0]}, {},
                           {.backend = backend})({table, ids, dy});
      });
    };
    const auto ref = expect_reference_bits(run, {1, 2, 16}, dt);
    std::vector<double> want(static_cast<std::size_t>(vocab * dim), 0.0);
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < dim; ++j) {
        auto& v = want[static_cast<std::size_t>(ids.data<std::int32_t>()[i] * dim + j)];
        v = dt == std::string("float32")
                ? static_cast<double>(static_cast<float>(v) +
                                      static_cast<float>(dy.item(i * dim + j)))
                : v + dy.item(i * dim + j);
      }
    std::int64_t bad = 0;
    for (std::int64_t k = 0; k < vocab * dim; ++k)
      bad += ref[1].item(k) != want[static_cast<std::size_t>(k)];
    EXPECT_EQ(bad, 0) << dt;
  }
  // Indices of every kind the lookup reads: int32 and int64 (read directly) and int16 (read
  // through gather_row).
  for (const DType idt : {DType::int32, DType::int64, DType::int16}) {
    NDArray wrong = ids.astype(idt);
    wrong.set_item(3, 5000.0);
    wrong.set_item(9, -1.0);
    for (int threads : {1, 2, 16}) {
      const std::string msg = ktape::testing_util::error_of<ktape::ValueError>([&] {
        in_arena(threads, [&] {
          auto w = K::placeholder({vocab, dim});
          auto i = K::placeholder({n}, {.dtype = std::string(dtype_name(idt))});
          return K::function({w, i}, {K::gather(w, i)}, {},
                             {.backend = "cpu"})({pattern(Shape{vocab, dim}), wrong});
        });
      });
      EXPECT_HAS(msg, "K::gather: index 5000 at position 3 is out of range [0, 5000)")
          << dtype_name(idt) << " at " << threads << " threads";
    }
  }
}

}  // namespace

// Slices, concatenations, their gradients (SlicePad, ConcatPart) and fills (ones_like,
// zeros_like): on the cpu backend copies of contiguous runs split over threads in ranges of
// elements, so a task may start and end inside a row. The reference's bits at 1, 2 and 16
// threads for float32 and float64 and for 1-, 2-, 4- and 8-byte dtypes (the kernels move bytes),
// from serial sizes to ones split into 2 to 16 tasks (the grain policy's counts for these
// sizes), most of them cut inside rows; then the split results against their definitions.
TEST(Threads, SlicesAndConcatenationsCopyRuns) {
  auto typed = [](const Shape& s, const std::string& dtype, double scale) {
    NDArray a(s, ktape::dtype_from_name(dtype, "test"));
    for (std::int64_t i = 0; i < a.size(); ++i)
      a.set_item(i, std::round(scale * std::sin(0.7 * static_cast<double>(i) + 0.3)));
    return a;
  };
  using Make = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
  struct Case {
    std::vector<Shape> shapes;
    std::string dtype;
    Make make;
    const char* what;
  };
  auto grads = [](const Tensor& y, const std::vector<Tensor>& xs) {
    return K::gradients({y}, xs, {K::cos(y)});
  };
  const std::vector<Case> cases = {
      {{Shape{4, 3}, Shape{4, 2}},
       "float32",
       [](const auto& x) {
         return std::vector<Tensor>{K::concatenate({x[0], x[1]})};
       },
       "small concatenation"},
      {{Shape{6001, 41}, Shape{6001, 24}},
       "float32",
       [](const auto& x) {
         return std::vector<Tensor>{K::concatenate({x[0], x[1]})};
       },
       "concatenation of rows"},
      {{Shape{6001, 41}, Shape{6001, 24}},
       "float32",
       [&](const auto& x) {
         return grads(K::concatenate({x[0], x[1]}), x);
       },
       "concatenation of rows, gradient"},
      {{Shape{3000, 128}, Shape{5000, 128}},
       "float64",
       [&](const auto& x) {
         auto y = K::concatenate({x[0], x[1]}, 0);
         auto g = grads(y, x);
         return std::vector<Tensor>{y, g[0], g[1]};
       },
       "concatenation on axis 0 and its gradient"},
      {{Shape{202, 30, 64}, Shape{202, 1, 64}, Shape{202, 10, 64}},
       "float64",
       [&](const auto& x) {
         auto y = K::concatenate({x[0], x[1], x[2]}, 1);
         auto g = grads(y, x);
         return std::vector<Tensor>{y, g[0], g[1], g[2]};
       },
       "concatenation on a middle axis and its gradient"},
      {{Shape{6001, 41}, Shape{6001, 24}},
       "uint8",
       [](const auto& x) {
         return std::vector<Tensor>{K::concatenate({x[0], x[1]})};
       },
       "uint8 concatenation"},
      {{Shape{6001, 41}, Shape{6001, 24}},
       "float16",
       [](const auto& x) {
         return std::vector<Tensor>{K::concatenate({x[0], x[1]})};
       },
       "float16 concatenation"},
      {std::vector<Shape>(30, Shape{100, 64}), "float32",
       [](const auto& x) {
         return std::vector<Tensor>{K::concatenate(x)};  // inputs as tasks, in groups
       },
       "concatenation of thirty small inputs"},
      {{Shape{6001, 41}, Shape{6001, 0}, Shape{0, 24}, Shape{6001, 24}},
       "float32",
       [](const auto& x) {
         return std::vector<Tensor>{K::concatenate({x[0], x[1], x[3]}),
                                    K::concatenate({x[2], x[3], x[2]}, 0)};
       },
       "concatenations with empty inputs"},
      {{Shape{5, 6, 2}},
       "float32",
       [&](const auto& x) {
         auto y = K::slice(x[0], {1, 2, 0}, {3, -1, 1});
         return std::vector<Tensor>{y, grads(y, x)[0]};
       },
       "small slice and its gradient"},
      {{Shape{400, 300, 8}},
       "float32",
       [&](const auto& x) {
         auto y = K::slice(x[0], {10, 20, 0}, {380, 250, 8});
         return std::vector<Tensor>{y, grads(y, x)[0]};
       },
       "slice of rows and its gradient"},
      {{Shape{20000, 64}},
       "float64",
       [&](const auto& x) {
         auto y = K::slice(x[0], {0, 16}, {-1, 32});
         return std::vector<Tensor>{y, grads(y, x)[0]};
       },
       "slice of columns and its gradient"},
      {{Shape{3001, 77}},
       "float32",
       [&](const auto& x) {
         auto y = K::slice(x[0], {3, 5}, {2990, 70});  // tasks start inside its rows
         return std::vector<Tensor>{y, grads(y, x)[0]};
       },
       "slice of rows cut by tasks and its gradient"},
      {{Shape{120, 50, 40}},
       "float64",
       [&](const auto& x) {
         auto y = K::slice(x[0], {1, 2, 3}, {117, 45, 33});  // rows over two axes
         return std::vector<Tensor>{y, grads(y, x)[0]};
       },
       "slice on three axes and its gradient"},
      {{Shape{400000}},
       "float32",
       [&](const auto& x) {
         auto y = K::slice(x[0], {7}, {399990});  // one row
         return std::vector<Tensor>{y, grads(y, x)[0]};
       },
       "slice of a vector and its gradient"},
      {{Shape{2000, 30, 8}},
       "float64",
       [&](const auto& x) {
         auto y = K::slice(x[0], {5, 0, 0}, {1990, -1, -1});  // whole trailing axes: one row
         return std::vector<Tensor>{y, grads(y, x)[0]};
       },
       "slice of whole trailing axes and its gradient"},
      {{Shape{20000, 64}},
       "int32",
       [](const auto& x) {
         return std::vector<Tensor>{K::slice(x[0], {3, 5}, {19990, 50})};
       },
       "int32 slice"},
      {{Shape{1000, 400}},
       "float32",
       [](const auto& x) {
         return std::vector<Tensor>{K::ones_like(x[0]),
                                    K::zeros_like(x[0], {.dtype = "uint8"}),
                                    K::ones_like(x[0], {.dtype = "float16"}),
                                    K::ones_like(x[0], {.dtype = "bool"}),
                                    K::ones_like(x[0], {.dtype = "int64"}),
                                    K::ones_like(K::slice(x[0], {0, 0}, {1, 1}))};
       },
       "fills"}};
  for (const Case& cs : cases) {
    std::vector<NDArray> xv;
    for (const Shape& s : cs.shapes) xv.push_back(typed(s, cs.dtype, 100.0));
    auto run = [&](const std::string& backend, int threads) {
      return in_arena(threads, [&] {
        std::vector<Tensor> x;
        for (const Shape& s : cs.shapes) x.push_back(K::placeholder(s, {.dtype = cs.dtype}));
        return K::function(x, cs.make(x), {}, {.backend = backend})(xv);
      });
    };
    expect_reference_bits(run, {1, 2, 16}, cs.what);
  }
  // The split results against their definitions (at 2 threads): a concatenation of rows, a
  // slice of rows and its gradient, and a fill, computed into arrays that held other values
  // (a Function writes into the caller's output arrays when it can).
  const NDArray a = typed(Shape{6001, 41}, "float32", 100.0);
  const NDArray b = typed(Shape{6001, 24}, "float32", 7.0);
  const NDArray x = typed(Shape{400, 300, 8}, "float32", 100.0);
  const auto out = in_arena(2, [&] {
    auto pa = K::placeholder({6001, 41}), pb = K::placeholder({6001, 24}),
         px = K::placeholder({400, 300, 8});
    auto s = K::slice(px, {10, 20, 0}, {380, 250, 8});
    auto f = K::function(
        {pa, pb, px}, {K::concatenate({pa, pb}), s, K::gradients({s}, {px}, {K::ones_like(s)})[0],
                       K::ones_like(px)});
    std::vector<NDArray> outs{
        NDArray::full(Shape{6001, 65}, 5.0), NDArray::full(Shape{380, 250, 8}, 5.0),
        NDArray::full(Shape{400, 300, 8}, 5.0), NDArray::full(Shape{400, 300, 8}, 5.0)};
    f.run({a, b, x}, outs);
    return outs;
  });
  std::int64_t bad = 0;
  for (std::int64_t i = 0; i < 6001; ++i)
    for (std::int64_t j = 0; j < 65; ++j)
      bad += out[0].item(i * 65 + j) != (j < 41 ? a.item(i * 41 + j) : b.item(i * 24 + j - 41));
  for (std::int64_t i = 0; i < 400; ++i)
    for (std::int64_t j = 0; j < 300; ++j)
      for (std::int64_t k = 0; k < 8; ++k) {
        const bool in = i >= 10 && i < 390 && j >= 20 && j < 270;
        if (in)
          bad += out[1].item(((i - 10) * 250 + (j - 20)) * 8 + k) != x.item((i * 300 + j) * 8 + k);
        bad += out[2].item((i * 300 + j) * 8 + k) != (in ? 1.0 : 0.0);
        bad += out[3].item((i * 300 + j) * 8 + k) != 1.0;
      }
  EXPECT_EQ(bad, 0);
}

// ArgMax, ArgMin, Cumsum, Cumprod, OneHot and Cast: on the cpu backend the reference's kernels
// on ranges of the lines before the axis (of the indices for one_hot, of the elements for a
// cast), split over threads by the grain policy: the reference's bits at 1, 2 and 16 threads, in
// float32, float64 and int32, with ties and NaNs for the arg ops (the first one wins), cumsum's
// gradient (a reverse cumsum), indices out of range for one_hot (a row of zeros), and casts
// that saturate or meet NaNs; then an argmax, a cumsum and a one_hot against their definitions.
TEST(Threads, LinesOneHotAndCastsAsRanges) {
  auto values = [](const Shape& s, const std::string& dtype) {
    NDArray a(s, ktape::dtype_from_name(dtype, "test"));
    for (std::int64_t i = 0; i < a.size(); ++i)  // few distinct values: ties
      a.set_item(i, std::round(4.0 * std::sin(0.37 * static_cast<double>(i))));
    return a;
  };
  using Make = std::function<std::vector<Tensor>(const Tensor&)>;
  struct Case {
    Shape shape;
    std::string dtype;
    Make make;
    const char* what;
  };
  const std::vector<Case> cases = {
      {Shape{3000, 40}, "float32",
       [](const Tensor& x) {
         return std::vector<Tensor>{K::argmax(x), K::argmin(x)};
       },
       "arg ops over rows"},
      {Shape{50, 40, 30}, "float64",
       [](const Tensor& x) {
         return std::vector<Tensor>{K::argmax(x, 1), K::argmin(x, 1)};
       },
       "arg ops over a middle axis"},
      {Shape{3000, 40}, "int32",
       [](const Tensor& x) {
         return std::vector<Tensor>{K::argmax(x), K::cumsum(x, 1), K::cumprod(x, 1)};
       },
       "int32 lines"},
      {Shape{3000, 40}, "float32",
       [](const Tensor& x) {
         auto y = K::cumsum(x, 1);
         return std::vector<Tensor>{y, K::cumprod(x * 0.5, 1),
                                    K::gradients({y}, {x}, {K::cos(y)})[0]};
       },
       "cumsum and cumprod over rows, cumsum's gradient"},
      {Shape{40, 300, 8}, "float64",
       [](const Tensor& x) {
         return std::vector<Tensor>{K::cumsum(x, 1), K::cumsum(x, 0)};
       },
       "cumsum over a middle axis and the first"},
      {Shape{400, 70}, "int32",
       [](const Tensor& x) {
         return std::vector<Tensor>{K::one_hot(x - 1, 3), K::one_hot(x + 2, 5, "float16")};
       },
       "one_hot with indices out of range"},
      {Shape{100, 30, 40}, "float16",
       [](const Tensor& x) {
         return std::vector<Tensor>{K::argmax(x, 2), K::argmin(x, 1), K::cumsum(x, 2),
                                    K::cast(x, "float32")};
       },
       "float16 lines over the last axis of three, and a cast"},
      {Shape{3000, 40}, "bool",
       [](const Tensor& x) { return std::vector<Tensor>{K::cast(x, "float64")}; }, "a bool cast"},
      {Shape{3000, 40}, "float32",
       [](const Tensor& x) {
         return std::vector<Tensor>{K::cast(x * 1e9, "int32"), K::cast(x, "bool"),
                                    K::cast(x * 70.0, "float16"), K::cast(x * 100.0, "uint8"),
                                    K::cast(K::cast(x, "int64"), "float64")};
       },
       "casts (saturating, NaN to 0), in one fused pass"},
      {Shape{3000, 40}, "float32",
       [](const Tensor& x) { return std::vector<Tensor>{K::cast(x, "float16")}; },
       "a cast on its own"},
      {Shape{3000, 40}, "int32",
       [](const Tensor& x) { return std::vector<Tensor>{K::cast(x, "uint8")}; },
       "an int32 cast on its own"}};
  for (const Case& cs : cases) {
    NDArray xv = values(cs.shape, cs.dtype);
    if (cs.dtype != "int32" && cs.dtype != "bool")
      for (std::int64_t i = 17; i < xv.size(); i += 997) xv.set_item(i, std::nan(""));
    auto run = [&](const std::string& backend, int threads) {
      return in_arena(threads, [&] {
        auto x = K::placeholder(cs.shape, {.dtype = cs.dtype});
        return K::function({x}, cs.make(x), {}, {.backend = backend})({xv});
      });
    };
    expect_reference_bits(run, {1, 2, 16}, cs.what);
  }
  // Against their definitions, at 2 threads (no NaNs here).
  const NDArray xv = values(Shape{3000, 40}, "float32");
  const auto out = in_arena(2, [&] {
    auto x = K::placeholder({3000, 40});
    return K::function(
        {x}, {K::argmax(x), K::cumsum(x, 1), K::one_hot(K::cast(x, "int32") + 1, 5)})({xv});
  });
  std::int64_t bad = 0;
  for (std::int64_t r = 0; r < 3000; ++r) {
    std::int64_t best = 0;
    double sum = 0;
    for (std::int64_t j = 0; j < 40; ++j) {
      const double v = xv.item(r * 40 + j);
      if (v > xv.item(r * 40 + best)) best = j;
      sum += v;  // small integers: exact in any order
      bad += out[1].item(r * 40 + j) != sum;
      const auto hot = static_cast<std::int64_t>(v) + 1;
      for (std::int64_t k = 0; k < 5; ++k)
        bad += out[2].item((r * 40 + j) * 5 + k) != (k == hot ? 1.0 : 0.0);
    }
    bad += out[0].item(r) != static_cast<double>(best);
  }
  EXPECT_EQ(bad, 0);
}

// Sparse tensors on the cpu backend (ops/kernels/cpu/sparse.cpp). to_dense of fed values in
// row-major order with repeated positions (runs across the bounds of the kernel's slots, one run
// longer than a slot, padding at the end), of the same entries shuffled (added serially), and of
// int32 values; concatenations (along rows: still in order, padding in the middle; along columns:
// out of order); ctc_label_dense_to_sparse (every position, padding past each length) and the
// gradient of its values. The reference's bits at 1, 2 and 16 threads, and the ordered float32
// one against a plain loop adding the entries in order. An index out of range computed in the
// graph names the first bad entry at any thread count.
TEST(Threads, SparseOpsAsTasks) {
  const std::int64_t rows = 1000, cols = 300;
  std::vector<std::int64_t> pos;  // never going down
  for (std::int64_t e = 0, p = 0; p < rows * cols; ++e) {
    if (e == 50000) pos.insert(pos.end(), 30000, p);  // a slot is about 2,500 entries
    pos.push_back(p);
    p += (e * 7919) % 7 == 0 ? 0 : 1 + (e * 31) % 5;
  }
  const auto nnz = static_cast<std::int64_t>(pos.size());
  std::vector<std::int64_t> idx, shuffled_idx;
  std::vector<double> val, shuffled_val, ival;
  for (std::int64_t e = 0; e < nnz; ++e) {
    const std::int64_t p = pos[static_cast<std::size_t>(e)];
    idx.insert(idx.end(), {p / cols, p % cols});
    val.push_back(std::sin(0.37 * static_cast<double>(e)) * (e % 3 == 0 ? 1e4 : 1e-2));
    ival.push_back(static_cast<double>((e * 2654435761LL) % 2001 - 1000));
  }
  ASSERT_NE(nnz % 7919, 0);
  ASSERT_GT(nnz, 100000);
  std::vector<std::int64_t> order(static_cast<std::size_t>(nnz));
  for (std::int64_t e = 0; e < nnz; ++e) order[static_cast<std::size_t>(e)] = (e * 7919) % nnz;
  for (std::int64_t e : order) {  // 7919 is prime and does not divide nnz: a permutation
    shuffled_idx.insert(shuffled_idx.end(), {idx[static_cast<std::size_t>(2 * e)],
                                             idx[static_cast<std::size_t>(2 * e + 1)]});
    shuffled_val.push_back(val[static_cast<std::size_t>(e)]);
  }
  auto i64 = [](const std::vector<std::int64_t>& v, const Shape& s) {
    return NDArray::from_vector<std::int64_t>(v, s);
  };
  const ktape::SparseValue ordered{
      i64(idx, {nnz, 2}), NDArray::from_values(val, {nnz}, DType::float32), Shape{rows, cols}};
  const ktape::SparseValue shuffled{i64(shuffled_idx, {nnz, 2}),
                                    NDArray::from_values(shuffled_val, {nnz}, DType::float32),
                                    Shape{rows, cols}};
  const ktape::SparseValue ints{i64(idx, {nnz, 2}), NDArray::from_values(ival, {nnz}, DType::int32),
                                Shape{rows, cols}};
  const NDArray labels = pattern(Shape{4000, 64});
  NDArray lengths(Shape{4000}, DType::int32);
  for (std::int64_t i = 0; i < 4000; ++i)
    lengths.set_item(i, static_cast<double>((i * 37) % 70 - 3));
  const NDArray w = pattern(Shape{4000, 64}, 0.5);
  // Indices from the graph with padding inside a run: 20,000 entries (8 slots of 2,500), in order
  // with runs of 3, entries 5,000-9,999 padding (slots 2 and 3 of padding alone), and entries
  // 4,998-4,999 and 10,000-10,100 at one position.
  const std::int64_t gap_n = 20000;
  std::vector<std::int64_t> gap_idx;
  std::vector<double> gap_val;
  for (std::int64_t e = 0, p = 0; e < gap_n; ++e) {
    if (e >= 5000 && e < 10000) {
      gap_idx.insert(gap_idx.end(), {-1, 0});
    } else {
      gap_idx.insert(gap_idx.end(), {p / cols, p % cols});
      if (e % 3 == 2 && (e < 4999 || e >= 10100)) ++p;
    }
    gap_val.push_back(std::sin(0.11 * static_cast<double>(e)) * (e % 2 != 0 ? 1e3 : 1e-3));
  }
  const NDArray gap_values = NDArray::from_values(gap_val, {gap_n}, DType::float32);
  auto carrier = [&] {
    return ktape::make_node(ktape::Op::ShapeCarrier,
                            {K::constant(0.0, {.shape = Shape{rows, cols}})}, {}, DType::float32);
  };
  auto run = [&](const std::string& backend, int threads) {
    return in_arena(threads, [&] {
      auto xs = K::placeholder({rows, cols}, {.sparse = true});
      auto xu = K::placeholder({rows, cols}, {.sparse = true});
      auto xi = K::placeholder({rows, cols}, {.dtype = "int32", .sparse = true});
      auto lab = K::placeholder({4000, 64});
      auto len = K::placeholder({4000}, {.dtype = "int32"});
      auto wp = K::placeholder({4000, 64});
      auto vg = K::placeholder({gap_n});
      auto gap = ktape::ops::sparse_from_parts(
          K::constant(i64(gap_idx, {gap_n, 2}), {.dtype = "int64"}), vg, carrier());
      auto d = K::to_dense(K::ctc_label_dense_to_sparse(lab, len));
      std::vector<Tensor> outs{K::to_dense(xs),
                               K::to_dense(xu),
                               K::to_dense(xi),
                               K::to_dense(K::concatenate({xs, xs}, 0)),
                               K::to_dense(K::concatenate({xs, xu}, 1)),
                               d,
                               K::gradients(K::sum(d * wp), {lab})[0],
                               K::to_dense(gap)};
      return K::function({xs, xu, xi, lab, len, wp, vg}, outs, {}, {.backend = backend})(
          std::vector<ktape::Feed>{ordered, shuffled, ints, labels, lengths, w, gap_values});
    });
  };
  const auto ref = expect_reference_bits(run, {1, 2, 16}, "sparse ops");
  // The ordered float32 one by its definition: zeros, then each entry added in order.
  std::vector<float> want(static_cast<std::size_t>(rows * cols), 0.0f);
  for (std::int64_t e = 0; e < nnz; ++e)
    want[static_cast<std::size_t>(pos[static_cast<std::size_t>(e)])] +=
        static_cast<float>(val[static_cast<std::size_t>(e)]);
  const NDArray cpu = run("cpu", 2)[0];
  EXPECT_EQ(0, std::memcmp(cpu.raw_data(), want.data(), want.size() * sizeof(float)));
  ASSERT_EQ(ref.size(), 8u);
  // Row 5 has length 185 % 70 - 3 = 42: the gradient is w inside it, 0 past it.
  EXPECT_EQ(ref[6].item(5 * 64 + 41), w.item(5 * 64 + 41));
  EXPECT_EQ(ref[6].item(5 * 64 + 42), 0.0);

  // Indices from the graph, out of range at entries 5,000 and 100,000 (slots 1 and 39 of 58).
  std::vector<std::int64_t> bad = idx;
  bad[2 * 5000 + 1] = cols;
  bad[2 * 100000] = rows + 4;
  for (int threads : {1, 2, 16})
    for (const char* backend : {"cpu", "reference"}) {
      SCOPED_TRACE(std::string(backend) + " at " + std::to_string(threads) + " threads");
      std::string dense_err, gather_err;
      in_arena(threads, [&] {
        auto v = K::placeholder({nnz});
        auto sp = ktape::ops::sparse_from_parts(K::constant(i64(bad, {nnz, 2}), {.dtype = "int64"}),
                                                v, carrier());
        const NDArray vv = NDArray::from_values(val, {nnz}, DType::float32);
        auto wd = K::placeholder({rows, cols});
        dense_err = ktape::testing_util::error_of<ktape::ValueError>(
            [&] { K::function({v}, {K::to_dense(sp)}, {}, {.backend = backend})({vv}); });
        gather_err = ktape::testing_util::error_of<ktape::ValueError>([&] {
          K::function({v, wd}, {K::gradients(K::sum(K::to_dense(sp) * wd), {v})[0]}, {},
                      {.backend = backend})({vv, NDArray::full(Shape{rows, cols}, 1.0)});
        });
        return std::vector<NDArray>{};
      });
      EXPECT_HAS(dense_err, "K::to_dense: index 300 of entry 5000 (dim 1) is out of range");
      EXPECT_HAS(gather_err,
                 "K::gradients (sparse): index 300 of entry 5000 (dim 1) is out of range");
    }
}
