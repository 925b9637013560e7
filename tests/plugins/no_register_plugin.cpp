// A shared library that is not a ktape backend: it does not export ktape_backend_register.
extern "C" int no_register_plugin_answer() { return 42; }
