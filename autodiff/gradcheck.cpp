#include "autodiff/gradcheck.hpp"

#include <cmath>
#include <sstream>

#include "autodiff/gradients.hpp"
#include "engine/errors.hpp"
#include "engine/function.hpp"
#include "engine/graph.hpp"
#include "engine/random.hpp"
#include "ops/kernels/attrs.hpp"

namespace ktape {

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                          const std::vector<NDArray>& inputs, const GradcheckOptions& o) {
  std::vector<Tensor> phs;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].dtype() != DType::float64)
      throw ValueError("gradcheck: input " + std::to_string(i) + " must be float64");
    phs.push_back(make_source(Op::Placeholder, inputs[i].shape(), DType::float64,
                              "gradcheck_input_" + std::to_string(i)));
  }
  const Tensor y = f(phs);
  if (!y.defined() || y.dtype() != DType::float64)
    throw ValueError("gradcheck: f must return a float64 tensor");
  // loss = sum(y * r) with a fixed projection r of y's (static) shape; if y's shape is not
  // static, run once to learn it.
  Shape ys = y.shape();
  if (!ys.is_fully_defined()) ys = Function(phs, {y}, {})(inputs)[0].shape();
  NDArray r(ys, DType::float64);
  for (std::int64_t i = 0; i < r.size(); ++i)
    r.set_item(i, 0.5 + rng::uniform(o.seed, 0, static_cast<std::uint64_t>(i)));
  const Tensor rc = make_source(Op::Constant, ys, DType::float64, "gradcheck_projection", r);
  const Tensor prod = make_node(Op::Mul, {y, rc}, {}, DType::float64);
  std::vector<int> axes;
  for (int d = 0; d < prod.ndim(); ++d) axes.push_back(d);
  const Tensor loss = make_node(Op::Sum, {prod}, attrs::Reduce::make(false, axes), DType::float64);

  const std::vector<Tensor> grads = gradients(loss, phs);
  std::vector<Tensor> outs;
  std::vector<int> where;
  for (std::size_t i = 0; i < grads.size(); ++i)
    if (grads[i].defined()) {
      where.push_back(static_cast<int>(i));
      outs.push_back(grads[i]);
    }
  FunctionOptions fo;
  fo.backend = o.backend;
  std::vector<NDArray> analytic(inputs.size());
  if (!outs.empty()) {
    const auto vals = Function(phs, outs, {}, fo)(inputs);
    for (std::size_t k = 0; k < where.size(); ++k)
      analytic[static_cast<std::size_t>(where[k])] = vals[k];
  }
  const Function fl(phs, {loss}, {}, fo);
  std::vector<NDArray> work;
  for (const auto& a : inputs) work.push_back(a.clone());

  GradcheckResult res;
  double worst = -1e300;
  for (std::size_t i = 0; i < work.size(); ++i) {
    for (std::int64_t j = 0; j < work[i].size(); ++j) {
      const double x0 = work[i].item(j);
      work[i].set_item(j, x0 + o.eps);
      const double lp = fl(work)[0].item(0);
      work[i].set_item(j, x0 - o.eps);
      const double lm = fl(work)[0].item(0);
      work[i].set_item(j, x0);
      const double num = (lp - lm) / (2 * o.eps);
      const double ana = analytic[i].defined() ? analytic[i].item(j) : 0.0;
      const double excess = std::abs(ana - num) - (o.atol + o.rtol * std::abs(num));
      if (excess > worst || std::isnan(ana) != std::isnan(num)) {
        worst = std::isnan(excess) ? 1e300 : excess;
        std::ostringstream os;
        os << "input " << i << " element " << j << ": analytic " << ana << ", numeric " << num
           << (analytic[i].defined() ? "" : " (analytic gradient is null)");
        res.report = os.str();
      }
    }
  }
  res.max_error = worst > 0 ? worst : 0;
  res.ok = worst <= 0;
  return res;
}

}  // namespace ktape
