#include "python/src/py_watch.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "python/src/py_client.h"
#include "python/src/py_waiting.h"
#include "python/src/status_error.h"

namespace tensorbroker::python {

namespace py = pybind11;

namespace {

PyWatchEvent ToPython(const WatchEvent& event, const py::object& client) {
  PyWatchEvent out;
  out.kind = WatchEventKindName(event.kind);
  out.sequence = event.sequence;
  out.name = event.name;
  out.version = event.version;
  out.previous_version = event.previous_version;
  out.info = event.kind == WatchEvent::Kind::kLost ? py::none() : py::object(InfoDict(event.info));
  out.lost_first = event.lost_first;
  out.lost_last = event.lost_last;
  out.client = client;
  return out;
}

}  // namespace

py::object PyWatchEvent::Get(py::object timeout) const {
  if (kind == "lost") {
    throw StatusError(absl::FailedPreconditionError(absl::StrCat(
        "a lost event (sequences ", lost_first, "..", lost_last, ") names no tensor")));
  }
  py::dict kwargs;
  kwargs["version"] = version;
  return client.attr("get")(name, timeout, **kwargs);
}

std::string PyWatchEvent::Repr() const {
  if (kind == "lost") {
    return absl::StrCat("<tensorbroker.WatchEvent lost ", lost_first, "..", lost_last, ">");
  }
  return absl::StrCat("<tensorbroker.WatchEvent ", kind, " '", name, "' version ", version,
                      " (sequence ", sequence, ")>");
}

PyWatch::PyWatch(py::object client, std::unique_ptr<Watcher> watcher)
    : client_(std::move(client)), watcher_(std::move(watcher)) {}

py::object PyWatch::Next(std::optional<double> timeout) {
  std::shared_ptr<Watcher> watcher = watcher_;
  auto event =
      WaitInSlices(timeout, [&](std::chrono::milliseconds slice) { return watcher->Next(slice); });
  if (!event.ok()) throw StatusError(event.status());
  if (!event->has_value()) return py::none();
  return py::cast(ToPython(**event, client_));
}

PyWatchEvent PyWatch::Iterate() {
  try {
    return Next(std::nullopt).cast<PyWatchEvent>();
  } catch (const StatusError& error) {
    if (closed_.load() && absl::IsCancelled(error.status())) throw py::stop_iteration();
    throw;
  }
}

void PyWatch::Close() {
  closed_.store(true);
  watcher_->Close();
}

}  // namespace tensorbroker::python
