/// \file
/// How many threads ktape's kernels may use. oneTBB owns the only pool; this bounds it (a
/// tbb::global_control). Results never depend on the number: every kernel splits its work by
/// the work alone (engine/parallel.hpp), so the same seed gives the same bits at any count.
#pragma once

namespace ktape {

/// Limits the kernels to `n` threads; 0 lifts the limit (every core). ValueError if n < 0.
/// Takes effect for the next kernels that run, in any Function.
void set_num_threads(int n);
/// The current limit: what set_num_threads or KTAPE_NUM_THREADS set, else the core count.
int num_threads();
/// Applies KTAPE_NUM_THREADS (a positive integer, or 0 / empty for every core) once, unless
/// set_num_threads came first; a malformed value is a ValueError naming it. The cpu backend
/// calls this when it is first used.
void apply_thread_environment();

}  // namespace ktape
