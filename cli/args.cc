#include "cli/args.h"

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "tensorbroker/dtype_names.h"

namespace tensorbroker::cli {
namespace {

constexpr absl::string_view kOverview = R"(Usage: tensorbroker [--socket PATH] COMMAND [ARGS...]

Inspect and move tensors published in a running tensorbrokerd.

Commands:
  ls [PREFIX] [--json]                    list published tensors (names starting with PREFIX),
                                          sorted by name
  stat NAME [--json]                      show one tensor's metadata
  put NAME FILE.npy [--replace] [--mutable] [--device DEV] [--readers LIST]
                                          publish the array in a .npy file under NAME
  get NAME FILE.npy                       write the tensor NAME to a .npy file
  rm NAME                                 unpublish NAME (holders keep their copy)
  stats [--json|--prometheus]             show the daemon's counters
  watch PREFIX [--json] [--after SEQUENCE] [--count N]
                                          print one line per publication, replacement,
                                          deletion or expiry under PREFIX as it happens
  health [--timeout SECONDS]              exit 0 if the daemon serves (a readiness probe)
  help [COMMAND]                          show this help, or a command's

Global options (accepted before or after the command):
  --socket PATH   the daemon's Unix socket. Default: $TENSORBROKER_SOCKET, else
                  /run/tensorbroker/broker.sock for root, else
                  $XDG_RUNTIME_DIR/tensorbroker/broker.sock, else
                  /tmp/tensorbroker-$UID/broker.sock
  -h, --help      show help (also 'tensorbroker COMMAND --help')
  --version       show the version

Exit status: 0 on success, 1 when the operation failed (the reason is printed on stderr,
prefixed "tensorbroker: ", with the broker's status code such as NOT_FOUND or
ALREADY_EXISTS), 2 on a usage error.

Connecting: a command waits up to 5 s for the daemon at the socket to answer, so a daemon on
its way up is waited for. A socket path that does not exist fails at once (UNAVAILABLE: "PATH
does not exist"), unless a daemon holds PATH.lock (it is starting: waited for) or the path
appears within half a second (a daemon started just before). health waits for nothing: see
'tensorbroker health --help'.

Names are 1-255 bytes of [A-Za-z0-9._/-], no leading '/', no empty or '..' segment.
)";

constexpr absl::string_view kWatchHelp =
    R"(Usage: tensorbroker [--socket PATH] watch PREFIX [--json] [--after SEQUENCE] [--count N]

Follows the daemon's events under PREFIX ("" for every name) that you may read, one line
each as it happens, in sequence order, until interrupted (Ctrl-C, or the reader of a pipe
going away):
  SEQUENCE KIND NAME vVERSION DTYPE[SHAPE] SIZE
KIND is published (a new name), replaced (a newer version), deleted, expired (a version left
the name's kept history, see put --keep) or lost: events the daemon no longer remembers may
have been missed (a watcher that fell behind, or resumed from before the daemon's memory):
  SEQUENCE lost FIRST..LAST

Options:
  --json            one JSON object per line: kind, sequence, name, version,
                    previous_version (replaced), tensor (as 'stat --json' prints it; its
                    leases as at the event: 0), or kind, sequence, lost_first, lost_last
  --after SEQUENCE  start after this sequence (the last one printed, to resume): what
                    the daemon still remembers comes first
  --count N         exit 0 after N events
)";

constexpr absl::string_view kLsHelp = R"(Usage: tensorbroker [--socket PATH] ls [PREFIX] [--json]

Lists the published tensors whose names start with PREFIX (all without one), sorted by
name, one per line: NAME, DTYPE (NumPy spelling), SHAPE, SIZE, VERSION and LEASES (live
leases on that version).

Options:
  --json   print a JSON array of objects, each as 'stat --json' prints it
)";

constexpr absl::string_view kStatHelp = R"(Usage: tensorbroker [--socket PATH] stat NAME [--json]

Shows the metadata of the tensor published as NAME: name, dtype (NumPy spelling such as
float32, bool, bfloat16, float8_e4m3fn), shape, strides (in elements), nbytes, device (cpu,
cuda:N or cuda_host), sealed, mutable, version (grows on each replace), leases and the
creation time.

Options:
  --json   print one JSON object with the keys name, dtype, shape, strides, nbytes, device,
           sealed, mutable, version, leases, created_unix_ms, owner_uid and readers
)";

constexpr absl::string_view kPutHelp =
    R"(Usage: tensorbroker [--socket PATH] put NAME FILE.npy [--replace] [--mutable] [--device DEV] [--readers LIST]

Publishes the array stored in FILE.npy (NumPy format; '-' reads standard input) as NAME. The
data is copied into the broker once and stored in C order.

Accepted files: format versions 1.0, 2.0 and 3.0; C or Fortran order (fortran_order=True);
little-endian data only (convert big-endian arrays with
a.astype(a.dtype.newbyteorder('<'))); the element types bool ('|b1'), int8..int64
('|i1', '<i2', '<i4', '<i8'), uint8..uint64, float16/32/64 ('<f2', '<f4', '<f8') and
complex64/128 ('<c8', '<c16'). Object, string, datetime, structured and raw void arrays are
refused, so bfloat16/float8 files written by 'get' (raw void) cannot be put back.

Options:
  --replace   if NAME is already published, publish this as its next version (holders of
              the old version keep it); without it an existing NAME is an error
              (ALREADY_EXISTS)
  --mutable   the tensor stays writable for every holder after publishing
  --device DEV
              where the broker keeps it: cpu (default) or cuda:N (this process's GPU N;
              FAILED_PRECONDITION without a usable GPU)
  --readers LIST
              who may read it besides you and the daemon's administrators, comma-separated:
              uid:N, gid:N, user:NAME, group:NAME, or * (anyone who may connect), e.g.
              --readers uid:1000,group:ml. Default: the daemon's default for NAME. To anyone
              else the tensor does not exist (NOT_FOUND).
)";

constexpr absl::string_view kGetHelp = R"(Usage: tensorbroker [--socket PATH] get NAME FILE.npy

Writes the tensor published as NAME to FILE.npy ('-' writes standard output) in NumPy
format 1.0 (2.0 if the header needs it), C order, little-endian. Does not wait: a NAME that
is not published is an error (NOT_FOUND). The file name is used as given (no '.npy' is
appended).

bfloat16 and float8 tensors have no standard NumPy dtype: they are written as raw void
elements of their size ('|V2' for bfloat16, '|V1' for float8), and a note saying so is
printed on stderr. Read them back with e.g.
  np.load(FILE).view(ml_dtypes.bfloat16)
Only tensors in host memory (cpu, cuda_host) can be written.
)";

constexpr absl::string_view kRmHelp = R"(Usage: tensorbroker [--socket PATH] rm NAME

Unpublishes NAME at once. Processes that hold the tensor keep valid memory until they
release it; the memory is freed after that.
)";

constexpr absl::string_view kStatsHelp =
    R"(Usage: tensorbroker [--socket PATH] stats [--json|--prometheus]

Shows the daemon's counters: capacity (--capacity of the daemon), used (bytes allocated to
tensors, including pending and unlinked ones), reserved (bytes of shared-memory segments),
tensors (published names), leases, clients (open sessions), segments and pending (created,
not yet sealed).

Options:
  --json   print one JSON object with the keys capacity_bytes, used_bytes, reserved_bytes,
           tensors, leases, clients, segments, pending, pools (one per memory pool) and
           users (uid, user, bytes, tensors, quota_bytes, quota_tensors: every user for an
           administrator, else you)
  --prometheus
           print the metrics in Prometheus's text format, for node_exporter's textfile
           collector: per device capacity/used/reserved bytes and segments, tensors, leases,
           clients, pending tensors, per user tensorbroker_user_bytes, _user_tensors and
           their quotas {uid,user}, tensorbroker_calls_total{method,code} and the
           tensorbroker_call_duration_seconds histogram per method
)";

constexpr absl::string_view kHealthHelp =
    R"(Usage: tensorbroker [--socket PATH] health [--timeout SECONDS]

Asks the daemon's standard gRPC health service (grpc.health.v1.Health/Check, the whole server)
whether it serves, and prints its answer: SERVING (exit status 0), or why not (exit status 1):
NOT_SERVING, or the call's error, e.g. UNAVAILABLE when nothing listens or the daemon is
shutting down (it then takes no new connections). For readiness and liveness probes
(Kubernetes exec probes, monitoring): it never waits longer than the timeout, and a socket
path that does not exist is UNAVAILABLE at once ("PATH does not exist").

Options:
  --timeout SECONDS   how long to wait for the answer, connecting included (default 1)
)";

constexpr absl::string_view kHelpHelp = R"(Usage: tensorbroker help [COMMAND]

Shows the overview, or the help of COMMAND.
)";

struct CommandSpec {
  size_t min_args;
  size_t max_args;
  absl::string_view usage;  // the line after the name
  bool json;
  bool put_flags;
};

CommandSpec SpecOf(Command command) {
  switch (command) {
    case Command::kLs:
      return {0, 1, "ls [PREFIX] [--json]", true, false};
    case Command::kStat:
      return {1, 1, "stat NAME [--json]", true, false};
    case Command::kPut:
      return {2, 2, "put NAME FILE.npy [--replace] [--mutable] [--device DEV] [--readers LIST]",
              false, true};
    case Command::kGet:
      return {2, 2, "get NAME FILE.npy", false, false};
    case Command::kRm:
      return {1, 1, "rm NAME", false, false};
    case Command::kStats:
      return {0, 0, "stats [--json|--prometheus]", true, false};
    case Command::kHealth:
      return {0, 0, "health [--timeout SECONDS]", false, false};
    case Command::kWatch:
      return {1, 1, "watch PREFIX [--json] [--after SEQUENCE] [--count N]", true, false};
    case Command::kHelp:
      return {0, 1, "help [COMMAND]", false, false};
    case Command::kNone:
      break;
  }
  return {0, 0, "", false, false};
}

absl::Status UsageError(absl::string_view message) { return absl::InvalidArgumentError(message); }

}  // namespace

Command CommandFromName(absl::string_view name) {
  if (name == "ls") return Command::kLs;
  if (name == "stat") return Command::kStat;
  if (name == "put") return Command::kPut;
  if (name == "get") return Command::kGet;
  if (name == "rm") return Command::kRm;
  if (name == "stats") return Command::kStats;
  if (name == "health") return Command::kHealth;
  if (name == "watch") return Command::kWatch;
  if (name == "help") return Command::kHelp;
  return Command::kNone;
}

absl::string_view CommandName(Command command) {
  switch (command) {
    case Command::kLs:
      return "ls";
    case Command::kStat:
      return "stat";
    case Command::kPut:
      return "put";
    case Command::kGet:
      return "get";
    case Command::kRm:
      return "rm";
    case Command::kStats:
      return "stats";
    case Command::kHealth:
      return "health";
    case Command::kWatch:
      return "watch";
    case Command::kHelp:
      return "help";
    case Command::kNone:
      break;
  }
  return "";
}

std::string HelpText(Command command) {
  switch (command) {
    case Command::kLs:
      return std::string(kLsHelp);
    case Command::kStat:
      return std::string(kStatHelp);
    case Command::kPut:
      return std::string(kPutHelp);
    case Command::kGet:
      return std::string(kGetHelp);
    case Command::kRm:
      return std::string(kRmHelp);
    case Command::kStats:
      return std::string(kStatsHelp);
    case Command::kHealth:
      return std::string(kHealthHelp);
    case Command::kWatch:
      return std::string(kWatchHelp);
    case Command::kHelp:
      return std::string(kHelpHelp);
    case Command::kNone:
      break;
  }
  return std::string(kOverview);
}

absl::StatusOr<Invocation> ParseArgs(const std::vector<std::string>& argv) {
  Invocation inv;
  bool options_done = false;
  bool socket_given = false;
  for (size_t i = 1; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    const bool is_option = !options_done && arg.size() > 1 && arg[0] == '-';
    if (!is_option) {
      if (inv.command == Command::kNone) {
        inv.command = CommandFromName(arg);
        if (inv.command == Command::kNone) {
          return UsageError(
              absl::StrCat("unknown command '", arg,
                           "' (commands: ls, stat, put, get, rm, stats, health, watch, help)"));
        }
      } else {
        inv.arguments.push_back(arg);
      }
      continue;
    }
    if (arg == "--") {
      options_done = true;
      continue;
    }
    const std::string context =
        inv.command == Command::kNone ? "" : absl::StrCat(" for '", CommandName(inv.command), "'");
    if (arg == "--socket" || absl::StartsWith(arg, "--socket=")) {
      if (socket_given) return UsageError("--socket given more than once");
      socket_given = true;
      if (arg == "--socket") {
        if (i + 1 >= argv.size()) return UsageError("--socket needs a PATH");
        inv.socket_path = argv[++i];
      } else {
        inv.socket_path = arg.substr(absl::string_view("--socket=").size());
      }
      if (inv.socket_path.empty()) return UsageError("--socket PATH must not be empty");
      continue;
    }
    if (arg == "-h" || arg == "--help") {
      inv.help = true;
      continue;
    }
    if (arg == "--version" && inv.command == Command::kNone) {
      inv.version = true;
      continue;
    }
    const CommandSpec spec = SpecOf(inv.command);
    if (arg == "--json" && spec.json) {
      inv.json = true;
      continue;
    }
    if (arg == "--prometheus" && inv.command == Command::kStats) {
      inv.prometheus = true;
      continue;
    }
    if ((arg == "--timeout" || absl::StartsWith(arg, "--timeout=")) &&
        inv.command == Command::kHealth) {
      std::string value;
      if (arg == "--timeout") {
        if (i + 1 >= argv.size()) return UsageError("--timeout needs SECONDS");
        value = argv[++i];
      } else {
        value = arg.substr(absl::string_view("--timeout=").size());
      }
      double seconds = 0;
      if (!absl::SimpleAtod(value, &seconds) || !(seconds > 0) || seconds > 3600) {
        return UsageError(
            absl::StrCat("--timeout '", value, "' is not a number of seconds in (0, 3600]"));
      }
      inv.timeout_seconds = seconds;
      continue;
    }
    if ((arg == "--after" || absl::StartsWith(arg, "--after=") || arg == "--count" ||
         absl::StartsWith(arg, "--count=")) &&
        inv.command == Command::kWatch) {
      const bool after = absl::StartsWith(arg, "--after");
      const absl::string_view flag = after ? "--after" : "--count";
      std::string value;
      if (arg == flag) {
        if (i + 1 >= argv.size()) return UsageError(absl::StrCat(flag, " needs a number"));
        value = argv[++i];
      } else {
        value = arg.substr(flag.size() + 1);
      }
      uint64_t number = 0;
      if (!absl::SimpleAtoi(value, &number)) {
        return UsageError(absl::StrCat(flag, " '", value, "' is not a whole number >= 0"));
      }
      if (after) {
        inv.after = number;
      } else {
        inv.count = number;
      }
      continue;
    }
    if (arg == "--replace" && spec.put_flags) {
      inv.replace = true;
      continue;
    }
    if (arg == "--mutable" && spec.put_flags) {
      inv.is_mutable = true;
      continue;
    }
    if ((arg == "--readers" || absl::StartsWith(arg, "--readers=")) && spec.put_flags) {
      std::string value;
      if (arg == "--readers") {
        if (i + 1 >= argv.size()) {
          return UsageError("--readers needs a list (uid:N, gid:N, user:NAME, group:NAME, *)");
        }
        value = argv[++i];
      } else {
        value = arg.substr(absl::string_view("--readers=").size());
      }
      for (absl::string_view entry : absl::StrSplit(value, ',', absl::SkipWhitespace())) {
        inv.readers.emplace_back(absl::StripAsciiWhitespace(entry));
      }
      if (inv.readers.empty()) return UsageError("--readers is empty");
      continue;
    }
    if ((arg == "--device" || absl::StartsWith(arg, "--device=")) && spec.put_flags) {
      if (arg == "--device") {
        if (i + 1 >= argv.size()) return UsageError("--device needs a value (cpu, cuda:N)");
        inv.device = argv[++i];
      } else {
        inv.device = arg.substr(absl::string_view("--device=").size());
      }
      if (absl::Status s = ParseDeviceName(inv.device, "--device").status(); !s.ok()) {
        return UsageError(std::string(s.message()));
      }
      continue;
    }
    return UsageError(absl::StrCat("unknown option '", arg, "'", context));
  }
  if (inv.help || inv.version) return inv;
  if (inv.json && inv.prometheus) return UsageError("--json and --prometheus exclude each other");
  if (inv.command == Command::kNone) return UsageError("no command given");
  const CommandSpec spec = SpecOf(inv.command);
  if (inv.arguments.size() < spec.min_args || inv.arguments.size() > spec.max_args) {
    return UsageError(absl::StrCat(
        inv.arguments.size() < spec.min_args ? "missing argument" : "too many arguments", " for '",
        CommandName(inv.command), "'; usage: tensorbroker ", spec.usage));
  }
  if (inv.command == Command::kHelp && !inv.arguments.empty() &&
      CommandFromName(inv.arguments[0]) == Command::kNone) {
    return UsageError(absl::StrCat("unknown command '", inv.arguments[0], "'"));
  }
  return inv;
}

}  // namespace tensorbroker::cli
