// Turns a TensorGrant from the daemon into a DLPack tensor over this process's mapping.
//
// Ownership: each exported tensor owns one heap context (its manager_ctx); its deleter frees
// exactly that context. Contexts that refer to the same tensor version share one LeaseHold: the
// broker lease this process holds on that version (granted to whichever of its Clients got it
// first) and the mapping it keeps valid. The last context to go releases the lease (queued,
// never waited for). So Get of a version this process already holds (the Get's own lease then
// goes back at once), Retain, and every extra DLPack view cost no broker lease.
// Deleters may run on any thread, after the Client is gone.
#ifndef TENSORBROKER_CLIENT_SRC_EXPORTED_TENSOR_H_
#define TENSORBROKER_CLIENT_SRC_EXPORTED_TENSOR_H_

#include <dlpack/dlpack.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "client/src/connection.h"
#include "tensorbroker/types.h"
#include "tensorbroker/v1/broker.pb.h"

namespace tensorbroker::client_internal {

// Wraps the grant, sharing the lease this client already holds on the same version (the
// grant's own lease is then released) or mapping the grant's region (page-locked if `pinned`,
// see MapRegion). On failure the grant's lease is released.
absl::StatusOr<DLManagedTensorVersioned*> ExportVersioned(std::shared_ptr<Connection> connection,
                                                          const v1::TensorGrant& grant,
                                                          bool pinned = false);
absl::StatusOr<DLManagedTensor*> ExportLegacy(std::shared_ptr<Connection> connection,
                                              const v1::TensorGrant& grant, bool pinned = false);

// A Get of `name`'s current version answered from `connection`'s directory with no message to
// the daemon (fast_reads.h; docs/architecture.md, "Reads without a round trip"): when the
// directory shows a version (newer than `after_version`, if set) of an immutable CPU tensor that
// this process holds already, or that lies in a segment it maps (a slot of its lease table is
// then the lease). nullopt: take the daemon's path (no directory, the name not in it, its
// segment not mapped here, the table full, or the record kept moving).
std::optional<DLManagedTensorVersioned*> GetFromDirectory(
    const std::shared_ptr<Connection>& connection, const std::string& name,
    std::optional<uint64_t> after_version);

// Another tensor sharing `tensor`'s lease and mapping; INVALID_ARGUMENT for a tensor made
// elsewhere (another Client, by Connection::client_id(), or another library).
absl::StatusOr<DLManagedTensorVersioned*> ShareVersioned(const DLManagedTensorVersioned& tensor,
                                                         uint64_t client_id);
// What the grant said about that tensor; the same errors as ShareVersioned.
absl::StatusOr<TensorInfo> InfoOf(const DLManagedTensorVersioned& tensor, uint64_t client_id);
// The same, not copied: the description the tensor's exports share.
absl::StatusOr<std::shared_ptr<const TensorInfo>> SharedInfoOf(
    const DLManagedTensorVersioned& tensor, uint64_t client_id);

// A Get of version `version` of `name` on `connection` (no wait), its descriptors mapped: the
// grant and its lease.
using GrantFetcher = std::function<absl::StatusOr<v1::TensorGrant>(
    Connection& connection, const std::string& name, uint64_t version)>;
// After the daemon `from` was made with went away: every sealed CPU tensor this process holds
// through `from` is leased again on `to` (through `fetch`) when `to`'s daemon still keeps the same
// version at the same place (it adopted it: tensors survive restarts), so that its memory is not
// reused while held. The others keep their pages without a lease (deleted or replaced before the
// restart; a restarted daemon reuses no adopted memory for a grace period). Returns how many.
size_t TakeLeasesAgain(const Connection& from, const std::shared_ptr<Connection>& to,
                       const GrantFetcher& fetch);

}  // namespace tensorbroker::client_internal

#endif  // TENSORBROKER_CLIENT_SRC_EXPORTED_TENSOR_H_
