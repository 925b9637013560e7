// Optimizer from_config on arbitrary JSON: a ktape::Error or an optimizer whose config
// round-trips, never a crash or another exception.
#include <cstdint>
#include <nlohmann/json.hpp>

#include "engine/errors.hpp"
#include "optim/optimizers.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  namespace O = ktape::optimizers;
  try {
    auto opt = O::from_config(j);
    const auto again = O::from_config(O::serialize(*opt));  // what it wrote, it reads
    if (O::serialize(*again) != O::serialize(*opt)) std::abort();
  } catch (const ktape::Error&) {
  }
  return 0;
}
