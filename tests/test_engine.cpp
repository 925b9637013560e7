// Engine basics: dtypes and half conversion, shapes, NDArray, the tape's id order and hash-consing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "engine/arena.hpp"
#include "ktape/ktape.hpp"

namespace K = ktape::backend;
using ktape::DType;
using ktape::NDArray;
using ktape::Shape;

TEST(DType, NamesRoundTrip) {
  for (const char* n :
       {"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"})
    EXPECT_EQ(ktape::dtype_name(ktape::dtype_from_name(n)), n);
  EXPECT_THROW(ktape::dtype_from_name("float128"), ktape::TypeError);
  EXPECT_EQ(ktape::dtype_size(DType::float16), 2u);
  EXPECT_EQ(ktape::dtype_size(DType::int64), 8u);
  EXPECT_TRUE(ktape::is_floating(DType::float16));
  EXPECT_FALSE(ktape::is_integer(DType::bool_));
}

TEST(DType, HalfConversion) {
  // IEEE binary16 bit patterns, by hand: 1.0 = 0x3c00, -2.0 = 0xc000, 65504 = 0x7bff (max),
  // 2^-24 = 0x0001 (smallest subnormal), 2^-14 = 0x0400 (smallest normal), 0.1 -> 0x2e66.
  EXPECT_EQ(ktape::Half(1.0f).bits, 0x3c00);
  EXPECT_EQ(ktape::Half(-2.0f).bits, 0xc000);
  EXPECT_EQ(ktape::Half(65504.0f).bits, 0x7bff);
  EXPECT_EQ(ktape::Half(1e6f).bits, 0x7c00);  // overflow -> inf
  EXPECT_EQ(ktape::Half(std::ldexp(1.0f, -24)).bits, 0x0001);
  EXPECT_EQ(ktape::Half(std::ldexp(1.0f, -14)).bits, 0x0400);
  EXPECT_EQ(ktape::Half(0.1f).bits, 0x2e66);
  EXPECT_EQ(static_cast<float>(ktape::Half(0.5f)), 0.5f);
  ktape::Half h;
  h.bits = 0x0001;
  EXPECT_EQ(static_cast<float>(h), std::ldexp(1.0f, -24));
  h.bits = 0x7e00;
  EXPECT_TRUE(std::isnan(static_cast<float>(h)));
}

TEST(Shape, Basics) {
  const Shape s{K::None, 784};
  EXPECT_EQ(s.ndim(), 2);
  EXPECT_FALSE(s.is_fully_defined());
  EXPECT_EQ(s.num_elements(), K::None);
  EXPECT_EQ(s.str(), "(None, 784)");
  EXPECT_EQ(Shape{3}.str(), "(3,)");
  EXPECT_EQ(Shape{}.num_elements(), 1);
  EXPECT_EQ(ktape::normalize_axis(-1, 3, "f"), 2);
  EXPECT_THROW(ktape::normalize_axis(3, 3, "f"), ktape::ValueError);
}

TEST(NDArray, ConstructionAndAccess) {
  NDArray a = NDArray::from_values({1, 2, 3, 4, 5, 6}, Shape{2, 3}, DType::float32);
  EXPECT_EQ(a.size(), 6);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.raw_data()) % 64, 0u);
  EXPECT_EQ((a.at<float>({1, 2})), 6.0f);
  EXPECT_THROW((a.at<float>({2, 0})), ktape::ValueError);
  EXPECT_THROW(a.data<double>(), ktape::TypeError);
  EXPECT_THROW(NDArray::from_values({1, 2}, Shape{3}), ktape::ValueError);
  EXPECT_THROW(NDArray(Shape{K::None, 2}, DType::float32), ktape::ValueError);
  NDArray b = a.astype(DType::int32);
  EXPECT_EQ(b.data<std::int32_t>()[4], 5);
  NDArray c = a.clone();
  c.set_item(0, 42);
  EXPECT_EQ(a.item(0), 1.0);
  NDArray z(Shape{0, 3}, DType::float64);
  EXPECT_EQ(z.size(), 0);
  NDArray bools = NDArray::from_values({0, 2}, Shape{2}, DType::bool_);
  EXPECT_EQ(bools.item(1), 1.0);
  NDArray h = NDArray::from_values({1.5}, Shape{}, DType::float16);
  EXPECT_EQ(h.item(0), 1.5);
}

namespace {

// The VmFlags of the mapping of this process holding `p` (/proc/self/smaps), or "" if none.
std::string vm_flags_of(const void* p) {
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    std::uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= at && at < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

}  // namespace

// Buffers of 4 MiB or more (a Function's arena, a dataset) are mapped from a 2 MiB boundary and
// advised as transparent huge pages (VmFlags "hg", MADV_HUGEPAGE), and read as zeros; smaller
// ones, and every one while ktape::set_huge_pages(false) holds, are left to the allocator.
TEST(NDArray, LargeBuffersAreAdvisedAsHugePages) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "under ASan large buffers stay with the allocator (its redzones)";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  GTEST_SKIP() << "under ASan large buffers stay with the allocator (its redzones)";
#endif
#endif
  if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled"))
    GTEST_SKIP() << "a kernel without transparent huge pages";
  const NDArray big(Shape{1 << 20, 2}, DType::float32);  // 8 MiB
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(big.raw_data()) % (std::uintptr_t{2} << 20), 0u);
  EXPECT_NE(vm_flags_of(big.raw_data()).find(" hg"), std::string::npos)
      << vm_flags_of(big.raw_data());
  const float* v = big.data<float>();
  for (std::int64_t i = 0; i < big.size(); i += 4093) ASSERT_EQ(v[i], 0.0f) << i;
  EXPECT_EQ(v[big.size() - 1], 0.0f);
  const NDArray small(Shape{1 << 18}, DType::float32);  // 1 MiB
  EXPECT_EQ(vm_flags_of(small.raw_data()).find(" hg"), std::string::npos);
  struct SmallPages {
    SmallPages() { ktape::set_huge_pages(false); }
    ~SmallPages() { ktape::set_huge_pages(true); }
  };
  const NDArray plain = [] {
    const SmallPages small_pages;
    return NDArray(Shape{1 << 20, 2}, DType::float32);
  }();
  EXPECT_EQ(vm_flags_of(plain.raw_data()).find(" hg"), std::string::npos);
}

TEST(Tape, IdsAreTopologicalAndPureNodesAreShared) {
  auto x = K::placeholder({K::None, 3});
  auto y = K::exp(x);
  auto z = y + x;
  EXPECT_LT(x.id(), y.id());
  EXPECT_LT(y.id(), z.id());
  // hash-consing: the same pure expression is the same node
  EXPECT_EQ(K::exp(x), y);
  EXPECT_EQ(K::exp(x) + x, z);
  // never for random ops or variables
  EXPECT_NE(K::random_uniform({2}, 0, 1, {.seed = 1}), K::random_uniform({2}, 0, 1, {.seed = 1}));
  EXPECT_NE(K::variable(1.0), K::variable(1.0));
}

TEST(Tape, NullTensorOperandIsAClearError) {
  ktape::Tensor null;
  auto x = K::variable(1.0);
  try {
    (void)(x + null);
    FAIL() << "expected ValueError";
  } catch (const ktape::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("null tensor"), std::string::npos);
  }
}

TEST(Eager, ScopeEvaluatesAtBuildTime) {
  auto v = K::variable(NDArray::from_values({1, 2}, Shape{2}));
  ktape::Tensor y;
  {
    K::EagerScope eager;
    y = v * 3.0;
  }
  K::set_value(v, NDArray::from_values({10, 20}, Shape{2}));
  // y was computed when built, from the value v had then.
  EXPECT_EQ(K::eval(y).to_vector(), (std::vector<double>{3, 6}));
  auto f = K::eager([&](const ktape::Tensor& a) { return a + 1.0; });
  EXPECT_EQ(K::eval(f(v)).to_vector(), (std::vector<double>{11, 21}));
  // a lazily built tensor reads the current value
  EXPECT_EQ(K::eval(v * 3.0).to_vector(), (std::vector<double>{30, 60}));
}
