/// \file
/// ktape: the Keras backend API in C++ on a tape-based reverse-mode autodiff engine.
/// The one header users include, with `namespace K = ktape::backend;`.
/// Optimizers: `ktape::optimizers::Adam opt({.lr = 1e-3});` their config API (get_config,
/// from_config) also needs `#include <nlohmann/json.hpp>`.
#pragma once

#include "autodiff/gradcheck.hpp"
#include "autodiff/gradients.hpp"
#include "engine/dot.hpp"
#include "engine/dtype.hpp"
#include "engine/errors.hpp"
#include "engine/function.hpp"
#include "engine/ndarray.hpp"
#include "engine/shape.hpp"
#include "engine/tensor.hpp"
#include "engine/threads.hpp"
#include "io/npz.hpp"
#include "ops/control.hpp"
#include "ops/conv.hpp"
#include "ops/core.hpp"
#include "ops/ctc.hpp"
#include "ops/elementwise.hpp"
#include "ops/image.hpp"
#include "ops/indexing.hpp"
#include "ops/layout.hpp"
#include "ops/nn.hpp"
#include "ops/normalization.hpp"
#include "ops/pool.hpp"
#include "ops/reductions.hpp"
#include "ops/rnn.hpp"
#include "ops/session.hpp"
#include "ops/sparse.hpp"
#include "optim/optimizers.hpp"
