#include "bench/measurements.h"

#include <dlpack/dlpack.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "bench/buffers.h"
#include "bench/units.h"

namespace tensorbroker::bench {

absl::Status Publish(Client& client, const std::string& name, const void* src, uint64_t nbytes) {
  auto w = client.Create(name, {static_cast<int64_t>(nbytes)}, tensorbroker::dtypes::kUInt8);
  if (!w.ok()) return w.status();
  std::memcpy(TensorData(*w), src, nbytes);
  auto info = client.Seal(name);
  (*w)->deleter(*w);
  return info.status();
}

void DeleteQuietly(Client& client, const std::string& name) { (void)client.Delete(name); }

// ---- 1. Ping ----------------------------------------------------------------------------------

absl::Status BenchPing(Client& client, const Options& opt, Report& rep) {
  for (int i = 0; i < opt.warmup; ++i) {
    if (absl::Status s = client.Ping(); !s.ok()) return s;
  }
  std::vector<int64_t> ns;
  ns.reserve(opt.iterations);
  for (int i = 0; i < opt.iterations; ++i) {
    const int64_t t0 = NowNs();
    absl::Status s = client.Ping();
    const int64_t t1 = NowNs();
    if (!s.ok()) return s;
    ns.push_back(t1 - t0);
  }
  rep.Add("ping", "empty round trip (Client::Ping)", ns);
  return absl::OkStatus();
}

// ---- 2. Get + release -------------------------------------------------------------------------

absl::Status BenchGetRelease(Client& client, const Options& opt, const std::string& name,
                             uint64_t nbytes, const void* src, const std::string& key,
                             Report& rep) {
  if (absl::Status s = Publish(client, name, src, nbytes); !s.ok()) return s;
  // Sanity: the first Get sees the right size and bytes.
  {
    auto t = client.Get(name);
    if (!t.ok()) return t.status();
    tensorbroker::TensorPtr hold(*t);
    if (TensorBytes(hold->dl_tensor) != nbytes) {
      return absl::InternalError("Get returned " + std::to_string(TensorBytes(hold->dl_tensor)) +
                                 " bytes, expected " + std::to_string(nbytes));
    }
    const size_t probe = std::min<uint64_t>(nbytes, 64);
    if (std::memcmp(TensorData(hold.get()), src, probe) != 0 ||
        std::memcmp(static_cast<char*>(TensorData(hold.get())) + nbytes - probe,
                    static_cast<const char*>(src) + nbytes - probe, probe) != 0) {
      return absl::InternalError("Get returned bytes that differ from what was published");
    }
  }
  for (int i = 0; i < opt.warmup; ++i) {
    auto t = client.Get(name);
    if (!t.ok()) return t.status();
    (*t)->deleter(*t);
  }
  std::vector<int64_t> get_ns, rel_ns, both_ns;
  get_ns.reserve(opt.iterations);
  rel_ns.reserve(opt.iterations);
  both_ns.reserve(opt.iterations);
  for (int i = 0; i < opt.iterations; ++i) {
    const int64_t t0 = NowNs();
    auto t = client.Get(name);
    const int64_t t1 = NowNs();
    if (!t.ok()) return t.status();
    (*t)->deleter(*t);
    const int64_t t2 = NowNs();
    get_ns.push_back(t1 - t0);
    rel_ns.push_back(t2 - t1);
    both_ns.push_back(t2 - t0);
  }
  const std::string sz = FormatSize(nbytes);
  rep.Add(key + "_get", "Get " + sz, get_ns);
  rep.Add(key + "_release", "release (deleter) " + sz, rel_ns);
  rep.Add(key + "_get_release", "Get + release " + sz, both_ns);
  return absl::OkStatus();
}

// ---- 3. moving 1 GiB --------------------------------------------------------------------------

namespace {

// Client-streamed Put through the generated stub: header, then `chunk`-sized data messages.
absl::Status GrpcPut(v1::Broker::Stub& stub, const std::string& name, const unsigned char* src,
                     uint64_t nbytes, uint64_t chunk) {
  grpc::ClientContext ctx;
  v1::TensorInfo info;
  std::unique_ptr<grpc::ClientWriter<v1::PutRequest>> writer = stub.Put(&ctx, &info);
  v1::PutRequest req;
  auto* h = req.mutable_header();
  h->set_name(name);
  h->mutable_dtype()->set_code(kDLUInt);
  h->mutable_dtype()->set_bits(8);
  h->mutable_dtype()->set_lanes(1);
  h->add_shape(static_cast<int64_t>(nbytes));
  h->mutable_device()->set_device_type(kDLCPU);
  h->mutable_device()->set_device_id(0);
  bool ok = writer->Write(req);
  for (uint64_t off = 0; ok && off < nbytes; off += chunk) {
    const uint64_t len = std::min(chunk, nbytes - off);
    req.set_data(src + off, len);  // the bytes path's first copy: into the message
    ok = writer->Write(req);
  }
  writer->WritesDone();
  const grpc::Status st = writer->Finish();
  if (!st.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                        "gRPC Put: " + st.error_message());
  }
  if (!ok) return absl::InternalError("gRPC Put: stream broke without an error status");
  if (info.nbytes() != nbytes) {
    return absl::InternalError("gRPC Put: daemon reports " + std::to_string(info.nbytes()) +
                               " bytes, sent " + std::to_string(nbytes));
  }
  return absl::OkStatus();
}

// Server-streamed Read into `dst` (already faulted in).
absl::Status GrpcRead(v1::Broker::Stub& stub, const std::string& name, unsigned char* dst,
                      uint64_t nbytes) {
  grpc::ClientContext ctx;
  v1::ReadRequest req;
  req.set_name(name);
  std::unique_ptr<grpc::ClientReader<v1::ReadResponse>> reader = stub.Read(&ctx, req);
  v1::ReadResponse resp;
  uint64_t off = 0;
  bool overflow = false;
  while (reader->Read(&resp)) {
    const std::string& d = resp.data();
    if (off + d.size() > nbytes) {
      overflow = true;
      continue;
    }
    std::memcpy(dst + off, d.data(), d.size());
    off += d.size();
  }
  const grpc::Status st = reader->Finish();
  if (!st.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                        "gRPC Read: " + st.error_message());
  }
  if (overflow || off != nbytes) {
    return absl::InternalError("gRPC Read returned " + std::string(overflow ? "more than " : "") +
                               std::to_string(off) + " bytes, expected " + std::to_string(nbytes));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status BenchMoveLarge(Client& client, v1::Broker::Stub& stub, const Options& opt,
                            const unsigned char* src, unsigned char* dst, Report& rep) {
  const uint64_t n = opt.size_large;
  std::vector<int64_t> put_ns, read_ns, zc_ns, zc_create_ns, zc_fill_ns, zc_seal_ns, zc_get_ns;
  const int total = opt.large_warmup + opt.large_iterations;
  for (int it = 0; it < total; ++it) {
    const bool timed = it >= opt.large_warmup;
    const std::string put_name = "bench/move/put/" + std::to_string(it);
    const std::string zc_name = "bench/move/zc/" + std::to_string(it);

    // (a) gRPC bytes path in.
    int64_t t0 = NowNs();
    absl::Status s = GrpcPut(stub, put_name, src, n, opt.chunk);
    int64_t t1 = NowNs();
    if (!s.ok()) return s;
    // (a2) and out again.
    std::memset(dst, 0, 4096);  // so a stale copy cannot pass the check below
    int64_t t2 = NowNs();
    s = GrpcRead(stub, put_name, dst, n);
    int64_t t3 = NowNs();
    if (!s.ok()) return s;
    if (std::memcmp(dst, src, n) != 0) {
      return absl::InternalError("gRPC Read returned bytes that differ from those Put");
    }
    if (s = client.Delete(put_name); !s.ok()) return s;
    if (timed) {
      put_ns.push_back(t1 - t0);
      read_ns.push_back(t3 - t2);
    }

    // (b) zero-copy: Create + fill in place + Seal + Get + release.
    const int64_t z0 = NowNs();
    auto w = client.Create(zc_name, {static_cast<int64_t>(n)}, tensorbroker::dtypes::kUInt8);
    const int64_t z1 = NowNs();
    if (!w.ok()) return w.status();
    std::memcpy(TensorData(*w), src, n);
    const int64_t z2 = NowNs();
    auto info = client.Seal(zc_name);
    (*w)->deleter(*w);
    const int64_t z3 = NowNs();
    if (!info.ok()) return info.status();
    auto g = client.Get(zc_name);
    if (!g.ok()) return g.status();
    (*g)->deleter(*g);
    const int64_t z4 = NowNs();
    if (s = client.Delete(zc_name); !s.ok()) return s;
    if (timed) {
      zc_ns.push_back(z4 - z0);
      zc_create_ns.push_back(z1 - z0);
      zc_fill_ns.push_back(z2 - z1);
      zc_seal_ns.push_back(z3 - z2);
      zc_get_ns.push_back(z4 - z3);
    }
  }
  const std::string sz = FormatSize(n);
  rep.Add("grpc_put_large", "(a)  gRPC Put " + sz + " (" + FormatSize(opt.chunk) + " chunks)",
          put_ns, n);
  rep.Add("grpc_read_large", "(a2) gRPC Read " + sz + " into a local buffer", read_ns, n);
  rep.Add("zero_copy_large", "(b)  zero-copy " + sz + ": Create+fill+Seal+Get+release", zc_ns, n);
  rep.Add("zero_copy_large_create", "       Create", zc_create_ns);
  rep.Add("zero_copy_large_fill", "       fill (memcpy into shared pages)", zc_fill_ns, n);
  rep.Add("zero_copy_large_seal", "       Seal + producer release", zc_seal_ns);
  rep.Add("zero_copy_large_get_release", "       Get + release", zc_get_ns);
  return absl::OkStatus();
}

}  // namespace tensorbroker::bench
