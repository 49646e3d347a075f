#include "daemon/app/daemon_runner.h"

#include <signal.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/app/daemon.h"
#include "daemon/base/log.h"

namespace tensorbroker::daemon {
namespace {

uint32_t Fnv1a(const std::string& text) {
  uint32_t hash = 2166136261u;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 16777619u;
  }
  return hash;
}

// Blocks until one of `signals` arrives; returns its number.
int WaitForSignal(const sigset_t& signals) {
  int signal = 0;
  while (sigwait(&signals, &signal) != 0) {
  }
  return signal;
}

// SIGHUP: re-reads the settings; applies the log level, says what else would need a restart.
void Reload(const DaemonOptions& running, const OptionsLoader& reload) {
  if (!reload) return;
  auto fresh = reload();
  if (!fresh.ok()) {
    Log(LogLevel::kError, "SIGHUP: configuration not reloaded: ", fresh.status().message(),
        "; keeping the running configuration");
    return;
  }
  std::vector<std::string> changes;
  const LogLevel before = CurrentLogLevel();
  if (fresh->log_level != before) {
    SetLogLevel(fresh->log_level);
    changes.push_back(
        absl::StrCat("log-level ", LogLevelName(before), " -> ", LogLevelName(fresh->log_level)));
  }
  auto needs_restart = [&](absl::string_view key, const std::string& was, const std::string& is) {
    if (was == is) return;
    Log(LogLevel::kWarning, "SIGHUP: ", key, " changed (", was, " -> ", is,
        "); it takes effect at the next start");
  };
  needs_restart("socket", running.socket_path, fresh->socket_path);
  needs_restart("capacity", absl::StrCat(running.capacity_bytes),
                absl::StrCat(fresh->capacity_bytes));
  auto cuda = [](const DaemonOptions& o) {
    return o.cuda_capacity_bytes.has_value() ? absl::StrCat(*o.cuda_capacity_bytes)
                                             : std::string("default");
  };
  needs_restart("cuda-capacity", cuda(running), cuda(*fresh));
  needs_restart("metrics-listen", running.metrics_listen, fresh->metrics_listen);
  needs_restart("peer-listen", running.peer_listen, fresh->peer_listen);
  needs_restart("tls-cert", running.tls.cert, fresh->tls.cert);
  needs_restart("tls-key", running.tls.key, fresh->tls.key);
  needs_restart("tls-ca", running.tls.ca, fresh->tls.ca);
  Log(LogLevel::kNotice, "SIGHUP: configuration reloaded from ",
      fresh->config_path.empty() ? std::string("flags only") : fresh->config_path, ": ",
      changes.empty() ? std::string("nothing to change at run time")
                      : absl::StrJoin(changes, ", "));
}

}  // namespace

std::string SegmentPrefixFor(const std::string& socket_path) {
  std::error_code error;
  std::filesystem::path absolute = std::filesystem::absolute(socket_path, error);
  const std::string key = error ? socket_path : absolute.lexically_normal().string();
  return absl::StrCat("tb-", absl::Hex(Fnv1a(key), absl::kZeroPad8), "-");
}

absl::Status RunDaemon(const DaemonOptions& options, const OptionsLoader& reload) {
  SetLogLevel(options.log_level);
  // Stop and reload signals are taken synchronously by this thread; every thread created later
  // inherits the mask, so no gRPC thread is interrupted by them.
  sigset_t handled_signals;
  sigemptyset(&handled_signals);
  sigaddset(&handled_signals, SIGTERM);
  sigaddset(&handled_signals, SIGINT);
  sigaddset(&handled_signals, SIGHUP);  // waited for below too: reload
  sigaddset(&handled_signals,
            SIGUSR2);  // raised by the Daemon once a takeover has been handed over
  pthread_sigmask(SIG_BLOCK, &handled_signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  auto daemon = Daemon::Start(options);
  if (!daemon.ok()) return daemon.status();
  int signal = 0;
  while ((signal = WaitForSignal(handled_signals)) == SIGHUP) Reload(options, reload);
  if (signal == SIGUSR2) {
    Log(LogLevel::kNotice, (*daemon)->handed_over() ? "handed over to the new daemon; exiting"
                                                    : "takeover failed; exiting");
  } else {
    Log(LogLevel::kInfo, "received ", strsignal(signal), "; shutting down");
  }
  daemon->reset();  // the shutdown order: daemon.h
  Log(LogLevel::kInfo, "tensorbrokerd stopped");
  return absl::OkStatus();
}

}  // namespace tensorbroker::daemon
