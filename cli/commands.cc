#include "cli/commands.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cli/health_check.h"
#include "cli/info_format.h"
#include "cli/npy_file.h"
#include "cli/npy_format.h"
#include "cli/posix_file.h"
#include "cli/socket_wait.h"
#include "common/cuda_runtime.h"
#include "common/prometheus_format.h"
#include "common/tensor_layout.h"
#include "tensorbroker/client.h"
#include "tensorbroker/dtype_names.h"

namespace tensorbroker::cli {
namespace {

// Prints "tensorbroker: <what>: <CODE>: <message>" and returns the failure exit status.
int Fail(std::ostream& err, absl::string_view what, const absl::Status& status) {
  err << "tensorbroker: " << what << ": " << absl::StatusCodeToString(status.code()) << ": "
      << status.message() << "\n";
  return kExitFailure;
}

std::string Quoted(absl::string_view name) { return absl::StrCat("'", name, "'"); }

// How long a command waits for the daemon to answer (the socket's path to appear included).
constexpr absl::Duration kConnectTimeout = absl::Seconds(5);

class CommandRunner {
 public:
  CommandRunner(const Invocation& inv, std::ostream& out, std::ostream& err)
      : inv_(inv), out_(out), err_(err) {}

  int Run() {
    switch (inv_.command) {
      case Command::kLs:
        return Ls();
      case Command::kStat:
        return Stat();
      case Command::kPut:
        return Put();
      case Command::kGet:
        return Get();
      case Command::kRm:
        return Rm();
      case Command::kStats:
        return Stats();
      case Command::kHealth:
        return Health();
      case Command::kWatch:
        return Watch();
      case Command::kHelp:
      case Command::kNone:
        break;
    }
    out_ << HelpText(inv_.arguments.empty() ? Command::kNone : CommandFromName(inv_.arguments[0]));
    return kExitOk;
  }

 private:
  // Connects on first use, within kConnectTimeout (waiting for the socket's path included:
  // socket_wait.h); on failure prints the error and returns false.
  bool Connect() {
    const std::string socket = inv_.socket_path.empty() ? DefaultSocketPath() : inv_.socket_path;
    const std::string what = absl::StrCat("cannot connect to tensorbrokerd at ", socket);
    const absl::Time start = absl::Now();
    if (absl::Status there = AwaitSocketPath(socket, kConnectTimeout); !there.ok()) {
      Fail(err_, what, there);
      return false;
    }
    const absl::Duration left =
        std::max(kConnectTimeout - (absl::Now() - start), absl::ZeroDuration());
    absl::StatusOr<std::unique_ptr<Client>> client =
        Client::Connect(inv_.socket_path, absl::ToChronoMilliseconds(left));
    if (!client.ok()) {
      Fail(err_, what, client.status());
      return false;
    }
    client_ = *std::move(client);
    return true;
  }

  int Ls() {
    const std::string prefix = inv_.arguments.empty() ? "" : inv_.arguments[0];
    if (absl::Status s = ValidatePrefix(prefix); !s.ok()) return Fail(err_, "ls", s);
    if (!Connect()) return kExitFailure;
    absl::StatusOr<std::vector<TensorInfo>> infos = client_->List(prefix);
    if (!infos.ok()) return Fail(err_, "ls", infos.status());
    std::sort(infos->begin(), infos->end(),
              [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
    if (inv_.json) {
      out_ << TensorListJson(*infos) << "\n";
    } else {
      out_ << TensorTableText(*infos);
    }
    return kExitOk;
  }

  // Until --count events (or forever), one line each, flushed as it comes.
  int Watch() {
    const std::string& prefix = inv_.arguments[0];
    const std::string what = absl::StrCat("watch ", Quoted(prefix));
    if (absl::Status s = ValidatePrefix(prefix); !s.ok()) return Fail(err_, what, s);
    if (!Connect()) return kExitFailure;
    WatchOptions options;
    options.after_version = inv_.after;
    absl::StatusOr<std::unique_ptr<Watcher>> watcher = client_->Watch(prefix, options);
    if (!watcher.ok()) return Fail(err_, what, watcher.status());
    for (uint64_t seen = 0; inv_.count == 0 || seen < inv_.count; ++seen) {
      absl::StatusOr<std::optional<WatchEvent>> event =
          (*watcher)->Next(std::chrono::milliseconds(-1));
      if (!event.ok()) return Fail(err_, what, event.status());
      out_ << (inv_.json ? WatchEventJson(**event) : WatchEventText(**event)) << std::endl;
    }
    return kExitOk;
  }

  int Stat() {
    const std::string& name = inv_.arguments[0];
    const std::string what = absl::StrCat("stat ", Quoted(name));
    if (absl::Status s = ValidateName(name); !s.ok()) return Fail(err_, what, s);
    if (!Connect()) return kExitFailure;
    absl::StatusOr<TensorInfo> info = client_->Stat(name);
    if (!info.ok()) return Fail(err_, what, info.status());
    if (inv_.json) {
      out_ << TensorInfoJson(*info) << "\n";
    } else {
      out_ << TensorInfoText(*info);
    }
    return kExitOk;
  }

  int Put() {
    const std::string& name = inv_.arguments[0];
    const std::string& path = inv_.arguments[1];
    const std::string what = absl::StrCat("put ", Quoted(name));
    if (absl::Status s = ValidateName(name); !s.ok()) return Fail(err_, what, s);
    absl::StatusOr<npy::NpyArray> array = npy::NpyArray::Load(path);
    if (!array.ok()) return Fail(err_, what, array.status());
    if (!Connect()) return kExitFailure;
    PutOptions options;
    options.is_mutable = inv_.is_mutable;
    options.replace = inv_.replace;
    options.readers = inv_.readers;
    if (!inv_.device.empty()) options.device = *ParseDeviceName(inv_.device);  // parsed by args
    absl::StatusOr<TensorInfo> info = client_->Put(name, array->tensor(), options);
    if (!info.ok()) return Fail(err_, what, info.status());
    return kExitOk;
  }

  int Get() {
    const std::string& name = inv_.arguments[0];
    const std::string& path = inv_.arguments[1];
    const std::string what = absl::StrCat("get ", Quoted(name));
    if (absl::Status s = ValidateName(name); !s.ok()) return Fail(err_, what, s);
    if (!Connect()) return kExitFailure;
    absl::StatusOr<DLManagedTensorVersioned*> got =
        client_->Get(name, std::chrono::milliseconds(0));
    if (!got.ok()) return Fail(err_, what, got.status());
    const TensorPtr tensor(*got);  // releases the lease on every path out
    DLTensor dl = tensor->dl_tensor;
    std::vector<uint8_t> staged;  // a CUDA tensor's bytes, copied to the host
    if (dl.device.device_type == kDLCUDA) {
      uint64_t elements = 1;
      for (int32_t d = 0; d < dl.ndim; ++d) elements *= static_cast<uint64_t>(dl.shape[d]);
      staged.resize(elements * ItemSize(dl.dtype));
      absl::Status copied = CopyToCompactOnDevice(dl, staged.data(), DLDevice{kDLCPU, 0});
      if (!copied.ok()) return Fail(err_, what, copied);
      dl.data = staged.data();
      dl.device = {kDLCPU, 0};
      dl.byte_offset = 0;
      dl.strides = nullptr;  // compact now
    } else if (dl.device.device_type != kDLCPU && dl.device.device_type != kDLCUDAHost) {
      return Fail(err_, what,
                  absl::FailedPreconditionError(
                      absl::StrCat("the tensor is on ", DeviceName(dl.device),
                                   "; only CPU and CUDA tensors can be written")));
    }
    absl::StatusOr<npy::Descr> descr = npy::DescrForDType(dl.dtype);
    if (!descr.ok()) return Fail(err_, what, descr.status());
    if (descr->raw_void) {
      err_ << "tensorbroker: note: " << Quoted(name) << " is " << DTypeName(dl.dtype)
           << ", which has no standard NumPy dtype; "
           << (path == "-" ? std::string("the output") : Quoted(path)) << " holds raw "
           << ItemSize(dl.dtype) << "-byte elements (descr " << Quoted(descr->text)
           << "); view them with e.g. np.load(f).view(ml_dtypes." << DTypeName(dl.dtype) << ")\n";
    }
    absl::StatusOr<OutputFile> file = OutputFile::Create(path);
    if (!file.ok()) return Fail(err_, what, file.status());
    absl::Status written =
        npy::WriteNpy(dl, descr->text, [&](absl::string_view bytes) { return file->Write(bytes); });
    if (written.ok()) written = file->Commit();
    if (!written.ok()) return Fail(err_, what, written);
    return kExitOk;
  }

  int Rm() {
    const std::string& name = inv_.arguments[0];
    const std::string what = absl::StrCat("rm ", Quoted(name));
    if (absl::Status s = ValidateName(name); !s.ok()) return Fail(err_, what, s);
    if (!Connect()) return kExitFailure;
    if (absl::Status s = client_->Delete(name); !s.ok()) return Fail(err_, what, s);
    return kExitOk;
  }

  // Prints the daemon's serving status; 0 only for SERVING.
  int Health() {
    const std::string socket = inv_.socket_path.empty() ? DefaultSocketPath() : inv_.socket_path;
    const std::string what = absl::StrCat("health of tensorbrokerd at ", socket);
    // A probe waits for nothing: a path that does not exist is said at once, by name.
    if (absl::Status there = AwaitSocketPath(socket, absl::ZeroDuration(), absl::ZeroDuration());
        !there.ok()) {
      return Fail(err_, what, there);
    }
    absl::StatusOr<std::string> answer = CheckHealth(socket, absl::Seconds(inv_.timeout_seconds));
    if (!answer.ok()) return Fail(err_, what, answer.status());
    out_ << *answer << "\n";
    return *answer == "SERVING" ? kExitOk : kExitFailure;
  }

  int Stats() {
    if (!Connect()) return kExitFailure;
    absl::StatusOr<BrokerStats> stats = client_->Stats();
    if (!stats.ok()) return Fail(err_, "stats", stats.status());
    if (inv_.prometheus) {
      out_ << PrometheusText(*stats);
      return kExitOk;
    }
    if (inv_.json) {
      out_ << StatsJson(*stats) << "\n";
    } else {
      out_ << StatsText(*stats);
    }
    return kExitOk;
  }

  const Invocation& inv_;
  std::ostream& out_;
  std::ostream& err_;
  std::unique_ptr<Client> client_;
};

}  // namespace

int Run(const Invocation& invocation, std::ostream& out, std::ostream& err) {
  return CommandRunner(invocation, out, err).Run();
}

}  // namespace tensorbroker::cli
