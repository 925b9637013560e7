#include "engine/backend.hpp"

#include <dlfcn.h>

#include <map>
#include <memory>
#include <mutex>

#include "engine/config.hpp"
#include "engine/errors.hpp"
#include "engine/log.hpp"
#include "engine/threads.hpp"

namespace ktape {

namespace {

std::mutex g_mu;
const Backend* g_active = nullptr;
std::map<std::string, std::unique_ptr<Backend>> g_plugins;

bool is_plugin_path(const std::string& name) {
  return name.find('/') != std::string::npos ||
         (name.size() > 3 && name.compare(name.size() - 3, 3, ".so") == 0);
}

bool op_needs_kernel(Op op) {
  return op != Op::Placeholder && op != Op::Variable && op != Op::Constant;
}

class Registrar final : public PluginRegistrar {
 public:
  explicit Registrar(Backend& b) : b_(b) {}
  void add(const char* op, const char* dtype, KernelFn fn) override {
    for (int i = 0; i < kNumOps; ++i) {
      if (std::string(op_name(static_cast<Op>(i))) == op) {
        b_.set(static_cast<Op>(i), dtype_from_name(dtype, "ktape_backend_register"), fn);
        return;
      }
    }
    unknown_.push_back(op);
  }
  KernelFn reference(const char* op, const char* dtype) const override {
    for (int i = 0; i < kNumOps; ++i)
      if (std::string(op_name(static_cast<Op>(i))) == op)
        return reference_backend().get(static_cast<Op>(i), dtype_from_name(dtype, "reference"));
    return nullptr;
  }
  std::vector<std::string> unknown_;

 private:
  Backend& b_;
};

const Backend& load_plugin(const std::string& path) {
  auto it = g_plugins.find(path);
  if (it != g_plugins.end()) return *it->second;
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* err = dlerror();
    throw ValueError("Unable to load backend '" + path + "': " + (err ? err : "dlopen failed"));
  }
  // Unloaded again on every failure below (nothing keeps a pointer into a rejected library).
  std::unique_ptr<void, int (*)(void*)> guard(handle, &dlclose);
  using RegisterFn = void (*)(PluginRegistrar*);
  auto reg = reinterpret_cast<RegisterFn>(dlsym(handle, "ktape_backend_register"));
  if (!reg)
    throw ValueError("Invalid backend '" + path +
                     "': it does not export extern \"C\" ktape_backend_register");
  auto b = std::make_unique<Backend>();
  b->name = path;
  Registrar r(*b);
  try {
    reg(&r);
  } catch (...) {
    guard.release();  // the exception may live in (or have its type defined by) the library
    throw;
  }
  std::string missing;
  int n_missing = 0;
  for (int i = 0; i < kNumOps; ++i) {
    const Op op = static_cast<Op>(i);
    if (op_needs_kernel(op) && reference_backend().get(op, DType::float32) &&
        !b->get(op, DType::float32)) {
      missing += (n_missing++ ? ", " : "") + std::string(op_name(op));
    }
  }
  if (n_missing)
    throw ValueError("Invalid backend '" + path + "'. Missing " + std::to_string(n_missing) +
                     " required float32 kernel(s): " + missing);
  if (!r.unknown_.empty()) {
    std::string u;
    for (const auto& s : r.unknown_) u += (u.empty() ? "" : ", ") + s;
    throw ValueError("Invalid backend '" + path + "': it registers unknown op(s): " + u);
  }
  guard.release();  // a loaded backend stays mapped for the life of the process
  return *(g_plugins[path] = std::move(b));
}

}  // namespace

const Backend& reference_backend() {
  static const Backend b = [] {
    Backend r;
    r.name = "reference";
    register_reference_kernels(r);
    return r;
  }();
  return b;
}

const Backend& cpu_backend() {
  static const Backend b = [] {
    apply_thread_environment();  // KTAPE_NUM_THREADS, before any kernel runs
    Backend c;
    c.name = "cpu";
    register_cpu_kernels(c);
    return c;
  }();
  return b;
}

const Backend& backend_by_name(const std::string& name) {
  if (name == "cpu") return cpu_backend();
  if (name == "reference") return reference_backend();
  if (name == "tensorflow" || name == "theano" || name == "cntk") {
    static std::once_flag once;
    std::call_once(once, [&] {
      log_info("Backend '" + name +
               "' is a Python Keras engine; ktape uses its default backend (cpu).");
    });
    return cpu_backend();
  }
  if (is_plugin_path(name)) {
    std::lock_guard<std::mutex> lock(g_mu);
    return load_plugin(name);
  }
  throw ValueError(
      "Unknown backend '" + name +
      "'. Valid backends: cpu, reference, tensorflow, theano, cntk (the last three map "
      "to cpu), or a path to a shared library implementing the ktape plugin ABI.");
}

const Backend& active_backend() {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_active) return *g_active;
  }
  const std::string name = config::backend_name();
  const Backend& b = backend_by_name(name);
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_active) {
    g_active = &b;
    static std::once_flag logged;
    std::call_once(logged, [&] { log_info("Using ktape backend (" + b.name + ")."); });
  }
  return *g_active;
}

void reset_backend_selection() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_active = nullptr;
}

KernelFn find_kernel(const Backend& b, Op op, DType dt) {
  if (KernelFn f = b.get(op, dt)) return f;
  return reference_backend().get(op, dt);
}

std::vector<std::string> required_plugin_kernels() {
  std::vector<std::string> r;
  for (int i = 0; i < kNumOps; ++i) {
    const Op op = static_cast<Op>(i);
    if (op_needs_kernel(op) && reference_backend().get(op, DType::float32))
      r.push_back(op_name(op));
  }
  return r;
}

}  // namespace ktape
