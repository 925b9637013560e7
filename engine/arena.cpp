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

namespace {

std::size_t first_fit(std::vector<ArenaBlock>& blocks, std::vector<std::size_t>& offsets) {
  ArenaAllocator arena;
  int last_step = 0;
  for (const ArenaBlock& b : blocks) last_step = std::max({last_step, b.first, b.last});
  // Blocks by their first step (stable: the given order within a step), and by their last.
  std::vector<std::vector<std::size_t>> starting(static_cast<std::size_t>(last_step) + 1),
      ending(static_cast<std::size_t>(last_step) + 1);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    starting[static_cast<std::size_t>(blocks[i].first)].push_back(i);
    ending[static_cast<std::size_t>(blocks[i].last)].push_back(i);
  }
  offsets.assign(blocks.size(), 0);
  for (std::size_t s = 0; s < starting.size(); ++s) {
    for (std::size_t i : starting[s]) offsets[i] = arena.alloc(blocks[i].bytes);
    for (std::size_t i : ending[s]) arena.release(offsets[i], blocks[i].bytes);
  }
  return arena.top();
}

std::size_t largest_first(const std::vector<ArenaBlock>& blocks,
                          std::vector<std::size_t>& offsets) {
  std::vector<std::size_t> order(blocks.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const std::size_t sa = round64(blocks[a].bytes), sb = round64(blocks[b].bytes);
    return sa != sb ? sa > sb : a < b;  // ties in the given order
  });
  offsets.assign(blocks.size(), 0);
  std::vector<std::size_t> placed;
  std::vector<std::pair<std::size_t, std::size_t>> taken;  // (offset, end) of live neighbours
  std::size_t top = 0;
  for (std::size_t i : order) {
    const ArenaBlock& b = blocks[i];
    const std::size_t bytes = round64(b.bytes);
    taken.clear();
    for (std::size_t j : placed)
      if (blocks[j].first <= b.last && b.first <= blocks[j].last)
        taken.emplace_back(offsets[j], offsets[j] + round64(blocks[j].bytes));
    std::sort(taken.begin(), taken.end());
    std::size_t off = 0;
    for (const auto& [lo, hi] : taken) {
      if (lo >= off && lo - off >= bytes) break;
      off = std::max(off, hi);
    }
    std::size_t end = 0;
    if (__builtin_add_overflow(off, bytes, &end) || end > PTRDIFF_MAX)
      throw ResourceExhaustedError("K::function: the plan's buffers need more than " +
                                   std::to_string(PTRDIFF_MAX) + " bytes");
    offsets[i] = off;
    top = std::max(top, end);
    placed.push_back(i);
  }
  return top;
}

}  // namespace

std::size_t place_blocks(std::vector<ArenaBlock>& blocks) {
  std::vector<std::size_t> a, b;
  const std::size_t top_a = first_fit(blocks, a);
  const std::size_t top_b = largest_first(blocks, b);
  const std::vector<std::size_t>& best = top_b < top_a ? b : a;
  for (std::size_t i = 0; i < blocks.size(); ++i) blocks[i].offset = best[i];
  return std::min(top_a, top_b);
}

}  // namespace ktape
