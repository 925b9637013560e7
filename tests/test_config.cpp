// Tests for engine/config: keras.json loading/writing, KERAS_HOME/KERAS_BACKEND handling and
// the global floatx / epsilon / data-format API.
#include "engine/config.hpp"
#include "test_util.hpp"

#include <gtest/gtest.h>
#include <unistd.h>
#include <cmath>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/errors.hpp"

namespace {

namespace fs = std::filesystem;
namespace cfg = ktape::config;

using ktape::testing_util::get_env;
using ktape::testing_util::restore_env;

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_bytes(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
}

using ktape::testing_util::contains;

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_home_ = get_env("HOME");
    saved_keras_home_ = get_env("KERAS_HOME");
    saved_keras_backend_ = get_env("KERAS_BACKEND");
    char tmpl[] = "/tmp/ktape_config_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/keras.json";
    setenv("KERAS_HOME", dir_.c_str(), 1);
    unsetenv("KERAS_BACKEND");
  }

  void TearDown() override {
    restore_env("HOME", saved_home_);
    restore_env("KERAS_HOME", saved_keras_home_);
    restore_env("KERAS_BACKEND", saved_keras_backend_);
    std::error_code ec;
    fs::remove_all(dir_, ec);
    try {
      cfg::reload();
    } catch (const std::exception&) {
      // The user's own keras.json is not this test's business.
    }
  }

  // Writes keras.json with `content`, then reloads and expects a ValueError whose message
  // names the file, the key and the bad value.
  void expect_invalid(const std::string& content, const std::string& key,
                      const std::string& shown_value) {
    write_bytes(path_, content);
    try {
      cfg::reload();
      FAIL() << "expected ValueError for " << content;
    } catch (const ktape::ValueError& e) {
      const std::string msg = e.what();
      EXPECT_TRUE(contains(msg, path_)) << msg;
      EXPECT_TRUE(contains(msg, "\"" + key + "\"")) << msg;
      EXPECT_TRUE(contains(msg, "\"" + key + "\": " + shown_value)) << msg;
    }
    EXPECT_EQ(read_bytes(path_), content);
  }

  std::optional<std::string> saved_home_, saved_keras_home_, saved_keras_backend_;
  std::string dir_, path_;
};

TEST_F(ConfigTest, DefaultsWrittenWhenMissing) {
  ASSERT_FALSE(fs::exists(path_));
  cfg::reload();
  ASSERT_TRUE(fs::exists(path_));

  const nlohmann::json j = nlohmann::json::parse(read_bytes(path_));
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.size(), 4u);
  EXPECT_EQ(j.at("floatx"), "float32");
  ASSERT_TRUE(j.at("epsilon").is_number_float());
  EXPECT_EQ(j.at("epsilon").get<double>(), 1e-07);
  EXPECT_EQ(j.at("backend"), "cpu");
  EXPECT_EQ(j.at("image_data_format"), "channels_last");

  // Same text and key order as json.dumps(_config, indent=4) in Keras.
  EXPECT_EQ(read_bytes(path_),
            "{\n"
            "    \"floatx\": \"float32\",\n"
            "    \"epsilon\": 1e-07,\n"
            "    \"backend\": \"cpu\",\n"
            "    \"image_data_format\": \"channels_last\"\n"
            "}");

  EXPECT_EQ(cfg::floatx(), "float32");
  EXPECT_EQ(cfg::floatx_dtype(), ktape::DType::float32);
  EXPECT_EQ(cfg::epsilon(), 1e-07);
  EXPECT_EQ(cfg::image_data_format(), "channels_last");
  EXPECT_EQ(cfg::backend_name(), "cpu");

  // No temporary file is left behind.
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"keras.json"});
}

TEST_F(ConfigTest, ExistingFileRead) {
  write_bytes(path_,
              R"({"floatx": "float64", "epsilon": 1e-5, "image_data_format": "channels_first",)"
              R"( "backend": "reference", "unknown_key": [1, 2], "image_dim_ordering": "tf"})");
  cfg::reload();
  EXPECT_EQ(cfg::floatx(), "float64");
  EXPECT_EQ(cfg::floatx_dtype(), ktape::DType::float64);
  EXPECT_EQ(cfg::epsilon(), 1e-5);
  EXPECT_EQ(cfg::image_data_format(), "channels_first");
  EXPECT_EQ(cfg::image_dim_ordering(), "th");
  EXPECT_EQ(cfg::backend_name(), "reference");
}

TEST_F(ConfigTest, PartialFileUsesDefaultsForMissingKeys) {
  write_bytes(path_, R"({"floatx": "float16"})");
  cfg::reload();
  EXPECT_EQ(cfg::floatx(), "float16");
  EXPECT_EQ(cfg::epsilon(), 1e-07);
  EXPECT_EQ(cfg::image_data_format(), "channels_last");
  EXPECT_EQ(cfg::backend_name(), "cpu");
}

TEST_F(ConfigTest, ExistingFileNeverModified) {
  const std::string content = "{\"backend\":\"reference\",   \"epsilon\": 0.001}\n";
  write_bytes(path_, content);
  cfg::reload();
  EXPECT_EQ(cfg::epsilon(), 0.001);
  cfg::set_floatx("float16");
  cfg::set_epsilon(0.5);
  cfg::set_image_data_format("channels_first");
  EXPECT_EQ(read_bytes(path_), content);
  cfg::reload();
  EXPECT_EQ(read_bytes(path_), content);
  // reload() discards the in-memory setter values.
  EXPECT_EQ(cfg::floatx(), "float32");
  EXPECT_EQ(cfg::epsilon(), 0.001);
  EXPECT_EQ(cfg::image_data_format(), "channels_last");
}

TEST_F(ConfigTest, MalformedJsonUsesDefaultsAndKeepsFile) {
  for (const std::string& content :
       {std::string("{\"floatx\": \"float64\",,"), std::string(""), std::string("not json"),
        std::string("[\"float64\"]"), std::string("\"channels_first\""),
        // A number no double holds (found by fuzz_config): nlohmann's out_of_range, not a
        // parse error, and it escaped before.
        std::string("{\"floatx\": \"float64\", \"epsilon\": 1e317}")}) {
    write_bytes(path_, content);
    cfg::reload();
    EXPECT_EQ(cfg::floatx(), "float32") << content;
    EXPECT_EQ(cfg::epsilon(), 1e-07) << content;
    EXPECT_EQ(cfg::image_data_format(), "channels_last") << content;
    EXPECT_EQ(cfg::backend_name(), "cpu") << content;
    EXPECT_EQ(read_bytes(path_), content);
  }
}

TEST_F(ConfigTest, MalformedJsonWarningGoesToStderrOnly) {
  // Every log line belongs on stderr: stdout is the program's output.
  for (const std::string& content : {std::string("{\"floatx\": "), std::string("[1]")}) {
    write_bytes(path_, content);
    ::testing::internal::CaptureStdout();
    ::testing::internal::CaptureStderr();
    cfg::reload();
    const std::string out = ::testing::internal::GetCapturedStdout();
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(out, "") << content;
    EXPECT_TRUE(contains(err, "keras.json")) << err;
    EXPECT_TRUE(contains(err, "using the default configuration")) << err;
  }
}

TEST_F(ConfigTest, InvalidFloatxThrows) {
  expect_invalid(R"({"floatx": "float128"})", "floatx", "\"float128\"");
  expect_invalid(R"({"floatx": 32})", "floatx", "32");
  expect_invalid(R"({"floatx": null})", "floatx", "null");
}

TEST_F(ConfigTest, IntegerEpsilonThrows) {
  expect_invalid(R"({"epsilon": 1})", "epsilon", "1");
  expect_invalid(R"({"epsilon": 0})", "epsilon", "0");
  expect_invalid(R"({"epsilon": "1e-7"})", "epsilon", "\"1e-7\"");
  // Found by fuzz_config: a negative epsilon was accepted.
  expect_invalid(R"({"epsilon": -1e-07})", "epsilon", "-1e-07");
  // A float that happens to be integral is fine.
  write_bytes(path_, R"({"epsilon": 1.0})");
  cfg::reload();
  EXPECT_EQ(cfg::epsilon(), 1.0);
}

TEST_F(ConfigTest, BadImageDataFormatThrows) {
  expect_invalid(R"({"image_data_format": "channels_middle"})", "image_data_format",
                 "\"channels_middle\"");
  expect_invalid(R"({"image_data_format": "Channels_Last"})", "image_data_format",
                 "\"Channels_Last\"");
}

TEST_F(ConfigTest, NonStringBackendThrows) {
  expect_invalid(R"({"backend": 3})", "backend", "3");
  expect_invalid(R"({"backend": ["cpu"]})", "backend", "[\"cpu\"]");
}

TEST_F(ConfigTest, FailedLoadIsRetriedByNextCall) {
  write_bytes(path_, R"({"floatx": "float128"})");
  EXPECT_THROW(cfg::reload(), ktape::ValueError);
  EXPECT_THROW(cfg::floatx(), ktape::ValueError);
  EXPECT_THROW(cfg::ensure_loaded(), ktape::ValueError);
  write_bytes(path_, R"({"floatx": "float64"})");
  EXPECT_EQ(cfg::floatx(), "float64");
  EXPECT_EQ(cfg::epsilon(), 1e-07);
}

TEST_F(ConfigTest, KerasBackendEnvWinsOverFile) {
  write_bytes(path_, R"({"backend": "cpu"})");
  setenv("KERAS_BACKEND", "reference", 1);
  cfg::reload();
  EXPECT_EQ(cfg::backend_name(), "reference");
}

TEST_F(ConfigTest, EmptyKerasBackendIgnored) {
  write_bytes(path_, R"({"backend": "reference"})");
  setenv("KERAS_BACKEND", "", 1);
  cfg::reload();
  EXPECT_EQ(cfg::backend_name(), "reference");
}

TEST_F(ConfigTest, KerasBackendOnFirstRunStillWritesCpu) {
  setenv("KERAS_BACKEND", "reference", 1);
  cfg::reload();
  EXPECT_EQ(cfg::backend_name(), "reference");
  const nlohmann::json j = nlohmann::json::parse(read_bytes(path_));
  EXPECT_EQ(j.at("backend"), "cpu");
}

TEST_F(ConfigTest, SetFloatxRejectsUnknownAndKeepsValue) {
  cfg::reload();
  cfg::set_floatx("float64");
  try {
    cfg::set_floatx("beerfloat");
    FAIL() << "expected ValueError";
  } catch (const ktape::ValueError& e) {
    EXPECT_EQ(std::string(e.what()),
              "set_floatx: Unknown floatx type: 'beerfloat'; expected one of float16, float32, "
              "float64");
  }
  EXPECT_EQ(cfg::floatx(), "float64");
  EXPECT_THROW(cfg::set_floatx(""), ktape::ValueError);
  EXPECT_THROW(cfg::set_floatx("Float32"), ktape::ValueError);
  EXPECT_EQ(cfg::floatx(), "float64");
  cfg::set_floatx("float16");
  EXPECT_EQ(cfg::floatx(), "float16");
  EXPECT_EQ(cfg::floatx_dtype(), ktape::DType::float16);
}

TEST_F(ConfigTest, SetEpsilon) {
  cfg::reload();
  cfg::set_epsilon(1e-3);
  EXPECT_EQ(cfg::epsilon(), 1e-3);
  cfg::set_epsilon(0.0);
  EXPECT_EQ(cfg::epsilon(), 0.0);
  EXPECT_THROW(cfg::set_epsilon(-1e-7), ktape::ValueError);
  EXPECT_THROW(cfg::set_epsilon(std::nan("")), ktape::ValueError);
  EXPECT_THROW(cfg::set_epsilon(INFINITY), ktape::ValueError);
  EXPECT_EQ(cfg::epsilon(), 0.0);  // unchanged
}

TEST_F(ConfigTest, SetImageDataFormat) {
  cfg::reload();
  cfg::set_image_data_format("channels_first");
  EXPECT_EQ(cfg::image_data_format(), "channels_first");
  try {
    cfg::set_image_data_format("channels_middle");
    FAIL() << "expected ValueError";
  } catch (const ktape::ValueError& e) {
    EXPECT_TRUE(contains(e.what(), "channels_middle")) << e.what();
  }
  EXPECT_THROW(cfg::set_image_data_format("Channels_Last"), ktape::ValueError);
  EXPECT_EQ(cfg::image_data_format(), "channels_first");
}

TEST_F(ConfigTest, NormalizeDataFormat) {
  cfg::reload();
  EXPECT_EQ(cfg::normalize_data_format(std::nullopt), "channels_last");
  cfg::set_image_data_format("channels_first");
  EXPECT_EQ(cfg::normalize_data_format(std::nullopt), "channels_first");
  EXPECT_EQ(cfg::normalize_data_format("Channels_First"), "channels_first");
  EXPECT_EQ(cfg::normalize_data_format("CHANNELS_LAST"), "channels_last");
  EXPECT_EQ(cfg::normalize_data_format("channels_last"), "channels_last");
  try {
    cfg::normalize_data_format("channels_middle");
    FAIL() << "expected ValueError";
  } catch (const ktape::ValueError& e) {
    EXPECT_EQ(std::string(e.what()),
              "The `data_format` argument must be one of \"channels_first\", "
              "\"channels_last\". Received: channels_middle");
  }
}

TEST_F(ConfigTest, ImageDimOrderingRoundTrip) {
  cfg::reload();
  EXPECT_EQ(cfg::image_dim_ordering(), "tf");
  cfg::set_image_dim_ordering("th");
  EXPECT_EQ(cfg::image_data_format(), "channels_first");
  EXPECT_EQ(cfg::image_dim_ordering(), "th");
  cfg::set_image_dim_ordering("tf");
  EXPECT_EQ(cfg::image_data_format(), "channels_last");
  EXPECT_EQ(cfg::image_dim_ordering(), "tf");
  cfg::set_image_dim_ordering("th");
  try {
    cfg::set_image_dim_ordering("xy");
    FAIL() << "expected ValueError";
  } catch (const ktape::ValueError& e) {
    EXPECT_EQ(std::string(e.what()), "set_image_dim_ordering: Unknown dim_ordering: 'xy'");
  }
  EXPECT_EQ(cfg::image_dim_ordering(), "th");
}

TEST_F(ConfigTest, CastToFloatx) {
  cfg::reload();
  const auto x = ktape::NDArray::from_vector<std::int32_t>({1, -2, 3}, ktape::Shape{3});
  const ktape::NDArray y = cfg::cast_to_floatx(x);
  EXPECT_EQ(y.dtype(), ktape::DType::float32);
  EXPECT_EQ(y.shape(), ktape::Shape{3});
  EXPECT_EQ(y.to_vector(), (std::vector<double>{1.0, -2.0, 3.0}));
  cfg::set_floatx("float64");
  const ktape::NDArray z = cfg::cast_to_floatx(x);
  EXPECT_EQ(z.dtype(), ktape::DType::float64);
  EXPECT_EQ(z.to_vector(), (std::vector<double>{1.0, -2.0, 3.0}));
  EXPECT_EQ(x.dtype(), ktape::DType::int32);
}

TEST_F(ConfigTest, NonexistentKerasHomeIsCreated) {
  const std::string nested = dir_ + "/a/b/c";
  setenv("KERAS_HOME", nested.c_str(), 1);
  cfg::reload();
  EXPECT_TRUE(fs::is_directory(nested));
  EXPECT_EQ(cfg::keras_dir(), nested);
  EXPECT_EQ(cfg::config_path(), nested + "/keras.json");
  const nlohmann::json j = nlohmann::json::parse(read_bytes(nested + "/keras.json"));
  EXPECT_EQ(j.at("floatx"), "float32");
  EXPECT_EQ(j.at("backend"), "cpu");
}

TEST_F(ConfigTest, PathsFollowEnvironment) {
  EXPECT_EQ(cfg::keras_dir(), dir_);
  EXPECT_EQ(cfg::config_path(), dir_ + "/keras.json");

  // A leading ~ in KERAS_HOME is expanded for the file path only.
  setenv("HOME", dir_.c_str(), 1);
  setenv("KERAS_HOME", "~/kh", 1);
  EXPECT_EQ(cfg::keras_dir(), "~/kh");
  EXPECT_EQ(cfg::config_path(), dir_ + "/kh/keras.json");
  cfg::reload();
  EXPECT_TRUE(fs::exists(dir_ + "/kh/keras.json"));

  // Without KERAS_HOME, a writable home gives ~/.keras.
  unsetenv("KERAS_HOME");
  EXPECT_EQ(cfg::keras_dir(), dir_ + "/.keras");
  EXPECT_EQ(cfg::config_path(), dir_ + "/.keras/keras.json");
  cfg::reload();
  EXPECT_TRUE(fs::exists(dir_ + "/.keras/keras.json"));
}

TEST_F(ConfigTest, UnwritableHomeFallsBackToTmp) {
  if (geteuid() == 0) GTEST_SKIP() << "root can write everywhere";
  unsetenv("KERAS_HOME");
  setenv("HOME", "/proc", 1);
  EXPECT_EQ(cfg::keras_dir(), "/tmp/.keras");
  EXPECT_EQ(cfg::config_path(), "/tmp/.keras/keras.json");
}

TEST_F(ConfigTest, ConcurrentGettersAreConsistent) {
  write_bytes(path_, R"({"floatx": "float64", "epsilon": 0.25})");
  cfg::reload();
  std::vector<std::thread> threads;
  std::vector<int> ok(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&ok, t] {
      bool good = true;
      for (int i = 0; i < 200; ++i) {
        good = good && cfg::floatx() == "float64" && cfg::epsilon() == 0.25;
      }
      ok[static_cast<std::size_t>(t)] = good ? 1 : 0;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok, std::vector<int>(8, 1));
}

}  // namespace
