// K::function: feeding and its errors, plan caching per shape signature, Keras update
// semantics, the learning phase, and no heap allocation per call in steady state.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "engine/arena.hpp"
#include "ktape/ktape.hpp"
#include "test_util.hpp"

namespace K = ktape::backend;
using ktape::DType;
using ktape::NDArray;
using ktape::Shape;

// Replacing the global operator new/delete pair confuses GCC's mismatch heuristic.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

// ---- a counting allocation hook for this test binary ------------------------------------------
namespace {
std::atomic<long> g_allocs{0};
std::atomic<bool> g_counting{false};
}  // namespace
void* operator new(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
// The nothrow form too (std::stable_sort's buffer): under ASan, its own would pair with ours.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n == 0 ? 1 : n);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }

// Eigen's GEMM and aligned buffers call malloc directly: count those too (glibc lets the
// executable interpose malloc; not under the sanitizers, whose runtimes own malloc).
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define KTAPE_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KTAPE_SANITIZED 1
#endif
#if defined(__GLIBC__) && !defined(KTAPE_SANITIZED)
extern "C" void* __libc_malloc(std::size_t);
extern "C" void* malloc(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
  return __libc_malloc(n);
}
#endif

namespace {

using ktape::testing_util::error_of;

}  // namespace

TEST(Function, UpdatesReadPreCallValuesThenCommit) {
  // Keras test_function: output square(x_old) + y, then x == 2 * x_old.
  auto x = K::variable(NDArray::from_values({1, 2, 3}, Shape{3}));
  auto y = K::placeholder({3});
  auto out = K::square(x) + y;
  auto f = K::function({y}, {out}, {K::update(x, x * 2.0)});
  auto r = f({NDArray::from_values({10, 10, 10}, Shape{3})});
  EXPECT_EQ(r[0].to_vector(), (std::vector<double>{11, 14, 19}));
  EXPECT_EQ(K::get_value(x).to_vector(), (std::vector<double>{2, 4, 6}));
  r = f({NDArray::from_values({0, 0, 0}, Shape{3})});
  EXPECT_EQ(r[0].to_vector(), (std::vector<double>{4, 16, 36}));
}

TEST(Function, SwapThroughUpdatesIsSimultaneous) {
  // keras #10769: swapping two variables must be deterministic.
  auto a = K::variable(1.0);
  auto b = K::variable(2.0);
  auto f = K::function({}, {}, {K::update(a, b), K::update(b, a)});
  f({});
  EXPECT_EQ(K::get_value(a).item(0), 2.0);
  EXPECT_EQ(K::get_value(b).item(0), 1.0);
}

TEST(Function, TwoUpdatesOfOneVariableIsAnError) {
  auto v = K::variable(0.0, {.name = "counter"});
  const std::string msg = error_of([&] {
    K::function({}, {}, {K::update_add(v, K::constant(1.0)), K::update(v, K::constant(5.0))});
  });
  EXPECT_NE(msg.find("counter"), std::string::npos) << msg;
  EXPECT_NE(msg.find("twice"), std::string::npos) << msg;
}

TEST(Function, UpdateOpsAndEval) {
  auto v = K::variable(NDArray::from_values({1, 1}, Shape{2}));
  K::eval(K::update_add(v, K::constant(NDArray::from_values({1, 2}, Shape{2}))));
  EXPECT_EQ(K::get_value(v).to_vector(), (std::vector<double>{2, 3}));
  K::eval(K::update_sub(v, K::constant(NDArray::from_values({2, 2}, Shape{2}))));
  EXPECT_EQ(K::get_value(v).to_vector(), (std::vector<double>{0, 1}));
  EXPECT_THROW(K::update(K::constant(1.0), K::constant(2.0)), ktape::TypeError);
  EXPECT_THROW(K::update(v, K::constant(NDArray::from_values({1, 2, 3}, Shape{3}))),
               ktape::ValueError);
}

TEST(Function, MovingAverageUpdate) {
  // Zero-debiased (Keras 2.2.4 on TF): after one update x == value whatever x was.
  auto x = K::variable(NDArray::from_values({1, 1}, Shape{2}));
  auto val = K::constant(NDArray::from_values({4, 8}, Shape{2}));
  auto f = K::function({}, {}, {K::moving_average_update(x, val, 0.9)});
  f({});
  EXPECT_NEAR(K::get_value(x).item(0), 4.0, 1e-5);
  EXPECT_NEAR(K::get_value(x).item(1), 8.0, 1e-5);
  // second update with value 0: biased = 0.9*0.4 + 0.1*0 ... by hand:
  // biased1 = 0.1*4 = 0.4; biased2 = 0.9*0.4 = 0.36; x = 0.36 / (1 - 0.81) = 1.894736...
  auto val0 = K::constant(NDArray::from_values({0, 0}, Shape{2}));
  auto x2 = K::variable(NDArray::from_values({1, 1}, Shape{2}));
  auto v = K::placeholder({2});
  auto g = K::function({v}, {}, {K::moving_average_update(x2, v, 0.9)});
  g({NDArray::from_values({4, 8}, Shape{2})});
  g({NDArray::from_values({0, 0}, Shape{2})});
  EXPECT_NEAR(K::get_value(x2).item(0), 0.36 / 0.19, 1e-5);
  // plain EMA (Keras 2.3.1): x = 0.9*x + 0.1*value
  auto x3 = K::variable(NDArray::from_values({1, 1}, Shape{2}));
  K::eval(K::moving_average_update(x3, val, 0.9, {.zero_debias = false}));
  EXPECT_NEAR(K::get_value(x3).item(0), 0.9 + 0.4, 1e-6);
  (void)val0;
}

TEST(Function, FeedErrorsNamePlaceholderAndShapes) {
  auto x = K::placeholder({K::None, 4}, {.name = "features"});
  auto f = K::function({x}, {K::sum(x)});
  std::string msg = error_of([&] { f({NDArray(Shape{2, 5}, DType::float32)}); });
  EXPECT_NE(msg.find("features"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(None, 4)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(2, 5)"), std::string::npos) << msg;
  msg = error_of([&] { f({NDArray(Shape{2, 4}, DType::float64)}); });
  EXPECT_NE(msg.find("float64"), std::string::npos) << msg;
  msg = error_of([&] { f({}); });
  EXPECT_NE(msg.find("expected 1"), std::string::npos) << msg;
  msg = error_of([&] { f({NDArray(Shape{4}, DType::float32)}); });
  EXPECT_NE(msg.find("(4,)"), std::string::npos) << msg;
}

TEST(Function, MissingPlaceholderAndBadArguments) {
  auto x = K::placeholder({2}, {.name = "needed"});
  auto y = K::placeholder({2});
  std::string msg =
      error_of([&] { K::function({y}, {x + y})({NDArray(Shape{2}, DType::float32)}); });
  EXPECT_NE(msg.find("needed"), std::string::npos) << msg;
  EXPECT_THROW(K::function({x * 2.0}, {x}), ktape::ValueError);
  EXPECT_THROW(K::function({x}, {ktape::Tensor()}), ktape::ValueError);
  EXPECT_THROW(K::function({x}, {x}, {x}), ktape::ValueError);
  EXPECT_THROW(K::eval(x + 1.0), ktape::ValueError);
}

TEST(Function, OnePlanPerShapeSignature) {
  auto x = K::placeholder({K::None, 3});
  auto f = K::function({x}, {K::sum(x * 2.0, 1)});
  auto a = f({NDArray::full(Shape{2, 3}, 1.0)});
  EXPECT_EQ(a[0].shape(), (Shape{2}));
  EXPECT_EQ(a[0].item(1), 6.0);
  f({NDArray::full(Shape{5, 3}, 1.0)});
  f({NDArray::full(Shape{2, 3}, 1.0)});
  EXPECT_EQ(f.num_plans(), 2u);
}

TEST(Function, ArenaReusesDeadBuffers) {
  // A chain of 20 elementwise ops on (256, 256) floats needs far less than 20 buffers.
  auto x = K::placeholder({256, 256});
  ktape::Tensor y = x;
  for (int i = 0; i < 20; ++i) y = K::tanh(y) + 1.0;
  auto f = K::function({x}, {y});
  f({NDArray(Shape{256, 256}, DType::float32)});
  const std::size_t one = 256 * 256 * 4;
  EXPECT_LE(f.arena_bytes(), 3 * one) << "arena " << f.arena_bytes();
}

TEST(Function, ArenaPlacesLargestBuffersFirstWhenThatIsSmaller) {
  // In 64-byte units: x (100, steps 0-1) then a long-lived y (200, steps 1-10), a small s
  // (1, steps 5-8) and r (105, steps 8-10). First fit in step order: x at 0, y at 100, s at 0
  // in x's hole, r at 300 (the hole of 99 is too small): 405 units. Largest first: y at 0, r at
  // 200, x at 200 (it dies before r is born), s at 305: 306 units (worked by hand).
  std::vector<ktape::ArenaBlock> blocks{
      {100 * 64, 0, 1}, {200 * 64, 1, 10}, {1 * 64, 5, 8}, {105 * 64, 8, 10}};
  EXPECT_EQ(ktape::place_blocks(blocks), 306u * 64);
  for (std::size_t i = 0; i < blocks.size(); ++i)
    for (std::size_t j = i + 1; j < blocks.size(); ++j) {
      const auto& a = blocks[i];
      const auto& b = blocks[j];
      const bool same_time = a.first <= b.last && b.first <= a.last;
      const bool same_bytes = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
      EXPECT_FALSE(same_time && same_bytes) << "blocks " << i << " and " << j;
    }
  // First fit stays when it is the smaller plan: two blocks in turn share one place.
  std::vector<ktape::ArenaBlock> turn{{64 * 10, 0, 0}, {64 * 10, 1, 1}};
  EXPECT_EQ(ktape::place_blocks(turn), 640u);
}

TEST(Function, LearningPhaseIsAnInputWithTestDefault) {
  K::clear_session();
  auto x = K::placeholder({3});
  auto y = K::in_train_phase(x * 2.0, x * 3.0);
  auto lp = K::learning_phase();
  auto f = K::function({x, lp}, {y});
  const NDArray ones = NDArray::full(Shape{3}, 1.0);
  EXPECT_EQ(f({ones, NDArray::scalar(1, DType::bool_)})[0].item(0), 2.0);
  EXPECT_EQ(f({ones, NDArray::scalar(0, DType::float32)})[0].item(0), 3.0);
  auto g = K::function({x}, {y});  // not fed: test mode
  EXPECT_EQ(g({ones})[0].item(0), 3.0);
  K::set_learning_phase(1);
  auto z = K::in_train_phase(x * 2.0, x * 3.0);
  EXPECT_EQ(K::function({x}, {z})({ones})[0].item(0), 2.0);
  EXPECT_THROW(K::set_learning_phase(2), ktape::ValueError);
  K::clear_session();
}

TEST(Function, NoHeapAllocationPerCallInSteadyState) {
  auto x = K::placeholder({K::None, 64});
  auto t = K::placeholder({K::None}, {.dtype = "int32"});
  auto W = K::random_uniform_variable({64, 32}, -0.1, 0.1, {.seed = 3});
  auto b = K::zeros({32});
  auto W2 = K::random_uniform_variable({32, 10}, -0.1, 0.1, {.seed = 4});
  auto h =
      K::in_train_phase([&] { return K::dropout(K::relu(K::dot(x, W) + b), 0.3, {.seed = 5}); },
                        K::relu(K::dot(x, W) + b));
  auto p = K::softmax(K::dot(h, W2));
  auto loss = K::mean(K::sparse_categorical_crossentropy(t, p));
  auto g = K::gradients(loss, {W, b, W2});
  auto f = K::function(
      {x, t, K::learning_phase()}, {loss},
      {K::update_sub(W, 0.1 * g[0]), K::update_sub(b, 0.1 * g[1]), K::update_sub(W2, 0.1 * g[2])});
  NDArray xb(Shape{128, 64}, DType::float32), tb(Shape{128}, DType::int32);
  for (int i = 0; i < 128; ++i) tb.data<std::int32_t>()[i] = i % 10;
  const NDArray phase = NDArray::scalar(1, DType::bool_);
  std::vector<NDArray> ins{xb, tb, phase}, outs;
  f.run(ins, outs);  // compiles
  f.run(ins, outs);
  g_allocs = 0;
  g_counting = true;
  for (int i = 0; i < 10; ++i) f.run(ins, outs);
  g_counting = false;
  EXPECT_EQ(g_allocs.load(), 0) << "heap allocations in 10 steady-state calls";
}

TEST(Function, RnnTrainingStepAllocatesNothingPerCall) {
  // An LSTM-like step through the symbolic loop (forward scan and its reverse-scan gradient):
  // the per-step body runs without touching the heap.
  auto x = K::placeholder({K::None, 12, 8});
  auto t = K::placeholder({K::None}, {.dtype = "int32"});
  auto W = K::random_uniform_variable({8, 64}, -0.1, 0.1, {.seed = 6});
  auto U = K::random_uniform_variable({16, 64}, -0.1, 0.1, {.seed = 7});
  auto b = K::zeros({64});
  auto Wd = K::random_uniform_variable({16, 10}, -0.1, 0.1, {.seed = 8});
  auto step = [&](const ktape::Tensor& xt, const std::vector<ktape::Tensor>& s) {
    auto z = K::dot(xt, W) + K::dot(s[0], U) + b;
    auto gate = [&](int k) { return K::slice(z, {0, 16 * k}, {-1, 16}); };
    auto c = K::sigmoid(gate(1)) * s[1] + K::sigmoid(gate(0)) * K::tanh(gate(2));
    auto h = K::sigmoid(gate(3)) * K::tanh(c);
    return std::pair<ktape::Tensor, std::vector<ktape::Tensor>>{h, {h, c}};
  };
  auto h0 = K::zeros_like(K::dot(K::sum(x, 1), K::zeros({8, 16})));
  auto r = K::rnn(step, x, {h0, h0});
  auto loss = K::mean(K::sparse_categorical_crossentropy(t, K::softmax(K::dot(r.last_output, Wd))));
  std::vector<ktape::Tensor> params{W, U, b, Wd};
  auto g = K::gradients(loss, params);
  std::vector<ktape::Tensor> ups;
  for (std::size_t i = 0; i < params.size(); ++i)
    ups.push_back(K::update_sub(params[i], 0.1 * g[i]));
  auto f = K::function({x, t}, {loss}, ups);
  NDArray xb = NDArray::full(Shape{32, 12, 8}, 0.25), tb(Shape{32}, DType::int32);
  for (int i = 0; i < 32; ++i) tb.data<std::int32_t>()[i] = i % 10;
  std::vector<NDArray> ins{xb, tb}, outs;
  f.run(ins, outs);
  f.run(ins, outs);
  g_allocs = 0;
  g_counting = true;
  for (int i = 0; i < 5; ++i) f.run(ins, outs);
  g_counting = false;
  EXPECT_EQ(g_allocs.load(), 0) << "heap allocations in 5 steady-state calls of an rnn step";
}

TEST(Function, UpdateWithAReshapedValue) {
  // The new value is a view (reshape) of a fed array of another shape: the update checks the
  // view's shape, and commits the fed data.
  auto p = K::variable(NDArray::full(Shape{4, 3}, 1.0));
  auto g = K::placeholder({1, 12});
  auto f = K::function({g}, {}, {K::update(p, K::reshape(g, {4, 3}))});
  NDArray gv(Shape{1, 12}, DType::float32);
  for (int i = 0; i < 12; ++i) gv.set_item(i, i);
  f({gv});
  EXPECT_EQ(K::get_value(p).item(5), 5.0);
  // Gradients through a reshape of a variable, used in an update.
  auto x = K::placeholder({2, 6});
  auto l = K::sum(K::reshape(p, {2, 6}) * x);
  auto gr = K::gradients(l, {p})[0];
  auto f2 = K::function({x}, {gr}, {K::update_sub(p, gr)});
  auto o = f2({NDArray::full(Shape{2, 6}, 3.0)});
  EXPECT_EQ(o[0].shape(), (Shape{4, 3}));
  EXPECT_EQ(o[0].item(0), 3.0);
  EXPECT_EQ(K::get_value(p).item(5), 2.0);
}

TEST(Function, InPlaceUpdateOfAVariableReadByAnAddN) {
  // v_new = AddN(u * 3, v) is computed by a kernel that writes its output while reading v: the
  // update must still see every element of the old v (v = [1, 2], u = [1, 2] -> [4, 8]).
  auto u = K::variable(NDArray::from_values({1.0, 2.0}, Shape{2}));
  auto v = K::variable(NDArray::from_values({1.0, 2.0}, Shape{2}));
  auto g = ktape::gradients(std::vector<ktape::Tensor>{u + 0.0, u * 3.0}, {u}, {v, v})[0];
  K::function({}, {}, {K::update(v, g)})({});
  EXPECT_EQ(K::get_value(v).item(0), 4.0);
  EXPECT_EQ(K::get_value(v).item(1), 8.0);
}

TEST(Function, GraphAndPlanRenderAsDot) {
  auto x = K::placeholder({K::None, 3}, {.name = "x"});
  auto W = K::variable(NDArray::full({3, 2}, 0.5), {.name = "W"});
  auto loss = K::sum(K::tanh(K::dot(x, W)));
  auto g = K::gradients(loss, {W})[0];
  const std::string dot = ktape::graph_dot({g});
  EXPECT_EQ(dot.rfind("digraph ktape {", 0), 0u) << dot;
  EXPECT_NE(dot.find("Placeholder\\n(None, 3) float32\\nx\", shape=ellipse"), std::string::npos)
      << dot;
  EXPECT_NE(dot.find("Variable\\n(3, 2) float32\\nW\", shape=ellipse"), std::string::npos) << dot;
  EXPECT_NE(dot.find("MatMul"), std::string::npos);
  // One edge per input of every node drawn.
  std::size_t edges = 0;
  for (std::size_t p = dot.find("->"); p != std::string::npos; p = dot.find("->", p + 2)) ++edges;
  EXPECT_GE(edges, 6u);
  auto f = K::function({x}, {loss}, {K::update_sub(W, 0.1 * g)});
  EXPECT_EQ(f.plan_dot(), "digraph plan {}\n");  // nothing compiled yet
  f({NDArray::full({4, 3}, 1.0)});
  const std::string plan = f.plan_dot();
  EXPECT_EQ(plan.rfind("digraph plan {", 0), 0u);
  EXPECT_NE(plan.find("fed\\nx\\n(4, 3)"), std::string::npos) << plan;
  EXPECT_NE(plan.find("MatMul"), std::string::npos) << plan;
  std::size_t steps = 0;
  for (std::size_t p = plan.find("shape=box"); p != std::string::npos;
       p = plan.find("shape=box", p + 1))
    ++steps;
  EXPECT_EQ(steps, f.num_steps());
}

TEST(Function, CnnTrainingStepAllocatesNothingPerCall) {
  // conv -> bias -> relu -> max-pool twice, dense, softmax crossentropy, SGD updates, in both
  // data formats: the conv workspaces come from the arena, Eigen's GEMMs stay off the heap.
#if defined(__GLIBC__) && !defined(KTAPE_SANITIZED)
  {  // the hook sees plain malloc calls (Eigen's), not only operator new
    g_allocs = 0;
    g_counting = true;
    void* volatile p = std::malloc(24);
    g_counting = false;
    std::free(p);
    ASSERT_EQ(g_allocs.load(), 1);
  }
#endif
  for (const std::string df : {"channels_last", "channels_first"}) {
    const bool cf = df == "channels_first";
    auto x =
        K::placeholder(cf ? ktape::Shape{K::None, 1, 28, 28} : ktape::Shape{K::None, 28, 28, 1});
    auto t = K::placeholder({K::None}, {.dtype = "int32"});
    auto k1 = K::random_uniform_variable({3, 3, 1, 32}, -0.1, 0.1, {.seed = 1});
    auto k2 = K::random_uniform_variable({3, 3, 32, 64}, -0.1, 0.1, {.seed = 2});
    auto b1 = K::zeros({32}), b2 = K::zeros({64});
    auto W = K::random_uniform_variable({1600, 10}, -0.05, 0.05, {.seed = 3});
    auto block = [&](const ktape::Tensor& h, const ktape::Tensor& k, const ktape::Tensor& b) {
      auto a = K::relu(K::bias_add(K::conv2d(h, k, {.data_format = df}), b, df));
      return K::pool2d(a, {2, 2}, {.strides = {2, 2}, .data_format = df});
    };
    auto h = K::batch_flatten(block(block(x, k1, b1), k2, b2));
    auto loss = K::mean(K::sparse_categorical_crossentropy(t, K::softmax(K::dot(h, W))));
    std::vector<ktape::Tensor> params{k1, b1, k2, b2, W};
    auto g = K::gradients(loss, params);
    std::vector<ktape::Tensor> ups;
    for (std::size_t i = 0; i < params.size(); ++i)
      ups.push_back(K::update_sub(params[i], 0.01 * g[i]));
    auto f = K::function({x, t}, {loss}, ups);
    NDArray xb = NDArray::full(cf ? Shape{64, 1, 28, 28} : Shape{64, 28, 28, 1}, 0.5);
    NDArray tb(Shape{64}, DType::int32);
    for (int i = 0; i < 64; ++i) tb.data<std::int32_t>()[i] = i % 10;
    std::vector<NDArray> ins{xb, tb}, outs;
    f.run(ins, outs);
    f.run(ins, outs);
    g_allocs = 0;
    g_counting = true;
    for (int i = 0; i < 3; ++i) f.run(ins, outs);
    g_counting = false;
    EXPECT_EQ(g_allocs.load(), 0) << "heap allocations in 3 steady-state CNN steps, " << df;
  }
}

TEST(Function, WideLayersAllocateNothingPerCall) {
  // Layers wide enough that one Eigen GEMM over a whole operand would pack more than the stack
  // allows (a 3x3 conv 64 -> 512 and a dense 784 -> 512, float32 and float64): the kernels cut
  // their GEMMs into panels, so a training step still allocates nothing.
  for (const std::string dt : {"float32", "float64"}) {
    auto x = K::placeholder({K::None, 6, 6, 64}, {.dtype = dt});
    auto v = K::placeholder({K::None, 784}, {.dtype = dt});
    auto k = K::random_uniform_variable({3, 3, 64, 512}, -0.01, 0.01, {.dtype = dt, .seed = 1});
    auto W = K::random_uniform_variable({784, 512}, -0.01, 0.01, {.dtype = dt, .seed = 2});
    auto loss =
        K::sum(K::square(K::conv2d(x, k, {.padding = "same"}))) + K::sum(K::square(K::dot(v, W)));
    auto g = K::gradients(loss, {k, W, x});
    auto f = K::function({x, v}, {loss, g[2]},
                         {K::update_sub(k, 1e-6 * g[0]), K::update_sub(W, 1e-6 * g[1])});
    const DType d = ktape::dtype_from_name(dt);
    std::vector<NDArray> ins{NDArray::full(Shape{16, 6, 6, 64}, 0.5, d),
                             NDArray::full(Shape{64, 784}, 0.25, d)},
        outs;
    f.run(ins, outs);
    f.run(ins, outs);
    g_allocs = 0;
    g_counting = true;
    for (int i = 0; i < 2; ++i) f.run(ins, outs);
    g_counting = false;
    EXPECT_EQ(g_allocs.load(), 0) << "heap allocations in 2 steady-state steps, " << dt;
  }
}

TEST(Function, AValueReadOnlyForItsShapeIsNotComputed) {
  // ones_like(exp(exp(x))) reads exp(exp(x)) only for its shape: the plan is the fill alone,
  // and the arena holds nothing for the exps. sum(exp(x)) * ones_like(exp(x)) still computes
  // exp(x) once, for the sum.
  const ktape::Tensor x = K::placeholder({K::None, 3});
  const auto f = K::function({x}, {K::ones_like(K::exp(K::exp(x)))});
  const auto out = f({NDArray::from_values({1, 2, 3, 4, 5, 6}, {2, 3})});
  EXPECT_TRUE(ktape::testing_util::Close(out[0], {1, 1, 1, 1, 1, 1}, {2, 3}, 0, 0));
  EXPECT_EQ(f.num_steps(), 1u) << f.describe_plan();
  EXPECT_EQ(f.describe_plan().find("Exp"), std::string::npos) << f.describe_plan();
  const ktape::Tensor e = K::exp(x);
  const auto g = K::function({x}, {K::sum(e) * K::ones_like(e)});
  const auto v = g({NDArray::from_values({0, 0, 0}, {1, 3})});
  EXPECT_TRUE(ktape::testing_util::Close(v[0], {3, 3, 3}, {1, 3}, 0, 0));
}

namespace {

// Plain loops in double: the independent oracle of the tests below.
std::vector<double> product(const std::vector<double>& a, const std::vector<double>& b,
                            std::int64_t m, std::int64_t k, std::int64_t n, bool ta = false) {
  std::vector<double> c(static_cast<std::size_t>(m * n), 0.0);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t p = 0; p < k; ++p)
        c[static_cast<std::size_t>(i * n + j)] +=
            a[static_cast<std::size_t>(ta ? p * m + i : i * k + p)] *
            b[static_cast<std::size_t>(p * n + j)];
  return c;
}

std::vector<double> ramp(std::int64_t size, double scale) {
  std::vector<double> v(static_cast<std::size_t>(size));
  for (std::int64_t i = 0; i < size; ++i)
    v[static_cast<std::size_t>(i)] = scale * static_cast<double>((i * 7) % 11 - 5);
  return v;
}

std::vector<ktape::Tensor> weight_gradients_of_two_inputs(const ktape::Tensor& x0,
                                                          const ktape::Tensor& x1,
                                                          const NDArray& w0, const NDArray& w1) {
  const std::string dt(ktape::dtype_name(w0.dtype()));
  const ktape::Tensor W0 = K::variable(w0, {.dtype = dt}), W1 = K::variable(w1, {.dtype = dt});
  const ktape::Tensor y = K::dot(x0, W0) + K::dot(x1, W1);
  return K::gradients(0.5 * K::sum(K::square(y)), {W0, W1});
}

}  // namespace

TEST(Function, WeightGradientsSharingTheirOutputGradientRunAsOneProduct) {
  // y = x0 W0 + x1 W1 and loss = sum(y^2) / 2: dW0 = x0^T y and dW1 = x1^T y share y, as an
  // LSTM's dU = h^T dZ and dW = x^T dZ share dZ. On the cpu backend the two products are one
  // step (B packed once); the values are those of plain loops, in both dtypes.
  const std::int64_t n = 37, f0 = 19, f1 = 5, h = 23;
  const auto a0 = ramp(n * f0, 0.1), a1 = ramp(n * f1, -0.2), w0 = ramp(f0 * h, 0.05),
             w1 = ramp(f1 * h, 0.3);
  std::vector<double> y = product(a0, w0, n, f0, h);
  const std::vector<double> y1 = product(a1, w1, n, f1, h);
  for (std::size_t i = 0; i < y.size(); ++i) y[i] += y1[i];
  const std::vector<double> want0 = product(a0, y, f0, n, h, true),
                            want1 = product(a1, y, f1, n, h, true);
  for (const char* dt : {"float32", "float64"})
    for (const char* backend : {"cpu", "reference"}) {
      const DType d = ktape::dtype_from_name(dt);
      const ktape::Tensor x0 = K::placeholder({K::None, f0}, {.dtype = dt}),
                          x1 = K::placeholder({K::None, f1}, {.dtype = dt});
      const auto g = weight_gradients_of_two_inputs(x0, x1, NDArray::from_values(w0, {f0, h}, d),
                                                    NDArray::from_values(w1, {f1, h}, d));
      const auto f = K::function({x0, x1}, g, {}, {.backend = backend});
      const auto out =
          f({NDArray::from_values(a0, {n, f0}, d), NDArray::from_values(a1, {n, f1}, d)});
      const double tol = d == DType::float32 ? 1e-5 : 1e-12;
      EXPECT_TRUE(ktape::testing_util::Close(out[0], want0, {f0, h}, tol, tol)) << dt << backend;
      EXPECT_TRUE(ktape::testing_util::Close(out[1], want1, {f1, h}, tol, tol)) << dt << backend;
      const std::string plan = f.describe_plan();
      // (Either product may come first in the plan.)
      EXPECT_EQ(ktape::testing_util::contains(plan, "[and MatMul ("), std::string(backend) == "cpu")
          << dt << " " << backend << "\n"
          << plan;
    }
}

TEST(Function, AProductThatReadsTheOtherIsNotJoinedWithIt) {
  // c1 = a B and c2 = c1 B share B, but c2 needs c1: they stay two steps, in order.
  const std::int64_t m = 9, k = 13;
  const auto a = ramp(m * k, 0.1), b = ramp(k * k, 0.07);
  const auto c1 = product(a, b, m, k, k), c2 = product(c1, b, m, k, k);
  const ktape::Tensor x = K::placeholder({K::None, k});
  const ktape::Tensor B = K::variable(NDArray::from_values(b, {k, k}));
  const ktape::Tensor y1 = K::dot(x, B);
  const auto f = K::function({x}, {y1, K::dot(y1, B)}, {}, {.backend = "cpu"});
  const auto out = f({NDArray::from_values(a, {m, k})});
  EXPECT_TRUE(ktape::testing_util::Close(out[0], c1, {m, k}, 1e-5, 1e-5));
  EXPECT_TRUE(ktape::testing_util::Close(out[1], c2, {m, k}, 1e-5, 1e-5));
  EXPECT_EQ(f.num_steps(), 2u) << f.describe_plan();
  // Two independent products of B are one step.
  const ktape::Tensor x2 = K::placeholder({K::None, k});
  const auto g = K::function({x, x2}, {K::dot(x, B), K::dot(x2, B)}, {}, {.backend = "cpu"});
  const auto both = g({NDArray::from_values(a, {m, k}), NDArray::from_values(c1, {m, k})});
  EXPECT_TRUE(ktape::testing_util::Close(both[0], c1, {m, k}, 1e-5, 1e-5));
  EXPECT_TRUE(ktape::testing_util::Close(both[1], c2, {m, k}, 1e-5, 1e-5));
  EXPECT_EQ(g.num_steps(), 1u) << g.describe_plan();
}

// Output arrays the caller passes back (run() with the same output vector) are computed into
// directly, not copied into after the run; values must be those of a fresh call in every case:
// an output read by a later step, two outputs of one value, an update that reads an output's
// buffer, an output vector that is also the input vector (its buffer read while it is written).
TEST(Function, OutputsReusedByTheCallerHoldTheCallsValues) {
  auto x = K::placeholder({3, 3});
  auto v = K::variable(NDArray::full(Shape{3, 3}, 0.0));
  auto y = x * 2.0 + 1.0;
  auto z = K::sum(y);  // reads y's buffer after y is written
  auto f = K::function({x}, {y, z, y}, {K::update(v, y * 3.0)});
  std::vector<NDArray> outs;
  for (double base : {1.0, 10.0, -4.0}) {
    std::vector<double> xs(9);
    for (int i = 0; i < 9; ++i) xs[static_cast<std::size_t>(i)] = base + i;
    const void* before = outs.empty() ? nullptr : outs[0].raw_data();
    f.run({NDArray::from_values(xs, Shape{3, 3})}, outs);
    ASSERT_EQ(outs.size(), 3u);
    if (before != nullptr) {
      EXPECT_EQ(outs[0].raw_data(), before) << "the caller's array was not reused";
    }
    double sum = 0;
    for (int i = 0; i < 9; ++i) {
      const double want = 2.0 * xs[static_cast<std::size_t>(i)] + 1.0;  // by hand
      sum += want;
      EXPECT_EQ(outs[0].item(i), want);
      EXPECT_EQ(outs[2].item(i), want);
      EXPECT_EQ(K::get_value(v).item(i), 3.0 * want);
    }
    EXPECT_EQ(outs[1].item(0), sum);
  }
  // A call with fresh outputs after them: computed in the plan's own buffers again, the earlier
  // arrays left as they were.
  const std::vector<double> kept = outs[0].to_vector();
  const auto fresh = f({NDArray::full(Shape{3, 3}, 0.5)});
  EXPECT_EQ(fresh[0].to_vector(), std::vector<double>(9, 2.0));
  EXPECT_EQ(fresh[1].item(0), 18.0);
  EXPECT_EQ(outs[0].to_vector(), kept);
  // The output vector is the input vector: a transpose and a product read their input while
  // they write their output, so these outputs must not go into the input's buffer.
  auto a = K::placeholder({4, 4});
  auto w = K::variable(NDArray::full(Shape{4, 4}, 1.0));
  for (int which = 0; which < 2; ++which) {
    auto g = K::function({a}, {which == 0 ? K::transpose(a) : K::dot(a, w)});
    std::vector<double> as(16);
    for (int i = 0; i < 16; ++i) as[static_cast<std::size_t>(i)] = i;
    std::vector<NDArray> io{NDArray::from_values(as, Shape{4, 4})};
    g.run(io, io);
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 4; ++c) {
        // transpose: element (r, c) is a[c][r] = 4c + r; a @ ones: row r's sum, 16r + 6
        const double want = which == 0 ? 4.0 * c + r : 16.0 * r + 6.0;
        EXPECT_EQ(io[0].item(4 * r + c), want)
            << (which == 0 ? "transpose" : "dot") << " (" << r << ", " << c << ")";
      }
  }
  // ... with more outputs than inputs, and fewer: the vector is resized only after the run.
  auto b = K::placeholder({2, 2});
  std::vector<NDArray> io{NDArray::full(Shape{2, 2}, 3.0)};
  K::function({b}, {b * 2.0, b + 1.0}).run(io, io);
  ASSERT_EQ(io.size(), 2u);
  EXPECT_EQ(io[0].to_vector(), std::vector<double>(4, 6.0));
  EXPECT_EQ(io[1].to_vector(), std::vector<double>(4, 4.0));
  auto c = K::placeholder({2, 2});
  K::function({b, c}, {b + c}).run(io, io);
  ASSERT_EQ(io.size(), 1u);
  EXPECT_EQ(io[0].to_vector(), std::vector<double>(4, 10.0));
}
