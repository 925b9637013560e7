// Whole-file writes that never leave a half-written file (ktape::AtomicFile,
// engine/atomic_file.hpp): the history CSV and the SVG plot go through the same writer as the
// checkpoints.
#pragma once

#include "engine/atomic_file.hpp"

namespace ktape::train {
using ktape::write_file_atomically;
}  // namespace ktape::train
