// The `tensorbroker._core` extension: binds PyClient and PyTensor and maps broker errors to
// tensorbroker.errors. The public package (tensorbroker/__init__.py) re-exports it.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "python/src/lease_export.h"
#include "python/src/py_client.h"
#include "python/src/py_stream.h"
#include "python/src/py_tensor.h"
#include "python/src/py_watch.h"
#include "python/src/status_error.h"
#include "tensorbroker/dtype_names.h"

namespace py = pybind11;
using tensorbroker::python::PyClient;
using tensorbroker::python::PyStreamReader;
using tensorbroker::python::PyStreamWriter;
using tensorbroker::python::PyTensor;
using tensorbroker::python::PyWatch;
using tensorbroker::python::PyWatchEvent;

PYBIND11_MODULE(_core, m) {
  m.doc() = "tensorbroker's native core; use the `tensorbroker` package.";
  py::module_::import("tensorbroker.errors");  // fail at import, not at the first error
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const tensorbroker::python::StatusError& e) {
      tensorbroker::python::RaiseInPython(e);
    }
  });

  tensorbroker::python::BindLeaseBytes(m);

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
        d["pinned_segments"] = m.pinned_segments;
        return d;
      },
      "This process's mappings of broker memory: shared-memory segments cached for reuse, CUDA "
      "slabs open (closed with their last tensor) and segments page-locked.");

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

  // Declared before the methods that return them, so signatures name them as Python does.
  py::class_<PyTensor> tensor_class(m, "Tensor",
                                    R"doc(A broker tensor this process holds a lease on.

Zero-copy views: np.asarray(t), np.from_dlpack(t), torch.from_dlpack(t), t.numpy(), t.torch().
Each view holds its own reference to the lease (one broker lease per process and version), so it stays valid after t.release() or after `t` is
garbage-collected; the broker frees the memory when the last lease anywhere ends.
Read-only unless the tensor is mutable or came from create() and is not sealed yet.
Usable as a context manager: release() on exit (and abort() if created and never sealed).)doc");

  py::class_<PyClient>(m, "Client", R"doc(A session with tensorbrokerd; made by connect().

Safe to share between threads. Every call releases the GIL while it talks to the daemon.
Tensors it returned keep working after close(). Usable as a context manager (closes on exit).)doc")
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
readers, keep: as for put().)doc")
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
      .def("stats", &PyClient::Stats,
           "Daemon-wide counters and what each user holds (`users`: every user for an "
           "administrator, else you): the fields of `tensorbroker stats --json`.")
      .def("ping", &PyClient::Ping, "An empty round trip to the daemon.")
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
      .def("stream_writer", &tensorbroker::python::OpenStreamWriter, py::arg("name"),
           py::arg("shape"), py::arg("dtype"), py::kw_only(), py::arg("slots") = 8,
           py::arg("max_readers") = 4, py::arg("frames_per_reader") = 2,
           py::arg("readers") = py::none(), py::arg("replace") = false,
           R"doc(Publish a stream ring under `name`: frames of one shape and dtype that readers
follow with no daemon round trip per frame (see docs/python.md, "Streams").

slots: frames in the ring (2-256); max_readers: readers at once (1-64); frames_per_reader:
    frames one reader may hold at once (1-16). With slots >= 2 + max_readers *
    frames_per_reader, loan() never waits for a reader.
readers: who may read it besides you, as for put(); replace: take over a name already
    published (a new writer after one that died).)doc")
      .def("stream_reader", &tensorbroker::python::OpenStreamReader, py::arg("name"),
           py::arg("timeout") = 5.0,
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

  m.def("connect", &PyClient::Connect, py::arg("socket") = py::none(), py::arg("timeout") = 5.0,
        py::arg("reconnect_timeout") = 30.0,
        R"doc(Connect to tensorbrokerd and open a session.

socket: the daemon's Unix socket; None uses default_socket() (the same rule as the C++ client
    and the CLI).
timeout: seconds to wait for the daemon to answer.
reconnect_timeout: when the daemon goes away (a restart, an upgrade, a crash), the call that
    finds it gone waits up to this many seconds for it to answer again, then reconnects and goes
    on; tensors this client holds stay valid. 0: such calls raise Unavailable.

Raises Unavailable when no daemon answers, PermissionDenied when the socket may not be used,
FailedPrecondition when it is served by a user other than root, the daemon's user
($TENSORBROKER_DAEMON_USER, else tensorbroker) or this process's own.)doc");

  tensor_class
      .def("__dlpack__", &PyTensor::DLPack, py::kw_only(), py::arg("stream") = py::none(),
           py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(),
           py::arg("copy") = py::none(),
           R"doc(A DLPack capsule holding its own reference to the lease, released by its deleter.

"dltensor_versioned" (DLPack 1.x, with the read-only flag) when max_version allows it, else the
legacy "dltensor" that NumPy 1.24 and PyTorch 1.13 read.
stream: for CUDA tensors, the consumer's stream (DLPack: 1 legacy default, 2 per-thread, -1 no
    synchronisation; 0 is refused as ambiguous). The tensor is complete when get() returns (its
    producer's stream was synchronised before seal), so no wait is queued on it. For a mutable
    tensor, order concurrent writers yourself. CPU tensors take None (or -1).
dl_device: None, or the tensor's own (__dlpack_device__()); any other is BufferError.
copy: None or False share the broker's pages; True hands a private, writable copy (CPU tensors
    only; BufferError for CUDA ones), flagged as copied in DLPack 1.x.)doc")
      .def("__dlpack_device__", &PyTensor::DLPackDevice,
           "(device_type, device_id): (1, 0) = CPU (pinned tensors too), (2, N) = CUDA device N "
           "of this process.")
      .def("__array__", &PyTensor::Array, py::arg("dtype") = py::none(),
           py::arg("copy") = py::none(),
           "A NumPy view of the broker's pages (its own reference to the lease); read-only unless "
           "writable.")
      .def(
          "numpy", [](PyTensor& self) { return self.Array(py::none(), py::none()); },
          "np.asarray(t): a zero-copy NumPy view, bool included.")
      .def("torch", &PyTensor::Torch,
           "torch.from_dlpack(t); bool tensors come back as torch.bool (through a uint8 view where "
           "torch does not take DLPack's kDLBool, as 1.13).")
      .def("view", &PyTensor::View, py::arg("dtype"),
           "The same bytes as another dtype of the same item size (e.g. bool as uint8), with a "
           "reference of its own to the lease.")
      .def("seal", &PyTensor::Seal, py::arg("stream") = py::none(),
           R"doc(Publish a tensor from create(). Unless it is mutable it is read-only from now on:
do not write through views taken before.

stream: CUDA tensors: the stream you wrote it on (torch.cuda.Stream, cupy.cuda.Stream or a
    cudaStream_t int); seal() waits for that stream's work first, so no consumer ever sees
    unfinished writes. None: waits for all work on the tensor's GPU (cudaDeviceSynchronize).)doc")
      .def("abort", &PyTensor::Abort, "Drop a tensor from create() that was never sealed.")
      .def("release", &PyTensor::Release,
           "End this object's lease now (views made from it keep theirs). Idempotent.")
      .def_property_readonly(
          "name", [](const PyTensor& t) { return t.info().name; },
          "The name it was published (or created) under.")
      .def_property_readonly(
          "shape", [](const PyTensor& t) { return py::tuple(py::cast(t.info().shape)); },
          "Its dimensions.")
      .def_property_readonly(
          "strides", [](const PyTensor& t) { return py::tuple(py::cast(t.info().strides)); },
          "In elements, as DLPack.")
      .def_property_readonly(
          "ndim", [](const PyTensor& t) { return t.info().shape.size(); },
          "The number of dimensions.")
      .def_property_readonly(
          "dtype", [](const PyTensor& t) { return tensorbroker::DTypeName(t.dtype()); },
          "NumPy spelling: \"float32\", \"bool\", \"bfloat16\", ...")
      .def_property_readonly(
          "nbytes", [](const PyTensor& t) { return t.info().nbytes; }, "Bytes of its elements.")
      .def_property_readonly(
          "version", [](const PyTensor& t) { return t.info().version; },
          "The version of the name this tensor is (1 for the first).")
      .def_property_readonly(
          "mutable", [](const PyTensor& t) { return t.info().is_mutable; },
          "Whether it stays writable for every holder after seal().")
      .def_property_readonly(
          "readonly", [](const PyTensor& t) { return !t.writable(); },
          "Whether this process may not write it (mapped read-only).")
      .def_property_readonly(
          "sealed", [](const PyTensor& t) { return !t.created(); },
          "Whether it is published (False for an unsealed create()).")
      .def_property_readonly("released", &PyTensor::released,
                             "Whether release() was called (views made before stay valid).")
      .def_property_readonly("device", &PyTensor::device,
                             "\"cpu\", \"cuda:N\" (this process's ordinal) or \"cuda_host\" "
                             "(pinned CPU memory).")
      .def_property_readonly("pinned", &PyTensor::pinned,
                             "CPU memory page-locked for CUDA (create/get with pinned=True).")
      .def(
          "__enter__", [](PyTensor& self) -> PyTensor& { return self; },
          py::return_value_policy::reference)
      .def("__exit__",
           [](PyTensor& self, py::args) {
             if (self.created() && !self.released()) {
               try {
                 self.Abort();
               } catch (const tensorbroker::python::StatusError&) {
               }
             }
             self.Release();
           })
      .def("__repr__", &PyTensor::Repr);
}
