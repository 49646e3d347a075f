// tensorbroker client: publish tensors by name and get them back, in any process on this host,
// as DLPack tensors that point at the broker's shared memory (no copies).
//
//   auto client = tensorbroker::Client::Connect();            // default socket
//   if (!client.ok()) return client.status();
//   // Producer: reserve, fill in place, publish.
//   auto w = (*client)->Create("frames/0", {2, 3}, tensorbroker::dtypes::kFloat32);
//   float* p = static_cast<float*>((*w)->dl_tensor.data);  ... fill p ...
//   (*client)->Seal("frames/0");
//   (*w)->deleter(*w);                                        // the producer's lease ends
//   // Consumer (any process): the same physical pages, read-only.
//   auto t = (*client)->Get("frames/0", std::chrono::seconds(5));
//   ... use (*t)->dl_tensor ...;  (*t)->deleter(*t);           // releases this lease
//
// Ownership: every tensor returned (Create, Get, GetLegacy, Retain) is owned by the caller, who
// must call its deleter exactly once. The deleter releases exactly the lease that tensor holds;
// it may run on any thread, also after the Client is destroyed: a tensor stays valid until its
// deleter runs. `tensorbroker::TensorPtr` does that for you.
//
// Threading: a Client is safe to use from many threads at once.
// Errors: fallible calls return absl::Status / absl::StatusOr with the gRPC codes the daemon
// answered with (NOT_FOUND, ALREADY_EXISTS, INVALID_ARGUMENT, RESOURCE_EXHAUSTED, ...).
#ifndef TENSORBROKER_CLIENT_H_
#define TENSORBROKER_CLIENT_H_

#include <dlpack/dlpack.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tensorbroker/types.h"

namespace tensorbroker {

struct CreateOptions {
  // Stays writable for every holder after Seal; writes are seen by all holders.
  bool is_mutable = false;
  // On Seal, a name already published moves to the new version (old holders keep theirs).
  bool replace = false;
  // Optional layout in elements (non-negative); empty means compact C order.
  std::vector<int64_t> strides;
};

struct PutOptions {
  bool is_mutable = false;
  bool replace = false;
};

// Calls the tensor's deleter on destruction.
struct TensorDeleter {
  void operator()(DLManagedTensorVersioned* t) const {
    if (t != nullptr && t->deleter != nullptr) t->deleter(t);
  }
};
using TensorPtr = std::unique_ptr<DLManagedTensorVersioned, TensorDeleter>;

// The socket a client uses when none is given, the daemon's default too:
// $TENSORBROKER_SOCKET, else /run/tensorbroker/broker.sock for root, else
// $XDG_RUNTIME_DIR/tensorbroker/broker.sock, else /tmp/tensorbroker-$UID/broker.sock.
std::string DefaultSocketPath();

class Client {
 public:
  // Connects to the daemon at `socket_path` (empty: DefaultSocketPath()) and opens a session.
  // UNAVAILABLE if no daemon answers within `timeout`.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(
      const std::string& socket_path = "",
      std::chrono::milliseconds timeout = std::chrono::seconds(5));

  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Reserves a writable tensor of `shape` and `dtype` (256-byte aligned, zero-filled pages are
  // not guaranteed) that no one else sees until Seal(name).
  absl::StatusOr<DLManagedTensorVersioned*> Create(const std::string& name,
                                                   const std::vector<int64_t>& shape,
                                                   DLDataType dtype,
                                                   const CreateOptions& options = {});
  // Publishes the tensor this client created under `name`. Unless it was created mutable, it is
  // read-only from now on, also for this client: do not write through the Create tensor.
  absl::StatusOr<TensorInfo> Seal(const std::string& name);
  // Drops a tensor this client created and has not sealed.
  absl::Status Abort(const std::string& name);

  // Copies a CPU tensor (any strides, any byte_offset) into the broker, stored compact, and
  // publishes it: one copy.
  absl::StatusOr<TensorInfo> Put(const std::string& name, const DLTensor& tensor,
                                 const PutOptions& options = {});

  // Returns the tensor published under `name`, waiting up to `timeout` for it to appear
  // (0: do not wait; NOT_FOUND at once). Read-only unless the tensor is mutable
  // (DLPACK_FLAG_BITMASK_READ_ONLY is set then, and the pages are mapped read-only).
  absl::StatusOr<DLManagedTensorVersioned*> Get(
      const std::string& name, std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  // The same for consumers still on the pre-1.0 DLPack ABI.
  absl::StatusOr<DLManagedTensor*> GetLegacy(
      const std::string& name, std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

  // Another handle on the tensor `tensor` refers to, with a lease of its own: the same memory
  // and version even if the name was since replaced or deleted, writable if `tensor` is.
  // For handing one tensor to several consumers that each call their own deleter.
  // `tensor` must come from this Client (Create, Get or Retain) and still be alive;
  // INVALID_ARGUMENT otherwise.
  absl::StatusOr<DLManagedTensorVersioned*> Retain(const DLManagedTensorVersioned& tensor);
  // What the broker said about `tensor` when it granted it: name, version, mutable, ...
  // (`leases` as of then). No round trip. The same INVALID_ARGUMENT cases as Retain.
  absl::StatusOr<TensorInfo> Describe(const DLManagedTensorVersioned& tensor) const;

  absl::Status Delete(const std::string& name);
  absl::StatusOr<std::vector<TensorInfo>> List(const std::string& prefix = "");
  absl::StatusOr<TensorInfo> Stat(const std::string& name);
  absl::StatusOr<BrokerStats> Stats();
  // An empty round trip to the daemon.
  absl::Status Ping();

  const std::string& socket_path() const;

  class Impl;

 private:
  explicit Client(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace tensorbroker

#endif  // TENSORBROKER_CLIENT_H_
