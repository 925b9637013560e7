// The .npz / .npy readers on arbitrary bytes: a ktape::Error or a loaded array, never a crash,
// a leak, undefined behaviour or another exception.
#include <cstdint>

#include "engine/errors.hpp"
#include "fuzz_util.hpp"
#include "io/npz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string& path = ktape::fuzz::scratch_file(data, size, ".npz");
  try {
    for (const auto& [name, a] : ktape::load_npz(path))
      if (a.defined() && a.size() > 0) (void)a.item(a.size() - 1);  // every byte readable
  } catch (const ktape::Error&) {
  }
  try {
    const ktape::NDArray a = ktape::load_npy(path);
    if (a.size() > 0) (void)a.item(a.size() - 1);
  } catch (const ktape::Error&) {
  }
  return 0;
}
