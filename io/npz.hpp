/// \file
/// NumPy .npy / .npz files: checkpoints that numpy reads with np.load and that ktape reads back.
/// save_npz writes what np.savez writes: an uncompressed zip of `<name>.npy` entries in NPY
/// format 1.0, C order, little-endian, for every ktape dtype (scalars have shape ()). Files are
/// written to `<path>.tmp-<pid>`, synced and renamed onto `path`, so a crash never leaves a
/// half-written file behind. load_npz also reads np.savez_compressed files, ZIP64 extras,
/// big-endian and Fortran-order arrays. Bad files raise IOError naming the file and the problem.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/ndarray.hpp"

namespace ktape {

using NamedArrays = std::vector<std::pair<std::string, NDArray>>;

/// Writes `arrays` in order as entries `<name>.npy`; names are kept as given ("dense_1/kernel:0"
/// is fine). Throws ValueError for an empty or duplicate name or an undefined array, IOError if
/// the file cannot be written (the previous file at `path`, if any, is then left untouched).
void save_npz(const std::string& path, const NamedArrays& arrays);

/// Reads every entry, in the order of the archive, named without the ".npy" suffix.
NamedArrays load_npz(const std::string& path);

/// Reads the entries named by `targets` and copies each into its existing array, which must be
/// defined and have the entry's shape and dtype. Everything is checked before any target is
/// written: a missing entry or a shape/dtype mismatch throws ValueError naming the entry, the
/// expected and the found shape and dtype, and leaves all targets unchanged. Entries of the file
/// that no target names are ignored.
void load_npz_into(const std::string& path,
                   const std::vector<std::pair<std::string, NDArray*>>& targets);

/// A single array as an .npy file (what np.save writes / np.load reads), written atomically.
void save_npy(const std::string& path, const NDArray& array);
NDArray load_npy(const std::string& path);

}  // namespace ktape
