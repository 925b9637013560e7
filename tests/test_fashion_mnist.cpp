// Tests for the Fashion-MNIST IDX loader: tiny hand-written IDX files (gzip and plain) check
// shapes, scaling, labels, limits and error messages; the installed dataset is checked if present.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "examples/common/fashion_mnist.hpp"

namespace fs = std::filesystem;
using ktape::DType;
using ktape::IOError;
using ktape::NDArray;
using ktape::Shape;
namespace data = ktape::data;

namespace {

using Bytes = std::vector<unsigned char>;

void put_u32(Bytes& b, std::uint32_t v) {
  b.push_back(static_cast<unsigned char>(v >> 24));
  b.push_back(static_cast<unsigned char>(v >> 16));
  b.push_back(static_cast<unsigned char>(v >> 8));
  b.push_back(static_cast<unsigned char>(v));
}

Bytes image_file(std::uint32_t n, std::uint32_t rows, std::uint32_t cols, const Bytes& pixels,
                 std::uint32_t magic = 0x00000803) {
  Bytes b;
  put_u32(b, magic);
  put_u32(b, n);
  put_u32(b, rows);
  put_u32(b, cols);
  b.insert(b.end(), pixels.begin(), pixels.end());
  return b;
}

Bytes label_file(std::uint32_t n, const Bytes& labels, std::uint32_t magic = 0x00000801) {
  Bytes b;
  put_u32(b, magic);
  put_u32(b, n);
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

class FashionMnistTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("ktape_fmnist_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write_gz(const std::string& name, const Bytes& bytes) {
    const std::string path = (dir_ / name).string();
    gzFile f = gzopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    if (!bytes.empty()) {
      EXPECT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
                static_cast<int>(bytes.size()));
    }
    gzclose(f);
    return path;
  }
  std::string write_plain(const std::string& name, const Bytes& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    return path;
  }

  // 3 images of 2x2 and 3 labels, as the "train" split.
  void write_small_split() {
    write_gz("train-images-idx3-ubyte.gz",
             image_file(3, 2, 2, {0, 51, 255, 102, 1, 2, 3, 4, 255, 255, 0, 0}));
    write_gz("train-labels-idx1-ubyte.gz", label_file(3, {9, 0, 3}));
  }

  fs::path dir_;
};

template <class F>
std::string error_message(F&& f) {
  try {
    f();
  } catch (const IOError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected IOError";
  return "";
}

TEST_F(FashionMnistTest, ReadsGzipImages) {
  const auto path = write_gz("img.gz", image_file(2, 2, 3,
                                                  {0, 51, 255, 102, 1, 2,  //
                                                   10, 20, 30, 40, 50, 60}));
  NDArray a = data::read_idx_images(path);
  EXPECT_EQ(a.dtype(), DType::uint8);  // the file's bytes; batches convert
  EXPECT_EQ(a.shape(), (Shape{2, 6}));
  const std::uint8_t* p = a.data<std::uint8_t>();
  const std::vector<std::uint8_t> want{0, 51, 255, 102, 1, 2, 10, 20, 30, 40, 50, 60};
  EXPECT_EQ(std::vector<std::uint8_t>(p, p + 12), want);
}

TEST_F(FashionMnistTest, PixelsToFloatDividesBy255) {
  const std::uint8_t px[] = {0, 51, 255, 102, 60};
  float f[5];
  data::pixels_to_float(px, 5, f);
  EXPECT_EQ(f[0], 0.0f);
  EXPECT_EQ(f[1], 0.2f);  // 51 / 255 rounds to the float nearest 0.2
  EXPECT_EQ(f[2], 1.0f);
  EXPECT_EQ(f[3], 0.4f);
  EXPECT_EQ(f[4], 60.0f / 255.0f);
}

TEST_F(FashionMnistTest, ReadsGzipLabels) {
  const auto path = write_gz("lbl.gz", label_file(4, {9, 0, 7, 255}));
  NDArray l = data::read_idx_labels(path);
  EXPECT_EQ(l.dtype(), DType::int32);
  EXPECT_EQ(l.shape(), (Shape{4}));
  const std::int32_t* p = l.data<std::int32_t>();
  EXPECT_EQ(p[0], 9);
  EXPECT_EQ(p[1], 0);
  EXPECT_EQ(p[2], 7);
  EXPECT_EQ(p[3], 255);
}

TEST_F(FashionMnistTest, ReadsUncompressedFiles) {
  const auto img = write_plain("img", image_file(1, 1, 2, {255, 51}));
  const auto lbl = write_plain("lbl", label_file(2, {5, 6}));
  NDArray a = data::read_idx_images(img);
  EXPECT_EQ(a.shape(), (Shape{1, 2}));
  EXPECT_EQ(a.data<std::uint8_t>()[0], 255);
  EXPECT_EQ(a.data<std::uint8_t>()[1], 51);
  NDArray l = data::read_idx_labels(lbl);
  EXPECT_EQ(l.shape(), (Shape{2}));
  EXPECT_EQ(l.data<std::int32_t>()[1], 6);
}

TEST_F(FashionMnistTest, LimitTakesFirstRows) {
  const auto img = write_gz("img.gz", image_file(3, 1, 2, {1, 2, 3, 4, 5, 6}));
  const auto lbl = write_gz("lbl.gz", label_file(3, {7, 8, 9}));
  NDArray a = data::read_idx_images(img, 2);
  EXPECT_EQ(a.shape(), (Shape{2, 2}));
  EXPECT_EQ(a.data<std::uint8_t>()[3], 4);
  NDArray l = data::read_idx_labels(lbl, 1);
  EXPECT_EQ(l.shape(), (Shape{1}));
  EXPECT_EQ(l.data<std::int32_t>()[0], 7);
  EXPECT_EQ(data::read_idx_images(img, 0).shape(), (Shape{0, 2}));
  EXPECT_EQ(data::read_idx_images(img, 100).shape(), (Shape{3, 2}));
  EXPECT_EQ(data::read_idx_labels(lbl, 100).shape(), (Shape{3}));
  EXPECT_EQ(data::read_idx_labels(lbl, -1).shape(), (Shape{3}));
}

TEST_F(FashionMnistTest, LimitDoesNotNeedTheRestOfTheFile) {
  // Only the first image is present; reading just it must succeed.
  const auto img = write_gz("img.gz", image_file(5, 1, 2, {10, 20}));
  EXPECT_EQ(data::read_idx_images(img, 1).shape(), (Shape{1, 2}));
  EXPECT_THROW(data::read_idx_images(img, 2), IOError);
}

TEST_F(FashionMnistTest, LoadsSplit) {
  write_small_split();
  data::Dataset ds = data::load_fashion_mnist(dir_.string(), "train");
  EXPECT_EQ(ds.images.shape(), (Shape{3, 4}));
  EXPECT_EQ(ds.labels.shape(), (Shape{3}));
  EXPECT_EQ(ds.images.data<std::uint8_t>()[2], 255);
  EXPECT_EQ(ds.images.data<std::uint8_t>()[1], 51);
  EXPECT_EQ(ds.labels.data<std::int32_t>()[0], 9);
  EXPECT_EQ(ds.labels.data<std::int32_t>()[2], 3);

  data::Dataset two = data::load_fashion_mnist(dir_.string(), "train", 2);
  EXPECT_EQ(two.images.shape(), (Shape{2, 4}));
  EXPECT_EQ(two.labels.shape(), (Shape{2}));
  EXPECT_EQ(two.images.data<std::uint8_t>()[4], 1);
}

TEST_F(FashionMnistTest, LoadsUncompressedSplitWhenGzAbsent) {
  write_plain("t10k-images-idx3-ubyte", image_file(1, 1, 1, {255}));
  write_plain("t10k-labels-idx1-ubyte", label_file(1, {4}));
  data::Dataset ds = data::load_fashion_mnist(dir_.string(), "t10k");
  EXPECT_EQ(ds.images.shape(), (Shape{1, 1}));
  EXPECT_EQ(ds.labels.data<std::int32_t>()[0], 4);
}

TEST_F(FashionMnistTest, BadSplitName) {
  write_small_split();
  EXPECT_THROW(data::load_fashion_mnist(dir_.string(), "test"), ktape::ValueError);
}

TEST_F(FashionMnistTest, MissingFileMessage) {
  const std::string path = (dir_ / "nope-images-idx3-ubyte.gz").string();
  const std::string msg = error_message([&] { data::read_idx_images(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("Fashion-MNIST not found at"), std::string::npos) << msg;
  EXPECT_NE(msg.find("apt-get install dataset-fashion-mnist"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--data-dir"), std::string::npos) << msg;

  const std::string lmsg = error_message([&] { data::read_idx_labels(path); });
  EXPECT_NE(lmsg.find(path), std::string::npos) << lmsg;

  const std::string missing_dir = (dir_ / "absent").string();
  const std::string dmsg = error_message([&] { data::load_fashion_mnist(missing_dir, "train"); });
  EXPECT_NE(dmsg.find(missing_dir), std::string::npos) << dmsg;
  EXPECT_NE(dmsg.find("train-images-idx3-ubyte"), std::string::npos) << dmsg;
  EXPECT_NE(dmsg.find("apt-get install dataset-fashion-mnist"), std::string::npos) << dmsg;
}

TEST_F(FashionMnistTest, BadMagic) {
  const auto img = write_gz("img.gz", label_file(1, {3}));  // a label file read as images
  const std::string msg = error_message([&] { data::read_idx_images(img); });
  EXPECT_NE(msg.find(img), std::string::npos) << msg;
  EXPECT_NE(msg.find("magic"), std::string::npos) << msg;
  EXPECT_NE(msg.find("0x00000803"), std::string::npos) << msg;
  EXPECT_NE(msg.find("0x00000801"), std::string::npos) << msg;

  const auto lbl = write_gz("lbl.gz", label_file(1, {3}, 0x12345678));
  const std::string lmsg = error_message([&] { data::read_idx_labels(lbl); });
  EXPECT_NE(lmsg.find(lbl), std::string::npos) << lmsg;
  EXPECT_NE(lmsg.find("0x00000801"), std::string::npos) << lmsg;
  EXPECT_NE(lmsg.find("0x12345678"), std::string::npos) << lmsg;
}

TEST_F(FashionMnistTest, TruncatedData) {
  // Header says 2 images of 2x2 (8 bytes) but only 5 pixel bytes follow.
  const auto img = write_gz("img.gz", image_file(2, 2, 2, {1, 2, 3, 4, 5}));
  const std::string msg = error_message([&] { data::read_idx_images(img); });
  EXPECT_NE(msg.find(img), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected 8"), std::string::npos) << msg;
  EXPECT_NE(msg.find("found 5"), std::string::npos) << msg;

  const auto lbl = write_plain("lbl", label_file(4, {1, 2}));
  const std::string lmsg = error_message([&] { data::read_idx_labels(lbl); });
  EXPECT_NE(lmsg.find("expected 4"), std::string::npos) << lmsg;
  EXPECT_NE(lmsg.find("found 2"), std::string::npos) << lmsg;

  // Truncated header.
  const auto hdr = write_gz("hdr.gz", Bytes{0, 0, 8, 3, 0, 0});
  const std::string hmsg = error_message([&] { data::read_idx_images(hdr); });
  EXPECT_NE(hmsg.find("truncated"), std::string::npos) << hmsg;

  // Empty file.
  const auto empty = write_plain("empty", {});
  EXPECT_THROW(data::read_idx_labels(empty), IOError);
}

TEST_F(FashionMnistTest, CorruptHeaderNeverAllocatesWhatItClaims) {
  // A header claiming 65536 x 65536 pixels per image (4 GiB each) over a few bytes of data must
  // be a clear IOError, not std::bad_alloc; likewise a count of 2^32 - 1 labels, and dims whose
  // product overflows.
  const auto img = write_gz("huge.gz", image_file(60000, 65536, 65536, {1, 2, 3}));
  const std::string msg = error_message([&] { data::read_idx_images(img); });
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("65536x65536"), std::string::npos) << msg;
  EXPECT_NE(msg.find("found 3"), std::string::npos) << msg;
  const auto plain = write_plain("huge", image_file(1, 65536, 65536, {}));
  EXPECT_NE(error_message([&] { data::read_idx_images(plain); }).find("found 0"),
            std::string::npos);
  const auto lbl = write_plain("lbl", label_file(0xFFFFFFFFu, {1, 2}));
  EXPECT_NE(error_message([&] { data::read_idx_labels(lbl); }).find("found 2"), std::string::npos);
  const auto over = write_plain("over", image_file(0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, {}));
  EXPECT_NE(error_message([&] { data::read_idx_images(over); }).find("implausible header"),
            std::string::npos);
  const auto zero = write_plain("zero", image_file(3, 0, 28, {}));
  EXPECT_NE(error_message([&] { data::read_idx_images(zero); }).find("implausible header"),
            std::string::npos);
}

TEST_F(FashionMnistTest, TruncatedGzipStream) {
  // A valid gzip file cut in the middle of its compressed stream.
  Bytes pixels(4000);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<unsigned char>(i * 7);
  const auto full = write_gz("full.gz", image_file(10, 20, 20, pixels));
  std::ifstream in(full, std::ios::binary);
  Bytes gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(gz.size(), 40u);
  gz.resize(gz.size() / 2);
  const auto cut = write_plain("cut.gz", gz);
  const std::string msg = error_message([&] { data::read_idx_images(cut); });
  EXPECT_NE(msg.find(cut), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST_F(FashionMnistTest, CountMismatch) {
  write_gz("train-images-idx3-ubyte.gz", image_file(3, 1, 1, {1, 2, 3}));
  write_gz("train-labels-idx1-ubyte.gz", label_file(2, {1, 2}));
  const std::string msg = error_message([&] { data::load_fashion_mnist(dir_.string(), "train"); });
  EXPECT_NE(msg.find("train-images-idx3-ubyte.gz"), std::string::npos) << msg;
  EXPECT_NE(msg.find("train-labels-idx1-ubyte.gz"), std::string::npos) << msg;
  EXPECT_NE(msg.find("3 images"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2 labels"), std::string::npos) << msg;
  // Also detected when a limit hides the difference.
  EXPECT_THROW(data::load_fashion_mnist(dir_.string(), "train", 1), IOError);
}

TEST(FashionMnistInstalled, LoadsT10kFirst100) {
  const std::string dir = data::default_fashion_mnist_dir();
  EXPECT_EQ(dir, "/usr/share/datasets/fashion-mnist");
  if (!fs::exists(dir)) GTEST_SKIP() << "Fashion-MNIST not installed at " << dir;
  data::Dataset ds = data::load_fashion_mnist(dir, "t10k", 100);
  ASSERT_EQ(ds.images.shape(), (Shape{100, 784}));
  ASSERT_EQ(ds.labels.shape(), (Shape{100}));
  ASSERT_EQ(ds.images.dtype(), DType::uint8);
  const std::uint8_t* p = ds.images.data<std::uint8_t>();
  EXPECT_GT(*std::max_element(p, p + ds.images.size()), 128);
  const std::int32_t* l = ds.labels.data<std::int32_t>();
  for (std::int64_t i = 0; i < ds.labels.size(); ++i) {
    ASSERT_GE(l[i], 0);
    ASSERT_LE(l[i], 9);
  }
  EXPECT_EQ(l[0], 9);  // the first test image is an ankle boot
}

}  // namespace
