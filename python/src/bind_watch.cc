// The WatchEvent and Watch classes of `tensorbroker._core`: see bind.h.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "python/src/bind.h"
#include "python/src/py_watch.h"

namespace py = pybind11;

namespace tensorbroker::python {

void BindWatch(py::module_& m) {
  py::class_<PyWatchEvent>(m, "WatchEvent", "One change under a watched prefix (Client.watch).")
      .def_readonly("kind", &PyWatchEvent::kind,
                    "\"published\", \"replaced\", \"deleted\", \"expired\" (out of the "
                    "name's kept history) or \"lost\" (events may have been missed)")
      .def_readonly("sequence", &PyWatchEvent::sequence,
                    "Increasing along the stream; resume with after_version=sequence")
      .def_readonly("name", &PyWatchEvent::name, "The tensor's name (\"\" for lost)")
      .def_readonly("version", &PyWatchEvent::version, "The version concerned")
      .def_readonly("previous_version", &PyWatchEvent::previous_version,
                    "replaced: the version that was current")
      .def_readonly("info", &PyWatchEvent::info,
                    "The version's stat() dict as at the event (leases 0); None for lost")
      .def_readonly("lost_first", &PyWatchEvent::lost_first, "lost: first sequence missed")
      .def_readonly("lost_last", &PyWatchEvent::lost_last, "lost: last sequence missed")
      .def("get", &PyWatchEvent::Get, py::arg("timeout") = 0,
           "client.get(name, timeout, version=version): the version this event names, while "
           "the name keeps it (NotFound after; FailedPrecondition for a lost event).")
      .def("__repr__", &PyWatchEvent::Repr);

  py::class_<PyWatch>(m, "Watch",
                      "Events under a prefix (Client.watch): iterate it, or call next(). "
                      "A context manager (close() on exit).")
      .def("next", &PyWatch::Next, py::arg("timeout") = py::none(),
           "The next WatchEvent; None when `timeout` seconds passed first (None waits). "
           "Cancelled once closed.")
      .def("close", &PyWatch::Close,
           "End the watch, from any thread: an iteration waiting in another thread stops.")
      .def_property_readonly("closed", &PyWatch::closed, "Whether close() was called.")
      .def_property_readonly("last_sequence", &PyWatch::last_sequence,
                             "The sequence of the last event returned (0: none yet).")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &PyWatch::Iterate)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyWatch& self, py::args) { self.Close(); });
}

}  // namespace tensorbroker::python
