// Reference kernels for matmul and the layout ops.
// MatMul attrs: ints = {transpose_a, transpose_b}; 2-D operands.
// Transpose attrs: ints = perm. Concat attrs: ints = {axis}.
// ConcatPart(g, x0..xn-1) attrs: ints = {axis, k}: the slice of g that concatenation took from xk.
#include <algorithm>
#include <string>

#include "engine/backend.hpp"
#include "engine/errors.hpp"
#include "ops/kernels/attrs.hpp"
#include "ops/kernels/common.hpp"
#include "ops/kernels/functors.hpp"
#include "ops/kernels/reference/reference.hpp"

namespace ktape::kernels {

namespace {

template <class T>
void matmul_kernel(const KernelCall& c) {
  using C = Compute<T>;
  const auto matmul_attrs = attrs::MatMul::of(*c.attrs);
  const auto ta = matmul_attrs.ta;
  const auto tb = matmul_attrs.tb;
  const ArrayRef& a = c.in[0];
  const ArrayRef& b = c.in[1];
  // Operands of rank > 2 are stacks of rows (see ops/layout.cpp).
  const std::int64_t n = c.out.dims[c.out.ndim - 1], m = leading_rows(c.out);
  const std::int64_t k = ta ? leading_rows(a) : a.dims[a.ndim - 1];
  const T* pa = ptr<T>(a);
  const T* pb = ptr<T>(b);
  T* y = ptr<T>(c.out);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      C s = 0;
      for (std::int64_t p = 0; p < k; ++p) {
        const C av = static_cast<C>(ta ? pa[p * m + i] : pa[i * k + p]);
        const C bv = static_cast<C>(tb ? pb[j * k + p] : pb[p * n + j]);
        s = wrap_add(s, wrap_mul(av, bv));
      }
      y[i * n + j] = static_cast<T>(s);
    }
}

template <class T>
void transpose_kernel(const KernelCall& c) {
  const ArrayRef& in = c.in[0];
  const int r = in.ndim;
  std::int64_t in_strides[kMaxRank], src_strides[kMaxRank];
  contiguous_strides(in.dims, r, in_strides);
  for (int d = 0; d < r; ++d)
    src_strides[d] = in_strides[attrs::IntList::of(*c.attrs).values[static_cast<std::size_t>(d)]];
  const T* x = ptr<T>(in);
  T* y = ptr<T>(c.out);
  strided_walk<1>(c.out.dims, r, c.out.size, {src_strides}, {0},
                  [&](std::int64_t i, const auto& o) { y[i] = x[o[0]]; });
}

template <class T>
void concat_kernel(const KernelCall& c) {
  const int axis = attrs::Axis::of(*c.attrs).axis;
  std::int64_t outer, n_out, inner;
  split_axis(c.out.dims, c.out.ndim, axis, outer, n_out, inner);
  T* y = ptr<T>(c.out);
  std::int64_t off = 0;
  for (int k = 0; k < c.n_in; ++k) {
    const std::int64_t nk = c.in[k].dims[axis];
    const T* x = ptr<T>(c.in[k]);
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t j = 0; j < nk * inner; ++j)
        y[(o * n_out + off) * inner + j] = x[o * nk * inner + j];
    off += nk;
  }
}

template <class T>
void concat_part_kernel(const KernelCall& c) {
  const auto concat_part_attrs = attrs::ConcatPart::of(*c.attrs);
  const auto axis = concat_part_attrs.axis;
  const auto part = concat_part_attrs.k;
  const ArrayRef& g = c.in[0];
  std::int64_t outer, n_g, inner;
  split_axis(g.dims, g.ndim, axis, outer, n_g, inner);
  std::int64_t off = 0;
  for (std::size_t k = 0; k < part; ++k) off += c.in[1 + k].dims[axis];
  const std::int64_t nk = c.out.dims[axis];
  const T* pg = ptr<T>(g);
  T* y = ptr<T>(c.out);
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t j = 0; j < nk * inner; ++j)
      y[o * nk * inner + j] = pg[(o * n_g + off) * inner + j];
}

// Walks the elements of a slice of `full` (start per axis, `part` dims): f(part index, full index).
template <class F>
void for_slice(const ArrayRef& full, const ArrayRef& part, const std::int64_t* start, F f) {
  const int r = full.ndim;
  std::int64_t strides[kMaxRank];
  contiguous_strides(full.dims, r, strides);
  std::int64_t s = 0;
  for (int d = 0; d < r; ++d) s += start[d] * strides[d];
  strided_walk<1>(part.dims, r, part.size, {strides}, {s},
                  [&](std::int64_t i, const auto& o) { f(i, o[0]); });
}

template <class T>
void slice_kernel(const KernelCall& c) {
  const T* x = ptr<T>(c.in[0]);
  T* y = ptr<T>(c.out);
  for_slice(c.in[0], c.out, attrs::Slice::of(*c.attrs).start.data(),
            [&](std::int64_t i, std::int64_t s) { y[i] = x[s]; });
}

template <class T>
void slice_pad_kernel(const KernelCall& c) {
  const T* g = ptr<T>(c.in[0]);
  T* y = ptr<T>(c.out);
  for (std::int64_t i = 0; i < c.out.size; ++i) y[i] = T(0);
  for_slice(c.out, c.in[0], attrs::Slice::of(*c.attrs).start.data(),
            [&](std::int64_t i, std::int64_t s) { y[s] = g[i]; });
}

// Gather(reference, indices): out[i, ...] = reference[indices[i], ...].
template <class T>
void gather_kernel(const KernelCall& c) {
  const ArrayRef& ref = c.in[0];
  const ArrayRef& idx = c.in[1];
  const std::int64_t rows = ref.dims[0];
  const std::int64_t width = rows > 0 ? ref.size / rows : 0;
  const T* x = ptr<T>(ref);
  T* y = ptr<T>(c.out);
  for (std::int64_t i = 0; i < idx.size; ++i) {
    const std::int64_t r = gather_row(idx, i, rows);
    std::copy(x + r * width, x + (r + 1) * width, y + i * width);
  }
}

// GatherGrad(g, indices, reference): zeros shaped like reference, g's rows added at indices.
template <class T>
void gather_grad_kernel(const KernelCall& c) {
  const ArrayRef& g = c.in[0];
  const ArrayRef& idx = c.in[1];
  const std::int64_t rows = c.out.dims[0];
  const std::int64_t width = rows > 0 ? c.out.size / rows : 0;
  const T* pg = ptr<T>(g);
  T* y = ptr<T>(c.out);
  std::fill(y, y + c.out.size, T(0));
  for (std::int64_t i = 0; i < idx.size; ++i) {
    const std::int64_t r = gather_row(idx, i, rows);
    for (std::int64_t j = 0; j < width; ++j)
      y[r * width + j] = static_cast<T>(static_cast<Compute<T>>(y[r * width + j]) +
                                        static_cast<Compute<T>>(pg[i * width + j]));
  }
}

// Reverse(x): the axes in attrs::IntList reversed.
template <class T>
void reverse_kernel(const KernelCall& c) {
  const ArrayRef& in = c.in[0];
  const int r = in.ndim;
  bool flip[kMaxRank] = {};
  for (auto a : attrs::IntList::of(*c.attrs).values) flip[a] = true;
  std::int64_t strides[kMaxRank];
  contiguous_strides(in.dims, r, strides);
  const T* x = ptr<T>(in);
  T* y = ptr<T>(c.out);
  for (std::int64_t i = 0; i < in.size; ++i) {
    std::int64_t rest = i, src = 0;
    for (int d = 0; d < r; ++d) {
      const std::int64_t k = rest / strides[d];
      rest %= strides[d];
      src += (flip[d] ? in.dims[d] - 1 - k : k) * strides[d];
    }
    y[i] = x[src];
  }
}

template <class... Ts>
struct TypeList {};

template <class... Ts>
void reg_numeric(Backend& b, TypeList<Ts...>) {
  (b.set(Op::MatMul, dtype_of<Ts>, &matmul_kernel<Ts>), ...);
  (b.set(Op::GatherGrad, dtype_of<Ts>, &gather_grad_kernel<Ts>), ...);
}
template <class... Ts>
void reg_all(Backend& b, TypeList<Ts...>) {
  (b.set(Op::Transpose, dtype_of<Ts>, &transpose_kernel<Ts>), ...);
  (b.set(Op::Concat, dtype_of<Ts>, &concat_kernel<Ts>), ...);
  (b.set(Op::ConcatPart, dtype_of<Ts>, &concat_part_kernel<Ts>), ...);
  (b.set(Op::Slice, dtype_of<Ts>, &slice_kernel<Ts>), ...);
  (b.set(Op::SlicePad, dtype_of<Ts>, &slice_pad_kernel<Ts>), ...);
  (b.set(Op::Gather, dtype_of<Ts>, &gather_kernel<Ts>), ...);
  (b.set(Op::Reverse, dtype_of<Ts>, &reverse_kernel<Ts>), ...);
}

}  // namespace

void register_reference_layout(Backend& b) {
  reg_numeric(b, TypeList<Half, float, double, std::int32_t, std::int64_t>{});
  reg_all(b, TypeList<Half, float, double, std::int8_t, std::int16_t, std::int32_t, std::int64_t,
                      std::uint8_t, bool>{});
}

void register_reference_all(Backend& b) {
  register_reference_elementwise(b);
  register_reference_reduce(b);
  register_reference_nn(b);
  register_reference_layout(b);
  register_reference_window(b);
  register_reference_ctc(b);
  register_reference_sparse(b);
}

}  // namespace ktape::kernels

namespace ktape {
void register_reference_kernels(Backend& b) { kernels::register_reference_all(b); }
}  // namespace ktape
