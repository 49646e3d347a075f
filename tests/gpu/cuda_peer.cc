// tensorbroker_cuda_peer: the second process of the GPU tests (tests/gpu). A test runs it with a
// role; it talks to the daemon through the real client library, on the real GPU, and prints one
// line for the test to assert.
//
//   check NAME SEED     Get a uint32 CUDA tensor, copy it to the host and compare every element
//                       with Stamp(i, SEED); print "ok N" or "mismatch AT got G want W"
//   write-sealed NAME   Get a sealed uint32 CUDA tensor and write its first element with
//                       cudaMemset on the view; print "write ERROR_NAME" and, when the write
//                       reported success, "first F" as read back
//   mappings            print "cached C open O" (CurrentProcessMappings)
// Every role takes --socket PATH. A failed call prints "error CODE message" and exits 4; bad
// usage exits 2.
#include <cuda_runtime_api.h>
#include <dlpack/dlpack.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensorbroker/client.h"
#include "tests/gpu/stamp.h"
#include "tests/integration/peer_output.h"

namespace {

using tensorbroker::Client;

using tensorbroker::testing::Say;

using tensorbroker::testing::Fail;

[[noreturn]] void Usage(const std::string& why) {
  tensorbroker::testing::UsageError("tensorbroker_cuda_peer", why);
}

tensorbroker::TensorPtr GetOrDie(Client& client, const std::string& name) {
  auto t = client.Get(name);
  if (!t.ok()) Fail(t.status());
  return tensorbroker::TensorPtr(*t);
}

uint64_t Elements(const DLTensor& t) {
  uint64_t n = 1;
  for (int i = 0; i < t.ndim; ++i) n *= static_cast<uint64_t>(t.shape[i]);
  return n;
}

void Check(Client& client, const std::string& name, uint32_t seed) {
  tensorbroker::TensorPtr t = GetOrDie(client, name);
  const uint64_t n = Elements(t->dl_tensor);
  std::vector<uint32_t> host(n);
  const char* data = static_cast<const char*>(t->dl_tensor.data) + t->dl_tensor.byte_offset;
  if (cudaError_t e = cudaMemcpy(host.data(), data, n * 4, cudaMemcpyDeviceToHost);
      e != cudaSuccess) {
    Say(absl::StrCat("error CUDA cudaMemcpy: ", cudaGetErrorName(e)));
    std::exit(4);
  }
  for (uint64_t i = 0; i < n; ++i) {
    if (host[i] != tensorbroker::testing::Stamp(i, seed)) {
      Say(absl::StrCat("mismatch ", i, " got ", host[i], " want ",
                       tensorbroker::testing::Stamp(i, seed)));
      return;
    }
  }
  Say(absl::StrCat("ok ", n));
}

void WriteSealed(Client& client, const std::string& name) {
  tensorbroker::TensorPtr t = GetOrDie(client, name);
  char* data = static_cast<char*>(t->dl_tensor.data) + t->dl_tensor.byte_offset;
  cudaError_t e = cudaMemset(data, 0xff, 4);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  Say(absl::StrCat("write ", cudaGetErrorName(e)));
  if (e == cudaSuccess) {
    uint32_t first = 0;
    (void)cudaMemcpy(&first, data, 4, cudaMemcpyDeviceToHost);
    Say(absl::StrCat("first ", first));
  }
  // A faulted context cannot release cleanly; the lease ends with the process.
  if (e != cudaSuccess) std::_Exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) Usage("no role");
  const std::string role = argv[1];
  std::vector<std::string> positional;
  std::string socket;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--socket" && i + 1 < argc) {
      socket = argv[++i];
    } else {
      positional.push_back(arg);
    }
  }
  if (socket.empty()) Usage("--socket is required");
  auto client = Client::Connect(socket);
  if (!client.ok()) Fail(client.status());
  if (role == "check" && positional.size() == 2) {
    Check(**client, positional[0],
          static_cast<uint32_t>(std::strtoul(positional[1].c_str(), nullptr, 10)));
  } else if (role == "write-sealed" && positional.size() == 1) {
    WriteSealed(**client, positional[0]);
  } else if (role == "mappings") {
    const tensorbroker::ProcessMappings m = tensorbroker::CurrentProcessMappings();
    Say(absl::StrCat("cached ", m.cached_cuda_slabs, " open ", m.open_cuda_slabs));
  } else {
    Usage("unknown role or wrong arguments: " + role);
  }
  return 0;
}
