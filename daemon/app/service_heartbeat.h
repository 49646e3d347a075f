// A thread that, at a steady period, checks the daemon's serving path end to end (a Stats call
// over its own socket: accept, a gRPC worker, the store's lock) and then reports to the service
// manager: WATCHDOG=1 when systemd asked for a watchdog, and a STATUS= line with what the broker
// holds. A failed check sends no ping, so a wedged daemon is restarted by systemd.
//
// Ownership: owns its thread; the destructor (or Stop) stops and joins it. Thread-safe.
#ifndef TENSORBROKER_DAEMON_SERVICE_HEARTBEAT_H_
#define TENSORBROKER_DAEMON_SERVICE_HEARTBEAT_H_

#include <optional>
#include <string>
#include <thread>

#include "absl/time/time.h"
#include "common/mutex.h"

namespace tensorbroker::daemon {

class ServiceHeartbeat {
 public:
  // `watchdog`: the service manager's watchdog timeout (pings every half of it); without one,
  // only STATUS= lines, every `status_period`.
  ServiceHeartbeat(std::string socket_path, std::optional<absl::Duration> watchdog,
                   absl::Duration status_period = absl::Seconds(10));
  ~ServiceHeartbeat();
  ServiceHeartbeat(const ServiceHeartbeat&) = delete;
  ServiceHeartbeat& operator=(const ServiceHeartbeat&) = delete;

  void Stop();

 private:
  void Run();
  // One end-to-end check; the STATUS= text on success.
  std::optional<std::string> Check(absl::Duration deadline) const;

  const std::string socket_path_;
  const std::optional<absl::Duration> watchdog_;
  const absl::Duration period_;
  Mutex mu_;
  CondVar wake_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace tensorbroker::daemon

#endif  // TENSORBROKER_DAEMON_SERVICE_HEARTBEAT_H_
