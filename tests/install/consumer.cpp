// Built against the installed headers only: one SGD step of a linear model.
#include <ktape/ktape.hpp>

#include <cstdio>

namespace K = ktape::backend;

int main() {
  auto x = K::placeholder({K::None, 3});
  auto W = K::variable(ktape::NDArray::full({3, 1}, 0.0));
  auto loss = K::mean(K::square(K::dot(x, W) - 1.0));
  auto g = K::gradients(loss, {W});
  auto step = K::function({x}, {loss}, {K::update_sub(W, 0.1 * g[0])});
  const ktape::NDArray batch = ktape::NDArray::full({4, 3}, 1.0);
  const double before = step({batch})[0].item();
  const double after = step({batch})[0].item();
  std::printf("consumer: loss %g then %g\n", before, after);
  return after < before ? 0 : 1;
}
