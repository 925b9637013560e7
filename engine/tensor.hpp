/// \file
/// Tensor: a cheap shared handle to a node of the graph (the tape), as Keras's symbolic tensors:
/// what K:: functions take and return. Its static shape may have unknown (None) dims; a null
/// Tensor is what K::gradients returns for a variable the loss does not depend on.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/dtype.hpp"
#include "engine/op_list.hpp"
#include "engine/shape.hpp"

namespace ktape {

struct Node;

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<Node> n) : node_(std::move(n)) {}

  bool defined() const { return node_ != nullptr; }
  explicit operator bool() const { return defined(); }
  Node& node() const;  ///< throws ValueError on a null tensor
  const std::shared_ptr<Node>& node_ptr() const { return node_; }
  std::int64_t id() const;
  const Shape& shape() const;  ///< static shape, None for unknown dims
  DType dtype() const;
  int ndim() const { return shape().ndim(); }
  const std::string& name() const;
  Op op() const;
  bool operator==(const Tensor& o) const { return node_ == o.node_; }
  bool operator!=(const Tensor& o) const { return node_ != o.node_; }

 private:
  std::shared_ptr<Node> node_;
};

}  // namespace ktape
