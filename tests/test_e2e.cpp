// End to end: the fashion_mlp model trained on 2,000 Fashion-MNIST samples for 2 epochs
// (SGD lr 0.03, batch 16: 250 steps). Training is deterministic for a fixed seed.
#include <gtest/gtest.h>

#include <filesystem>

#include "examples/common/mlp.hpp"

TEST(EndToEnd, MlpLearnsFashionMnist) {
  const std::string dir = ktape::data::default_fashion_mnist_dir();
  if (!std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)";
  const auto train = ktape::data::load_fashion_mnist(dir, "train", 2000);
  const auto test = ktape::data::load_fashion_mnist(dir, "t10k", 2000);
  ktape::examples::Mlp mlp({.lr = 0.03, .batch_size = 16, .seed = 2});
  std::mt19937_64 rng(2);
  const auto before = mlp.evaluate(test);
  const auto e1 = mlp.train_epoch(train, rng);
  const auto e2 = mlp.train_epoch(train, rng);
  const auto after = mlp.evaluate(test);
  EXPECT_LT(e2.loss, e1.loss);
  EXPECT_LT(after.loss, before.loss);
  EXPECT_GT(after.acc, 0.70) << "test accuracy after 2 epochs on 2,000 samples";
}
