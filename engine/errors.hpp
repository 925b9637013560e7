/// \file
/// Exceptions thrown by ktape. They mirror the Python exceptions Keras raises so that
/// code ported from Keras keeps its error handling: ValueError for bad values and shapes,
/// TypeError for wrong kinds and dtypes, NotImplementedError, IOError for files, and
/// ResourceExhaustedError (TF's) for an allocation the machine cannot satisfy.
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
class ResourceExhaustedError : public Error {
 public:
  using Error::Error;
};

}  // namespace ktape
