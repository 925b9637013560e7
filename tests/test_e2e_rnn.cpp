// End to end: the fashion_rnn classifier (K::rnn's symbolic loop, Adam lr 0.005) trained on
// 1,000 Fashion-MNIST samples for one epoch (batch 32: 32 steps), hidden 32 instead of the
// example's 128, as an LSTM and as a GRU. The loss must fall: the mean of the last 8 batch losses
// below 0.8 x the first batch's.
#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>

#include "examples/common/rnn_model.hpp"

namespace {

std::vector<double> batch_losses(const ktape::examples::RnnConfig& cfg,
                                 const ktape::data::Dataset& train) {
  ktape::backend::clear_session();
  ktape::examples::RnnClassifier model(cfg);
  std::vector<double> losses;
  model.train_epoch(train, [&](std::int64_t, double loss, double) { losses.push_back(loss); });
  return losses;
}

void expect_loss_falls(const std::vector<double>& losses) {
  ASSERT_EQ(losses.size(), 32u);
  const double last = std::accumulate(losses.end() - 8, losses.end(), 0.0) / 8.0;
  // Measured: 2.34 -> 1.33 (LSTM), 2.43 -> 1.43 (GRU).
  EXPECT_LT(last, 0.8 * losses.front())
      << "first batch " << losses.front() << ", last 8 mean " << last;
}

}  // namespace

TEST(EndToEnd, LstmLossFallsOnFashionMnist) {
  const std::string dir = ktape::data::default_fashion_mnist_dir();
  if (!std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)";
  const auto train = ktape::data::load_fashion_mnist(dir, "train", 1000);
  expect_loss_falls(
      batch_losses({.cell = "lstm", .hidden = 32, .lr = 0.005, .batch_size = 32}, train));
}

TEST(EndToEnd, GruLossFallsOnFashionMnist) {
  const std::string dir = ktape::data::default_fashion_mnist_dir();
  if (!std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)";
  const auto train = ktape::data::load_fashion_mnist(dir, "train", 1000);
  expect_loss_falls(
      batch_losses({.cell = "gru", .hidden = 32, .lr = 0.005, .batch_size = 32}, train));
}
