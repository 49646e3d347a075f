// Root's raw gRPC view of the daemon, for what the Client does not expose (regions, lease ids,
// pages, header-only Puts, a session id to leak): a stub and a Session stream of this process,
// open while the object lives.
#ifndef TENSORBROKER_TESTS_INTEGRATION_RAW_SESSION_H_
#define TENSORBROKER_TESTS_INTEGRATION_RAW_SESSION_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "tensorbroker/v1/broker.grpc.pb.h"

namespace tensorbroker::testing {

// A client context that gives up after 30 s: a hang guard for raw calls.
inline std::unique_ptr<grpc::ClientContext> Deadline30s() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  return context;
}

class RawSession {
 public:
  explicit RawSession(const std::string& socket)
      : stub_(v1::Broker::NewStub(
            grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()))),
        stream_(stub_->Session(&context_)) {
    v1::SessionEvent event;
    if (stream_->Write(v1::SessionRequest()) && stream_->Read(&event) && event.has_opened()) {
      id_ = event.opened().session_id();
    }
  }
  ~RawSession() {
    context_.TryCancel();
    (void)stream_->Finish();
  }
  RawSession(const RawSession&) = delete;
  RawSession& operator=(const RawSession&) = delete;

  // The session's id; empty when the daemon did not open one.
  const std::string& id() const { return id_; }
  v1::Broker::Stub& stub() { return *stub_; }

  grpc::Status Get(const std::string& name, v1::TensorGrant* grant) {
    v1::GetRequest request;
    request.set_session_id(id_);
    request.set_name(name);
    return stub_->Get(Deadline30s().get(), request, grant);
  }
  grpc::Status Release(uint64_t lease) {
    v1::ReleaseRequest request;
    request.set_session_id(id_);
    request.set_lease_id(lease);
    v1::Empty empty;
    return stub_->Release(Deadline30s().get(), request, &empty);
  }
  grpc::Status Retain(uint64_t lease) {
    v1::RetainRequest request;
    request.set_session_id(id_);
    request.set_lease_id(lease);
    v1::TensorGrant grant;
    return stub_->Retain(Deadline30s().get(), request, &grant);
  }
  grpc::Status Create(v1::CreateRequest request, v1::TensorGrant* grant) {
    request.set_session_id(id_);
    return stub_->Create(Deadline30s().get(), request, grant);
  }
  grpc::Status List(const std::string& prefix, uint32_t page_size, const std::string& token,
                    v1::ListResponse* page) {
    v1::ListRequest request;
    request.set_prefix(prefix);
    request.set_page_size(page_size);
    request.set_page_token(token);
    return stub_->List(Deadline30s().get(), request, page);
  }

 private:
  std::unique_ptr<v1::Broker::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionEvent>> stream_;
  std::string id_;
};

}  // namespace tensorbroker::testing

#endif  // TENSORBROKER_TESTS_INTEGRATION_RAW_SESSION_H_
