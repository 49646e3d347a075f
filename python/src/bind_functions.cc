// Module-level functions of `tensorbroker._core` and the Cancellation class: see bind.h.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>

#include "python/src/bind.h"
#include "tensorbroker/client.h"

namespace py = pybind11;

namespace tensorbroker::python {

void BindModuleFunctions(py::module_& m) {
  m.def("default_socket", &tensorbroker::DefaultSocketPath,
        "The socket used when none is given: $TENSORBROKER_SOCKET, else "
        "/run/tensorbroker/broker.sock for root, else $XDG_RUNTIME_DIR/tensorbroker/broker.sock, "
        "else /tmp/tensorbroker-$UID/broker.sock.");

  m.def(
      "process_mappings",
      [] {
        const tensorbroker::ProcessMappings m = tensorbroker::CurrentProcessMappings();
        py::dict d;
        d["cached_segments"] = m.cached_segments;
        d["open_cuda_slabs"] = m.open_cuda_slabs;
        d["cached_cuda_slabs"] = m.cached_cuda_slabs;
        d["pinned_segments"] = m.pinned_segments;
        return d;
      },
      "This process's mappings of broker memory: shared-memory segments cached for reuse, CUDA "
      "slabs open (closed with their last tensor) and segments page-locked.");
}

void BindCancellation(py::module_& m) {
  py::class_<tensorbroker::GetCancellation, std::shared_ptr<tensorbroker::GetCancellation>>(
      m, "Cancellation", R"doc(Cancels waiting get() calls from any thread: get(name, cancel=c).

Once c.cancel() is called, every get() given c raises Cancelled at once (now, or when it starts),
leaving no waiter in the daemon and no lease in this process. It cannot be reset; one token may
serve many calls. Thread-safe.)doc")
      .def(py::init<>())
      .def(
          "cancel",
          [](tensorbroker::GetCancellation& self) {
            py::gil_scoped_release released;
            self.Cancel();
          },
          "Cancel every get() given this token, now and later.")
      .def_property_readonly("cancelled", &tensorbroker::GetCancellation::cancelled,
                             "Whether cancel() was called.")
      .def("__repr__", [](const tensorbroker::GetCancellation& self) {
        return self.cancelled() ? "<tensorbroker.Cancellation cancelled>"
                                : "<tensorbroker.Cancellation>";
      });
}

void BindConnect(py::module_& m) {
  m.def("connect", &PyClient::Connect, py::arg("socket") = py::none(), py::arg("timeout") = 5.0,
        py::arg("reconnect_timeout") = 30.0, py::arg("fast_reads") = true,
        R"doc(Connect to tensorbrokerd and open a session.

socket: the daemon's Unix socket; None uses default_socket() (the same rule as the C++ client
    and the CLI).
timeout: seconds to wait for the daemon to answer.
reconnect_timeout: when the daemon goes away (a restart, an upgrade, a crash), the call that
    finds it gone waits up to this many seconds for it to answer again, then reconnects and goes
    on; tensors this client holds stay valid. 0: such calls raise Unavailable.
fast_reads: map this uid's directory of current versions and a lease table of this client's
    own, so that latest_version() is a read of shared memory and a get() of a current version
    in a segment this process maps already asks nothing of the daemon. False: every get() and
    check is a call.

Raises Unavailable when no daemon answers, PermissionDenied when the socket may not be used,
FailedPrecondition when it is served by a user other than root, the daemon's user
($TENSORBROKER_DAEMON_USER, else tensorbroker) or this process's own.)doc");
}

}  // namespace tensorbroker::python
