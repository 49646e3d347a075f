// Turns a TensorGrant from the daemon into a DLPack tensor over this process's mapping.
//
// Ownership: each exported tensor owns one heap context (its manager_ctx) that holds the lease,
// a reference to the mapping and one to the Connection. The deleter releases exactly that
// lease and frees exactly that context; it may run on any thread, after the Client is gone.
#ifndef TENSORBROKER_CLIENT_SRC_EXPORTED_TENSOR_H_
#define TENSORBROKER_CLIENT_SRC_EXPORTED_TENSOR_H_

#include <dlpack/dlpack.h>

#include <memory>

#include "absl/status/statusor.h"
#include "client/src/connection.h"
#include "tensorbroker/types.h"
#include "tensorbroker/v1/broker.pb.h"

namespace tensorbroker::client_internal {

// Maps the grant's region (page-locked if `pinned`, see MapRegion) and wraps it. On failure the
// grant's lease is released.
absl::StatusOr<DLManagedTensorVersioned*> ExportVersioned(std::shared_ptr<Connection> connection,
                                                          const v1::TensorGrant& grant,
                                                          bool pinned = false);
absl::StatusOr<DLManagedTensor*> ExportLegacy(std::shared_ptr<Connection> connection,
                                              const v1::TensorGrant& grant, bool pinned = false);

// The lease a tensor made by ExportVersioned over `connection` holds; INVALID_ARGUMENT for a
// tensor made elsewhere (another Client, another library).
absl::StatusOr<uint64_t> LeaseOf(const DLManagedTensorVersioned& tensor,
                                 const Connection* connection);
// What the grant said about that tensor; the same errors as LeaseOf.
absl::StatusOr<TensorInfo> InfoOf(const DLManagedTensorVersioned& tensor,
                                  const Connection* connection);

}  // namespace tensorbroker::client_internal

#endif  // TENSORBROKER_CLIENT_SRC_EXPORTED_TENSOR_H_
