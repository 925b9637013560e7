/// \file
/// Gradient checking: analytic gradients (K::gradients through a Function) against float64
/// central differences. A non-scalar output is reduced by a fixed random projection.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/ndarray.hpp"
#include "engine/tensor.hpp"

namespace ktape {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  std::uint64_t seed = 1234;  ///< of the projection
  std::string backend;        ///< "" = active backend
};

struct GradcheckResult {
  bool ok = true;
  double max_error = 0;  ///< largest |analytic - numeric| - (atol + rtol*|numeric|), if positive
  std::string report;    ///< the worst element: input, index, analytic, numeric
};

/// f builds the output from placeholders shaped like `inputs` (which must be float64).
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                          const std::vector<NDArray>& inputs, const GradcheckOptions& options = {});

}  // namespace ktape
