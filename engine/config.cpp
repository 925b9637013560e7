// Global Keras configuration: state, keras.json loading/writing and the legacy dim-ordering API.
#include "engine/config.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <unistd.h>
#include <cmath>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>

#include "engine/errors.hpp"
#include "engine/log.hpp"

namespace ktape::config {
namespace {

constexpr double kDefaultEpsilon = 1e-7;
constexpr const char* kDefaultFloatx = "float32";
constexpr const char* kDefaultDataFormat = "channels_last";
constexpr const char* kDefaultBackend = "cpu";

struct State {
  double epsilon = kDefaultEpsilon;
  std::string floatx = kDefaultFloatx;
  std::string data_format = kDefaultDataFormat;
  std::string backend = kDefaultBackend;  // after KERAS_BACKEND precedence
  bool loaded = false;
};

std::mutex g_mu;
State g_state;

bool is_floatx_name(std::string_view f) {
  return f == "float16" || f == "float32" || f == "float64";
}
bool is_data_format(std::string_view f) { return f == "channels_last" || f == "channels_first"; }

// os.path.join for two components.
std::string path_join(const std::string& a, const std::string& b) {
  if (!b.empty() && b.front() == '/') return b;
  if (a.empty() || a.back() == '/') return a + b;
  return a + "/" + b;
}

// os.path.expanduser (POSIX): "~" and "~user" prefixes.
std::string expand_user(const std::string& path) {
  if (path.empty() || path.front() != '~') return path;
  std::size_t i = path.find('/', 1);
  if (i == std::string::npos) i = path.size();
  std::string home;
  if (i == 1) {
    if (const char* h = std::getenv("HOME")) {
      home = h;
    } else {
      const passwd* pw = getpwuid(getuid());
      if (pw == nullptr || pw->pw_dir == nullptr) return path;
      home = pw->pw_dir;
    }
  } else {
    const std::string name = path.substr(1, i - 1);
    const passwd* pw = getpwnam(name.c_str());
    if (pw == nullptr || pw->pw_dir == nullptr) return path;
    home = pw->pw_dir;
  }
  while (!home.empty() && home.back() == '/') home.pop_back();
  std::string out = home + path.substr(i);
  return out.empty() ? "/" : out;
}

[[noreturn]] void throw_invalid(const std::string& path, const char* key,
                                const nlohmann::json& value, const char* expected) {
  throw ValueError("keras.json (" + path + "): invalid value for \"" + key + "\": " + value.dump() +
                   "; expected " + expected);
}

// Writes `content` to a fresh temporary file next to `path` and links it into place, so a
// reader never sees a half-written file and an existing file is never replaced.
void write_new_file_atomically(const std::string& path, const std::string& content) {
  namespace fs = std::filesystem;
  static std::atomic<unsigned> counter{0};
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
    tmp = (dir / (".keras.json.tmp." + std::to_string(getpid()) + "." +
                  std::to_string(counter.fetch_add(1))))
              .string();
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    log_debug("keras.json (" + path + "): could not create a temporary file; not written");
    return;
  }
  bool ok = true;
  std::size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      ok = false;
      break;
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) ok = false;
  if (ok) {
    if (::link(tmp.c_str(), path.c_str()) != 0 && errno != EEXIST) {
      // Filesystems without hard links: fall back to rename unless the file appeared meanwhile.
      std::error_code ec;
      if (!fs::exists(target, ec)) {
        ok = ::rename(tmp.c_str(), path.c_str()) == 0;
      }
    }
  }
  if (!ok) log_debug("keras.json (" + path + "): could not write the default configuration");
  ::unlink(tmp.c_str());  // harmless if it was renamed away
}

std::string default_file_content(const State& s) {
  nlohmann::ordered_json j;
  j["floatx"] = s.floatx;
  j["epsilon"] = s.epsilon;
  j["backend"] = s.backend;
  j["image_data_format"] = s.data_format;
  return j.dump(4);
}

// Reads and validates an existing keras.json into `s`. Throws ValueError/IOError.
void read_config_file(const std::string& path, State& s) {
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open()) throw IOError("keras.json (" + path + "): cannot open the file for reading");
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) throw IOError("keras.json (" + path + "): error while reading the file");
  const std::string text = buf.str();

  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    // A syntax error, or a number no double holds (1e317: out_of_range, not parse_error).
    log_warn("keras.json (" + path + "): malformed JSON (" + e.what() +
             "); using the default configuration");
    return;
  }
  if (!j.is_object()) {
    log_warn("keras.json (" + path +
             "): top-level value is not a JSON object; using the default configuration");
    return;
  }

  if (auto it = j.find("floatx"); it != j.end()) {
    if (!it->is_string() || !is_floatx_name(it->get_ref<const std::string&>())) {
      throw_invalid(path, "floatx", *it, "one of \"float16\", \"float32\", \"float64\"");
    }
    s.floatx = it->get<std::string>();
  }
  if (auto it = j.find("epsilon"); it != j.end()) {
    // A negative epsilon would invert every clip(p, epsilon, 1 - epsilon) of the losses.
    if (!it->is_number_float() || !(it->get<double>() >= 0)) {
      throw_invalid(path, "epsilon", *it, "a floating-point number >= 0 such as 1e-07");
    }
    s.epsilon = it->get<double>();
  }
  if (auto it = j.find("image_data_format"); it != j.end()) {
    if (!it->is_string() || !is_data_format(it->get_ref<const std::string&>())) {
      throw_invalid(path, "image_data_format", *it, "one of \"channels_last\", \"channels_first\"");
    }
    s.data_format = it->get<std::string>();
  }
  if (auto it = j.find("backend"); it != j.end()) {
    if (!it->is_string()) throw_invalid(path, "backend", *it, "a string");
    s.backend = it->get<std::string>();
  }
}

// Loads env + keras.json into g_state. Caller holds g_mu. On failure g_state is untouched.
void load_locked() {
  State s;  // defaults
  const std::string path = config_path();

  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (!dir.empty() && !std::filesystem::exists(dir, ec)) {
    std::filesystem::create_directories(dir, ec);  // errors (permissions, races) are swallowed
  }

  if (std::filesystem::exists(path, ec)) {
    read_config_file(path, s);
  } else {
    // Written with the defaults, before KERAS_BACKEND is consulted (as Keras does).
    write_new_file_atomically(path, default_file_content(s));
  }

  if (const char* env = std::getenv("KERAS_BACKEND"); env != nullptr && *env != '\0') {
    s.backend = env;
  }
  s.loaded = true;
  g_state = std::move(s);
}

void ensure_loaded_locked() {
  if (!g_state.loaded) load_locked();
}

}  // namespace

void ensure_loaded() {
  std::lock_guard<std::mutex> lock(g_mu);
  ensure_loaded_locked();
}

void reload() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_state = State{};
  load_locked();
}

double epsilon() {
  std::lock_guard<std::mutex> lock(g_mu);
  ensure_loaded_locked();
  return g_state.epsilon;
}

void set_epsilon(double e) {
  if (!std::isfinite(e) || e < 0)
    throw ValueError("K::set_epsilon: epsilon must be a finite number >= 0, got " +
                     std::to_string(e));
  std::lock_guard<std::mutex> lock(g_mu);
  ensure_loaded_locked();
  g_state.epsilon = e;
}

std::string floatx() {
  std::lock_guard<std::mutex> lock(g_mu);
  ensure_loaded_locked();
  return g_state.floatx;
}

void set_floatx(const std::string& f) {
  std::lock_guard<std::mutex> lock(g_mu);
  ensure_loaded_locked();
  if (!is_floatx_name(f)) {
    throw ValueError("set_floatx: Unknown floatx type: '" + f +
                     "'; expected one of float16, float32, float64");
  }
  g_state.floatx = f;
}

DType floatx_dtype() { return dtype_from_name(floatx(), "floatx"); }

NDArray cast_to_floatx(const NDArray& x) { return x.astype(floatx_dtype()); }

std::string image_data_format() {
  std::lock_guard<std::mutex> lock(g_mu);
  ensure_loaded_locked();
  return g_state.data_format;
}

void set_image_data_format(const std::string& f) {
  std::lock_guard<std::mutex> lock(g_mu);
  ensure_loaded_locked();
  if (!is_data_format(f)) {
    throw ValueError("set_image_data_format: Unknown data_format: '" + f +
                     "'; expected one of channels_first, channels_last");
  }
  g_state.data_format = f;
}

std::string normalize_data_format(const std::optional<std::string>& value) {
  if (!value) return image_data_format();
  std::string lower = *value;
  for (char& c : lower) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  if (!is_data_format(lower)) {
    throw ValueError(
        "The `data_format` argument must be one of \"channels_first\", \"channels_last\". "
        "Received: " +
        *value);
  }
  return lower;
}

std::string image_dim_ordering() { return image_data_format() == "channels_first" ? "th" : "tf"; }

void set_image_dim_ordering(const std::string& v) {
  if (v == "th") {
    set_image_data_format("channels_first");
  } else if (v == "tf") {
    set_image_data_format("channels_last");
  } else {
    ensure_loaded();
    throw ValueError("set_image_dim_ordering: Unknown dim_ordering: '" + v + "'");
  }
}

std::string keras_dir() {
  if (const char* home = std::getenv("KERAS_HOME")) return home;
  std::string base = expand_user("~");
  if (::access(base.c_str(), W_OK) != 0) base = "/tmp";
  return path_join(base, ".keras");
}

std::string config_path() { return expand_user(path_join(keras_dir(), "keras.json")); }

std::string backend_name() {
  std::lock_guard<std::mutex> lock(g_mu);
  ensure_loaded_locked();
  return g_state.backend;
}

}  // namespace ktape::config
