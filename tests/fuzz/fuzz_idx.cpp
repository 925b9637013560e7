// The Fashion-MNIST IDX readers (plain or gzip) on arbitrary bytes: an IOError or arrays whose
// size matches their header, never a crash or an allocation the file does not justify.
#include <cstdint>

#include "engine/errors.hpp"
#include "examples/common/fashion_mnist.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string& path = ktape::fuzz::scratch_file(data, size, ".idx");
  for (std::int64_t limit : {std::int64_t{-1}, std::int64_t{2}}) {
    try {
      const auto a = ktape::data::read_idx_images(path, limit);
      if (a.size() > 0) (void)a.item(a.size() - 1);
    } catch (const ktape::Error&) {
    }
    try {
      const auto a = ktape::data::read_idx_labels(path, limit);
      if (a.size() > 0) (void)a.item(a.size() - 1);
    } catch (const ktape::Error&) {
    }
  }
  return 0;
}
