// Exceptions thrown by ktape. They mirror the Python exceptions Keras raises so that
// code ported from Keras keeps its error handling: ValueError for bad values and shapes,
// TypeError for wrong kinds and dtypes, NotImplementedError, and IOError for files.
#pragma once

#include <stdexcept>
#include <string>

namespace ktape {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
class ValueError : public Error {
 public:
  using Error::Error;
};
class TypeError : public Error {
 public:
  using Error::Error;
};
class NotImplementedError : public Error {
 public:
  using Error::Error;
};
class IOError : public Error {
 public:
  using Error::Error;
};

}  // namespace ktape
