#include "ops/op_util.hpp"

#include <cctype>
#include <unordered_map>

#include "engine/config.hpp"
#include "ops/kernels/attrs.hpp"

namespace ktape::ops {

std::string fn_name(Op op) {
  const std::string n = op_name(op);
  std::string s = "K::";
  for (std::size_t i = 0; i < n.size(); ++i) {
    const char ch = n[i];
    if (std::isupper(static_cast<unsigned char>(ch))) {
      if (i) s += '_';
      s += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    } else {
      s += ch;
    }
  }
  return s;
}

void check_float(const char* fn, const char* arg, const Tensor& x) {
  if (!is_floating(x.dtype()))
    throw TypeError(std::string(fn) + ": `" + arg + "` must be a float tensor, got " +
                    std::string(dtype_name(x.dtype())) + " '" + x.name() + "'");
}

void check_same_dtype(const char* fn, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype())
    throw TypeError(std::string(fn) + ": operands have different dtypes " +
                    std::string(dtype_name(a.dtype())) + " ('" + a.name() + "') and " +
                    std::string(dtype_name(b.dtype())) + " ('" + b.name() + "'); use K::cast");
}

Tensor scalar(double v, DType dtype) {
  // Constants are sources and not hash-consed by the tape; keep a small cache so gradient
  // rules that ask for the same scalar share one node.
  static std::mutex mu;
  static std::unordered_map<std::string, std::weak_ptr<Node>> cache;
  std::string key(reinterpret_cast<const char*>(&v), sizeof v);
  key.push_back(static_cast<char>(dtype));
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end())
    if (auto n = it->second.lock()) return Tensor(std::move(n));
  Tensor t = make_source(Op::Constant, Shape{}, dtype, "Const", NDArray::scalar(v, dtype));
  if (cache.size() > 4096) cache.clear();
  cache[key] = t.node_ptr();
  return t;
}

Shape broadcast_shapes(const char* fn, const Shape& a, const Shape& b) {
  const int r = std::max(a.ndim(), b.ndim());
  std::vector<std::int64_t> out(static_cast<std::size_t>(r));
  for (int i = 0; i < r; ++i) {
    const int ia = i - (r - a.ndim()), ib = i - (r - b.ndim());
    const std::int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    std::int64_t d;
    if (da == db)
      d = da;
    else if (da == 1)
      d = db;
    else if (db == 1)
      d = da;
    else if (da == None)
      d = db;
    else if (db == None)
      d = da;
    else
      throw ValueError(std::string(fn) + ": operands could not be broadcast together with shapes " +
                       a.str() + " and " + b.str());
    out[static_cast<std::size_t>(i)] = d;
  }
  if (r > 12) throw ValueError(std::string(fn) + ": tensors of rank above 12 are not supported");
  return Shape(std::move(out));
}

std::string dims_str(std::span<const std::int64_t> v) {
  std::string s = "(";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + (v.size() == 1 ? ",)" : ")");
}

bool channels_first(const char* fn, const std::optional<std::string>& data_format) {
  try {
    return config::normalize_data_format(data_format) == "channels_first";
  } catch (const ValueError& e) {
    throw ValueError(std::string(fn) + ": " + e.what());
  }
}

std::vector<std::int64_t> spatial_tuple(const char* fn, const char* arg,
                                        const std::vector<std::int64_t>& v, int rank) {
  std::vector<std::int64_t> out;
  if (v.empty()) out.assign(static_cast<std::size_t>(rank), 1);
  if (v.size() == 1) out.assign(static_cast<std::size_t>(rank), v[0]);
  if (static_cast<int>(v.size()) == rank) out = v;
  if (out.empty())
    throw ValueError(std::string(fn) + ": `" + arg + "` " + dims_str(v) + " must have " +
                     std::to_string(rank) + " entries (one per spatial dim)");
  for (auto x : out)
    if (x < 1 || x > kMaxWindowValue)
      throw ValueError(std::string(fn) + ": `" + arg + "` " + dims_str(v) +
                       " must hold values from 1 to " + std::to_string(kMaxWindowValue));
  return out;
}

int padding_mode(const char* fn, const std::string& padding, bool causal_ok) {
  if (padding == "valid") return attrs::Window::kValid;
  if (padding == "same") return attrs::Window::kSame;
  if (padding == "causal" && causal_ok) return kCausal;
  throw ValueError(std::string(fn) + ": Invalid padding: \"" + padding + "\" (expected " +
                   (causal_ok ? "\"valid\", \"same\" or \"causal\")" : "\"valid\" or \"same\")"));
}

Shape same_as_input0(const Node&, const std::vector<Shape>& in) { return in[0]; }

Shape broadcast_rule(const Node& n, const std::vector<Shape>& in) {
  const std::string fn = fn_name(n.op);
  Shape s = in[0];
  for (std::size_t i = 1; i < in.size(); ++i) s = broadcast_shapes(fn.c_str(), s, in[i]);
  return s;
}

Shape scalar_rule(const Node&, const std::vector<Shape>&) { return Shape{}; }

}  // namespace ktape::ops
