/// \file
/// Global Keras configuration (keras/backend/common.py + the keras.json loader): floatx, epsilon,
/// image data format and backend name. State is loaded once from $KERAS_HOME/keras.json (written
/// with defaults if missing) on first use; setters change only the in-memory values.
#pragma once

#include <optional>
#include <string>

#include "engine/dtype.hpp"
#include "engine/ndarray.hpp"

namespace ktape::config {

/// Fuzz factor used by losses and optimizers (default 1e-7).
double epsilon();
/// ValueError for a negative or non-finite value (Keras takes any float; a negative one would
/// invert the losses' clips), as keras.json's "epsilon" is refused then.
void set_epsilon(double e);

/// Default float type name: "float16", "float32" (default) or "float64".
std::string floatx();
/// Throws ValueError for any other name; the state is then unchanged.
void set_floatx(const std::string& f);
DType floatx_dtype();
/// x converted to floatx (a new array unless x already has that dtype).
NDArray cast_to_floatx(const NDArray& x);

/// "channels_last" (default) or "channels_first".
std::string image_data_format();
void set_image_data_format(const std::string& f);
/// nullopt -> the global format; otherwise the lowercased value, which must be a known format.
std::string normalize_data_format(const std::optional<std::string>& value);

/// Keras 1 legacy names: "th" <-> channels_first, "tf" <-> channels_last.
std::string image_dim_ordering();
void set_image_dim_ordering(const std::string& v);

/// $KERAS_HOME if set (even empty); else ~/.keras if ~ is writable; else /tmp/.keras.
/// Computed from the current environment; does not load the configuration.
std::string keras_dir();
/// keras_dir() joined with "keras.json", with a leading ~ expanded like os.path.expanduser.
std::string config_path();

/// Non-empty $KERAS_BACKEND > "backend" of keras.json > "cpu" (as resolved at load time).
std::string backend_name();

/// Loads the configuration once (thread-safe). Throws ValueError for invalid values in keras.json;
/// a failed load is retried by the next call. Every getter and setter calls it.
void ensure_loaded();
/// Resets all state to the defaults and loads the environment and keras.json again (for tests).
void reload();

}  // namespace ktape::config
