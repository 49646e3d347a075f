#include "tests/integration/peer_fixture.h"

#include <grp.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/wire/grpc_status.h"
#include "tests/support/host_tensor.h"
#include "tests/support/subprocess.h"

namespace tensorbroker::testing {

absl::StatusOr<std::unique_ptr<TestPki>> TestPki::Make(const std::vector<std::string>& brokers) {
  std::unique_ptr<TestPki> pki(new TestPki());
  if (pki->dir_.path().empty()) return absl::InternalError("no temporary directory for the PKI");
  SubprocessOptions options;
  options.capture_stdout = true;
  options.capture_stderr = true;
  std::vector<std::string> argv = {"/bin/bash", TENSORBROKER_TEST_PKI_SCRIPT, pki->dir_.path()};
  argv.insert(argv.end(), brokers.begin(), brokers.end());
  auto script = Subprocess::Spawn(argv, options);
  if (!script.ok()) return script.status();
  auto done = script->Finish(absl::Seconds(60));
  if (!done.ok()) return done.status();
  if (!WIFEXITED(done->status) || WEXITSTATUS(done->status) != 0) {
    return absl::InternalError(absl::StrCat("make_test_pki.sh failed: ", done->err));
  }
  return pki;
}

std::vector<std::string> TestPki::ListenFlags(const std::string& broker) const {
  return {"--peer-listen", "127.0.0.1:0",         "--tls-cert", File(broker + ".crt"),
          "--tls-key",     File(broker + ".key"), "--tls-ca",   File("ca.crt")};
}

std::string TestPki::Read(const std::string& name) const {
  std::ifstream in(File(name));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<int> PeerPortOf(const DaemonProcess& daemon) {
  static const std::regex kServing("peers: serving on [0-9.]+:([0-9]+)");
  // A successor (--takeover) may still be on its way up: the socket answers all along.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (true) {
    const std::string log = daemon.Log();
    std::smatch match;
    if (std::regex_search(log, match, kServing)) return std::stoi(match[1].str());
    if (absl::Now() > deadline) {
      return absl::NotFoundError(absl::StrCat("no 'peers: serving on' line in the log:\n", log));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

absl::StatusOr<PeerServingDaemon> StartServingPeers(const TestPki& pki, const std::string& broker,
                                                    const std::vector<std::string>& extra, int port,
                                                    const std::string& host) {
  std::vector<std::string> flags = pki.ListenFlags(broker);
  flags[1] = absl::StrCat(host, ":", port);
  flags.insert(flags.end(), extra.begin(), extra.end());
  const group* own = ::getgrgid(::getegid());
  if (own == nullptr) return absl::InternalError("this process's group has no name");
  flags.insert(flags.end(), {"--admin-group", own->gr_name});
  auto daemon = DaemonProcess::Start(flags);
  if (!daemon.ok()) return daemon.status();
  PeerServingDaemon serving;
  serving.daemon = std::make_unique<DaemonProcess>(*std::move(daemon));
  auto bound = PeerPortOf(*serving.daemon);
  if (!bound.ok()) return bound.status();
  serving.port = *bound;
  return serving;
}

std::vector<uint8_t> PutStamped(Client& client, const std::string& name,
                                std::vector<std::string> readers, size_t size, uint8_t seed,
                                bool is_mutable, bool replace) {
  std::vector<uint8_t> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>(seed + i * 11 + i / 5003);
  std::vector<int64_t> shape = {static_cast<int64_t>(size)};
  DLTensor tensor = HostTensor(bytes.data(), shape, dtypes::kUInt8);
  PutOptions options;
  options.readers = std::move(readers);
  options.is_mutable = is_mutable;
  options.replace = replace;
  auto put = client.Put(name, tensor, options);
  if (!put.ok()) ADD_FAILURE() << "put " << name << ": " << put.status();
  return bytes;
}

std::unique_ptr<v1::Broker::Stub> PeerStub(const TestPki& pki, int port, const PeerIdentity& peer) {
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = pki.Read(peer.ca);
  if (!peer.identity.empty()) {
    options.pem_cert_chain = pki.Read(peer.identity + ".crt");
    options.pem_private_key = pki.Read(peer.identity + ".key");
  }
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own per stub
  auto channel = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                           grpc::SslCredentials(options), args);
  return v1::Broker::NewStub(channel);
}

std::unique_ptr<v1::Broker::Stub> PlaintextStub(int port) {
  return v1::Broker::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
}

std::unique_ptr<grpc::ClientContext> ContextWithin(int seconds) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  return context;
}

absl::StatusOr<std::string> ReadAll(v1::Broker::Stub& stub, const std::string& name,
                                    grpc::Status* status_out) {
  auto context = ContextWithin();
  v1::ReadRequest request;
  request.set_name(name);
  auto reader = stub.Read(context.get(), request);
  std::string bytes;
  v1::ReadResponse chunk;
  while (reader->Read(&chunk)) bytes += chunk.data();
  const grpc::Status status = reader->Finish();
  if (status_out != nullptr) *status_out = status;
  if (!status.ok()) return FromGrpcStatus(status);
  return bytes;
}

}  // namespace tensorbroker::testing
