// LLVMFuzzerInitialize for the fuzz targets of daemon code that parses protobuf: the daemon
// logs errors only, and protobuf's own log handler is off (it logs every string field that is
// not UTF-8, which fuzzed bytes rarely are). Include it in exactly one file of a fuzz program.
#ifndef TENSORBROKER_TESTS_FUZZ_QUIET_DAEMON_LOGS_H_
#define TENSORBROKER_TESTS_FUZZ_QUIET_DAEMON_LOGS_H_

#include <google/protobuf/stubs/logging.h>

#include "daemon/base/log.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tensorbroker::daemon::SetLogLevel(tensorbroker::daemon::LogLevel::kError);
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

#endif  // TENSORBROKER_TESTS_FUZZ_QUIET_DAEMON_LOGS_H_
