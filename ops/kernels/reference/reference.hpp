// Registration entry points of the reference kernel families (one per file).
#pragma once

namespace ktape {
struct Backend;
}

namespace ktape::kernels {
void register_reference_elementwise(Backend& b);
void register_reference_reduce(Backend& b);
void register_reference_nn(Backend& b);
void register_reference_layout(Backend& b);
void register_reference_window(Backend& b);
// Every reference family: the complete table.
void register_reference_all(Backend& b);
}  // namespace ktape::kernels
