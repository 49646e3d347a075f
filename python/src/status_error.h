// Broker errors in Python: C++ code throws StatusError; the translator that module.cc registers
// turns it into the tensorbroker.errors class for its gRPC code (NotFound, Timeout, ...).
// Also the GIL helper every blocking call and every deleter uses.
#ifndef TENSORBROKER_PYTHON_SRC_STATUS_ERROR_H_
#define TENSORBROKER_PYTHON_SRC_STATUS_ERROR_H_

#include <pybind11/pybind11.h>

#include <unistd.h>

#include <exception>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tensorbroker::python {

class StatusError : public std::exception {
 public:
  explicit StatusError(absl::Status status)
      : status_(std::move(status)), what_(status_.ToString()) {}
  const absl::Status& status() const { return status_; }
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  absl::Status status_;
  std::string what_;
};

inline void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) throw StatusError(status);
}

template <typename T>
T ValueOrThrow(absl::StatusOr<T> value) {
  if (!value.ok()) throw StatusError(value.status());
  return *std::move(value);
}

// Sets the Python error for `error` (called by pybind11's exception translation).
void RaiseInPython(const StatusError& error);

// True once the interpreter has begun to finalize.
inline bool InterpreterFinalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

// Releases the GIL for its scope (this thread must hold it). Unlike pybind11's guard it never
// takes the GIL back once the interpreter is finalizing: CPython would end this thread with
// pthread_exit from inside the destructor, which aborts a C++ program. A thread that would
// come back then (a daemon thread in get(), a deleter on a daemon thread) parks instead;
// the process is exiting anyway.
class GilReleased {
 public:
  GilReleased() : state_(PyEval_SaveThread()) {}
  ~GilReleased() {
    while (InterpreterFinalizing()) pause();
    PyEval_RestoreThread(state_);
  }
  GilReleased(const GilReleased&) = delete;
  GilReleased& operator=(const GilReleased&) = delete;

 private:
  PyThreadState* state_;
};

// Runs `work` with the GIL released when this thread holds it, and simply runs it otherwise:
// from a thread that never held the GIL, and after Py_Finalize began (Py_IsInitialized() is
// false then), when Python must not be touched at all. Deleters rely on this.
template <typename Work>
void RunWithoutGil(Work&& work) {
  if (Py_IsInitialized() && !InterpreterFinalizing() && PyGILState_Check()) {
    GilReleased released;
    work();
  } else {
    work();
  }
}

}  // namespace tensorbroker::python

#endif  // TENSORBROKER_PYTHON_SRC_STATUS_ERROR_H_
