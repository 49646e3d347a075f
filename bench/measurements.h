// Sections 1-3 of the bench: the empty round trip, Get/release of a sealed tensor, and moving
// the large tensor in and out (gRPC bytes path vs. zero-copy). Each call runs on the caller's
// thread over a Client (and raw stub) the caller owns, and appends its rows to the Report.
#ifndef TENSORBROKER_BENCH_MEASUREMENTS_H_
#define TENSORBROKER_BENCH_MEASUREMENTS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "bench/bench_options.h"
#include "bench/report.h"
#include "tensorbroker/client.h"
#include "tensorbroker/v1/broker.grpc.pb.h"

namespace tensorbroker::bench {

// Publishes `nbytes` of `src` under `name` (Create + memcpy + Seal + drop the producer's lease).
absl::Status Publish(Client& client, const std::string& name, const void* src, uint64_t nbytes);

// Deletes `name`, ignoring any error.
void DeleteQuietly(Client& client, const std::string& name);

// 1. Client::Ping, opt.warmup + opt.iterations times. Row "ping".
absl::Status BenchPing(Client& client, const Options& opt, Report& rep);

// 2. Publishes `src` as `name`, checks one Get, then times Get and the deleter separately.
// Rows "<key>_get", "<key>_release", "<key>_get_release". Leaves `name` published.
absl::Status BenchGetRelease(Client& client, const Options& opt, const std::string& name,
                             uint64_t nbytes, const void* src, const std::string& key, Report& rep);

// 3. opt.size_large bytes from `src`: gRPC Put, gRPC Read into `dst` (checked), and the
// zero-copy Create + fill + Seal + Get + release, each tensor deleted after every iteration.
absl::Status BenchMoveLarge(Client& client, v1::Broker::Stub& stub, const Options& opt,
                            const unsigned char* src, unsigned char* dst, Report& rep);

}  // namespace tensorbroker::bench

#endif  // TENSORBROKER_BENCH_MEASUREMENTS_H_
