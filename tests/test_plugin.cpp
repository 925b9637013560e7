// External-backend plugins: a path to a shared library loads a backend through
// ktape_backend_register; loading validates it and lists every missing required kernel; the
// path can be chosen through KERAS_BACKEND or keras.json. The plugins are built from
// tests/plugins/ (good: complete, with its own Exp; bad: only Add, Exp and MatMul;
// no_register: no ktape_backend_register at all).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/backend.hpp"
#include "engine/config.hpp"
#include "ktape/ktape.hpp"
#include "test_util.hpp"

namespace K = ktape::backend;
using ktape::DType;
using ktape::NDArray;
using ktape::Op;
using ktape::Shape;
using ktape::Tensor;

namespace {

const std::string kGood = KTAPE_GOOD_PLUGIN;
const std::string kBad = KTAPE_BAD_PLUGIN;
const std::string kNoRegister = KTAPE_NO_REGISTER_PLUGIN;

using ktape::testing_util::contains;

// The message of the ValueError `f` throws; a test failure if it throws nothing or another type.
template <class F>
std::string value_error_of(F f) {
  try {
    f();
  } catch (const ktape::ValueError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected ktape::ValueError, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected ktape::ValueError, nothing was thrown";
  return "";
}

// Whether `path` is mapped into this process right now (RTLD_NOLOAD never loads it).
bool is_loaded(const std::string& path) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (h) dlclose(h);
  return h != nullptr;
}

// A symbol of the (already loaded) good plugin.
void* good_plugin_symbol(const char* name) {
  void* h = dlopen(kGood.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (!h) return nullptr;
  void* s = dlsym(h, name);
  dlclose(h);  // the backend loader keeps its own reference
  return s;
}

long good_plugin_exp_calls() {
  auto fn = reinterpret_cast<long (*)()>(good_plugin_symbol("good_plugin_exp_calls"));
  if (!fn) {
    ADD_FAILURE() << "good_plugin_exp_calls not found in " << kGood;
    return -1;
  }
  return fn();
}

std::optional<Op> op_by_name(const std::string& name) {
  for (int i = 0; i < ktape::kNumOps; ++i)
    if (ktape::op_name(static_cast<Op>(i)) == name) return static_cast<Op>(i);
  return std::nullopt;
}

std::vector<std::string> split(const std::string& s, const std::string& sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t i = s.find(sep, start);
    out.push_back(s.substr(start, i == std::string::npos ? std::string::npos : i - start));
    if (i == std::string::npos) return out;
    start = i + sep.size();
  }
}

using ktape::testing_util::get_env;
using ktape::testing_util::restore_env;

NDArray f32(const std::vector<double>& values) {
  return NDArray::from_values(values, Shape{static_cast<std::int64_t>(values.size())},
                              DType::float32);
}

TEST(Plugin, RequiredKernelsAreTheComputeOps) {
  // The list the validation checks against: ops with a float32 reference kernel, never the
  // sources that have no kernel (placeholders, variables, constants).
  const auto req = ktape::required_plugin_kernels();
  const std::set<std::string> s(req.begin(), req.end());
  for (const char* op : {"Add", "AddN", "Sub", "Mul", "Exp", "MatMul", "Softmax", "Sum"})
    EXPECT_TRUE(s.count(op)) << op;
  for (const char* op : {"Placeholder", "Variable", "Constant"}) EXPECT_FALSE(s.count(op)) << op;
}

TEST(Plugin, GoodPluginLoadsByPathAndRunsItsOwnKernel) {
  const ktape::Backend& b = ktape::backend_by_name(kGood);
  EXPECT_EQ(b.name, kGood);
  EXPECT_TRUE(is_loaded(kGood));
  EXPECT_EQ(&ktape::backend_by_name(kGood), &b);  // loaded once, then cached

  // Every required kernel is there: the reference one, except the plugin's own Exp.
  const auto own_exp = reinterpret_cast<ktape::KernelFn>(good_plugin_symbol("good_plugin_exp"));
  ASSERT_NE(own_exp, nullptr);
  for (const std::string& name : ktape::required_plugin_kernels()) {
    const Op op = *op_by_name(name);
    const ktape::KernelFn ref = ktape::reference_backend().get(op, DType::float32);
    if (name == "Exp") {
      EXPECT_EQ(b.get(op, DType::float32), own_exp);
      EXPECT_NE(b.get(op, DType::float32), ref);
    } else {
      EXPECT_EQ(b.get(op, DType::float32), ref) << name;
    }
  }

  // exp(x) + 1 through the plugin: Exp is the plugin's loop (one call), Add the host's.
  // By hand: e^0 + 1 = 2, e^1 + 1 = 3.7182817, e^-1 + 1 = 1.3678794, e^2 + 1 = 8.3890561.
  Tensor x = K::placeholder(Shape{4});
  const Tensor y = K::exp(x) + 1.0;
  const K::Function f = K::function({x}, {y}, {}, {.backend = kGood});
  const long before = good_plugin_exp_calls();
  const NDArray out = f({f32({0, 1, -1, 2})})[0];
  EXPECT_EQ(good_plugin_exp_calls(), before + 1);
  ASSERT_EQ(out.shape(), Shape{4});
  ASSERT_EQ(out.dtype(), DType::float32);
  EXPECT_FLOAT_EQ(out.at<float>({0}), 2.0f);
  EXPECT_FLOAT_EQ(out.at<float>({1}), 3.7182817f);
  EXPECT_FLOAT_EQ(out.at<float>({2}), 1.3678794f);
  EXPECT_FLOAT_EQ(out.at<float>({3}), 8.3890561f);

  // Control: the same graph on the reference backend gives the same values without the plugin.
  const K::Function g = K::function({x}, {y}, {}, {.backend = "reference"});
  const NDArray ref_out = g({f32({0, 1, -1, 2})})[0];
  EXPECT_EQ(good_plugin_exp_calls(), before + 1);
  EXPECT_FLOAT_EQ(ref_out.at<float>({3}), 8.3890561f);
}

TEST(Plugin, BadPluginErrorListsEveryMissingKernel) {
  const std::string msg = value_error_of([] { ktape::backend_by_name(kBad); });
  EXPECT_TRUE(contains(msg, "'" + kBad + "'")) << msg;

  // The list after "kernel(s): " must be exactly the required kernels the plugin left out,
  // compared name by name (substrings would lie: "Add" is inside "AddN", "Max" in "Maximum").
  const std::set<std::string> registered = {"Add", "Exp", "MatMul"};
  std::vector<std::string> expected;
  for (const std::string& name : ktape::required_plugin_kernels())
    if (!registered.count(name)) expected.push_back(name);
  const std::size_t at = msg.find("kernel(s): ");
  ASSERT_NE(at, std::string::npos) << msg;
  const std::vector<std::string> listed = split(msg.substr(at + 11), ", ");
  EXPECT_EQ(listed, expected) << msg;
  const std::set<std::string> listed_set(listed.begin(), listed.end());
  for (const std::string& name : registered) EXPECT_FALSE(listed_set.count(name)) << name;
  for (const char* name : {"AddN", "Sub", "Mul", "Softmax", "Concat"})
    EXPECT_TRUE(listed_set.count(name)) << name;
  EXPECT_TRUE(contains(msg, "Missing " + std::to_string(expected.size()) + " required")) << msg;

  // A rejected library is unloaded again, and a second attempt fails the same way.
  EXPECT_FALSE(is_loaded(kBad));
  EXPECT_EQ(value_error_of([] { ktape::backend_by_name(kBad); }), msg);
}

TEST(Plugin, MissingLibraryOrSymbolNamesThePath) {
  const std::string missing = "/nonexistent/ktape/libktape_missing_backend.so";
  std::string msg = value_error_of([&] { ktape::backend_by_name(missing); });
  EXPECT_TRUE(contains(msg, "Unable to load backend '" + missing + "'")) << msg;

  // A bare "*.so" name is a plugin path too (dlopen searches the library path), not a name.
  msg = value_error_of([] { ktape::backend_by_name("libktape_missing_backend.so"); });
  EXPECT_TRUE(contains(msg, "Unable to load backend 'libktape_missing_backend.so'")) << msg;
  msg = value_error_of([] { ktape::backend_by_name("no_such_backend"); });
  EXPECT_TRUE(contains(msg, "Unknown backend 'no_such_backend'")) << msg;

  msg = value_error_of([] { ktape::backend_by_name(kNoRegister); });
  EXPECT_TRUE(contains(msg, "'" + kNoRegister + "'")) << msg;
  EXPECT_TRUE(contains(msg, "ktape_backend_register")) << msg;
  EXPECT_FALSE(is_loaded(kNoRegister));
}

// Selection through the configuration; restores the environment and the backend choice.
class PluginSelectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_keras_home_ = get_env("KERAS_HOME");
    saved_keras_backend_ = get_env("KERAS_BACKEND");
    backend_before_ = K::backend();
    char tmpl[] = "/tmp/ktape_plugin_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    setenv("KERAS_HOME", dir_.c_str(), 1);
    unsetenv("KERAS_BACKEND");
  }

  void TearDown() override {
    restore_env("KERAS_HOME", saved_keras_home_);
    restore_env("KERAS_BACKEND", saved_keras_backend_);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    ktape::config::reload();
    ktape::reset_backend_selection();
    EXPECT_EQ(K::backend(), backend_before_);
  }

  // Loads the configuration again and forgets the chosen backend, as a fresh process would.
  static void reselect() {
    ktape::config::reload();
    ktape::reset_backend_selection();
  }

  std::optional<std::string> saved_keras_home_, saved_keras_backend_;
  std::string backend_before_, dir_;
};

TEST_F(PluginSelectionTest, KerasBackendEnvSelectsThePlugin) {
  setenv("KERAS_BACKEND", kGood.c_str(), 1);
  reselect();
  EXPECT_EQ(K::backend(), kGood);
  EXPECT_EQ(&ktape::active_backend(), &ktape::backend_by_name(kGood));

  // K::eval uses the active backend, so the plugin's Exp runs: e^1 = 2.7182817, e^0 = 1.
  const long before = good_plugin_exp_calls();
  const NDArray out = K::eval(K::exp(K::constant(f32({1, 0}))));
  EXPECT_EQ(good_plugin_exp_calls(), before + 1);
  EXPECT_FLOAT_EQ(out.at<float>({0}), 2.7182817f);
  EXPECT_FLOAT_EQ(out.at<float>({1}), 1.0f);
}

TEST_F(PluginSelectionTest, KerasJsonSelectsThePlugin) {
  std::ofstream(dir_ + "/keras.json") << "{\"backend\": \"" << kGood << "\"}";
  reselect();
  EXPECT_EQ(K::backend(), kGood);
}

TEST_F(PluginSelectionTest, InvalidPluginInKerasBackendFailsSelection) {
  setenv("KERAS_BACKEND", kBad.c_str(), 1);
  reselect();
  const std::string msg = value_error_of([] { K::backend(); });
  EXPECT_TRUE(contains(msg, "'" + kBad + "'")) << msg;
  EXPECT_TRUE(contains(msg, "required float32 kernel(s): ")) << msg;
}

}  // namespace
