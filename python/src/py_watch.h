// tensorbroker.Watch and tensorbroker.WatchEvent: a Watcher (client.h) for Python. Iterating a
// Watch blocks for the next event with the GIL released (in slices on the main thread, so
// Ctrl-C interrupts it); close() from any thread ends the iteration. An event keeps the Client
// it came from, so that event.get() reads the version it names.
// Thread-safe: close() may run while another thread waits in next().
#ifndef TENSORBROKER_PYTHON_SRC_PY_WATCH_H_
#define TENSORBROKER_PYTHON_SRC_PY_WATCH_H_

#include <pybind11/pybind11.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "tensorbroker/client.h"

namespace tensorbroker::python {

struct PyWatchEvent {
  std::string kind;  // "published", "replaced", "deleted", "expired", "lost"
  uint64_t sequence = 0;
  std::string name;
  uint64_t version = 0;
  uint64_t previous_version = 0;
  pybind11::object info;  // the TensorStat dict of the version concerned; None for "lost"
  uint64_t lost_first = 0;
  uint64_t lost_last = 0;
  pybind11::object client;  // the tensorbroker.Client the watch belongs to

  // client.get(name, timeout, version=version): NotFound once the version is no longer kept.
  pybind11::object Get(pybind11::object timeout) const;
  std::string Repr() const;
};

class PyWatch {
 public:
  PyWatch(pybind11::object client, std::unique_ptr<Watcher> watcher);

  // The next event; None when `timeout` (seconds) passed first; None waits until one comes.
  // Cancelled once closed.
  pybind11::object Next(std::optional<double> timeout);
  // __next__: the next event; StopIteration once closed.
  PyWatchEvent Iterate();
  void Close();
  bool closed() const { return closed_.load(); }
  uint64_t last_sequence() const { return watcher_->last_sequence(); }

 private:
  pybind11::object client_;
  std::shared_ptr<Watcher> watcher_;
  std::atomic<bool> closed_{false};
};

}  // namespace tensorbroker::python

#endif  // TENSORBROKER_PYTHON_SRC_PY_WATCH_H_
