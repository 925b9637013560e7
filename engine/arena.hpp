// ArenaAllocator: plans byte offsets in one buffer (a Function plan's arena). First fit over a
// sorted free list, blocks rounded up to 64 bytes (so every block stays 64-byte aligned), freed
// neighbours merged. Internal to Function's compile.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace ktape {

class ArenaAllocator {
 public:
  // The offset of a new block of `bytes` (at most PTRDIFF_MAX); ResourceExhaustedError when the
  // arena would outgrow PTRDIFF_MAX bytes.
  std::size_t alloc(std::size_t bytes);
  void release(std::size_t offset, std::size_t bytes);
  std::size_t top() const { return top_; }  // bytes the arena needs

 private:
  std::size_t grow(std::size_t from, std::size_t bytes);
  std::vector<std::pair<std::size_t, std::size_t>> free_;  // (offset, bytes), sorted
  std::size_t top_ = 0;
};

}  // namespace ktape
