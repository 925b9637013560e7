// Planning byte offsets in one buffer (a Function plan's arena), every block rounded up to 64
// bytes so that each stays 64-byte aligned. ArenaAllocator: first fit over a sorted free list,
// freed neighbours merged. place_blocks: the offsets of blocks whose lifetimes are all known.
// Internal to Function's compile.
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

// A buffer live from step `first` through step `last` (inclusive): two blocks may share bytes
// only when their step ranges do not meet.
struct ArenaBlock {
  std::size_t bytes = 0;
  int first = 0, last = 0;
  std::size_t offset = 0;  // set by place_blocks
};

// For benchmarks that compare against 4 KB pages (BM_LstmStep's variant 3): with `on` false,
// aligned_buffer (engine/ndarray.hpp) no longer maps large blocks on huge pages. Default true;
// buffers already allocated keep their pages.
void set_huge_pages(bool on);

// Sets every block's offset and returns the bytes the arena needs: the smaller of two plans,
// first fit in step order (blocks starting at a step, in the order given, taken before those
// ending there are freed) and largest first (each block at the lowest offset clear of the
// larger blocks live at the same time: a long-lived projection no longer pins the middle of
// the arena). ResourceExhaustedError beyond PTRDIFF_MAX bytes.
std::size_t place_blocks(std::vector<ArenaBlock>& blocks);

}  // namespace ktape
