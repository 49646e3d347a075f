#include "daemon/daemon_options.h"

#include <sys/statvfs.h>

#include "absl/strings/string_view.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "common/socket_path.h"

namespace tensorbroker::daemon {

std::string DaemonUsage() {
  return absl::StrCat(
      "Usage: tensorbrokerd [--socket PATH] [--capacity SIZE] [--cuda-capacity SIZE]\n"
      "                    [--log-level LEVEL]\n"
      "\n"
      "tensorbrokerd owns shared memory and publishes tensors by name over a gRPC API\n"
      "(tensorbroker.v1.Broker) on a Unix socket. Clients get DLPack tensors that point at\n"
      "the very same pages; memory is freed when no name and no lease refers to it.\n"
      "\n"
      "  --socket PATH      Unix socket to serve on. Default: $TENSORBROKER_SOCKET, else\n"
      "                     /run/tensorbroker/broker.sock for root, else\n"
      "                     $XDG_RUNTIME_DIR/tensorbroker/broker.sock, else\n"
      "                     /tmp/tensorbroker-$UID/broker.sock (now: ",
      ResolveDefaultSocketPath(),
      ").\n"
      "                     One daemon per socket (PATH.lock is held); a stale socket left\n"
      "                     by a dead daemon is replaced.\n"
      "  --capacity SIZE    Most shared memory to reserve, e.g. 512M, 4G, 1.5GiB or plain\n"
      "                     bytes. Default: half of /dev/shm (now: ",
      FormatByteSize(DefaultCapacityBytes()),
      ").\n"
      "  --cuda-capacity SIZE\n"
      "                     Most device memory to hold on each GPU, in slabs allocated as\n"
      "                     needed. Default: half of each GPU's memory. 0: serve no CUDA\n"
      "                     tensors. Without a usable GPU only CPU tensors are served.\n"
      "  --log-level LEVEL  error, warning, notice, info (default) or debug. Logs go to\n"
      "                     stderr with syslog priority prefixes (<3>..<7>).\n"
      "  --help             Show this text.\n"
      "\n"
      "SIGTERM or SIGINT: stop accepting, finish in-flight calls, remove every segment and\n"
      "the socket, exit 0.\n");
}

uint64_t DefaultCapacityBytes() {
  struct statvfs fs;
  if (::statvfs("/dev/shm", &fs) != 0) return 1ull << 30;
  return static_cast<uint64_t>(fs.f_blocks) * fs.f_frsize / 2;
}

absl::StatusOr<DaemonOptions> ParseDaemonOptions(int argc, const char* const* argv,
                                                 uint64_t default_capacity) {
  DaemonOptions options;
  options.capacity_bytes = default_capacity;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    absl::string_view flag = arg;
    absl::string_view value;
    bool has_value = false;
    if (size_t eq = arg.find('='); absl::StartsWith(arg, "--") && eq != absl::string_view::npos) {
      flag = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    auto take_value = [&]() -> absl::StatusOr<absl::string_view> {
      if (has_value) return value;
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value"));
      return absl::string_view(argv[++i]);
    };
    if (flag == "--help" || flag == "-h") {
      options.help = true;
    } else if (flag == "--socket") {
      auto v = take_value();
      if (!v.ok()) return v.status();
      if (v->empty()) return absl::InvalidArgumentError("--socket is empty");
      options.socket_path = std::string(*v);
    } else if (flag == "--capacity") {
      auto v = take_value();
      if (!v.ok()) return v.status();
      auto bytes = ParseByteSize(*v, "--capacity");
      if (!bytes.ok()) return bytes.status();
      if (*bytes == 0) return absl::InvalidArgumentError("--capacity must be more than 0");
      options.capacity_bytes = *bytes;
    } else if (flag == "--cuda-capacity") {
      auto v = take_value();
      if (!v.ok()) return v.status();
      auto bytes = ParseByteSize(*v, "--cuda-capacity");
      if (!bytes.ok()) return bytes.status();
      options.cuda_capacity_bytes = *bytes;
    } else if (flag == "--log-level") {
      auto v = take_value();
      if (!v.ok()) return v.status();
      auto level = ParseLogLevel(*v);
      if (!level.ok()) return level.status();
      options.log_level = *level;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown argument '", arg.substr(0, 64), "' (see --help)"));
    }
  }
  if (options.socket_path.empty()) options.socket_path = ResolveDefaultSocketPath();
  return options;
}

}  // namespace tensorbroker::daemon
