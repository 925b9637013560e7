// Elementwise fusion, step 2 of Function's compile (DESIGN.md): chains of elementwise steps of one
// element count (operands may be scalars or rows, e.g. a bias after a GEMM) become one step that
// runs the members' own kernels chunk by chunk, so intermediates stay in cache and never get an
// arena buffer. A pass read only through another pass's gathered slices (a gate sum read by an
// LSTM cell's gates) is computed inside that pass, per chunk (FusedSource). Results are
// bit-identical to the unfused plan: the same kernels compute the same elements.
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "engine/plan.hpp"

namespace ktape {

// Groups fusable steps of `p` (values listed in `pinned` are outputs or committed and are always
// written out). Call after the steps are built and before liveness.
void fuse_elementwise(Plan& p, const std::vector<bool>& pinned);

// Points a fused step's program at its resolved output buffers (after the arena is planned).
// `value_ptr(v)` gives the buffer of value v.
template <class F>
void resolve_fused(Plan& p, F value_ptr);

// The kernel a fused step runs; KernelCall::ctx is its FusedProgram.
void run_fused(const KernelCall& c);

// Operands of one member kernel of a fused pass.
inline constexpr int kMaxFusedInputs = 8;

struct FusedOperand {
  enum Where : unsigned char { kInput, kRegister, kOutput } where;
  bool scalar = false;  // a size-1 input broadcast over the chunk
  int index = 0;        // input slot, register or output slot
  bool row = false;     // a row input (a bias) broadcast over the chunk's rows
  bool column = false;  // a column input (a channels_first bias): one value per run of `inner`
  bool block = false;   // a block of the input (a slice, OpDef::block_of), gathered per chunk
};

struct FusedInstr {
  KernelFn fn = nullptr;
  const Attrs* attrs = nullptr;
  std::uint64_t seed = 0;
  std::vector<FusedOperand> ins;
  std::vector<DType> in_dtypes;
  FusedOperand out;
  DType dtype = DType::float32;  // of the result
  // A result placed into a concatenation (OpDef::concat_axis): after the kernel, each of the
  // chunk's rows of `width` elements is copied from the register to output slot `place_slot`,
  // at element (row * place_pitch + place_offset). -1: not placed.
  int place_slot = -1;
  std::int64_t place_width = 0, place_pitch = 0, place_offset = 0;
};

struct FusedProgram;

// An elementwise pass whose result is read only through another pass's gathered blocks (an LSTM
// cell's gate sum z = x W + h U + b, read through its four gate slices): the reader runs it per
// chunk on just the rows its blocks need, into its scratch, instead of a pass of its own writing
// the whole array and the reader gathering from it. Its chunks are the ones it would have run
// alone, so every element is the same bits.
struct FusedSource {
  std::unique_ptr<FusedProgram> prog;  // its input slots are the reader's from in_base
  int in_base = 0;
  std::int64_t pitch = 0;        // elements per row of its result (the blocks' pitch)
  std::int64_t block_width = 0;  // of every block read from it
  std::size_t rows_offset = 0;   // the rows of its result a chunk needs, in the scratch
  std::size_t regs_offset = 0;   // its registers, in the scratch
  DType dtype = DType::float32;
};

struct FusedProgram {
  std::int64_t n = 0;    // elements of every full operand
  std::int64_t row = 0;  // width of the row operands (0: none); chunks start on a row
  // Column operands (inner > 0): `row` values, each held for `inner` consecutive elements, in
  // a cycle (element i reads value (i / inner) % row); chunks start on a run, and a column's
  // values for the chunk's runs are gathered into the thread's scratch at column_offset.
  std::int64_t inner = 0;
  std::int64_t chunk = 0;                  // elements per pass
  std::vector<std::size_t> column_offset;  // per input slot (column inputs only)
  // Block inputs: per input slot, the block (rows 0: none) and where each chunk's elements are
  // gathered in the thread's scratch, once per chunk before the instructions run.
  std::vector<Block> block;
  std::vector<std::size_t> block_offset;
  bool has_blocks = false;
  std::vector<FusedSource> sources;
  std::vector<int> block_source;  // per input slot: the source its block reads, or -1 (the input)
  std::vector<FusedInstr> instrs;
  double elem_cost = 0;  // per element: the sum of its instructions' (engine/parallel.hpp)
  std::vector<std::size_t> reg_offset;  // byte offset of each register in the scratch block
  std::size_t scratch_bytes = 0;
  int max_in = 0;
  bool places = false;  // some instruction places its result into a concatenation
  // Every member gives the same bits on any range of elements (arithmetic that is exact per
  // element: no packet-dependent approximation such as Eigen's exp), so the pass may run on
  // any pieces of its elements, e.g. as a MatMul's epilogue (MatMulEpilogue).
  bool exact = true;
  std::vector<int> out_values;  // value index written by each output slot
  std::vector<void*> out_ptrs;  // resolved buffers of the output slots
};

// A fused pass run by a MatMul step (step 3e of Function's compile): over each band of the
// product's rows as soon as the band is finished, while it is in cache (on one thread, or on
// several where the product's tiles are whole rows), else over the product's rows after it (the
// cpu kernel's choice, ops/kernels/cpu/matmul.cpp and gemm.hpp GemmDone). The pass reads
// the product, element for element, and its full operands have the product's elements.
// KernelCall::ctx of such a step (the cpu backend's Backend::matmul_epilogue kernel); the pass's
// inputs are the call's in[2..]. Every element is the same bits as the pass run alone: its program
// is `exact`, with scalar, row and full operands only. As for a fused pass writing a variable in
// place, a call that fails on allocating its scratch may leave part of such a write done.
struct MatMulEpilogue {
  std::unique_ptr<FusedProgram> pass;
  const Node* node = nullptr;        // the pass's step's (its last member's), for plan listings
  const void* matmul_ctx = nullptr;  // the MatMul's own context (a loop body's MatMulKeep)
  // Per row of the product: how many of its columns are final in this call (cleared when the
  // call starts). The product's regions finish in row bands; the task that completes a band
  // runs the pass over all of it (whole rows: contiguous elements, in the pass's own chunks,
  // split by the grain policy). A region of whole rows runs at once, uncounted.
  std::unique_ptr<std::atomic<std::int64_t>[]> done_columns;
};
// Whether a pass can run as the epilogue of a product with rows of n: exact members, no
// column, block, computed or placed operands, and row operands only of a width that divides n.
bool epilogue_ready(const FusedProgram& p, std::int64_t n);
// A one-instruction pass running step `s` alone, if it is an exact elementwise step whose
// operands are full or scalars (an activation's gradient after the product giving the incoming
// one); else null.
std::unique_ptr<FusedProgram> single_pass(const Plan& p, const Step& s);
// Whether Function's compile runs passes as MatMul epilogues (default on). Benchmarks switch it
// off to compare; plans compiled before a switch keep what they have.
void set_matmul_epilogues(bool on);
bool matmul_epilogues_enabled();
// Region [i0, i1) x [j0, j1) of the product (rows of n) is final: runs the epilogue's pass
// (its inputs `in`) over rows [i0, i1) once every column of them is, on the calling thread.
// The regions of one band of rows must share its extent (as the product's tiles do).
void epilogue_region_done(MatMulEpilogue& e, const ArrayRef* in, std::int64_t n, std::int64_t i0,
                          std::int64_t i1, std::int64_t j0, std::int64_t j1);

template <class F>
void resolve_fused(Plan& p, F value_ptr) {
  for (auto& s : p.steps) {
    if (!s.fused) continue;
    auto& prog = *s.fused;
    prog.out_ptrs.resize(prog.out_values.size());
    for (std::size_t k = 0; k < prog.out_values.size(); ++k)
      prog.out_ptrs[k] = value_ptr(prog.out_values[k]);
    s.call.ctx = s.fused.get();
  }
}

}  // namespace ktape
