#include "python/src/py_client.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/stats_schema.h"
#include "python/src/py_device.h"
#include "python/src/py_dtype.h"
#include "python/src/py_waiting.h"
#include "python/src/source_view.h"
#include "python/src/status_error.h"
#include "tensorbroker/dtype_names.h"

namespace tensorbroker::python {

namespace py = pybind11;

std::vector<int64_t> ShapeFromPython(py::handle shape) {
  if (PyLong_Check(shape.ptr())) return {shape.cast<int64_t>()};
  std::vector<int64_t> dims;
  try {
    for (py::handle dim : py::iter(shape)) dims.push_back(py::cast<int64_t>(dim));
  } catch (const py::error_already_set&) {
    throw StatusError(absl::InvalidArgumentError(absl::StrCat(
        "shape ", std::string(py::str(py::repr(shape))), " is not a sequence of integers")));
  } catch (const py::cast_error&) {
    throw StatusError(absl::InvalidArgumentError(absl::StrCat(
        "shape ", std::string(py::str(py::repr(shape))), " is not a sequence of integers")));
  }
  return dims;
}

// The entries of a readers argument that is not a string: an iterable of strings.
static std::vector<std::string> ReaderSequence(py::handle readers) {
  std::vector<std::string> entries;
  try {
    for (py::handle entry : py::iter(readers)) {
      if (!PyUnicode_Check(entry.ptr())) throw py::cast_error();
      entries.push_back(entry.cast<std::string>());
    }
  } catch (const std::exception&) {  // not iterable (error_already_set), not a str (cast_error)
    throw StatusError(
        absl::InvalidArgumentError(absl::StrCat("readers ", std::string(py::str(py::repr(readers))),
                                                " is not a string or a sequence of strings (uid:N, "
                                                "gid:N, user:NAME, group:NAME, peer:NAME, *)")));
  }
  return entries;
}

// None: no readers named (the daemon's default); "a,b": entries split at commas; or an
// iterable of strings. One that names no one ([], "") is refused: on the wire no readers means
// the daemon's default, often "*", the opposite of what "no readers" says.
std::vector<std::string> ReadersFromPython(py::handle readers) {
  std::vector<std::string> entries;
  if (readers.is_none()) return entries;
  if (PyUnicode_Check(readers.ptr())) {
    for (absl::string_view entry :
         absl::StrSplit(readers.cast<std::string>(), ',', absl::SkipWhitespace())) {
      entries.emplace_back(absl::StripAsciiWhitespace(entry));
    }
  } else {
    entries = ReaderSequence(readers);
  }
  if (entries.empty()) {
    throw StatusError(absl::InvalidArgumentError(absl::StrCat(
        "readers ", std::string(py::str(py::repr(readers))),
        " names no one: pass None for the daemon's default, or \"uid:N\" with your own uid "
        "for no reader but you")));
  }
  return entries;
}

namespace {}  // namespace

py::dict InfoDict(const TensorInfo& info) {
  py::dict d;
  d["name"] = info.name;
  d["dtype"] = DTypeName(info.dtype);
  d["shape"] = py::cast(info.shape);
  d["strides"] = py::cast(info.strides);
  d["nbytes"] = info.nbytes;
  d["device"] = DeviceName(info.device);
  d["sealed"] = info.sealed;
  d["mutable"] = info.is_mutable;
  d["version"] = info.version;
  d["leases"] = info.leases;
  d["created_unix_ms"] = info.created_unix_ms;
  d["owner_uid"] = info.owner_uid;
  d["readers"] = py::cast(info.readers);
  d["keep"] = info.keep;
  d["kept_versions"] = py::cast(info.kept_versions);
  d["ephemeral"] = info.ephemeral;
  if (info.origin.has_value()) {
    py::dict origin;
    origin["peer"] = info.origin->peer;
    origin["version"] = info.origin->version;
    origin["fetched_unix_ms"] = info.origin->fetched_unix_ms;
    d["origin"] = origin;
  } else {
    d["origin"] = py::none();
  }
  return d;
}

namespace {

// WalkStats' output as a dict whose lists hold dicts.
class StatsDictOut {
 public:
  void Number(const char* key, uint64_t value) { Current()[key] = value; }
  void String(const char* key, const std::string& value) { Current()[key] = value; }
  void BeginList(const char* key) {
    list_ = py::list();
    root_[key] = list_;  // the same list object: items appended below show in it
  }
  void BeginItem() {
    item_ = py::dict();
    in_item_ = true;
  }
  void EndItem() {
    list_.append(item_);
    in_item_ = false;
  }
  void EndList() {}

  py::dict Take() { return std::move(root_); }

 private:
  py::dict& Current() { return in_item_ ? item_ : root_; }

  py::dict root_;
  py::list list_;
  py::dict item_;
  bool in_item_ = false;
};

}  // namespace

py::dict StatsDict(const BrokerStats& stats) {
  StatsDictOut out;
  WalkStats(stats, out);
  return out.Take();
}

std::unique_ptr<PyClient> PyClient::Connect(std::optional<std::string> socket, double timeout,
                                            double reconnect_timeout, bool fast_reads) {
  ConnectOptions options;
  options.fast_reads = fast_reads;
  options.socket_path = socket.value_or("");
  options.timeout = SecondsToMillis(timeout, "timeout");
  options.reconnect_timeout = SecondsToMillis(reconnect_timeout, "reconnect_timeout");
  auto client = Unlocked([&] { return Client::Connect(options); });
  std::shared_ptr<Client> shared(ValueOrThrow(std::move(client)).release());
  std::string resolved = shared->socket_path();
  return std::unique_ptr<PyClient>(new PyClient(std::move(shared), std::move(resolved)));
}

std::shared_ptr<Client> PyClient::Live() const {
  if (client_ == nullptr) {
    throw StatusError(absl::FailedPreconditionError(
        absl::StrCat("the client for ", socket_, " is closed; connect() again")));
  }
  return client_;
}

PyClient::~PyClient() { Close(); }

void PyClient::Close() {
  std::shared_ptr<Client> dropped = std::move(client_);
  client_ = nullptr;
  RunWithoutGil([&] { dropped.reset(); });  // ends the session: a round trip
}

py::dict PyClient::Put(const std::string& name, py::handle object, bool is_mutable, bool replace,
                       py::object device, py::handle readers, uint32_t keep) {
  std::shared_ptr<Client> client = Live();
  PutOptions options;
  options.keep = keep;
  options.readers = ReadersFromPython(readers);
  if (!device.is_none()) options.device = DeviceFromPython(device);
  std::unique_ptr<SourceView> source = SourceView::Of(object);
  options.is_mutable = is_mutable;
  options.replace = replace;
  auto info = Unlocked([&] { return client->Put(name, source->tensor(), options); });
  source.reset();  // the producer's deleter may need the GIL: we hold it again
  return InfoDict(ValueOrThrow(std::move(info)));
}

std::unique_ptr<PyTensor> PyClient::Create(const std::string& name, py::handle shape,
                                           py::handle dtype, bool is_mutable, bool replace,
                                           py::handle device, bool pinned, py::handle readers,
                                           uint32_t keep) {
  std::shared_ptr<Client> client = Live();
  const std::vector<int64_t> dims = ShapeFromPython(shape);
  const DLDataType dl_dtype = DTypeFromPython(dtype);
  CreateOptions options;
  options.keep = keep;
  options.readers = ReadersFromPython(readers);
  options.device = DeviceFromPython(device);
  options.pinned = pinned;
  options.is_mutable = is_mutable;
  options.replace = replace;
  auto created = Unlocked([&] { return client->Create(name, dims, dl_dtype, options); });
  TensorPtr lease(ValueOrThrow(std::move(created)));
  std::shared_ptr<const TensorInfo> info = ValueOrThrow(client->DescribeShared(*lease));
  return std::make_unique<PyTensor>(client, std::move(lease), std::move(info), /*created=*/true);
}

std::unique_ptr<PyTensor> PyClient::Wrap(const std::shared_ptr<Client>& client,
                                         DLManagedTensorVersioned* got) {
  TensorPtr lease(got);
  std::shared_ptr<const TensorInfo> info = ValueOrThrow(client->DescribeShared(*lease));
  LeaseDrop drop(client, lease->dl_tensor.device);
  return std::make_unique<PyTensor>(client, std::move(lease), std::move(info), /*created=*/false,
                                    std::move(drop));
}

std::unique_ptr<PyTensor> PyClient::Get(const std::string& name, std::optional<double> timeout,
                                        bool pinned, py::object device, py::handle cancel,
                                        const VersionArgs& which) {
  std::optional<DLDevice> wanted;
  if (!device.is_none()) wanted = DeviceFromPython(device);
  std::shared_ptr<GetCancellation> token;
  if (!cancel.is_none()) {
    if (!py::isinstance<GetCancellation>(cancel)) {
      throw py::type_error(
          absl::StrCat("cancel: expected a tensorbroker.Cancellation or None, got ",
                       py::str(cancel.get_type().attr("__name__")).cast<std::string>()));
    }
    token = cancel.cast<std::shared_ptr<GetCancellation>>();
  }
  std::shared_ptr<Client> client = Live();
  const bool forever = !timeout.has_value();
  const auto total = forever ? std::chrono::milliseconds(0) : SecondsToMillis(*timeout, "timeout");
  const auto deadline = std::chrono::steady_clock::now() + total;
  const std::chrono::milliseconds longest = OnMainThread() ? kWaitSlice : kLongestSlice;
  auto ran_out = [&] {
    return StatusError(absl::DeadlineExceededError(absl::StrCat(
        "name '", name, "' was not published",
        which.after_version.has_value() ? absl::StrCat(" after version ", *which.after_version)
                                        : "",
        " within ", *timeout, " s")));
  };
  // The current version from the directory: a read of shared memory, cheaper with the GIL held
  // than letting it go and taking it back.
  if (client->fast_reads() && !pinned && !which.version.has_value() && !which.oldest &&
      token == nullptr) {
    GetOptions local;
    local.no_round_trip = true;
    local.device = wanted;
    local.after_version = which.after_version;
    if (auto got = client->Get(name, local); got.ok()) return Wrap(client, *got);
  }
  bool first = true;
  while (true) {
    // Rounded up: a last slice of 0 ms would ask "is it there now?" and answer NOT_FOUND.
    auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (!forever && !first && left.count() <= 0) throw ran_out();
    first = false;
    const auto slice = forever ? longest : std::clamp(left, std::chrono::milliseconds(0), longest);
    GetOptions options;
    options.timeout = slice;
    options.pinned = pinned;
    options.device = wanted;
    options.cancel = token;
    options.version = which.version.value_or(0);
    options.after_version = which.after_version;
    options.oldest = which.oldest;
    auto got = Unlocked([&] { return client->Get(name, options); });
    if (got.ok()) return Wrap(client, *got);
    const bool waiting_more = absl::IsDeadlineExceeded(got.status()) &&
                              (forever || std::chrono::steady_clock::now() < deadline);
    if (!waiting_more) {
      if (absl::IsDeadlineExceeded(got.status())) throw ran_out();
      throw StatusError(got.status());
    }
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();  // Ctrl-C
  }
}

std::unique_ptr<Watcher> PyClient::Watch(const std::string& prefix,
                                         std::optional<uint64_t> after_version) {
  std::shared_ptr<Client> client = Live();
  WatchOptions options;
  options.after_version = after_version;
  return ValueOrThrow(Unlocked([&] { return client->Watch(prefix, options); }));
}

void PyClient::Delete(const std::string& name) {
  std::shared_ptr<Client> client = Live();
  ThrowIfError(Unlocked([&] { return client->Delete(name); }));
}

py::list PyClient::List(const std::string& prefix) {
  std::shared_ptr<Client> client = Live();
  auto infos = ValueOrThrow(Unlocked([&] { return client->List(prefix); }));
  py::list out;
  for (const TensorInfo& info : infos) out.append(InfoDict(info));
  return out;
}

py::dict PyClient::Stat(const std::string& name) {
  std::shared_ptr<Client> client = Live();
  return InfoDict(ValueOrThrow(Unlocked([&] { return client->Stat(name); })));
}

uint64_t PyClient::LatestVersion(const std::string& name) {
  std::shared_ptr<Client> client = Live();
  // A read of shared memory costs less than letting the GIL go and taking it back.
  if (client->fast_reads()) return ValueOrThrow(client->LatestVersion(name));
  return ValueOrThrow(Unlocked([&] { return client->LatestVersion(name); }));
}

bool PyClient::ChangedSince(const std::string& name, uint64_t version) {
  return LatestVersion(name) != version;
}

py::dict PyClient::Stats() {
  std::shared_ptr<Client> client = Live();
  return StatsDict(ValueOrThrow(Unlocked([&] { return client->Stats(); })));
}

void PyClient::Ping() {
  std::shared_ptr<Client> client = Live();
  ThrowIfError(Unlocked([&] { return client->Ping(); }));
}

}  // namespace tensorbroker::python
