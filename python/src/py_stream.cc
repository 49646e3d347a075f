#include "python/src/py_stream.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/tensor_layout.h"
#include "python/src/py_dtype.h"
#include "python/src/py_waiting.h"
#include "python/src/status_error.h"

namespace tensorbroker::python {

namespace py = pybind11;

namespace {

// What a loan or a frame is, for the Tensor wrapping it.
TensorInfo InfoOf(const std::string& name, const DLTensor& t, uint64_t version) {
  TensorInfo info;
  info.name = name;
  info.dtype = t.dtype;
  info.shape.assign(t.shape, t.shape + t.ndim);
  info.strides = CompactStrides(info.shape);
  info.nbytes = ItemSize(t.dtype);
  for (int64_t dim : info.shape) info.nbytes *= static_cast<uint64_t>(dim);
  info.device = t.device;
  info.sealed = true;
  info.version = version;
  return info;
}

// A writable DLPack tensor over the writer's loan; it keeps the writer (and its client, which
// the writer's Close needs) alive.
DLManagedTensorVersioned* WrapLoan(const DLTensor& loan, std::shared_ptr<Client> client,
                                   std::shared_ptr<StreamWriter> writer) {
  struct LoanContext {
    std::shared_ptr<Client> client;  // destroyed after the writer
    std::shared_ptr<StreamWriter> writer;
    std::vector<int64_t> shape;
    std::vector<int64_t> strides;
  };
  auto* context = new LoanContext{std::move(client),
                                  std::move(writer),
                                  std::vector<int64_t>(loan.shape, loan.shape + loan.ndim),
                                  {}};
  context->strides = CompactStrides(context->shape);
  auto* out = new DLManagedTensorVersioned{};
  out->version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  out->manager_ctx = context;
  out->deleter = [](DLManagedTensorVersioned* t) {
    auto* c = static_cast<LoanContext*>(t->manager_ctx);
    // The last loan may close the writer: round trips, never with the GIL.
    RunWithoutGil([c] { delete c; });
    delete t;
  };
  out->dl_tensor = loan;
  out->dl_tensor.shape = context->shape.data();
  out->dl_tensor.strides = context->strides.data();
  return out;
}

}  // namespace

PyStreamWriter::PyStreamWriter(std::shared_ptr<Client> client, std::unique_ptr<StreamWriter> writer)
    : client_(std::move(client)), writer_(std::move(writer)) {}

PyStreamWriter::~PyStreamWriter() {
  RunWithoutGil([this] {
    writer_.reset();
    client_.reset();
  });
}

std::unique_ptr<PyTensor> PyStreamWriter::Loan(double timeout) {
  const auto limit = SecondsToMillis(timeout, "timeout");
  auto loan = Unlocked([&] { return writer_->Loan(limit); });
  DLTensor* frame = ValueOrThrow(std::move(loan));
  TensorPtr tensor(WrapLoan(*frame, client_, writer_));
  TensorInfo info = InfoOf(writer_->name(), *frame, 0);
  info.sealed = false;
  return PyTensor::Standalone(client_, std::move(tensor), std::move(info));
}

uint64_t PyStreamWriter::Publish() { return ValueOrThrow(writer_->Publish()); }

void PyStreamWriter::Close() {
  auto closed = Unlocked([&] { return writer_->Close(); });
  if (!closed.ok()) throw StatusError(closed);
}

PyStreamReader::PyStreamReader(std::shared_ptr<Client> client, std::unique_ptr<StreamReader> reader,
                               std::string name)
    : client_(std::move(client)), reader_(std::move(reader)), name_(std::move(name)) {}

PyStreamReader::~PyStreamReader() { Close(); }

void PyStreamReader::Close() {
  closed_.store(true);
  // Taken out with the GIL held (a next() in another thread copies reader_ with it), dropped
  // without it: the last owner deletes its seat, a round trip.
  std::shared_ptr<StreamReader> reader = std::move(reader_);
  RunWithoutGil([&reader] { reader.reset(); });
}

py::object PyStreamReader::Next(std::optional<double> timeout) {
  std::shared_ptr<StreamReader> reader = reader_;
  if (reader == nullptr) {
    throw StatusError(absl::FailedPreconditionError(
        absl::StrCat("the reader of stream '", name_, "' is closed")));
  }
  // Slices of at most 100 ms, so that a close() from another thread ends the wait soon.
  auto frame = WaitInSlices(
      timeout, [&](std::chrono::milliseconds slice) -> absl::StatusOr<std::optional<StreamFrame>> {
        if (closed_.load()) {
          return absl::CancelledError(
              absl::StrCat("the reader of stream '", name_, "' was closed"));
        }
        return reader->Next(std::min(slice, std::chrono::milliseconds(100)));
      });
  {
    // The last owner of a reader closed meanwhile deletes its seat: a round trip.
    GilReleased released;
    reader.reset();
  }
  if (!frame.ok()) throw StatusError(frame.status());
  if (!frame->has_value()) return py::none();
  return py::cast(Wrap(**std::move(frame)));
}

py::object PyStreamReader::Iterate() {
  try {
    return Next(std::nullopt);
  } catch (const StatusError& error) {
    if (absl::IsOutOfRange(error.status())) throw py::stop_iteration();
    if (closed_.load() && absl::IsCancelled(error.status())) throw py::stop_iteration();
    throw;
  }
}

std::unique_ptr<PyTensor> PyStreamReader::Wrap(StreamFrame frame) {
  last_sequence_ = frame.sequence;
  skipped_ = frame.skipped;
  TensorInfo info = InfoOf(name_, frame.tensor->dl_tensor, frame.sequence);
  return PyTensor::Standalone(client_, std::move(frame.tensor), std::move(info));
}

std::unique_ptr<PyStreamWriter> OpenStreamWriter(PyClient& self, const std::string& name,
                                                 py::handle shape, py::handle dtype, uint32_t slots,
                                                 uint32_t max_readers, uint32_t frames_per_reader,
                                                 py::handle readers, bool replace) {
  std::shared_ptr<Client> client = self.Shared();
  StreamOptions options;
  options.slots = slots;
  options.max_readers = max_readers;
  options.frames_per_reader = frames_per_reader;
  options.readers = ReadersFromPython(readers);
  options.replace = replace;
  const std::vector<int64_t> dims = ShapeFromPython(shape);
  const DLDataType dl_dtype = DTypeFromPython(dtype);
  auto writer =
      Unlocked([&] { return StreamWriter::Open(*client, name, dims, dl_dtype, options); });
  return std::make_unique<PyStreamWriter>(client, ValueOrThrow(std::move(writer)));
}

std::unique_ptr<PyStreamReader> OpenStreamReader(PyClient& self, const std::string& name,
                                                 double timeout) {
  std::shared_ptr<Client> client = self.Shared();
  const auto limit = SecondsToMillis(timeout, "timeout");
  auto reader = Unlocked([&] { return StreamReader::Open(*client, name, limit); });
  return std::make_unique<PyStreamReader>(client, ValueOrThrow(std::move(reader)), name);
}

}  // namespace tensorbroker::python
