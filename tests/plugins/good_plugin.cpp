// A complete external backend for tests/test_plugin.cpp. Every required float32 kernel is the
// host's reference kernel, handed back through the registrar, except Exp: this library computes
// it with its own loop and counts the calls, so a test can tell that the plugin really ran.
// It uses only the virtual PluginRegistrar interface and the plain kernel ABI structs, so it
// links against nothing from ktape (the build passes -Wl,--no-undefined to keep it that way).
#include <atomic>
#include <cmath>
#include <cstdint>
#include <string_view>

#include "engine/backend.hpp"

namespace {

std::atomic<long> g_exp_calls{0};

constexpr const char* kOpNames[] = {
#define GOOD_PLUGIN_OP_NAME(name) #name,
    KTAPE_OP_LIST(GOOD_PLUGIN_OP_NAME)
#undef GOOD_PLUGIN_OP_NAME
};

}  // namespace

extern "C" {

// The plugin's own float32 Exp kernel (exported so a test can compare kernel pointers).
void good_plugin_exp(const ktape::KernelCall& c) {
  g_exp_calls.fetch_add(1, std::memory_order_relaxed);
  const float* x = static_cast<const float*>(c.in[0].data);
  float* y = static_cast<float*>(c.out.data);
  for (std::int64_t i = 0; i < c.out.size; ++i) y[i] = std::exp(x[i]);
}

// How many times good_plugin_exp has run.
long good_plugin_exp_calls() { return g_exp_calls.load(std::memory_order_relaxed); }

void ktape_backend_register(ktape::PluginRegistrar* r) {
  for (const char* op : kOpNames) {
    if (std::string_view(op) == "Exp") continue;
    // Ops without a reference float32 kernel (sources, int-only ops) are not required.
    if (ktape::KernelFn fn = r->reference(op, "float32")) r->add(op, "float32", fn);
  }
  r->add("Exp", "float32", &good_plugin_exp);
}

}  // extern "C"
