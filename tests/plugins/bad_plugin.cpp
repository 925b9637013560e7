// An incomplete external backend for tests/test_plugin.cpp: it registers only Add, Exp and
// MatMul (float32), so loading it must fail with a ValueError that lists every other required
// kernel.
#include "engine/backend.hpp"

extern "C" void ktape_backend_register(ktape::PluginRegistrar* r) {
  for (const char* op : {"Add", "Exp", "MatMul"})
    r->add(op, "float32", r->reference(op, "float32"));
}
