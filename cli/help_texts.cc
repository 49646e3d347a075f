#include "cli/help_texts.h"

namespace tensorbroker::cli::help {

const absl::string_view kOverview = R"(Usage: tensorbroker [--socket PATH] COMMAND [ARGS...]

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

const absl::string_view kWatchHelp =
    R"(Usage: tensorbroker [--socket PATH] watch PREFIX [--json] [--after SEQUENCE] [--count N]

Follows the daemon's events under PREFIX ("" for every name) that you may read, one line
each as it happens, in sequence order, until interrupted (Ctrl-C, or the reader of a pipe
going away):
  SEQUENCE KIND NAME vVERSION DTYPE[SHAPE] SIZE
KIND is published (a new name), replaced (a newer version), deleted, expired (a version left
the name's kept history: the producer's keep, e.g. Python's put(..., keep=N)) or lost: events
the daemon no longer remembers may have been missed (a watcher that fell behind, or resumed
from before the daemon's memory):
  SEQUENCE lost FIRST..LAST

Options:
  --json            one JSON object per line: kind, sequence, name, version,
                    previous_version (replaced), tensor (as 'stat --json' prints it; its
                    leases as at the event: 0), or kind, sequence, lost_first, lost_last
  --after SEQUENCE  start after this sequence (the last one printed, to resume): what
                    the daemon still remembers comes first
  --count N         exit 0 after N events
)";

const absl::string_view kLsHelp = R"(Usage: tensorbroker [--socket PATH] ls [PREFIX] [--json]

Lists the published tensors whose names start with PREFIX (all without one), sorted by
name, one per line: NAME, DTYPE (NumPy spelling), SHAPE, SIZE, VERSION and LEASES (live
leases on that version).

Options:
  --json   print a JSON array of objects, each as 'stat --json' prints it
)";

const absl::string_view kStatHelp = R"(Usage: tensorbroker [--socket PATH] stat NAME [--json]

Shows the metadata of the tensor published as NAME: name, dtype (NumPy spelling such as
float32, bool, bfloat16, float8_e4m3fn), shape, strides (in elements), nbytes, device (cpu,
cuda:N or cuda_host), sealed, mutable, version (grows on each replace), leases and the
creation time.

Options:
  --json   print one JSON object with the keys name, dtype, shape, strides, nbytes, device,
           sealed, mutable, version, leases, created_unix_ms, owner_uid and readers
)";

const absl::string_view kPutHelp =
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
              uid:N, gid:N, user:NAME, group:NAME, peer:NAME (another broker), or *
              (anyone who may connect), e.g. --readers uid:1000,group:ml. Default: the
              daemon's default for NAME. To anyone else the tensor does not exist
              (NOT_FOUND).
)";

const absl::string_view kGetHelp = R"(Usage: tensorbroker [--socket PATH] get NAME FILE.npy

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

const absl::string_view kRmHelp = R"(Usage: tensorbroker [--socket PATH] rm NAME

Unpublishes NAME at once. Processes that hold the tensor keep valid memory until they
release it; the memory is freed after that.
)";

const absl::string_view kStatsHelp =
    R"(Usage: tensorbroker [--socket PATH] stats [--json|--prometheus]

Shows the daemon's counters: capacity (--capacity of the daemon), used (bytes allocated to
tensors, including pending and unlinked ones), reserved (bytes of shared-memory segments),
tensors (published names), leases, clients (open sessions), segments and pending (created,
not yet sealed).

Options:
  --json   print one JSON object with the keys capacity_bytes, used_bytes, reserved_bytes,
           tensors, leases, clients, segments, pending, pools (one per memory pool: device,
           handles (memfd, cuda-vmm or cuda-ipc) and its figures) and
           users (uid, user, bytes, tensors, quota_bytes, quota_tensors: every user for an
           administrator, else you)
  --prometheus
           print the metrics in Prometheus's text format, for node_exporter's textfile
           collector: per device capacity/used/reserved bytes, segments and
           tensorbroker_pool_info{device,handles}, tensors, leases,
           clients, pending tensors, per user tensorbroker_user_bytes, _user_tensors and
           their quotas {uid,user}, tensorbroker_calls_total{method,code} and the
           tensorbroker_call_duration_seconds histogram per method
)";

const absl::string_view kHealthHelp =
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

const absl::string_view kHelpHelp = R"(Usage: tensorbroker help [COMMAND]

Shows the overview, or the help of COMMAND.
)";

}  // namespace tensorbroker::cli::help
