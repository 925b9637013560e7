// Whole-file writes that never leave a half-written file: the text goes to `<path>.tmp-<pid>`,
// is synced, and is renamed onto `path`. Throws ktape::IOError naming the file on failure.
#pragma once

#include <string>

namespace ktape::train {

void write_file_atomically(const std::string& path, const std::string& content);

}  // namespace ktape::train
