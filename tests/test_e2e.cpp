// End to end, on the fashion_mlp model (examples/common/mlp.hpp) and the real Fashion-MNIST data
// (skipped when it is not installed):
// - plain SGD (lr 0.03, batch 16) and Adam (lr 0.001, batch 32) learn from 2,000 samples;
// - a run resumed from a checkpoint continues bit for bit like the uninterrupted run (weights,
//   optimizer slots, shuffle order and dropout masks all restored), for several optimizers;
// - foreign, damaged or mismatched checkpoint files are refused with a clear ktape::Error and
//   leave the model unchanged;
// - an epoch on the whole dataset peaks under 150 MB of resident memory (the images stay uint8).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "examples/common/mlp.hpp"
#include "io/npz.hpp"

namespace fs = std::filesystem;
namespace K = ktape::backend;
using ktape::data::Dataset;
using ktape::examples::Mlp;
using ktape::examples::MlpConfig;

namespace {

const std::string& data_dir() {
  static const std::string dir = ktape::data::default_fashion_mnist_dir();
  return dir;
}
bool have_data() { return fs::exists(data_dir() + "/train-images-idx3-ubyte.gz"); }
#define REQUIRE_DATA() \
  if (!have_data())    \
  GTEST_SKIP() << "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)"

const Dataset& train_set(std::int64_t n) {
  static std::map<std::int64_t, Dataset> cache;
  auto it = cache.find(n);
  if (it == cache.end())
    it = cache.emplace(n, ktape::data::load_fashion_mnist(data_dir(), "train", n)).first;
  return it->second;
}
const Dataset& test_set(std::int64_t n) {
  static std::map<std::int64_t, Dataset> cache;
  auto it = cache.find(n);
  if (it == cache.end())
    it = cache.emplace(n, ktape::data::load_fashion_mnist(data_dir(), "t10k", n)).first;
  return it->second;
}

bool same_bits(const ktape::NDArray& a, const ktape::NDArray& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// Every weight and optimizer weight of the two models is bit-identical.
void expect_same_state(Mlp& a, Mlp& b) {
  for (std::size_t i = 0; i < a.params().size(); ++i)
    EXPECT_TRUE(same_bits(K::get_value(a.params()[i]), K::get_value(b.params()[i])))
        << a.params()[i].name();
  const auto wa = a.optimizer().get_weights(), wb = b.optimizer().get_weights();
  ASSERT_EQ(wa.size(), wb.size());
  for (std::size_t i = 0; i < wa.size(); ++i)
    EXPECT_TRUE(same_bits(wa[i], wb[i])) << a.optimizer().weights()[i].name();
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (char& c : name)
      if (c == '/') c = '_';  // parameterized tests are named "ContinuesExactly/0"
    dir_ = fs::temp_directory_path() / ("ktape_e2e_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

}  // namespace

TEST(EndToEnd, SgdLearnsFashionMnist) {
  REQUIRE_DATA();
  const auto& train = train_set(2000);
  const auto& test = test_set(2000);
  Mlp mlp({.lr = 0.03, .batch_size = 16, .seed = 2});
  const auto before = mlp.evaluate(test);
  const auto e1 = mlp.train_epoch(train);
  const auto e2 = mlp.train_epoch(train);
  const auto after = mlp.evaluate(test);
  EXPECT_LT(e2.loss, e1.loss);
  EXPECT_LT(after.loss, before.loss);
  EXPECT_GT(after.acc, 0.70) << "test accuracy after 2 epochs on 2,000 samples";
}

// ctest runs each test in a process of its own, so the peak is this test's alone.
TEST(EndToEnd, AFullEpochPeaksUnder150MB) {
  REQUIRE_DATA();
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(KTAPE_TSAN)
  GTEST_SKIP() << "a sanitizer's shadow memory is resident too";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  GTEST_SKIP() << "a sanitizer's shadow memory is resident too";
#endif
#endif
  const Dataset train = ktape::data::load_fashion_mnist(data_dir(), "train");
  const Dataset test = ktape::data::load_fashion_mnist(data_dir(), "t10k");
  ASSERT_EQ(train.images.shape()[0], 60000);
  Mlp mlp({.seed = 1});
  mlp.train_epoch(train);
  mlp.evaluate(test);
  rusage u{};
  ASSERT_EQ(getrusage(RUSAGE_SELF, &u), 0);
  EXPECT_LE(u.ru_maxrss, 150 * 1024) << "peak resident set in KiB";  // Linux: KiB
}

TEST(EndToEnd, AdamLearnsFashionMnist) {
  REQUIRE_DATA();
  const auto& train = train_set(2000);
  const auto& test = test_set(2000);
  Mlp mlp({.optimizer = "adam", .batch_size = 32, .seed = 3});
  EXPECT_FLOAT_EQ(mlp.lr(), 0.001);  // the Adam default
  const auto before = mlp.evaluate(test);
  const auto r1 = mlp.fit_epoch(train, test);
  const auto r2 = mlp.fit_epoch(train, test);
  const auto r3 = mlp.fit_epoch(train, test);
  EXPECT_LT(r2.train.loss, r1.train.loss);
  EXPECT_LT(r3.train.loss, r2.train.loss);
  EXPECT_LT(r3.val.loss, before.loss);
  EXPECT_GT(r3.val.acc, 0.75) << "test accuracy after 3 Adam epochs on 2,000 samples";
  EXPECT_EQ(K::get_value(mlp.optimizer().iterations).item(0), 3 * 63);  // ceil(2000 / 32) steps
  ASSERT_EQ(mlp.history().size(), 3u);
  EXPECT_EQ(mlp.history().series("val_acc")[2], r3.val.acc);
}

class ResumeTest : public CheckpointTest, public ::testing::WithParamInterface<const char*> {};

// 2 epochs straight vs 1 epoch, checkpoint, a fresh model loading it, 1 more epoch (then a third
// epoch on both): identical losses, accuracies, weights and optimizer state, bit for bit.
TEST_P(ResumeTest, ContinuesExactly) {
  REQUIRE_DATA();
  const auto& train = train_set(250);  // 8 batches, the last one of 26
  const auto& test = test_set(250);
  const MlpConfig cfg{.optimizer = GetParam(), .batch_size = 32, .seed = 5};
  Mlp straight(cfg);
  straight.fit_epoch(train, test);
  straight.save_checkpoint(path("epoch1.npz"));
  const auto s2 = straight.fit_epoch(train, test);
  straight.save_checkpoint(path("epoch2.npz"));

  Mlp resumed(cfg);
  resumed.load_checkpoint(path("epoch1.npz"));
  EXPECT_EQ(resumed.epochs_done(), 1);
  EXPECT_EQ(resumed.history().to_csv(),
            ktape::train::History::from_csv(resumed.history().to_csv()).to_csv());
  const auto r2 = resumed.fit_epoch(train, test);
  EXPECT_EQ(r2.epoch, 2);
  EXPECT_EQ(r2.train.loss, s2.train.loss);  // exact, not approximate
  EXPECT_EQ(r2.train.acc, s2.train.acc);
  EXPECT_EQ(r2.val.loss, s2.val.loss);
  EXPECT_EQ(r2.val.acc, s2.val.acc);
  expect_same_state(straight, resumed);
  EXPECT_EQ(resumed.history().series("loss"), straight.history().series("loss"));

  // The generator and counters carry on: a third epoch matches too, also from epoch2.npz.
  const auto s3 = straight.fit_epoch(train, test);
  EXPECT_EQ(resumed.fit_epoch(train, test).train.loss, s3.train.loss);
  Mlp again(cfg);
  again.load_checkpoint(path("epoch2.npz"));
  EXPECT_EQ(again.fit_epoch(train, test).train.loss, s3.train.loss);
  expect_same_state(straight, again);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, ResumeTest,
                         ::testing::Values("sgd", "nesterov", "adam", "nadam", "adadelta"),
                         [](const auto& info) { return std::string(info.param); });

TEST_F(CheckpointTest, LearningRateFromCheckpointUnlessGiven) {
  Mlp a({.optimizer = "adam", .lr = 0.004, .seed = 5});
  a.save_checkpoint(path("a.npz"));
  Mlp b({.optimizer = "adam", .seed = 5});
  b.load_checkpoint(path("a.npz"));
  EXPECT_FLOAT_EQ(b.lr(), 0.004);
  Mlp c({.optimizer = "adam", .lr = 0.0005, .seed = 5});
  c.load_checkpoint(path("a.npz"));
  EXPECT_FLOAT_EQ(c.lr(), 0.0005);
}

TEST_F(CheckpointTest, EntriesAreKerasNamed) {
  Mlp mlp({.optimizer = "adam", .seed = 1});
  mlp.save_checkpoint(path("c.npz"));
  std::vector<std::string> names;
  for (const auto& [name, a] : ktape::load_npz(path("c.npz"))) names.push_back(name);
  for (const char* want :
       {"dense_1/kernel:0", "dense_1/bias:0", "dense_3/kernel:0", "optimizer/iterations:0",
        "optimizer/dense_1/kernel/m:0", "optimizer/dense_3/bias/v:0", "optimizer/lr:0",
        "training/epochs_done", "training/shuffle_rng", "training/dropout_counters",
        "training/history.csv", "training/optimizer", "training/dropout"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
}

// Every refusal names the problem, is a ktape::Error, and leaves the model as it was.
TEST_F(CheckpointTest, BadCheckpointsAreRefused) {
  const MlpConfig cfg{.optimizer = "adam", .seed = 5};
  Mlp target(cfg);
  const auto w_before = K::get_value(target.params()[0]);
  auto expect_refused = [&](const std::string& file, const std::string& needle) {
    SCOPED_TRACE(file);
    try {
      target.load_checkpoint(file);
      ADD_FAILURE() << "loaded " << file;
    } catch (const ktape::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << "message: " << e.what() << "\nexpected to contain: " << needle;
    }
    EXPECT_TRUE(same_bits(K::get_value(target.params()[0]), w_before));
    EXPECT_EQ(target.epochs_done(), 0);
    EXPECT_EQ(K::get_value(target.optimizer().iterations).item(0), 0);
  };

  expect_refused(path("missing.npz"), "missing.npz");
  { std::ofstream(path("text.npz")) << "not a zip file\n"; }
  expect_refused(path("text.npz"), "text.npz");
  ktape::save_npz(path("foreign.npz"), {{"x", ktape::NDArray::full({3}, 1.0)}});
  expect_refused(path("foreign.npz"), "not a fashion_mlp checkpoint");

  Mlp sgd({.optimizer = "sgd", .seed = 5});
  sgd.save_checkpoint(path("sgd.npz"));
  expect_refused(path("sgd.npz"), "--optimizer sgd");
  Mlp other_seed({.optimizer = "adam", .seed = 6});
  other_seed.save_checkpoint(path("seed6.npz"));
  expect_refused(path("seed6.npz"), "--seed 6");
  Mlp wide({.hidden1 = 64, .optimizer = "adam", .seed = 5});
  wide.save_checkpoint(path("wide.npz"));
  expect_refused(path("wide.npz"),
                 "'dense_1/kernel:0': expected shape (784, 256) float32, found "
                 "shape (784, 64) float32");
  Mlp no_dropout({.dropout = 0.0, .optimizer = "adam", .seed = 5});
  no_dropout.save_checkpoint(path("nodrop.npz"));
  expect_refused(path("nodrop.npz"), "written with --dropout 0, this run uses --dropout 0.2");
  Mlp other_rate({.dropout = 0.3, .optimizer = "adam", .seed = 5});
  other_rate.save_checkpoint(path("rate.npz"));
  expect_refused(path("rate.npz"), "written with --dropout 0.3, this run uses --dropout 0.2");
  {  // a checkpoint without its rate (an older fashion_mlp wrote none)
    auto arrays = ktape::load_npz(path("rate.npz"));
    std::erase_if(arrays, [](const auto& e) { return e.first == "training/dropout"; });
    ktape::save_npz(path("old.npz"), arrays);
  }
  expect_refused(path("old.npz"), "does not record its dropout rate");

  // A truncated copy of a good checkpoint: an IOError, never a crash.
  Mlp good(cfg);
  good.save_checkpoint(path("good.npz"));
  const auto size = fs::file_size(path("good.npz"));
  fs::copy_file(path("good.npz"), path("cut.npz"));
  fs::resize_file(path("cut.npz"), size / 2);
  expect_refused(path("cut.npz"), "cut.npz");
  EXPECT_NO_THROW(target.load_checkpoint(path("good.npz")));
}
