#include "engine/arena.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "engine/errors.hpp"

namespace ktape {

namespace {
std::size_t round64(std::size_t bytes) { return bytes == 0 ? 64 : (bytes + 63) / 64 * 64; }
}  // namespace

std::size_t ArenaAllocator::grow(std::size_t from, std::size_t bytes) {
  std::size_t top = 0;
  if (__builtin_add_overflow(from, bytes, &top) || top > PTRDIFF_MAX)
    throw ResourceExhaustedError("K::function: the plan's buffers need more than " +
                                 std::to_string(PTRDIFF_MAX) + " bytes");
  top_ = top;
  return from;
}

std::size_t ArenaAllocator::alloc(std::size_t bytes) {
  bytes = round64(bytes);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < bytes) continue;
    const std::size_t off = it->first;
    if (it->second == bytes) {
      free_.erase(it);
    } else {
      it->first += bytes;
      it->second -= bytes;
    }
    return off;
  }
  // Grow: extend a free block touching the end, if any.
  if (!free_.empty() && free_.back().first + free_.back().second == top_) {
    const std::size_t off = free_.back().first;
    free_.pop_back();
    return grow(off, bytes);
  }
  return grow(top_, bytes);
}

void ArenaAllocator::release(std::size_t off, std::size_t bytes) {
  bytes = round64(bytes);
  auto it = std::lower_bound(free_.begin(), free_.end(), std::make_pair(off, std::size_t{0}));
  it = free_.insert(it, {off, bytes});
  auto next = std::next(it);
  if (next != free_.end() && it->first + it->second == next->first) {
    it->second += next->second;
    free_.erase(next);
  }
  if (it != free_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      free_.erase(it);
    }
  }
}

}  // namespace ktape
