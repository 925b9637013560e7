// Tests for engine/npz: .npz/.npy round trips for every dtype (scalars, empty arrays, Keras names
// with '/' and ':'), files written by numpy 1.24 (embedded below), malformed files (missing,
// empty, random, truncated at every offset, corrupted bytes, bad CRC, unsupported dtypes) and
// shape/dtype-checked loading with load_npz_into.
//
// Checked by hand once (numpy 1.24.2) that numpy reads what save_npz writes: the test
// WritesAllDtypesForNumpy leaves $TMPDIR/ktape_npz_all_dtypes.npz behind, and
//   python3 -c "
//   import numpy as np
//   z = np.load('/tmp/ktape_npz_all_dtypes.npz')
//   exp = {'f16': np.array([[0.5, -2], [65504, 2**-10]], np.float16),
//          'f32': np.array([[1.5, -0.25], [3e38, 1e-7]], np.float32),
//          'f64': np.array([[np.pi, -1e300], [0, 5e-324]], np.float64),
//          'i8': np.array([[-128, 127], [0, -1]], np.int8),
//          'i16': np.array([[-32768, 32767], [5, -7]], np.int16),
//          'i32': np.array([[-2**31, 2**31 - 1], [1, -1]], np.int32),
//          'i64': np.array([[-2**63, 2**63 - 1], [2**40, -3]], np.int64),
//          'u8': np.array([[0, 255], [128, 7]], np.uint8),
//          'b': np.array([[True, False], [True, True]]),
//          'scalar/f64': np.float64(2.5), 'scalar/i32': np.int32(-7), 'scalar/b': np.bool_(True),
//          'dense_1/kernel:0': np.arange(6, dtype=np.float32).reshape(2, 3),
//          'empty:0': np.zeros((0, 3), np.float32)}
//   assert list(z.files) == list(exp), z.files
//   for k, v in exp.items():
//       assert z[k].dtype == v.dtype and z[k].shape == v.shape and np.array_equal(z[k], v), k
//   print('ok')"
// printed ok; unzip -t and Python's zipfile.testzip() accept the archive, and every entry is
// byte-identical to what np.save writes for the same array (see also NpyHeaderMatchesNumpy).
// The truncation and corruption tests were also run once under -fsanitize=address,undefined.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "io/atomic_file.hpp"
#include "io/npz.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using ktape::DType;
using ktape::Half;
using ktape::IOError;
using ktape::NamedArrays;
using ktape::NDArray;
using ktape::Shape;
using ktape::ValueError;

namespace {

using Bytes = std::string;

// Files written by numpy 1.24.2 (Debian 12 python3-numpy) with exactly this python, run once:
//   import numpy as np
//   x = np.array([[1.5, -2.0, 3.25], [0.0, 0.001, 65504.0]], dtype=np.float32)
//   v = np.array([1, -2, 3, 2**40], dtype=np.int64)
//   np.savez("foreign.npz", **{"dense_1/kernel:0": x, "v": v, "flag": np.bool_(True)})
//   np.savez_compressed("foreign_compressed.npz", y=np.linspace(0.0, 1.0, 11))
//   np.savez("foreign_layout.npz", be=np.array([1, -2, 70000], dtype=">i4"),
//            f=np.asfortranarray(np.arange(6, dtype=np.int16).reshape(2, 3)))
// np.savez writes ZIP64 extras in its local headers (sizes 0xffffffff there); the compressed
// file uses deflate; foreign_layout.npz holds a big-endian '>i4' and a fortran_order array.
const unsigned char kNumpySavez[] = {
    0x50, 0x4b, 0x03, 0x04, 0x2d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x21, 0x00, 0x4b, 0x05,
    0x32, 0x13, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x14, 0x00, 0x14, 0x00, 0x64, 0x65,
    0x6e, 0x73, 0x65, 0x5f, 0x31, 0x2f, 0x6b, 0x65, 0x72, 0x6e, 0x65, 0x6c, 0x3a, 0x30, 0x2e, 0x6e,
    0x70, 0x79, 0x01, 0x00, 0x10, 0x00, 0x98, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x98, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00,
    0x7b, 0x27, 0x64, 0x65, 0x73, 0x63, 0x72, 0x27, 0x3a, 0x20, 0x27, 0x3c, 0x66, 0x34, 0x27, 0x2c,
    0x20, 0x27, 0x66, 0x6f, 0x72, 0x74, 0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27,
    0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73, 0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27,
    0x3a, 0x20, 0x28, 0x32, 0x2c, 0x20, 0x33, 0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x0a, 0x00, 0x00, 0xc0, 0x3f, 0x00, 0x00, 0x00, 0xc0, 0x00, 0x00,
    0x50, 0x40, 0x00, 0x00, 0x00, 0x00, 0x6f, 0x12, 0x83, 0x3a, 0x00, 0xe0, 0x7f, 0x47, 0x50, 0x4b,
    0x03, 0x04, 0x2d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x21, 0x00, 0x81, 0x6b, 0x31, 0xad,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x05, 0x00, 0x14, 0x00, 0x76, 0x2e, 0x6e, 0x70,
    0x79, 0x01, 0x00, 0x10, 0x00, 0xa0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xa0, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b,
    0x27, 0x64, 0x65, 0x73, 0x63, 0x72, 0x27, 0x3a, 0x20, 0x27, 0x3c, 0x69, 0x38, 0x27, 0x2c, 0x20,
    0x27, 0x66, 0x6f, 0x72, 0x74, 0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a,
    0x20, 0x46, 0x61, 0x6c, 0x73, 0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a,
    0x20, 0x28, 0x34, 0x2c, 0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x0a, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xfe, 0xff, 0xff,
    0xff, 0xff, 0xff, 0xff, 0xff, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x01, 0x00, 0x00, 0x50, 0x4b, 0x03, 0x04, 0x2d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x21, 0x00, 0x82, 0x2d, 0xf8, 0xd3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x08,
    0x00, 0x14, 0x00, 0x66, 0x6c, 0x61, 0x67, 0x2e, 0x6e, 0x70, 0x79, 0x01, 0x00, 0x10, 0x00, 0x81,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x81, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x93,
    0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63, 0x72,
    0x27, 0x3a, 0x20, 0x27, 0x7c, 0x62, 0x31, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74, 0x72,
    0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73, 0x65,
    0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x29, 0x2c, 0x20, 0x7d,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a, 0x01,
    0x50, 0x4b, 0x01, 0x02, 0x2d, 0x03, 0x2d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x21, 0x00,
    0x4b, 0x05, 0x32, 0x13, 0x98, 0x00, 0x00, 0x00, 0x98, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x64, 0x65,
    0x6e, 0x73, 0x65, 0x5f, 0x31, 0x2f, 0x6b, 0x65, 0x72, 0x6e, 0x65, 0x6c, 0x3a, 0x30, 0x2e, 0x6e,
    0x70, 0x79, 0x50, 0x4b, 0x01, 0x02, 0x2d, 0x03, 0x2d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x21, 0x00, 0x81, 0x6b, 0x31, 0xad, 0xa0, 0x00, 0x00, 0x00, 0xa0, 0x00, 0x00, 0x00, 0x05, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x01, 0xde, 0x00, 0x00, 0x00,
    0x76, 0x2e, 0x6e, 0x70, 0x79, 0x50, 0x4b, 0x01, 0x02, 0x2d, 0x03, 0x2d, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x21, 0x00, 0x82, 0x2d, 0xf8, 0xd3, 0x81, 0x00, 0x00, 0x00, 0x81, 0x00, 0x00,
    0x00, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x01, 0xb5,
    0x01, 0x00, 0x00, 0x66, 0x6c, 0x61, 0x67, 0x2e, 0x6e, 0x70, 0x79, 0x50, 0x4b, 0x05, 0x06, 0x00,
    0x00, 0x00, 0x00, 0x03, 0x00, 0x03, 0x00, 0xab, 0x00, 0x00, 0x00, 0x70, 0x02, 0x00, 0x00, 0x00,
    0x00,
};

const unsigned char kNumpySavezCompressed[] = {
    0x50, 0x4b, 0x03, 0x04, 0x2d, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x21, 0x00, 0xb1, 0xbf,
    0x99, 0xae, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x05, 0x00, 0x14, 0x00, 0x79, 0x2e,
    0x6e, 0x70, 0x79, 0x01, 0x00, 0x10, 0x00, 0xd8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x73,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x9b, 0xec, 0x17, 0xea, 0x1b, 0x10, 0xc9, 0xc8, 0x50,
    0xc6, 0x50, 0xad, 0x9e, 0x92, 0x5a, 0x9c, 0x5c, 0xa4, 0x6e, 0xa5, 0xa0, 0x6e, 0x93, 0x66, 0xa1,
    0xae, 0xa3, 0xa0, 0x9e, 0x96, 0x5f, 0x54, 0x52, 0x94, 0x98, 0x17, 0x9f, 0x5f, 0x94, 0x92, 0x0a,
    0x12, 0x77, 0x4b, 0xcc, 0x29, 0x4e, 0x05, 0x8a, 0x17, 0x67, 0x24, 0x16, 0xa4, 0x02, 0xf9, 0x1a,
    0x86, 0x86, 0x3a, 0x9a, 0x3a, 0x0a, 0xb5, 0x0a, 0xe4, 0x03, 0x2e, 0x06, 0x28, 0x98, 0x35, 0x13,
    0x04, 0x76, 0xda, 0x43, 0xe8, 0x93, 0xf6, 0x26, 0xc6, 0x20, 0x70, 0x19, 0xca, 0xbf, 0x69, 0x0f,
    0x51, 0xf5, 0x00, 0x2a, 0xfe, 0xd8, 0x3e, 0x3d, 0x0d, 0x04, 0x9e, 0x41, 0xe5, 0x5f, 0xda, 0x9f,
    0x3d, 0x03, 0x02, 0x6f, 0xa0, 0xea, 0x3e, 0xd8, 0x03, 0x00, 0x50, 0x4b, 0x01, 0x02, 0x2d, 0x03,
    0x2d, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x21, 0x00, 0xb1, 0xbf, 0x99, 0xae, 0x73, 0x00,
    0x00, 0x00, 0xd8, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x79, 0x2e, 0x6e, 0x70, 0x79, 0x50, 0x4b, 0x05,
    0x06, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01, 0x00, 0x33, 0x00, 0x00, 0x00, 0xaa, 0x00, 0x00,
    0x00, 0x00, 0x00,
};

const unsigned char kNumpySavezLayout[] = {
    0x50, 0x4b, 0x03, 0x04, 0x2d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x21, 0x00, 0xf5, 0xad,
    0xc2, 0xa8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x06, 0x00, 0x14, 0x00, 0x62, 0x65,
    0x2e, 0x6e, 0x70, 0x79, 0x01, 0x00, 0x10, 0x00, 0x8c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x8c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00,
    0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63, 0x72, 0x27, 0x3a, 0x20, 0x27, 0x3e, 0x69, 0x34,
    0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74, 0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65,
    0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73, 0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70,
    0x65, 0x27, 0x3a, 0x20, 0x28, 0x33, 0x2c, 0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a, 0x00, 0x00, 0x00, 0x01, 0xff, 0xff, 0xff, 0xfe,
    0x00, 0x01, 0x11, 0x70, 0x50, 0x4b, 0x03, 0x04, 0x2d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x21, 0x00, 0x68, 0xc6, 0x18, 0x0f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x05, 0x00,
    0x14, 0x00, 0x66, 0x2e, 0x6e, 0x70, 0x79, 0x01, 0x00, 0x10, 0x00, 0x8c, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x8c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x93, 0x4e, 0x55, 0x4d, 0x50,
    0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63, 0x72, 0x27, 0x3a, 0x20, 0x27,
    0x3c, 0x69, 0x32, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74, 0x72, 0x61, 0x6e, 0x5f, 0x6f,
    0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x54, 0x72, 0x75, 0x65, 0x2c, 0x20, 0x27, 0x73, 0x68,
    0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x32, 0x2c, 0x20, 0x33, 0x29, 0x2c, 0x20, 0x7d, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a, 0x00, 0x00, 0x03, 0x00, 0x01,
    0x00, 0x04, 0x00, 0x02, 0x00, 0x05, 0x00, 0x50, 0x4b, 0x01, 0x02, 0x2d, 0x03, 0x2d, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x21, 0x00, 0xf5, 0xad, 0xc2, 0xa8, 0x8c, 0x00, 0x00, 0x00, 0x8c,
    0x00, 0x00, 0x00, 0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80,
    0x01, 0x00, 0x00, 0x00, 0x00, 0x62, 0x65, 0x2e, 0x6e, 0x70, 0x79, 0x50, 0x4b, 0x01, 0x02, 0x2d,
    0x03, 0x2d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x21, 0x00, 0x68, 0xc6, 0x18, 0x0f, 0x8c,
    0x00, 0x00, 0x00, 0x8c, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x80, 0x01, 0xc4, 0x00, 0x00, 0x00, 0x66, 0x2e, 0x6e, 0x70, 0x79, 0x50, 0x4b,
    0x05, 0x06, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x02, 0x00, 0x67, 0x00, 0x00, 0x00, 0x87, 0x01,
    0x00, 0x00, 0x00, 0x00,
};

template <std::size_t N>
Bytes bytes_of(const unsigned char (&a)[N]) {
  return Bytes(reinterpret_cast<const char*>(a), N);
}

void put_u16(Bytes& s, std::uint32_t v) {
  s += static_cast<char>(v & 0xff);
  s += static_cast<char>((v >> 8) & 0xff);
}
void put_u32(Bytes& s, std::uint32_t v) {
  put_u16(s, v & 0xffff);
  put_u16(s, v >> 16);
}

// An .npy image with the given header dict (format 1.0, padded like numpy) and data bytes.
Bytes make_npy(const std::string& dict, const Bytes& data) {
  std::string header = dict;
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  Bytes b("\x93NUMPY\x01\x00", 8);
  put_u16(b, static_cast<std::uint32_t>(header.size()));
  return b + header + data;
}

// A minimal zip of stored entries with correct CRCs, to wrap hand-made entries.
Bytes make_zip(const std::vector<std::pair<std::string, Bytes>>& entries) {
  Bytes out, central;
  for (const auto& [name, data] : entries) {
    const auto crc = static_cast<std::uint32_t>(
        crc32(0, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size())));
    Bytes common;
    put_u16(common, 20);
    put_u16(common, 0);
    put_u16(common, 0);
    put_u16(common, 0);
    put_u16(common, 0x21);
    put_u32(common, crc);
    put_u32(common, static_cast<std::uint32_t>(data.size()));
    put_u32(common, static_cast<std::uint32_t>(data.size()));
    put_u16(common, static_cast<std::uint32_t>(name.size()));
    put_u16(common, 0);
    const auto offset = static_cast<std::uint32_t>(out.size());
    put_u32(out, 0x04034b50);
    out += common + name + data;
    put_u32(central, 0x02014b50);
    put_u16(central, 20);
    central += common;
    put_u16(central, 0);  // comment length
    put_u16(central, 0);  // disk
    put_u16(central, 0);  // internal attributes
    put_u32(central, 0);  // external attributes
    put_u32(central, offset);
    central += name;
  }
  const auto dir_offset = static_cast<std::uint32_t>(out.size());
  out += central;
  put_u32(out, 0x06054b50);
  put_u32(out, 0);
  put_u16(out, static_cast<std::uint32_t>(entries.size()));
  put_u16(out, static_cast<std::uint32_t>(entries.size()));
  put_u32(out, static_cast<std::uint32_t>(central.size()));
  put_u32(out, dir_offset);
  put_u16(out, 0);
  return out;
}

Bytes raw_bytes(const NDArray& a) {
  return Bytes(static_cast<const char*>(a.raw_data()), a.nbytes());
}

template <class T>
NDArray arr(std::vector<T> v, Shape s) {
  return NDArray::from_vector<T>(v, s);
}

// Every dtype as a 2x2 array, a few scalars, a Keras-style name and an empty array.
NamedArrays all_dtypes() {
  using I64 = std::int64_t;
  std::vector<Half> h = {Half(0.5f), Half(-2.0f), Half(65504.0f), Half(1.0f / 1024)};
  return {
      {"f16", arr<Half>(h, {2, 2})},
      {"f32", arr<float>({1.5f, -0.25f, 3e38f, 1e-7f}, {2, 2})},
      {"f64", arr<double>({M_PI, -1e300, 0.0, 5e-324}, {2, 2})},
      {"i8", arr<std::int8_t>({-128, 127, 0, -1}, {2, 2})},
      {"i16", arr<std::int16_t>({-32768, 32767, 5, -7}, {2, 2})},
      {"i32", arr<std::int32_t>({std::numeric_limits<std::int32_t>::min(),
                                 std::numeric_limits<std::int32_t>::max(), 1, -1},
                                {2, 2})},
      {"i64", arr<I64>({std::numeric_limits<I64>::min(), std::numeric_limits<I64>::max(),
                        I64{1} << 40, -3},
                       {2, 2})},
      {"u8", arr<std::uint8_t>({0, 255, 128, 7}, {2, 2})},
      {"b", arr<bool>({true, false, true, true}, {2, 2})},
      {"scalar/f64", NDArray::scalar(2.5, DType::float64)},
      {"scalar/i32", NDArray::scalar(-7, DType::int32)},
      {"scalar/b", NDArray::scalar(1, DType::bool_)},
      {"dense_1/kernel:0", NDArray::from_values({0, 1, 2, 3, 4, 5}, {2, 3})},
      {"empty:0", NDArray(Shape{0, 3}, DType::float32)},
  };
}

void expect_same(const NamedArrays& got, const NamedArrays& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(want[i].first);
    EXPECT_EQ(got[i].first, want[i].first);
    EXPECT_EQ(got[i].second.dtype(), want[i].second.dtype());
    EXPECT_EQ(got[i].second.shape(), want[i].second.shape());
    EXPECT_EQ(raw_bytes(got[i].second), raw_bytes(want[i].second));
  }
}

class NpzTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("ktape_npz_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const Bytes& bytes) const {
    const std::string p = path(name);
    std::ofstream out(p, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p;
  }
  // Writes `bytes` to a new file (and removes the previous one): rewriting one file in place
  // makes ext4 flush it on every close, which makes the loops below slow.
  std::string scratch(const Bytes& bytes) {
    if (!scratch_.empty()) fs::remove(scratch_);
    scratch_ = write("scratch_" + std::to_string(scratch_count_++), bytes);
    return scratch_;
  }
  static Bytes read(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  fs::path dir_;
  std::string scratch_;
  int scratch_count_ = 0;
};

// Runs f, which must throw E; returns the message.
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no exception";
  return "";
}

using ktape::testing_util::contains;

// ---------------------------------------------------------------------------------------------

TEST_F(NpzTest, RoundTripsEveryDtypeScalarsEmptyAndKerasNames) {
  const auto arrays = all_dtypes();
  const auto p = path("all.npz");
  ktape::save_npz(p, arrays);
  expect_same(ktape::load_npz(p), arrays);
  // Stored entries are named <name>.npy, '/' and ':' kept.
  const Bytes file = read(p);
  EXPECT_EQ(file.substr(0, 4), Bytes("PK\x03\x04", 4));
  EXPECT_TRUE(contains(file, "dense_1/kernel:0.npy"));
  EXPECT_TRUE(contains(file, "{'descr': '<f2', 'fortran_order': False, 'shape': (2, 2), }"));
  EXPECT_TRUE(contains(file, "{'descr': '|b1', 'fortran_order': False, 'shape': (), }"));
  EXPECT_TRUE(contains(file, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 3), }"));
  // No temp file is left next to it.
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++files;
  EXPECT_EQ(files, 1u);
}

TEST_F(NpzTest, EmptyArchiveAndOverwrite) {
  const auto p = path("x.npz");
  ktape::save_npz(p, {});
  EXPECT_TRUE(ktape::load_npz(p).empty());
  ktape::save_npz(p, {{"a", NDArray::from_values({1, 2}, {2})}});
  ktape::save_npz(p, {{"b", NDArray::from_values({3}, {1}, DType::int16)}});
  const auto got = ktape::load_npz(p);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].first, "b");
  EXPECT_EQ(got[0].second.dtype(), DType::int16);
  EXPECT_EQ(got[0].second.item(0), 3);
}

TEST_F(NpzTest, WritesAllDtypesForNumpy) {
  // Left in place for the by-hand numpy check described at the top of this file.
  const auto p = (fs::temp_directory_path() / "ktape_npz_all_dtypes.npz").string();
  ktape::save_npz(p, all_dtypes());
  expect_same(ktape::load_npz(p), all_dtypes());
}

TEST_F(NpzTest, NpyHeaderMatchesNumpy) {
  // numpy 1.24: io = BytesIO(); np.save(io, np.zeros((3, 4), np.float32)); io.getvalue()[:128]
  const Bytes numpy_header = Bytes("\x93NUMPY\x01\x00\x76\x00", 10) +
                             "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }" +
                             Bytes(58, ' ') + "\n";
  ASSERT_EQ(numpy_header.size(), 128u);
  const auto p = path("z.npy");
  ktape::save_npy(p, NDArray(Shape{3, 4}, DType::float32));
  const Bytes file = read(p);
  ASSERT_EQ(file.size(), 128u + 48u);
  EXPECT_EQ(file.substr(0, 128), numpy_header);
  EXPECT_EQ(file.substr(128), Bytes(48, '\0'));
  // A scalar: np.save(io, np.float64(2)) has no growth-axis padding.
  ktape::save_npy(p, NDArray::scalar(2, DType::float64));
  const Bytes s = read(p);
  ASSERT_EQ(s.size(), 128u + 8u);
  EXPECT_EQ(s.substr(10, 55), "{'descr': '<f8', 'fortran_order': False, 'shape': (), }");
  EXPECT_EQ(s.find_first_not_of(' ', 65), 127u);
  EXPECT_EQ(s[127], '\n');
}

TEST_F(NpzTest, NpyRoundTrip) {
  for (const auto& [name, a] : all_dtypes()) {
    SCOPED_TRACE(name);
    const auto p = path("a.npy");
    ktape::save_npy(p, a);
    const NDArray b = ktape::load_npy(p);
    EXPECT_EQ(b.dtype(), a.dtype());
    EXPECT_EQ(b.shape(), a.shape());
    EXPECT_EQ(raw_bytes(b), raw_bytes(a));
  }
}

TEST_F(NpzTest, ReadsNumpySavez) {
  const auto got = ktape::load_npz(write("foreign.npz", bytes_of(kNumpySavez)));
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].first, "dense_1/kernel:0");
  const NDArray& x = got[0].second;
  EXPECT_EQ(x.dtype(), DType::float32);
  EXPECT_EQ(x.shape(), (Shape{2, 3}));
  const std::vector<float> xs = {1.5f, -2.0f, 3.25f, 0.0f, 0.001f, 65504.0f};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(x.data<float>()[i], xs[i]) << i;
  EXPECT_EQ(got[1].first, "v");
  EXPECT_EQ(got[1].second.dtype(), DType::int64);
  EXPECT_EQ(got[1].second.shape(), (Shape{4}));
  const std::vector<std::int64_t> vs = {1, -2, 3, std::int64_t{1} << 40};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got[1].second.data<std::int64_t>()[i], vs[i]);
  EXPECT_EQ(got[2].first, "flag");
  EXPECT_EQ(got[2].second.dtype(), DType::bool_);
  EXPECT_EQ(got[2].second.shape(), Shape{});
  EXPECT_EQ(got[2].second.data<bool>()[0], true);
}

TEST_F(NpzTest, ReadsNumpySavezCompressed) {
  const auto got = ktape::load_npz(write("c.npz", bytes_of(kNumpySavezCompressed)));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].first, "y");
  const NDArray& y = got[0].second;
  EXPECT_EQ(y.dtype(), DType::float64);
  ASSERT_EQ(y.shape(), (Shape{11}));
  for (int i = 0; i < 11; ++i) EXPECT_DOUBLE_EQ(y.data<double>()[i], i * 0.1) << i;
}

TEST_F(NpzTest, ReadsNumpyBigEndianAndFortranOrder) {
  const auto got = ktape::load_npz(write("l.npz", bytes_of(kNumpySavezLayout)));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].first, "be");
  EXPECT_EQ(got[0].second.dtype(), DType::int32);
  EXPECT_EQ(got[0].second.to_vector(), (std::vector<double>{1, -2, 70000}));
  EXPECT_EQ(got[1].first, "f");
  EXPECT_EQ(got[1].second.dtype(), DType::int16);
  EXPECT_EQ(got[1].second.shape(), (Shape{2, 3}));
  EXPECT_EQ(got[1].second.to_vector(), (std::vector<double>{0, 1, 2, 3, 4, 5}));
}

TEST_F(NpzTest, FortranOrderRank3AndOtherHeaderForms) {
  // 2x3x2 int8 in Fortran order: element (i, j, k) stored at i + 2 j + 6 k.
  Bytes data(12, '\0');
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 2; ++k) data[i + 2 * j + 6 * k] = static_cast<char>(100 * i + 10 * j + k);
  // Python-2 style longs, reordered keys, double quotes and '=' byte order are all accepted.
  const Bytes npy =
      make_npy("{\"shape\": (2L, 3L, 2L), 'fortran_order': True, 'descr': '|i1'}", data);
  const NDArray a = ktape::load_npz(write("f.npz", make_zip({{"a.npy", npy}})))[0].second;
  ASSERT_EQ(a.shape(), (Shape{2, 3, 2}));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 2; ++k) EXPECT_EQ(a.at<std::int8_t>({i, j, k}), 100 * i + 10 * j + k);
  const NDArray b = ktape::load_npy(
      write("b.npy", make_npy("{'descr': '>f8', 'fortran_order': False, 'shape': (1,), }",
                              Bytes("\x40\x04\x00\x00\x00\x00\x00\x00", 8))));
  EXPECT_EQ(b.to_vector(), std::vector<double>{2.5});
  const NDArray c = ktape::load_npy(write(
      "c.npy", make_npy("{'descr': '=u1', 'fortran_order': False, 'shape': (2,), }", "\x07\x09")));
  EXPECT_EQ(c.dtype(), DType::uint8);
  EXPECT_EQ(c.to_vector(), (std::vector<double>{7, 9}));
}

// ---------------------------------------------------------------------------------------------
// Malformed files: always IOError naming the file, never a crash.

TEST_F(NpzTest, MissingEmptyRandomAndDirectory) {
  const auto missing = path("nope.npz");
  auto m = message_of<IOError>([&] { ktape::load_npz(missing); });
  EXPECT_TRUE(contains(m, missing)) << m;
  EXPECT_TRUE(contains(m, "No such file")) << m;
  m = message_of<IOError>([&] { ktape::load_npy(missing); });
  EXPECT_TRUE(contains(m, "No such file")) << m;

  const auto empty = write("empty.npz", "");
  m = message_of<IOError>([&] { ktape::load_npz(empty); });
  EXPECT_TRUE(contains(m, empty + " is not an .npz file (the file is empty)")) << m;

  std::mt19937 rng(7);
  Bytes noise(3000, '\0');
  for (auto& c : noise) c = static_cast<char>(rng());
  const auto random = write("random.npz", noise);
  m = message_of<IOError>([&] { ktape::load_npz(random); });
  EXPECT_TRUE(contains(m, random + " is not an .npz file (not a zip archive)")) << m;
  m = message_of<IOError>([&] { ktape::load_npy(random); });
  EXPECT_TRUE(contains(m, "is not an .npy file")) << m;

  m = message_of<IOError>([&] { ktape::load_npz(dir_.string()); });
  EXPECT_TRUE(contains(m, "is a directory")) << m;

  const auto npy = path("a.npy");
  ktape::save_npy(npy, NDArray::scalar(1));
  m = message_of<IOError>([&] { ktape::load_npz(npy); });
  EXPECT_TRUE(contains(m, "it is an .npy file; use load_npy")) << m;
}

TEST_F(NpzTest, TruncatedAtEveryOffsetThrows) {
  const auto p = path("full.npz");
  ktape::save_npz(p, all_dtypes());
  const Bytes full = read(p);
  for (std::size_t n = 0; n < full.size(); ++n) {
    const auto t = scratch(full.substr(0, n));
    try {
      ktape::load_npz(t);
      ADD_FAILURE() << "no error for a file truncated to " << n << " bytes";
    } catch (const IOError& e) {
      EXPECT_TRUE(contains(e.what(), t)) << e.what();
    }
  }
  // A truncated zip says so.
  const auto m = message_of<IOError>(
      [&] { ktape::load_npz(write("t.npz", full.substr(0, full.size() / 2))); });
  EXPECT_TRUE(contains(m, "truncated")) << m;
  // So does a truncated .npy.
  const auto q = path("a.npy");
  ktape::save_npy(q, NDArray(Shape{10, 10}, DType::float64));
  const Bytes npy = read(q);
  for (std::size_t n = 0; n < npy.size(); n += 7)
    EXPECT_THROW(ktape::load_npy(scratch(npy.substr(0, n))), IOError) << n;
  const auto m2 = message_of<IOError>([&] { ktape::load_npy(write("t.npy", npy.substr(0, 300))); });
  EXPECT_TRUE(contains(m2, "is truncated: shape (10, 10) float64 needs 800 data bytes")) << m2;
}

TEST_F(NpzTest, CorruptedBytesThrowOrLoadButNeverCrash) {
  // Every single-byte change of a small archive either loads or throws IOError.
  const auto p = path("small.npz");
  ktape::save_npz(
      p, {{"w", NDArray::from_values({1, 2, 3}, {3})}, {"b", NDArray::scalar(1, DType::bool_)}});
  const Bytes good = read(p);
  for (std::size_t i = 0; i < good.size(); ++i) {
    for (unsigned char x : {0x01, 0x80, 0xff}) {
      Bytes bad = good;
      bad[i] = static_cast<char>(bad[i] ^ x);
      try {
        ktape::load_npz(scratch(bad));
      } catch (const IOError&) {
      }
    }
  }
  // The deflated numpy file too.
  const Bytes c = bytes_of(kNumpySavezCompressed);
  for (std::size_t i = 0; i < c.size(); ++i) {
    Bytes bad = c;
    bad[i] = static_cast<char>(bad[i] ^ 0x55);
    try {
      ktape::load_npz(scratch(bad));
    } catch (const IOError&) {
    }
  }
}

TEST_F(NpzTest, CrcMismatch) {
  const auto p = path("crc.npz");
  ktape::save_npz(p, {{"w", NDArray::from_values({1, 2, 3}, {3}, DType::float64)}});
  Bytes b = read(p);
  const std::size_t data = b.find("\x93NUMPY") + 128;  // first data byte of the entry
  b[data + 3] ^= 0x10;
  const auto m = message_of<IOError>([&] { ktape::load_npz(write("crc.npz", b)); });
  EXPECT_TRUE(contains(m, p + ": entry 'w.npy' is corrupted: CRC-32 mismatch")) << m;
  // A flipped byte in compressed data is caught too.
  Bytes c = bytes_of(kNumpySavezCompressed);
  c[c.find("y.npy") + 5 + 20 + 30] ^= 0x01;  // inside the deflate stream
  EXPECT_THROW(ktape::load_npz(write("c.npz", c)), IOError);
}

TEST_F(NpzTest, UnsupportedContentIsRejectedClearly) {
  const auto load = [&](const std::string& entry, const Bytes& npy) {
    return message_of<IOError>([&] { ktape::load_npz(write("u.npz", make_zip({{entry, npy}}))); });
  };
  auto m = load("o.npy", make_npy("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }",
                                  Bytes(16, '\0')));
  EXPECT_TRUE(contains(m, "entry 'o.npy': unsupported dtype descr '|O' (object arrays)")) << m;
  m = load("u.npy",
           make_npy("{'descr': '<u4', 'fortran_order': False, 'shape': (1,), }", Bytes(4, '\0')));
  EXPECT_TRUE(contains(m, "unsupported dtype descr '<u4'")) << m;
  m = load("s.npy", make_npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }",
                             Bytes(4, '\0')));
  EXPECT_TRUE(contains(m, "structured dtype")) << m;
  m = load("readme.txt", "hello");
  EXPECT_TRUE(contains(m, "entry 'readme.txt' is not an .npy file")) << m;
  m = load("x.npy", "hello, not numpy");
  EXPECT_TRUE(contains(m, "entry 'x.npy' is not an .npy file")) << m;
  m = load("h.npy", make_npy("{'descr': '<f4', 'shape': (1,), }", Bytes(4, '\0')));
  EXPECT_TRUE(contains(m, "bad .npy header")) << m;
  m = load("n.npy", make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", ""));
  EXPECT_TRUE(contains(m, "bad .npy header")) << m;
  m = load("d.npy",
           make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", Bytes(12, '\0')));
  EXPECT_TRUE(contains(m, "4 unexpected bytes after the data")) << m;
  m = load("big.npy", make_npy("{'descr': '<f8', 'fortran_order': False, "
                               "'shape': (4294967296, 4294967296), }",
                               ""));
  EXPECT_TRUE(contains(m, "too large")) << m;
  m = load("v.npy", Bytes("\x93NUMPY\x09\x00", 8) + Bytes(120, ' '));
  EXPECT_TRUE(contains(m, "unsupported .npy format version 9.0")) << m;
}

// ---------------------------------------------------------------------------------------------

TEST_F(NpzTest, SaveRejectsBadNamesAndUnwritablePaths) {
  const auto p = path("s.npz");
  const NDArray a = NDArray::scalar(1);
  auto m = message_of<ValueError>([&] { ktape::save_npz(p, {{"a", a}, {"a", a}}); });
  EXPECT_TRUE(contains(m, "duplicate array name 'a'")) << m;
  EXPECT_THROW(ktape::save_npz(p, {{"", a}}), ValueError);
  EXPECT_THROW(ktape::save_npz(p, {{"u", NDArray()}}), ValueError);
  EXPECT_THROW(ktape::save_npy(p, NDArray()), ValueError);
  EXPECT_FALSE(fs::exists(p));
  m = message_of<IOError>([&] { ktape::save_npz(path("no/such/dir/x.npz"), {{"a", a}}); });
  EXPECT_TRUE(contains(m, "cannot write " + path("no/such/dir/x.npz"))) << m;
  // A failed save leaves the old file alone and no temp file behind.
  ktape::save_npz(p, {{"old", a}});
  EXPECT_THROW(ktape::save_npz(p, {{"new", a}, {"new", a}}), ValueError);
  EXPECT_EQ(ktape::load_npz(p)[0].first, "old");
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++files;
  EXPECT_EQ(files, 1u);
}

TEST_F(NpzTest, StaleTempFilesOfDeadProcessesAreRemoved) {
  // A process killed while writing ck.npz leaves ck.npz.tmp-<pid>; the next save removes it,
  // but never the file of a live process (pid 1) or an unrelated name.
  const auto p = path("ck.npz");
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ::waitpid(child, nullptr, 0);  // reaped: its pid names no process now
  const std::string dead = p + ".tmp-" + std::to_string(child);
  const std::string live = p + ".tmp-1";
  const std::string other = path("other.npz.tmp-" + std::to_string(child));
  for (const auto& f : {dead, live, other})
    write(fs::path(f).filename().string(), Bytes(2800, 'x'));
  ktape::save_npz(p, {{"a", NDArray::scalar(1)}});
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(other));
  EXPECT_EQ(ktape::remove_stale_temp_files(path("other.npz")), 1);
  EXPECT_FALSE(fs::exists(other));
  EXPECT_EQ(ktape::load_npz(p)[0].first, "a");
}

TEST_F(NpzTest, LoadIntoChecksEverythingFirst) {
  const auto p = path("w.npz");
  ktape::save_npz(p, {{"dense_1/kernel:0", NDArray::from_values({1, 2, 3, 4, 5, 6}, {2, 3})},
                      {"dense_1/bias:0", NDArray::from_values({7, 8, 9}, {3})},
                      {"step", NDArray::scalar(42, DType::int64)}});
  NDArray kernel(Shape{2, 3}, DType::float32), bias(Shape{3}, DType::float32);
  const NDArray kernel_alias = kernel;  // shares the buffer: loading is in place
  ktape::load_npz_into(p, {{"dense_1/kernel:0", &kernel}, {"dense_1/bias:0", &bias}});
  EXPECT_EQ(kernel_alias.to_vector(), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(bias.to_vector(), (std::vector<double>{7, 8, 9}));

  NDArray k2(Shape{2, 3}, DType::float32), wrong_shape(Shape{3, 2}, DType::float32);
  auto m = message_of<ValueError>([&] {
    ktape::load_npz_into(p, {{"dense_1/kernel:0", &k2}, {"dense_1/bias:0", &wrong_shape}});
  });
  EXPECT_TRUE(
      contains(m, "'dense_1/bias:0': expected shape (3, 2) float32, found shape (3,) float32"))
      << m;
  EXPECT_EQ(k2.to_vector(), std::vector<double>(6, 0.0));  // untouched: all or nothing

  NDArray wrong_dtype(Shape{}, DType::int32);
  m = message_of<ValueError>([&] { ktape::load_npz_into(p, {{"step", &wrong_dtype}}); });
  EXPECT_TRUE(contains(m, "'step': expected shape () int32, found shape () int64")) << m;

  m = message_of<ValueError>([&] { ktape::load_npz_into(p, {{"dense_2/kernel:0", &k2}}); });
  EXPECT_TRUE(contains(m,
                       "'dense_2/kernel:0' is missing from the file (it has: dense_1/kernel:0, "
                       "dense_1/bias:0, step)"))
      << m;
  NDArray undefined;
  EXPECT_THROW(ktape::load_npz_into(p, {{"step", &undefined}}), ValueError);
  EXPECT_THROW(ktape::load_npz_into(path("missing.npz"), {{"step", &k2}}), IOError);
}

}  // namespace
