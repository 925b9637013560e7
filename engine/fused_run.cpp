// Running a fused pass (engine/fusion.hpp): its chunks split over oneTBB tasks, each chunk's
// sources computed and blocks gathered into the thread's registers, then the member kernels.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <tbb/task_arena.h>

#include "engine/errors.hpp"
#include "engine/fusion.hpp"
#include "engine/parallel.hpp"

namespace ktape {

namespace {

// Scratch for the registers of a fused group: one block per thread, grown once, never freed
// while the thread lives (steady-state calls allocate nothing).
struct Scratch {
  void* data = nullptr;
  std::size_t cap = 0;
  ~Scratch() { std::free(data); }
  void* get(std::size_t bytes) {
    if (bytes > cap) {
      std::free(data);
      cap = (bytes + 63) / 64 * 64;
      data = std::aligned_alloc(64, cap);
      if (!data)
        throw ResourceExhaustedError("ktape: cannot allocate " + std::to_string(cap) +
                                     " bytes of scratch for a fused pass");
    }
    return data;
  }
};

// The elements [start, start + len) of a block (rows of `width`, `pitch` apart, from `offset`:
// a gathered slice or a placed concatenation part) as runs that end at the rows' ends:
// f(element of the block's array, position in the chunk, run length).
template <class F>
void for_each_run(std::int64_t start, std::int64_t len, std::int64_t width, std::int64_t pitch,
                  std::int64_t offset, F&& f) {
  for (std::int64_t e = start; e < start + len;) {
    const std::int64_t col = e % width, run = std::min(width - col, start + len - e);
    f((e / width) * pitch + offset + col, e - start, run);
    e += run;
  }
}

// Elements [start, start + len) of one chunk of program P: inputs `in`, registers at `regs`,
// output slot k written at outs[k] + (start - origin) elements.
void run_chunk(const FusedProgram& P, const ArrayRef* in, char* regs, std::int64_t start,
               std::int64_t len, void* const* outs, std::int64_t origin) {
  ArrayRef args[kMaxFusedInputs];
  // With row operands, full operands are seen as (rows, width) so kernels broadcast rows;
  // with column operands as (runs, inner), each column as (runs, 1).
  const std::int64_t runs = P.inner > 0 ? len / P.inner : 0;
  const std::int64_t dims[2] = {P.inner > 0 ? runs : (P.row > 0 ? len / P.row : len),
                                P.inner > 0 ? P.inner : P.row};
  const int full_ndim = P.row > 0 ? 2 : 1;
  const std::int64_t row_dims[1] = {P.row};
  const std::int64_t column_dims[2] = {runs, 1};
  auto ref = [&](const FusedOperand& o, DType dt) {
    switch (o.where) {
      case FusedOperand::kInput: {
        const ArrayRef& a = in[o.index];
        if (o.block)
          return ArrayRef{regs + P.block_offset[static_cast<std::size_t>(o.index)], dims, full_ndim,
                          len, dt};
        if (o.scalar) return ArrayRef{a.data, nullptr, 0, 1, a.dtype};
        if (o.row) return ArrayRef{a.data, row_dims, 1, P.row, a.dtype};
        if (o.column) {
          char* col = regs + P.column_offset[static_cast<std::size_t>(o.index)];
          const std::size_t es = dtype_size(a.dtype);
          // Values (start / inner + r) % row for the chunk's runs r: contiguous but where the
          // cycle wraps, so copied in one or a few pieces.
          for (std::int64_t r = 0, at = (start / P.inner) % P.row; r < runs;) {
            const std::int64_t n = std::min(runs - r, P.row - at);
            std::memcpy(col + static_cast<std::size_t>(r) * es,
                        static_cast<const char*>(a.data) + static_cast<std::size_t>(at) * es,
                        static_cast<std::size_t>(n) * es);
            r += n;
            at = 0;
          }
          return ArrayRef{col, column_dims, 2, runs, a.dtype};
        }
        return ArrayRef{
            static_cast<char*>(a.data) + start * static_cast<std::int64_t>(dtype_size(a.dtype)),
            dims, full_ndim, len, a.dtype};
      }
      case FusedOperand::kRegister:
        return ArrayRef{regs + P.reg_offset[static_cast<std::size_t>(o.index)], dims, full_ndim,
                        len, dt};
      case FusedOperand::kOutput:
        break;
    }
    return ArrayRef{static_cast<char*>(outs[static_cast<std::size_t>(o.index)]) +
                        (start - origin) * static_cast<std::int64_t>(dtype_size(dt)),
                    dims, full_ndim, len, dt};
  };
  // Sources: the rows of their results this chunk's blocks read, each computed in the source's
  // own chunks (those it runs alone: the chunk size divides the rows' extent, checked at fuse).
  for (const FusedSource& src : P.sources) {
    const std::int64_t r0 = start / src.block_width,
                       r1 = (start + len + src.block_width - 1) / src.block_width;
    char* rows = regs + src.rows_offset;
    void* const to[1] = {rows};
    const FusedProgram& S = *src.prog;
    for (std::int64_t e = r0 * src.pitch; e < r1 * src.pitch; e += S.chunk)
      run_chunk(S, in + src.in_base, regs + src.regs_offset, e,
                std::min(S.chunk, r1 * src.pitch - e), to, r0 * src.pitch);
  }
  // Block inputs: this chunk's elements gathered from their arrays (or a source's rows), once
  // for every reader.
  if (P.has_blocks)
    for (std::size_t k = 0; k < P.block.size(); ++k) {
      const Block& b = P.block[k];
      if (b.rows == 0) continue;
      const int si = P.block_source.empty() ? -1 : P.block_source[k];
      const FusedSource* src = si >= 0 ? &P.sources[static_cast<std::size_t>(si)] : nullptr;
      const std::size_t es = dtype_size(src ? src->dtype : in[k].dtype);
      // A source holds rows from start / block_width on: element `at` of its result is
      // at - base there.
      const std::int64_t base = src ? start / src->block_width * src->pitch : 0;
      const char* from = src ? regs + src->rows_offset : static_cast<const char*>(in[k].data);
      char* to = regs + P.block_offset[k];
      for_each_run(start, len, b.width, b.pitch, b.offset,
                   [&](std::int64_t at, std::int64_t pos, std::int64_t run) {
                     std::memcpy(to + static_cast<std::size_t>(pos) * es,
                                 from + static_cast<std::size_t>(at - base) * es,
                                 static_cast<std::size_t>(run) * es);
                   });
    }
  // The places of this chunk's rows in a concatenation are strided, so the hardware does
  // not fetch them ahead of the writes: ask for their lines now, while the kernels run.
  if (P.places)
    for (const FusedInstr& ins : P.instrs) {
      if (ins.place_slot < 0) continue;
      const std::size_t es = dtype_size(ins.dtype);
      const char* dst = static_cast<const char*>(outs[static_cast<std::size_t>(ins.place_slot)]);
      for_each_run(start, len, ins.place_width, ins.place_pitch, ins.place_offset,
                   [&](std::int64_t at, std::int64_t, std::int64_t run) {
                     const char* p0 = dst + static_cast<std::size_t>(at) * es;
                     for (std::size_t b = 0; b < static_cast<std::size_t>(run) * es; b += 64)
                       __builtin_prefetch(p0 + b, 1, 3);
                   });
    }
  for (const FusedInstr& ins : P.instrs) {
    for (std::size_t k = 0; k < ins.ins.size(); ++k) args[k] = ref(ins.ins[k], ins.in_dtypes[k]);
    KernelCall kc;
    kc.in = args;
    kc.n_in = static_cast<int>(ins.ins.size());
    kc.out = ref(ins.out, ins.dtype);
    kc.attrs = ins.attrs;
    kc.seed = ins.seed;
    ins.fn(kc);
    if (ins.place_slot >= 0) {  // the result's rows into their place in the concatenation
      const std::size_t es = dtype_size(ins.dtype);
      const char* src = static_cast<const char*>(kc.out.data);
      char* dst = static_cast<char*>(outs[static_cast<std::size_t>(ins.place_slot)]);
      for_each_run(start, len, ins.place_width, ins.place_pitch, ins.place_offset,
                   [&](std::int64_t at, std::int64_t pos, std::int64_t run) {
                     std::memcpy(dst + static_cast<std::size_t>(at) * es,
                                 src + static_cast<std::size_t>(pos) * es,
                                 static_cast<std::size_t>(run) * es);
                   });
    }
  }
}

// Elements [e0, e1) of program P in chunks of P.chunk from e0, split over tasks of whole chunks
// (results never depend on the split).
// Isolated: a member kernel may split a big chunk in a nested parallel loop, and a thread
// waiting there must not pick up another chunk of this pass (or a task that runs another pass),
// which would reuse its thread-local registers underneath the waiting one.
void run_range(const FusedProgram& P, const ArrayRef* in, std::int64_t e0, std::int64_t e1) {
  const std::int64_t chunk = P.chunk;
  const std::int64_t chunks = (e1 - e0 + chunk - 1) / chunk;
  double cost = static_cast<double>(chunk) * P.elem_cost;
  for (const FusedSource& src : P.sources)
    cost += static_cast<double>(chunk / src.block_width * src.pitch) * src.prog->elem_cost;
  parallel_for(
      chunks, cost,
      [&](std::int64_t c0, std::int64_t c1) {
        tbb::this_task_arena::isolate([&] {
          thread_local Scratch scratch;
          char* regs = static_cast<char*>(scratch.get(P.scratch_bytes));
          for (std::int64_t ch = c0; ch < c1; ++ch) {
            const std::int64_t start = e0 + ch * chunk;
            run_chunk(P, in, regs, start, std::min(chunk, e1 - start), P.out_ptrs.data(), 0);
          }
        });
      },
      /*align=*/1);
}

}  // namespace

void run_fused(const KernelCall& c) {
  const auto& P = *static_cast<const FusedProgram*>(c.ctx);
  run_range(P, c.in, 0, P.n);
}

void epilogue_region_done(MatMulEpilogue& e, const ArrayRef* in, std::int64_t n, std::int64_t i0,
                          std::int64_t i1, std::int64_t j0, std::int64_t j1) {
  if (i1 <= i0 || j1 <= j0) return;
  if (j1 - j0 < n &&
      e.done_columns[i0].fetch_add(j1 - j0, std::memory_order_acq_rel) + (j1 - j0) < n)
    return;  // the band's other columns are still being computed
  // Whole rows: contiguous elements, run in the pass's chunks from the band's first row (the
  // members are exact per element, so the chunks' bounds do not change a bit).
  run_range(*e.pass, in, i0 * n, i1 * n);
}

}  // namespace ktape
