// Building fused passes (engine/fusion.hpp): grouping elementwise steps, placing
// concatenations, gathering slices, attaching sources. Running them: fused_run.cpp.
#include "engine/fusion.hpp"

#include <algorithm>
#include <atomic>

#include "engine/parallel.hpp"

namespace ktape {

namespace {

constexpr std::int64_t kChunk = 2048;  // elements per pass of a fused group (stays in L1/L2)
constexpr std::int64_t kMinFuse = 2;   // every chain of arrays fuses (scalars stay separate)

constexpr std::int64_t kMaxRowChunk = 8192;      // a row operand's chunk: lcm(width, 64) * k
constexpr std::int64_t kMaxColumnChunk = 16384;  // a column operand's: lcm(inner, 64) * k
constexpr std::size_t kMaxMerged = 64;           // members of passes merged into one

// `in` broadcasts along the leading axes of `out`: its dims (leading 1s dropped) are out's
// trailing dims. Such a row operand (a bias) repeats every `in.size` elements.
bool is_row_of(const Shape& in, const Shape& out) {
  int lead = 0;
  while (lead < in.ndim() && in[lead] == 1) ++lead;
  const int k = in.ndim() - lead;
  if (k > out.ndim()) return false;
  for (int i = 0; i < k; ++i)
    if (in[lead + i] != out[out.ndim() - k + i]) return false;
  return true;
}

// `in` broadcasts along the leading and the trailing axes of `out`: dropping its leading 1s, its
// dims are out's dims [a, b) followed by 1s on every axis after b < ndim. Such a column operand
// (a channels_first bias (C, 1, 1)) holds each value for `inner` = prod(out[b:]) elements.
bool is_column_of(const Shape& in, const Shape& out, std::int64_t& inner) {
  const int r = out.ndim(), pad = r - in.ndim();  // in aligned right, as numpy broadcasts
  if (pad < 0) return false;
  auto dim = [&](int i) { return i < pad ? std::int64_t{1} : in[i - pad]; };
  int b = r;
  while (b > 0 && dim(b - 1) == 1 && out[b - 1] != 1) --b;
  if (b == r) return false;
  int a = b;
  while (a > 0 && dim(a - 1) == out[a - 1]) --a;
  for (int i = 0; i < a; ++i)
    if (dim(i) != 1) return false;
  inner = 1;
  for (int i = b; i < r; ++i) inner *= out[i];
  return inner > 1;
}

// Ops whose cpu kernels compute each element the same way wherever it sits in the range they
// are given (plain per-element arithmetic; no packets whose tails differ, as Eigen's exp's do):
// the same bits on any piece of the elements (MatMulEpilogue).
bool exact_per_element(Op op) {
  switch (op) {
    case Op::Add:
    case Op::Sub:
    case Op::Mul:
    case Op::Div:
    case Op::Neg:
    case Op::Square:
    case Op::Sqrt:
    case Op::Abs:
    case Op::Sign:
    case Op::Maximum:
    case Op::Minimum:
    case Op::Relu:
    case Op::ReluGrad:
    case Op::Cast:
      return true;
    default:
      return false;
  }
}

std::int64_t gcd(std::int64_t a, std::int64_t b) { return b == 0 ? a : gcd(b, a % b); }
std::int64_t lcm64(std::int64_t w) { return w / gcd(w, 64) * 64; }

// How a group's operands broadcast: none, rows of `width` (inner 0), or columns of `width`
// values each held for `inner` elements.
struct Broadcast {
  std::int64_t width = 0, inner = 0;
  bool operator==(const Broadcast&) const = default;
  bool none() const { return width == 0; }
};

// Elements per chunk: a multiple of 64 (the same packet boundaries as an unfused kernel) and of
// the row width (every chunk starts a row) or of the column's run (every chunk starts a run).
std::int64_t chunk_for(const Broadcast& b) {
  if (b.none()) return kChunk;
  const std::int64_t l = lcm64(b.inner > 0 ? b.inner : b.width);
  return l >= kChunk ? l : l * (kChunk / l);
}

// Whether the step can join a fused pass, and how its operands broadcast.
bool fusable(const Plan& p, const Step& s, Broadcast& bc) {
  bc = {};
  if (s.fused || !s.node || !op_def(s.node->op).elementwise) return false;
  const Value& out = p.values[static_cast<std::size_t>(s.out)];
  if (out.size < kMinFuse || s.in_values.size() > static_cast<std::size_t>(kMaxFusedInputs))
    return false;
  for (int iv : s.in_values) {
    const Value& in = p.values[static_cast<std::size_t>(iv)];
    if (in.size == out.size || in.size == 1) continue;
    if (in.size == 0 || out.size % in.size != 0) return false;
    Broadcast mine{in.size, 0};
    std::int64_t inner = 0;
    if (is_row_of(in.shape, out.shape)) {
      if (lcm64(in.size) > kMaxRowChunk) return false;
    } else if (is_column_of(in.shape, out.shape, inner) && lcm64(inner) <= kMaxColumnChunk) {
      mine.inner = inner;
    } else {
      return false;
    }
    if (!bc.none() && !(bc == mine)) return false;
    bc = mine;
  }
  return true;
}

// The fused groups of a plan being built: each step's group (-1: none) and each group's members,
// the step where it runs (its last member's) and how its operands broadcast.
struct Groups {
  std::vector<int> of;
  std::vector<int> root;
  std::vector<Broadcast> bc;
  std::vector<std::vector<int>> members;
  const std::vector<char>* offset_view = nullptr;  // value roots read through a partial view

  std::int64_t size(const Plan& p, int g) const {
    const int r = root[static_cast<std::size_t>(g)];
    return p.values[static_cast<std::size_t>(p.steps[static_cast<std::size_t>(r)].out)].size;
  }

  // Merges groups `gs` (of one size, their broadcasts and `b` compatible) into the last-running
  // one, if that is legal: the merged pass runs where the last of them ran, so what the earlier
  // ones compute, and the steps `also` (the readers of a step about to join), must be read by
  // nothing outside the merged groups before that. Returns the merged group, or -1 (no change).
  int merge(const Plan& p, const std::vector<std::vector<int>>& consumers,
            const std::vector<int>& gs, Broadcast b, const std::vector<int>& also) {
    int last = -1, into = -1;
    for (int g : gs) {
      const Broadcast& gb = bc[static_cast<std::size_t>(g)];
      if (!gb.none()) {
        if (!b.none() && !(b == gb)) return -1;
        b = gb;
      }
      if (root[static_cast<std::size_t>(g)] > last) {
        last = root[static_cast<std::size_t>(g)];
        into = g;
      }
    }
    auto inside_or_after = [&](int c) {
      return c > last ||
             std::find(gs.begin(), gs.end(), of[static_cast<std::size_t>(c)]) != gs.end();
    };
    std::size_t total = 0;  // a pass of at most kMaxMerged members (bounds the checks too)
    for (int g : gs) total += members[static_cast<std::size_t>(g)].size();
    if (gs.size() < 2 || total > kMaxMerged ||
        !std::all_of(also.begin(), also.end(), inside_or_after))
      return -1;
    for (int g : gs) {
      // A root that stops being one would be read from a register: not through a view of part.
      const int r = root[static_cast<std::size_t>(g)];
      if (g != into &&
          (*offset_view)[static_cast<std::size_t>(p.steps[static_cast<std::size_t>(r)].out)])
        return -1;
    }
    for (int g : gs)
      for (int m : members[static_cast<std::size_t>(g)]) {
        const Step& st = p.steps[static_cast<std::size_t>(m)];
        const auto& cs =
            consumers[static_cast<std::size_t>(p.values[static_cast<std::size_t>(st.out)].root)];
        if (!std::all_of(cs.begin(), cs.end(), inside_or_after)) return -1;
      }
    for (int g : gs) {
      if (g == into) continue;
      for (int m : members[static_cast<std::size_t>(g)]) {
        of[static_cast<std::size_t>(m)] = into;
        members[static_cast<std::size_t>(into)].push_back(m);
      }
      members[static_cast<std::size_t>(g)].clear();
    }
    bc[static_cast<std::size_t>(into)] = b;
    return into;
  }
};

// Passes computed per chunk by the pass that reads them (FusedSource): a built pass P whose only
// result z (not pinned, not viewed in part) is read only through slices gathered by one other
// pass C, as blocks that each cover every row of z (its elements as rows of the blocks' pitch),
// all of one width that divides C's chunk, and together no wider than a row (z is computed
// once, not once per block). P's own chunks must tile the rows one chunk of C needs, so that
// every element is computed exactly as P alone would; P must read no gathered blocks, columns
// or random draws. P's inputs become C's, and P runs no step of its own.
void attach_sources(Plan& p, const std::vector<bool>& pinned, const std::vector<char>& offset_view,
                    const std::vector<std::vector<int>>& consumers,
                    const std::vector<int>& gathered, const Groups& G,
                    std::vector<std::unique_ptr<Step>>& fused_at) {
  constexpr std::int64_t kMaxSourceElements = 16384;  // of z, that one chunk of C may need
  for (std::size_t g = 0; g < G.members.size(); ++g) {
    if (G.members[g].size() < 2) continue;
    const auto pr = static_cast<std::size_t>(G.root[g]);
    Step* ps = fused_at[pr].get();
    if (!ps) continue;
    const FusedProgram& P = *ps->fused;
    if (P.out_values.size() != 1 || P.has_blocks || P.places || P.inner > 0 ||
        ps->in_values.empty() || !ps->extra_outs.empty())
      continue;
    const bool random = std::any_of(G.members[g].begin(), G.members[g].end(), [&](int m) {
      return op_def(p.steps[static_cast<std::size_t>(m)].node->op).random;
    });
    const int z = P.out_values[0];
    const Value& zv = p.values[static_cast<std::size_t>(z)];
    if (random || pinned[static_cast<std::size_t>(z)] || offset_view[static_cast<std::size_t>(z)] ||
        zv.root != z)
      continue;
    // Every reader of z a gathered slice, and every reader of those one pass C.
    Step* cs = nullptr;
    bool ok = !consumers[static_cast<std::size_t>(z)].empty();
    for (int sl : consumers[static_cast<std::size_t>(z)]) {
      const int sv = p.steps[static_cast<std::size_t>(sl)].out;
      ok = ok && gathered[static_cast<std::size_t>(sv)] == sl;
      if (!ok) break;
      for (int c : consumers[static_cast<std::size_t>(sv)]) {
        const int cg = G.of[static_cast<std::size_t>(c)];
        Step* here =
            cg >= 0 ? fused_at[static_cast<std::size_t>(G.root[static_cast<std::size_t>(cg)])].get()
                    : nullptr;
        ok = ok && here && here != ps && (!cs || cs == here);
        cs = here;
      }
    }
    if (!ok || !cs) continue;
    FusedProgram& C = *cs->fused;
    std::int64_t pitch = 0, width = 0, widths = 0;
    for (std::size_t k = 0; ok && k < cs->in_values.size(); ++k) {
      if (p.values[static_cast<std::size_t>(cs->in_values[k])].root != z) continue;
      const Block& b = C.block[k];
      ok = cs->in_values[k] == z && b.rows > 0 &&
           (pitch == 0 || (b.pitch == pitch && b.width == width)) &&
           b.offset + b.width <= b.pitch && b.rows * b.pitch == zv.size;
      pitch = b.pitch;
      width = b.width;
      widths += b.width;
    }
    if (!ok || width == 0 || widths > pitch || C.chunk % width != 0) continue;
    const std::int64_t need = C.chunk / width * pitch;
    if (need > kMaxSourceElements || need % P.chunk != 0) continue;
    // Attach: P's inputs after C's, the blocks read from P's rows, and scratch for both.
    FusedSource src;
    src.in_base = static_cast<int>(cs->in_values.size());
    src.pitch = pitch;
    src.block_width = width;
    src.dtype = zv.dtype;
    src.rows_offset = C.scratch_bytes;
    C.scratch_bytes += (static_cast<std::size_t>(need) * dtype_size(zv.dtype) + 63) / 64 * 64;
    src.regs_offset = C.scratch_bytes;
    C.scratch_bytes += (P.scratch_bytes + 63) / 64 * 64;
    C.block_source.resize(cs->in_values.size(), -1);
    for (std::size_t k = 0; k < cs->in_values.size(); ++k)
      if (cs->in_values[k] == z) {
        C.block_source[k] = static_cast<int>(C.sources.size());
        cs->in_values[k] = ps->in_values[0];  // a live value: the slot's data is never read
      }
    cs->in_values.insert(cs->in_values.end(), ps->in_values.begin(), ps->in_values.end());
    C.block.resize(cs->in_values.size());
    C.block_offset.resize(cs->in_values.size(), 0);
    C.column_offset.resize(cs->in_values.size(), 0);
    C.block_source.resize(cs->in_values.size(), -1);
    src.prog = std::move(ps->fused);
    C.sources.push_back(std::move(src));
    fused_at[pr].reset();
  }
}

}  // namespace

void fuse_elementwise(Plan& p, const std::vector<bool>& pinned) {
  const std::size_t ns = p.steps.size();
  const std::size_t nv = p.values.size();
  // Read through a view of part of it (a ScanPart): never a register.
  std::vector<char> offset_view(nv, 0);
  for (std::size_t v = 0; v < nv; ++v) {
    const Value& val = p.values[v];
    if (val.alias_offset != 0 || (val.root != static_cast<int>(v) &&
                                  val.size != p.values[static_cast<std::size_t>(val.root)].size))
      offset_view[static_cast<std::size_t>(val.root)] = 1;
  }
  std::vector<std::vector<int>> consumers(nv);
  for (std::size_t si = 0; si < ns; ++si)
    for (int iv : p.steps[si].in_values) {
      auto& c = consumers[static_cast<std::size_t>(p.values[static_cast<std::size_t>(iv)].root)];
      if (c.empty() || c.back() != static_cast<int>(si)) c.push_back(static_cast<int>(si));
    }

  // Reverse sweep: a step joins the group of a consumer when every other consumer is in that
  // group too or runs after the group does (the group runs at its last member's position).
  // Consumers through an alias (a reshape, an assignment) count as consumers of the root; an
  // elementwise consumer of the same element count reads the elements in the same order.
  Groups G;
  G.of.assign(ns, -1);
  G.offset_view = &offset_view;
  for (std::size_t s = ns; s-- > 0;) {
    const Step& st = p.steps[s];
    Broadcast bc;
    if (!fusable(p, st, bc)) continue;
    const std::int64_t n = p.values[static_cast<std::size_t>(st.out)].size;
    int chosen = -1;
    const auto& cs = consumers[static_cast<std::size_t>(st.out)];
    if (!offset_view[static_cast<std::size_t>(st.out)]) {
      std::vector<int> gs;  // the groups of its readers, of its size
      for (int c : cs) {
        const int g = G.of[static_cast<std::size_t>(c)];
        if (g < 0 || G.size(p, g) != n || std::find(gs.begin(), gs.end(), g) != gs.end()) continue;
        gs.push_back(g);
        const Broadcast& gbc = G.bc[static_cast<std::size_t>(g)];
        if (!bc.none() && !gbc.none() && !(bc == gbc)) continue;
        const bool ok = std::all_of(cs.begin(), cs.end(), [&](int c2) {
          return G.of[static_cast<std::size_t>(c2)] == g ||
                 c2 > G.root[static_cast<std::size_t>(g)];
        });
        if (ok) {
          chosen = g;
          if (!bc.none()) G.bc[static_cast<std::size_t>(g)] = bc;
          break;
        }
      }
      // Read by several passes (an LSTM's gate gradients, each a chain of its own, all read
      // dh): they merge into one, and the step joins it.
      if (chosen < 0 && gs.size() >= 2) chosen = G.merge(p, consumers, gs, bc, cs);
    }
    if (chosen < 0) {
      chosen = static_cast<int>(G.members.size());
      G.members.emplace_back();
      G.root.push_back(static_cast<int>(s));
      G.bc.push_back(bc);
    }
    G.of[s] = chosen;
    G.members[static_cast<std::size_t>(chosen)].push_back(static_cast<int>(s));
  }
  // Sibling passes: a pass merges into a later one of its size and broadcast when nothing
  // outside the two reads its results before the later runs, so independent chains (an LSTM's
  // output gate gradient beside the other three) share one pass. A few candidates each.
  {
    std::vector<int> order;
    for (std::size_t g = 0; g < G.members.size(); ++g) order.push_back(static_cast<int>(g));
    std::sort(order.begin(), order.end(), [&](int a, int b) {
      return G.root[static_cast<std::size_t>(a)] < G.root[static_cast<std::size_t>(b)];
    });
    constexpr std::size_t kSiblingWindow = 16;  // the next passes in running order
    for (std::size_t i = 0; i < order.size(); ++i) {
      const int g = order[i];
      if (G.members[static_cast<std::size_t>(g)].empty()) continue;
      for (std::size_t j = i + 1; j < order.size() && j <= i + kSiblingWindow; ++j) {
        const int h = order[j];
        if (G.members[static_cast<std::size_t>(h)].empty() || G.size(p, h) != G.size(p, g))
          continue;
        if (G.merge(p, consumers, {g, h}, Broadcast{}, {}) >= 0) break;
      }
    }
  }
  std::vector<int>& group_of = G.of;
  std::vector<int>& group_root = G.root;
  std::vector<Broadcast>& group_bc = G.bc;
  std::vector<std::vector<int>>& members = G.members;

  // Concatenations placed by their producers: when every input of a concatenation is computed
  // by a fused pass and read by nothing outside it, each pass writes its rows of the input
  // straight into their place in the output (from the register the kernel wrote, while it is in
  // cache), and the concatenation runs no kernel. The output is written by several passes: it
  // is an extra output of each, allocated at the first.
  struct Placement {
    std::int64_t width, pitch, offset;
    int concat;  // the output value
  };
  std::vector<int> placed(nv, -1);  // value root -> index in placements
  std::vector<Placement> placements;
  std::vector<char> removed(ns, 0);
  std::vector<int> producer(nv, -1);  // value root -> member step of a group of two or more
  for (std::size_t si = 0; si < ns; ++si) {
    const int g = group_of[si];
    if (g >= 0 && members[static_cast<std::size_t>(g)].size() >= 2)
      producer[static_cast<std::size_t>(p.steps[si].out)] = static_cast<int>(si);
  }
  for (std::size_t s = 0; s < ns; ++s) {
    const Step& st = p.steps[s];
    if (!st.node || st.fused || group_of[s] >= 0) continue;
    const OpDef& def = op_def(st.node->op);
    if (!def.concat_axis) continue;
    const Value& out = p.values[static_cast<std::size_t>(st.out)];
    const int axis = def.concat_axis(*st.node);
    if (out.root != st.out || axis < 0 || axis >= out.shape.ndim() || out.size == 0) continue;
    std::int64_t rows = 1;
    for (int d = 0; d < axis; ++d) rows *= out.shape[d];
    const std::int64_t pitch = out.size / rows;
    std::vector<std::pair<int, Placement>> mine;
    std::int64_t offset = 0;
    bool ok = true;
    for (int iv : st.in_values) {
      const Value& in = p.values[static_cast<std::size_t>(iv)];
      const int r = in.root;
      const int m = producer[static_cast<std::size_t>(r)];
      if (m < 0 || in.alias_offset != 0 || in.size != p.values[static_cast<std::size_t>(r)].size ||
          in.dtype != out.dtype || in.size % rows != 0 || pinned[static_cast<std::size_t>(r)] ||
          offset_view[static_cast<std::size_t>(r)] || placed[static_cast<std::size_t>(r)] >= 0) {
        ok = false;
        break;
      }
      const int g = group_of[static_cast<std::size_t>(m)];
      const std::int64_t width = in.size / rows;
      const auto& cs = consumers[static_cast<std::size_t>(r)];
      ok = width > 0 &&
           std::all_of(cs.begin(), cs.end(),
                       [&](int c) {
                         return c == static_cast<int>(s) ||
                                group_of[static_cast<std::size_t>(c)] == g;
                       }) &&
           std::none_of(mine.begin(), mine.end(), [&](const auto& q) { return q.first == r; });
      if (!ok) break;
      mine.push_back({r, Placement{width, pitch, offset, st.out}});
      offset += width;
    }
    if (!ok || offset != pitch) continue;
    for (const auto& [r, pl] : mine) {
      placed[static_cast<std::size_t>(r)] = static_cast<int>(placements.size());
      placements.push_back(pl);
    }
    removed[s] = 1;
  }

  // Slices gathered by their readers: a block of an array (OpDef::block_of) read only by fused
  // passes, as a full operand, is gathered by each pass chunk by chunk from the array, and the
  // slice runs no kernel and takes no buffer.
  std::vector<int> gathered(nv, -1);  // value root -> the slice's step
  for (std::size_t s = 0; s < ns; ++s) {
    const Step& st = p.steps[s];
    if (!st.node || st.fused || group_of[s] >= 0 || removed[s] || st.in_values.empty()) continue;
    const OpDef& def = op_def(st.node->op);
    if (!def.block_of) continue;
    const int r = st.out;
    const Value& out = p.values[static_cast<std::size_t>(r)];
    const Value& src = p.values[static_cast<std::size_t>(st.in_values[0])];
    if (out.root != r || out.size == 0 || src.dtype != out.dtype ||
        pinned[static_cast<std::size_t>(r)] || offset_view[static_cast<std::size_t>(r)])
      continue;
    const Block b = def.block_of(*st.node, src.shape, out.shape);
    if (b.rows <= 0 || b.rows * b.width != out.size) continue;
    const auto& cs = consumers[static_cast<std::size_t>(r)];
    const bool ok = std::all_of(cs.begin(), cs.end(), [&](int c) {
      const int g = group_of[static_cast<std::size_t>(c)];
      if (g < 0 || members[static_cast<std::size_t>(g)].size() < 2) return false;
      const int groot = group_root[static_cast<std::size_t>(g)];
      const Step& c_step = p.steps[static_cast<std::size_t>(c)];
      // Read whole, at the pass's size, and not through a view of another size.
      return p.values[static_cast<std::size_t>(p.steps[static_cast<std::size_t>(groot)].out)]
                     .size == out.size &&
             std::all_of(c_step.in_values.begin(), c_step.in_values.end(), [&](int iv) {
               const Value& in = p.values[static_cast<std::size_t>(iv)];
               return in.root != r || (iv == r || (in.alias_offset == 0 && in.size == out.size));
             });
    });
    if (!ok || cs.empty()) continue;
    gathered[static_cast<std::size_t>(r)] = static_cast<int>(s);
    removed[s] = 1;
  }

  // Build one fused step per group of two or more.
  std::vector<std::unique_ptr<Step>> fused_at(ns);
  for (std::size_t g = 0; g < members.size(); ++g) {
    auto& ms = members[g];
    if (ms.empty()) continue;  // merged into another group
    if (ms.size() < 2) {
      group_of[static_cast<std::size_t>(ms[0])] = -1;
      continue;
    }
    std::sort(ms.begin(), ms.end());
    auto prog = std::make_unique<FusedProgram>();
    auto step = std::make_unique<Step>();
    const int root = group_root[g];
    prog->n = p.values[static_cast<std::size_t>(p.steps[static_cast<std::size_t>(root)].out)].size;
    prog->row = group_bc[g].width;
    prog->inner = group_bc[g].inner;
    prog->chunk = chunk_for(group_bc[g]);
    std::vector<FusedOperand> where(nv, FusedOperand{FusedOperand::kInput, false, -1});
    std::vector<char> is_member_out(nv, 0);
    for (int m : ms)
      is_member_out[static_cast<std::size_t>(p.steps[static_cast<std::size_t>(m)].out)] = 1;
    // Registers are reused: the slot of a value is free again after the last member that reads
    // it (never for that member's own output, so no kernel runs in place). A pass then keeps a
    // few chunks live instead of one per intermediate, and stays in L1.
    std::vector<int> last_use(nv, -1);
    for (std::size_t i = 0; i < ms.size(); ++i)
      for (int iv : p.steps[static_cast<std::size_t>(ms[i])].in_values) {
        const int r = p.values[static_cast<std::size_t>(iv)].root;
        if (is_member_out[static_cast<std::size_t>(r)])
          last_use[static_cast<std::size_t>(r)] = static_cast<int>(i);
      }
    struct Slot {
      std::size_t offset, bytes;
    };
    std::vector<Slot> free_slots;
    std::vector<std::pair<int, Slot>> held;  // (value, slot) of the live registers
    for (std::size_t i = 0; i < ms.size(); ++i) {
      const int m = ms[i];
      Step& ms_step = p.steps[static_cast<std::size_t>(m)];
      FusedInstr ins;
      ins.fn = ms_step.fn;
      ins.attrs = &ms_step.node->attrs;
      ins.seed = ms_step.node->seed;
      for (int iv : ms_step.in_values) {
        ins.in_dtypes.push_back(p.values[static_cast<std::size_t>(iv)].dtype);
        const int r = p.values[static_cast<std::size_t>(iv)].root;
        if (is_member_out[static_cast<std::size_t>(r)]) {
          ins.ins.push_back(where[static_cast<std::size_t>(r)]);
          continue;
        }
        auto& w = where[static_cast<std::size_t>(iv)];
        if (const int sl = gathered[static_cast<std::size_t>(r)]; w.index < 0 && sl >= 0) {
          const Step& slice = p.steps[static_cast<std::size_t>(sl)];
          w.where = FusedOperand::kInput;
          w.index = static_cast<int>(step->in_values.size());
          w.block = true;
          step->in_values.push_back(slice.in_values[0]);
          prog->block.resize(step->in_values.size());
          prog->block.back() =
              op_def(slice.node->op)
                  .block_of(*slice.node,
                            p.values[static_cast<std::size_t>(slice.in_values[0])].shape,
                            p.values[static_cast<std::size_t>(r)].shape);
          prog->has_blocks = true;
        }
        if (w.index < 0) {
          w.where = FusedOperand::kInput;
          w.index = static_cast<int>(step->in_values.size());
          const std::int64_t in_size = p.values[static_cast<std::size_t>(iv)].size;
          w.scalar = in_size == 1 && prog->n > 1;
          const bool broadcast = !w.scalar && in_size != prog->n;
          w.row = broadcast && prog->inner == 0;
          w.column = broadcast && prog->inner > 0;
          step->in_values.push_back(iv);
        }
        ins.ins.push_back(w);
      }
      const int v = ms_step.out;
      const Value& val = p.values[static_cast<std::size_t>(v)];
      const auto& cs = consumers[static_cast<std::size_t>(v)];
      const int pl = placed[static_cast<std::size_t>(v)];
      const bool escapes =
          pl < 0 && (m == root || pinned[static_cast<std::size_t>(v)] || cs.empty() ||
                     std::any_of(cs.begin(), cs.end(), [&](int c) {
                       return group_of[static_cast<std::size_t>(c)] != static_cast<int>(g);
                     }));
      if (pl >= 0) {  // computed in a register, its rows then copied into the concatenation
        const Placement& place = placements[static_cast<std::size_t>(pl)];
        auto slot = std::find(prog->out_values.begin(), prog->out_values.end(), place.concat);
        ins.place_slot = static_cast<int>(slot - prog->out_values.begin());
        if (slot == prog->out_values.end()) prog->out_values.push_back(place.concat);
        prog->places = true;
        ins.place_width = place.width;
        ins.place_pitch = place.pitch;
        ins.place_offset = place.offset;
      }
      FusedOperand o;
      if (escapes) {
        o = {FusedOperand::kOutput, false, static_cast<int>(prog->out_values.size())};
        prog->out_values.push_back(v);
        if (m != root) step->extra_outs.push_back(v);
      } else {
        o = {FusedOperand::kRegister, false, static_cast<int>(prog->reg_offset.size())};
        const std::size_t bytes =
            (static_cast<std::size_t>(prog->chunk) * dtype_size(val.dtype) + 63) / 64 * 64;
        auto fit = std::find_if(free_slots.begin(), free_slots.end(),
                                [&](const Slot& f) { return f.bytes >= bytes; });
        Slot slot{prog->scratch_bytes, bytes};
        if (fit != free_slots.end()) {
          slot = *fit;
          free_slots.erase(fit);
        } else {
          prog->scratch_bytes += bytes;
        }
        prog->reg_offset.push_back(slot.offset);
        held.emplace_back(v, slot);
      }
      where[static_cast<std::size_t>(v)] = o;
      ins.out = o;
      ins.dtype = val.dtype;
      prog->max_in = std::max(prog->max_in, static_cast<int>(ins.ins.size()));
      prog->instrs.push_back(std::move(ins));
      prog->exact = prog->exact && exact_per_element(ms_step.node->op);
      prog->elem_cost += ms_step.node->op == Op::Cast
                             ? cast_cost(ms_step.node->inputs[0].dtype(), val.dtype)
                             : elem_cost(ms_step.node->op);
      // Release the registers this member read last (and an output nobody in the pass reads).
      for (std::size_t h = 0; h < held.size();) {
        if (last_use[static_cast<std::size_t>(held[h].first)] <= static_cast<int>(i)) {
          free_slots.push_back(held[h].second);
          held.erase(held.begin() + static_cast<std::ptrdiff_t>(h));
        } else {
          ++h;
        }
      }
    }
    // Each column input's values for one chunk's runs, after the registers.
    prog->column_offset.assign(step->in_values.size(), 0);
    for (std::size_t k = 0; k < step->in_values.size(); ++k) {
      const int iv = step->in_values[k];
      const auto& w = where[static_cast<std::size_t>(iv)];
      if (!w.column) continue;
      prog->column_offset[k] = prog->scratch_bytes;
      prog->scratch_bytes += (static_cast<std::size_t>(prog->chunk / prog->inner) *
                                  dtype_size(p.values[static_cast<std::size_t>(iv)].dtype) +
                              63) /
                             64 * 64;
    }
    // Each block input's gathered chunk, after them.
    prog->block.resize(step->in_values.size());
    prog->block_offset.assign(step->in_values.size(), 0);
    for (std::size_t k = 0; k < step->in_values.size(); ++k) {
      if (prog->block[k].rows == 0) continue;
      prog->block_offset[k] = prog->scratch_bytes;
      prog->scratch_bytes +=
          (static_cast<std::size_t>(prog->chunk) *
               dtype_size(p.values[static_cast<std::size_t>(step->in_values[k])].dtype) +
           63) /
          64 * 64;
    }
    step->fn = &run_fused;
    step->node = p.steps[static_cast<std::size_t>(root)].node;
    step->out = p.steps[static_cast<std::size_t>(root)].out;
    // The concatenations it writes into are outputs of the step (its result, when that is
    // placed too).
    if (const int pl = placed[static_cast<std::size_t>(step->out)]; pl >= 0)
      step->out = placements[static_cast<std::size_t>(pl)].concat;
    for (const FusedInstr& ins : prog->instrs) {
      if (ins.place_slot < 0) continue;
      const int cv = prog->out_values[static_cast<std::size_t>(ins.place_slot)];
      if (cv != step->out &&
          std::find(step->extra_outs.begin(), step->extra_outs.end(), cv) == step->extra_outs.end())
        step->extra_outs.push_back(cv);
    }
    step->fused = std::move(prog);
    fused_at[static_cast<std::size_t>(root)] = std::move(step);
  }

  attach_sources(p, pinned, offset_view, consumers, gathered, G, fused_at);

  std::vector<Step> out;
  out.reserve(ns);
  for (std::size_t s = 0; s < ns; ++s) {
    if (fused_at[s])
      out.push_back(std::move(*fused_at[s]));
    else if (group_of[s] < 0 && !removed[s])
      out.push_back(std::move(p.steps[s]));
  }
  p.steps = std::move(out);
}

namespace {
std::atomic<bool> g_epilogues{true};
}  // namespace
void set_matmul_epilogues(bool on) { g_epilogues.store(on, std::memory_order_relaxed); }
bool matmul_epilogues_enabled() { return g_epilogues.load(std::memory_order_relaxed); }

bool epilogue_ready(const FusedProgram& p, std::int64_t n) {
  return p.exact && (p.row == 0 || n % p.row == 0) && p.inner == 0 && !p.has_blocks &&
         p.sources.empty() && !p.places;
}

std::unique_ptr<FusedProgram> single_pass(const Plan& p, const Step& s) {
  if (s.fused || !s.node || s.random || !s.extra_outs.empty() || !op_def(s.node->op).elementwise ||
      !exact_per_element(s.node->op) ||
      s.in_values.size() > static_cast<std::size_t>(kMaxFusedInputs))
    return nullptr;
  const Value& out = p.values[static_cast<std::size_t>(s.out)];
  auto prog = std::make_unique<FusedProgram>();
  prog->n = out.size;
  prog->chunk = kChunk;
  FusedInstr ins;
  ins.fn = s.fn;
  ins.attrs = &s.node->attrs;
  ins.seed = s.node->seed;
  for (std::size_t k = 0; k < s.in_values.size(); ++k) {
    const Value& in = p.values[static_cast<std::size_t>(s.in_values[k])];
    if (in.size != out.size && in.size != 1) return nullptr;
    FusedOperand o{FusedOperand::kInput, in.size == 1 && out.size > 1, static_cast<int>(k)};
    ins.ins.push_back(o);
    ins.in_dtypes.push_back(in.dtype);
  }
  ins.out = {FusedOperand::kOutput, false, 0};
  ins.dtype = out.dtype;
  prog->max_in = static_cast<int>(ins.ins.size());
  prog->elem_cost = s.node->op == Op::Cast ? cast_cost(s.node->inputs[0].dtype(), out.dtype)
                                           : elem_cost(s.node->op);
  prog->instrs.push_back(std::move(ins));
  prog->out_values.push_back(s.out);
  return prog;
}

}  // namespace ktape
