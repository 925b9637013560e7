// End to end, on the fashion_cnn model (examples/common/cnn.hpp) and the real Fashion-MNIST data
// (skipped when it is not installed): one epoch on 2,000 samples in either data format makes
// the loss fall and the test accuracy rise well above chance; a checkpoint resumes exactly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "examples/common/cnn.hpp"

namespace fs = std::filesystem;
namespace K = ktape::backend;
using ktape::examples::Cnn;

namespace {

bool have_data() {
  return fs::exists(ktape::data::default_fashion_mnist_dir() + "/train-images-idx3-ubyte.gz");
}

class CnnEndToEnd : public ::testing::TestWithParam<const char*> {};

TEST_P(CnnEndToEnd, LossFallsInOneEpochOn2000Samples) {
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST not installed";
  const auto dir = ktape::data::default_fashion_mnist_dir();
  const auto train = ktape::data::load_fashion_mnist(dir, "train", 2000);
  const auto test = ktape::data::load_fashion_mnist(dir, "t10k", 1000);
  Cnn cnn({.batch_size = 32, .seed = 4, .data_format = GetParam()});
  const auto before = cnn.evaluate(test);
  std::vector<double> losses;
  const auto e =
      cnn.train_epoch(train, [&](std::int64_t, double l, double) { losses.push_back(l); });
  const auto after = cnn.evaluate(test);
  ASSERT_EQ(losses.size(), 63u);  // ceil(2000 / 32) Adam steps
  double first = 0, last = 0;
  for (int i = 0; i < 10; ++i) first += losses[static_cast<std::size_t>(i)] / 10;
  for (int i = 53; i < 63; ++i) last += losses[static_cast<std::size_t>(i)] / 10;
  EXPECT_LT(last, 0.75 * first) << "mean loss of the first 10 batches " << first
                                << ", of the last 10 " << last;
  EXPECT_LT(after.loss, before.loss);
  EXPECT_GT(after.acc, 0.6) << "test accuracy after one epoch on 2,000 samples (epoch loss "
                            << e.loss << ")";
}

INSTANTIATE_TEST_SUITE_P(DataFormats, CnnEndToEnd,
                         ::testing::Values("channels_last", "channels_first"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           return std::string(i.param);
                         });

TEST(CnnEndToEnd, CheckpointResumesExactly) {
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST not installed";
  const auto dir = ktape::data::default_fashion_mnist_dir();
  const auto train = ktape::data::load_fashion_mnist(dir, "train", 300);
  const auto test = ktape::data::load_fashion_mnist(dir, "t10k", 100);
  const fs::path ck =
      fs::temp_directory_path() / ("ktape_cnn_" + std::to_string(::getpid()) + ".npz");
  const ktape::examples::CnnConfig cfg{.batch_size = 50, .seed = 9};
  Cnn straight(cfg);
  straight.fit_epoch(train, test);
  straight.save_checkpoint(ck.string());
  const auto r2 = straight.fit_epoch(train, test);
  Cnn resumed(cfg);
  resumed.load_checkpoint(ck.string());
  fs::remove(ck);
  EXPECT_EQ(resumed.epochs_done(), 1);
  const auto q2 = resumed.fit_epoch(train, test);
  EXPECT_EQ(q2.train.loss, r2.train.loss);
  EXPECT_EQ(q2.val.acc, r2.val.acc);
  for (std::size_t i = 0; i < straight.params().size(); ++i) {
    const auto a = K::get_value(straight.params()[i]), b = K::get_value(resumed.params()[i]);
    EXPECT_EQ(0, std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()))
        << straight.params()[i].name();
  }
}

}  // namespace
