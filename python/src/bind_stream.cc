// The StreamWriter and StreamReader classes of `tensorbroker._core`: see bind.h.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "python/src/bind.h"
#include "python/src/py_stream.h"

namespace py = pybind11;

namespace tensorbroker::python {

void BindStreams(py::module_& m) {
  py::class_<PyStreamWriter>(m, "StreamWriter",
                             "The writer of a stream ring (Client.stream_writer). A context "
                             "manager (close() on exit).")
      .def("loan", &PyStreamWriter::Loan, py::arg("timeout") = 5.0,
           "The frame to fill next: a writable Tensor, valid until publish(); the same one "
           "again until then. Waits up to `timeout` seconds while readers hold every other "
           "slot (DeadlineExceeded).")
      .def("publish", &PyStreamWriter::Publish,
           "Make the loaned frame the newest and wake the readers; returns its sequence "
           "number (1, 2, ...).")
      .def("close", &PyStreamWriter::Close,
           "End the stream: readers get what was published, then the end. Deletes the name.")
      .def_property_readonly("readers", &PyStreamWriter::readers, "Readers accepted now.")
      .def_property_readonly("name", &PyStreamWriter::name, "The stream's name.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyStreamWriter& self, py::args) { self.Close(); });

  py::class_<PyStreamReader>(m, "StreamReader",
                             "A reader of a stream ring (Client.stream_reader): iterate it, or "
                             "call next(). A context manager (close() on exit).")
      .def("next", &PyStreamReader::Next, py::arg("timeout") = py::none(),
           "The newest frame after the last one: a read-only Tensor (its version is the "
           "frame's sequence number); None when `timeout` seconds passed first (None waits). "
           "StreamEnded once the writer closed the stream and nothing newer remains; "
           "ResourceExhausted while this reader holds frames_per_reader frames.")
      .def("close", &PyStreamReader::Close,
           "Leave the stream (frames already returned stay valid). From any thread: a next() "
           "waiting in another thread raises Cancelled (an iteration stops).")
      .def_property_readonly("last_sequence", &PyStreamReader::last_sequence,
                             "The sequence number of the last frame returned (0: none yet).")
      .def_property_readonly("skipped", &PyStreamReader::skipped,
                             "Frames the last next() skipped over (published meanwhile).")
      .def_property_readonly("name", &PyStreamReader::name, "The stream's name.")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &PyStreamReader::Iterate)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyStreamReader& self, py::args) { self.Close(); });
}

}  // namespace tensorbroker::python
