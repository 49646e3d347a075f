// The Client class of `tensorbroker._core`: see bind.h.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>

#include "python/src/bind.h"
#include "python/src/py_stream.h"
#include "python/src/py_watch.h"

namespace py = pybind11;

namespace tensorbroker::python {
namespace {

// put(), create().
void BindClientPublishing(py::class_<PyClient>& client) {
  client
      .def(
          "put",
          [](PyClient& self, const std::string& name, py::handle obj, bool replace, bool is_mutable,
             py::object device, py::handle readers, uint32_t keep) {
            return self.Put(name, obj, is_mutable, replace, device, readers, keep);
          },
          py::arg("name"), py::arg("obj"), py::arg("replace") = false, py::kw_only(),
          py::arg("mutable") = false, py::arg("device") = py::none(),
          py::arg("readers") = py::none(), py::arg("keep") = 1,
          R"doc(Publish a copy of `obj` under `name` and return its stat() dict.

obj: anything with __dlpack__ (numpy.ndarray, torch.Tensor, cupy.ndarray, ...) or the buffer
    protocol, on the CPU or a CUDA GPU, with any strides (one copy, stored compact in C order).
    A CUDA source is read on the legacy default stream, ordered after the producer's current
    stream through the DLPack protocol (__dlpack__(stream=1)).
device: where the broker keeps the copy: "cpu", "cuda:N" (this process's ordinal); None: where
    obj is.
mutable: the published tensor stays writable for every holder; writes are seen by all.
replace: publish a new version if the name is taken (holders of the old one keep it). Only the
    name's owner (the uid that first published it) or an administrator may.
readers: who may read it besides you and the daemon's administrators: a list such as
    ["uid:1000", "group:ml"] (or one string "uid:1000,group:ml"); "*" is anyone who may
    connect. None: the daemon's default for the name; [] or "" (no one) is refused, since on
    the wire it would mean that default. To others it does not exist (NotFound).
keep: how many versions of the name stay readable by number (get(name, version=v)) once this
    one is published: this one and up to keep - 1 before it (at most 1024). Older ones are
    unpublished as newer arrive; holders keep theirs.)doc")
      .def("create", &PyClient::Create, py::arg("name"), py::arg("shape"), py::arg("dtype"),
           py::arg("mutable") = false, py::arg("replace") = false, py::kw_only(),
           py::arg("device") = "cpu", py::arg("pinned") = false, py::arg("readers") = py::none(),
           py::arg("keep") = 1,
           R"doc(Reserve a writable tensor in broker memory to fill in place, then seal() it.

np.asarray(t) and torch.from_dlpack(t) give writable zero-copy views. Nobody else sees the
tensor until t.seal(). dtype: "float32", np.float32, torch.float32, ... (NumPy spelling).
device: "cpu" or "cuda:N" (this process's ordinal; torch.device works too): device memory the
    daemon owns, exported through CUDA IPC.
pinned: CPU tensors only: map this one page-locked for fast, asynchronous copies to the GPU.
readers, keep: as for put().)doc");
}

// get(), delete(), list(), stat(), stats(), ping().
void BindClientReading(py::class_<PyClient>& client) {
  client
      .def(
          "get",
          [](PyClient& self, const std::string& name, std::optional<double> timeout, bool pinned,
             py::object device, py::handle cancel, std::optional<uint64_t> after_version,
             std::optional<uint64_t> version, bool oldest) {
            return self.Get(name, timeout, pinned, device, cancel,
                            {version, after_version, oldest});
          },
          py::arg("name"), py::arg("timeout") = py::none(), py::kw_only(),
          py::arg("pinned") = false, py::arg("device") = py::none(), py::arg("cancel") = py::none(),
          py::arg("after_version") = py::none(), py::arg("version") = py::none(),
          py::arg("oldest") = false,
          R"doc(The tensor published under `name`, without copying it.

timeout: seconds to wait for the name to be published; 0 answers at once (NotFound if absent);
    None (the default) waits until it is. Raises Timeout when the wait runs out. Ctrl-C
    interrupts the wait.
pinned: CPU tensors only: map it page-locked (cudaHostRegister, once per segment and process),
    so torch's .to("cuda", non_blocking=True) copies asynchronously. Needs a usable GPU.
device: None, or where you need the tensor ("cpu", "cuda:N"): get() never copies, so a tensor
    kept elsewhere raises FailedPrecondition saying where it is.
A CUDA tensor comes back on this process's ordinal of its GPU (named by UUID across processes,
so CUDA_VISIBLE_DEVICES may differ between producer and consumer).
cancel: a Cancellation; cancel() from any thread ends the wait with Cancelled, leaving no
    waiter in the daemon and no lease here (get_async() uses this).
after_version: only a version newer than this: the current one if newer, else wait (timeout)
    for the next publication. Follow a stream with `v = t.version` after each get().
    Versions are daemon-wide: increasing, not consecutive.
version: exactly this version, if the name still keeps it (put/create keep=); NotFound at once
    otherwise. Not with after_version.
oldest: with after_version: the oldest kept version newer than it rather than the current
    one, to step through every version the history keeps.)doc")
      .def("delete", &PyClient::Delete, py::arg("name"),
           "Unpublish `name` at once; holders keep valid memory until they release it. Only its "
           "owner or an administrator may (PermissionDenied).")
      .def("list", &PyClient::List, py::arg("prefix") = "",
           "stat() dicts of the published tensors whose names start with `prefix` that you may "
           "read, by name (every page the daemon answers with).")
      .def("stat", &PyClient::Stat, py::arg("name"),
           "What the broker knows about `name`: the fields of `tensorbroker stat --json` (name, "
           "dtype, shape, strides, nbytes, device, sealed, mutable, version, leases, "
           "created_unix_ms, owner_uid, readers).")
      .def("latest_version", &PyClient::LatestVersion, py::arg("name"),
           "The current version of `name`, read from this uid's directory in shared memory (no "
           "call; a stat() when the directory cannot say). NotFound when it is not published or "
           "you may not read it.")
      .def("changed_since", &PyClient::ChangedSince, py::arg("name"), py::arg("version"),
           "Whether the current version of `name` is another than `version` (as "
           "latest_version(): no call).")
      .def("stats", &PyClient::Stats,
           "Daemon-wide counters and what each user holds (`users`: every user for an "
           "administrator, else you): the fields of `tensorbroker stats --json`.")
      .def("ping", &PyClient::Ping, "An empty round trip to the daemon.");
}

// watch(), stream_writer(), stream_reader(), and the session's own: close(), socket, ...
void BindClientFollowingAndSession(py::class_<PyClient>& client) {
  client
      .def(
          "watch",
          [](py::object self, const std::string& prefix, std::optional<uint64_t> after_version) {
            auto watcher = self.cast<PyClient&>().Watch(prefix, after_version);
            return std::make_unique<PyWatch>(self, std::move(watcher));
          },
          py::arg("prefix") = "", py::kw_only(), py::arg("after_version") = py::none(),
          R"doc(Follow every publication, replacement, deletion and expiry under `prefix`.

Returns a Watch: iterate it (``for ev in client.watch("camera/")``, or ``async for``) for
WatchEvent objects in sequence order, only of tensors you may read. after_version: start after
this sequence (what the daemon still remembers first; a gap comes as one "lost" event); None:
from now on. A watch that stops reading costs the daemon nothing: it falls behind and gets one
"lost" event when it reads again. It survives daemon restarts (after a "lost" event).)doc")
      .def("stream_writer", &OpenStreamWriter, py::arg("name"), py::arg("shape"), py::arg("dtype"),
           py::kw_only(), py::arg("slots") = 8, py::arg("max_readers") = 4,
           py::arg("frames_per_reader") = 2, py::arg("readers") = py::none(),
           py::arg("replace") = false,
           R"doc(Publish a stream ring under `name`: frames of one shape and dtype that readers
follow with no daemon round trip per frame (see docs/python.md, "Streams").

slots: frames in the ring (2-256); max_readers: readers at once (1-64); frames_per_reader:
    frames one reader may hold at once (1-16). With slots >= 2 + max_readers *
    frames_per_reader, loan() never waits for a reader.
readers: who may read it besides you, as for put(); replace: take over a name already
    published (a new writer after one that died).)doc")
      .def("stream_reader", &OpenStreamReader, py::arg("name"), py::arg("timeout") = 5.0,
           R"doc(Follow the stream ring `name` (stream_writer). Waits up to `timeout` seconds for
it to be published and for its writer to take this reader (DeadlineExceeded naming which).)doc")
      .def("close", &PyClient::Close, "End the session. Tensors already returned stay valid.")
      .def_property_readonly("socket", &PyClient::socket, "The daemon's socket path.")
      .def_property_readonly("closed", &PyClient::closed, "Whether close() was called.")
      .def(
          "__enter__", [](PyClient& self) -> PyClient& { return self; },
          py::return_value_policy::reference)
      .def("__exit__", [](PyClient& self, py::args) { self.Close(); })
      .def("__repr__", [](const PyClient& self) {
        return "<tensorbroker.Client " + self.socket() + (self.closed() ? " closed>" : ">");
      });
}

}  // namespace

void BindClient(py::module_& m) {
  py::class_<PyClient> client(m, "Client", R"doc(A session with tensorbrokerd; made by connect().

Safe to share between threads. Every call releases the GIL while it talks to the daemon.
Tensors it returned keep working after close(). Usable as a context manager (closes on exit).)doc");
  BindClientPublishing(client);
  BindClientReading(client);
  BindClientFollowingAndSession(client);
}

}  // namespace tensorbroker::python
