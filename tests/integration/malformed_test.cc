// Malformed and out-of-order requests get their exact gRPC code, with a message naming the
// offending field, and the daemon keeps serving after each (a Ping and Stats succeed). Covered
// twice: through the C++ client (which may reject early, with the same codes) and with raw gRPC
// requests from the generated stub, which reach the daemon's own validation.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "common/cuda_devices.h"
#include "tensorbroker/v1/broker.grpc.pb.h"
#include "tests/integration/test_util.h"

namespace tensorbroker::testing {
namespace {

using absl::StatusCode;

const std::vector<std::string>& BadNames() {
  static const auto* names = new std::vector<std::string>{
      "",   "/abs", "a//b",   "a/../b",     "has space", std::string(256, 'n'),
      "..", "a/",   "tab\tx", "uni\xc3\xa9"};
  return *names;
}

// A raw gRPC connection with its own open Session stream.
class RawBroker {
 public:
  explicit RawBroker(const std::string& socket)
      : stub_(v1::Broker::NewStub(
            grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()))) {}

  ~RawBroker() {
    if (stream_) {
      stream_->WritesDone();
      session_ctx_.TryCancel();
      (void)stream_->Finish();
    }
  }

  // Opens the Session stream; returns the session id ("" on failure).
  std::string OpenSession() {
    stream_ = stub_->Session(&session_ctx_);
    v1::SessionRequest hello;
    hello.mutable_hello()->set_pid(static_cast<int32_t>(getpid()));
    hello.mutable_hello()->set_client_name("malformed_test");
    if (!stream_->Write(hello)) return "";
    v1::SessionEvent event;
    if (!stream_->Read(&event) || !event.has_opened()) return "";
    return event.opened().session_id();
  }

  v1::Broker::Stub& stub() { return *stub_; }

  // A context with a generous deadline (a hang guard, never a measurement).
  static std::unique_ptr<grpc::ClientContext> Ctx() {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return ctx;
  }

  grpc::Status Ping() {
    v1::Empty in, out;
    return stub_->Ping(Ctx().get(), in, &out);
  }
  grpc::Status Create(const v1::CreateRequest& r, v1::TensorGrant* out = nullptr) {
    v1::TensorGrant g;
    return stub_->Create(Ctx().get(), r, out ? out : &g);
  }
  grpc::Status Seal(const std::string& session, const std::string& name) {
    v1::SealRequest r;
    r.set_session_id(session);
    r.set_name(name);
    v1::TensorInfo info;
    return stub_->Seal(Ctx().get(), r, &info);
  }
  grpc::Status Abort(const std::string& session, const std::string& name) {
    v1::AbortRequest r;
    r.set_session_id(session);
    r.set_name(name);
    v1::Empty e;
    return stub_->Abort(Ctx().get(), r, &e);
  }
  grpc::Status Get(const std::string& session, const std::string& name, uint32_t wait_ms = 0,
                   v1::TensorGrant* out = nullptr) {
    v1::GetRequest r;
    r.set_session_id(session);
    r.set_name(name);
    r.set_wait_ms(wait_ms);
    v1::TensorGrant g;
    return stub_->Get(Ctx().get(), r, out ? out : &g);
  }
  grpc::Status Release(const std::string& session, uint64_t lease) {
    v1::ReleaseRequest r;
    r.set_session_id(session);
    r.set_lease_id(lease);
    v1::Empty e;
    return stub_->Release(Ctx().get(), r, &e);
  }
  grpc::Status Retain(const std::string& session, uint64_t lease, v1::TensorGrant* out = nullptr) {
    v1::RetainRequest r;
    r.set_session_id(session);
    r.set_lease_id(lease);
    v1::TensorGrant g;
    return stub_->Retain(Ctx().get(), r, out ? out : &g);
  }
  grpc::Status Stat(const std::string& name) {
    v1::StatRequest r;
    r.set_name(name);
    v1::TensorInfo info;
    return stub_->Stat(Ctx().get(), r, &info);
  }
  grpc::Status Delete(const std::string& name) {
    v1::DeleteRequest r;
    r.set_name(name);
    v1::Empty e;
    return stub_->Delete(Ctx().get(), r, &e);
  }
  grpc::Status List(const std::string& prefix) {
    v1::ListRequest r;
    r.set_prefix(prefix);
    v1::ListResponse out;
    return stub_->List(Ctx().get(), r, &out);
  }
  grpc::Status Stats(v1::BrokerStats* out) {
    v1::StatsRequest r;
    return stub_->Stats(Ctx().get(), r, out);
  }
  // Reads a whole tensor; the status of the stream.
  grpc::Status Read(const std::string& name, std::string* bytes = nullptr,
                    v1::TensorInfo* info = nullptr) {
    v1::ReadRequest r;
    r.set_name(name);
    auto ctx = Ctx();
    auto reader = stub_->Read(ctx.get(), r);
    v1::ReadResponse msg;
    bool first = true;
    while (reader->Read(&msg)) {
      if (first && info) *info = msg.info();
      first = false;
      if (bytes) bytes->append(msg.data());
    }
    return reader->Finish();
  }
  // Sends `messages` as one Put stream.
  grpc::Status Put(const std::vector<v1::PutRequest>& messages, v1::TensorInfo* out = nullptr) {
    v1::TensorInfo info;
    auto ctx = Ctx();
    auto writer = stub_->Put(ctx.get(), out ? out : &info);
    for (const auto& m : messages) {
      if (!writer->Write(m)) break;  // the daemon already answered
    }
    writer->WritesDone();
    return writer->Finish();
  }

 private:
  std::unique_ptr<v1::Broker::Stub> stub_;
  grpc::ClientContext session_ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionEvent>> stream_;
};

v1::CreateRequest CreateReq(const std::string& session, const std::string& name,
                            std::vector<int64_t> shape, uint32_t code = 2, uint32_t bits = 32,
                            uint32_t lanes = 1) {
  v1::CreateRequest r;
  r.set_session_id(session);
  r.set_name(name);
  r.mutable_dtype()->set_code(code);
  r.mutable_dtype()->set_bits(bits);
  r.mutable_dtype()->set_lanes(lanes);
  for (int64_t d : shape) r.add_shape(d);
  return r;
}

v1::PutRequest PutHeader(const std::string& name, std::vector<int64_t> shape, uint32_t code = 2,
                         uint32_t bits = 32) {
  v1::PutRequest r;
  auto* h = r.mutable_header();
  h->set_name(name);
  h->mutable_dtype()->set_code(code);
  h->mutable_dtype()->set_bits(bits);
  h->mutable_dtype()->set_lanes(1);
  for (int64_t d : shape) h->add_shape(d);
  return r;
}

v1::PutRequest PutData(std::string bytes) {
  v1::PutRequest r;
  r.set_data(std::move(bytes));
  return r;
}

class MalformedTest : public BrokerTest {
 protected:
  void SetUp() override {
    BrokerTest::SetUp();
    if (HasFatalFailure()) return;
    raw_ = std::make_unique<RawBroker>(socket());
    session_ = raw_->OpenSession();
    ASSERT_FALSE(session_.empty()) << "could not open a raw Session stream";
  }
  void TearDown() override {
    raw_.reset();
    BrokerTest::TearDown();
  }

  // The daemon still answers, through both connections.
  void ExpectServing(const std::string& after) {
    const grpc::Status ping = raw_->Ping();
    EXPECT_TRUE(ping.ok()) << "Ping after " << after << ": " << ping.error_message();
    v1::BrokerStats stats;
    const grpc::Status st = raw_->Stats(&stats);
    EXPECT_TRUE(st.ok()) << "Stats after " << after << ": " << st.error_message();
    EXPECT_OK(client().Ping());
  }

  // A raw call's exact code and a message naming `field`, then the daemon still serves.
  void ExpectRaw(const grpc::Status& s, grpc::StatusCode code, const std::string& field,
                 const std::string& what) {
    EXPECT_EQ(s.error_code(), code)
        << what << ": got code " << s.error_code() << " '" << s.error_message() << "'";
    EXPECT_TRUE(absl::StrContains(s.error_message(), field))
        << what << ": message '" << s.error_message() << "' does not name '" << field << "'";
    ExpectServing(what);
  }
  void ExpectClient(const absl::Status& s, StatusCode code, const std::string& field,
                    const std::string& what) {
    EXPECT_EQ(s.code(), code) << what << ": " << s;
    EXPECT_TRUE(absl::StrContains(s.message(), field))
        << what << ": message '" << s.message() << "' does not name '" << field << "'";
    ExpectServing(what);
  }

  std::unique_ptr<RawBroker> raw_;
  std::string session_;
};

TEST_F(MalformedTest, BadNamesAreInvalidArgumentEverywhere) {
  for (const std::string& name : BadNames()) {
    SCOPED_TRACE("name '" + name.substr(0, 20) + "'");
    const auto kInvalid = grpc::StatusCode::INVALID_ARGUMENT;
    ExpectRaw(raw_->Create(CreateReq(session_, name, {2})), kInvalid, "name", "raw Create");
    ExpectRaw(raw_->Get(session_, name), kInvalid, "name", "raw Get");
    ExpectRaw(raw_->Seal(session_, name), kInvalid, "name", "raw Seal");
    ExpectRaw(raw_->Abort(session_, name), kInvalid, "name", "raw Abort");
    ExpectRaw(raw_->Stat(name), kInvalid, "name", "raw Stat");
    ExpectRaw(raw_->Delete(name), kInvalid, "name", "raw Delete");
    ExpectRaw(raw_->Read(name), kInvalid, "name", "raw Read");
    ExpectRaw(raw_->Put({PutHeader(name, {1}), PutData(std::string(4, '\0'))}), kInvalid, "name",
              "raw Put");

    ExpectClient(client().Create(name, {2}, dtypes::kFloat32).status(),
                 StatusCode::kInvalidArgument, "name", "Create");
    ExpectClient(client().Get(name).status(), StatusCode::kInvalidArgument, "name", "Get");
    ExpectClient(client().Seal(name).status(), StatusCode::kInvalidArgument, "name", "Seal");
    ExpectClient(client().Stat(name).status(), StatusCode::kInvalidArgument, "name", "Stat");
    ExpectClient(client().Delete(name), StatusCode::kInvalidArgument, "name", "Delete");
    float one = 1;
    std::vector<int64_t> shape = {1};
    ExpectClient(client().Put(name, HostTensor(&one, shape, dtypes::kFloat32)).status(),
                 StatusCode::kInvalidArgument, "name", "Put");
  }
  // A 255-byte name is fine.
  const std::string longest(255, 'n');
  ASSERT_OK(client().Put(longest, [] {
    static float v = 2;
    static std::vector<int64_t> shape = {1};
    return HostTensor(&v, shape, dtypes::kFloat32);
  }()));
  ASSERT_OK_AND_ASSIGN(TensorInfo info, client().Stat(longest));
  EXPECT_EQ(info.name, longest);
  // Bad List prefixes.
  ExpectRaw(raw_->List("has space"), grpc::StatusCode::INVALID_ARGUMENT, "prefix", "raw List");
  ExpectClient(client().List("has space").status(), StatusCode::kInvalidArgument, "prefix", "List");
  ASSERT_OK_AND_ASSIGN(BrokerStats stats, client().Stats());
  EXPECT_EQ(stats.pending, 0u);
  EXPECT_EQ(stats.tensors, 1u);
}

TEST_F(MalformedTest, BadShapesAndDtypesAreInvalidArgument) {
  struct Case {
    std::string what;
    std::vector<int64_t> shape;
    uint32_t code, bits, lanes;
    std::string field;
  };
  const std::vector<Case> cases = {
      {"negative shape", {2, -3}, 2, 32, 1, "shape"},
      {"overflowing shape", {int64_t{1} << 40, int64_t{1} << 40}, 2, 32, 1, "shape"},
      {"33 dims", std::vector<int64_t>(33, 1), 2, 32, 1, "shape"},
      {"unknown dtype code 99", {4}, 99, 32, 1, "dtype"},
      {"lanes 2", {4}, 2, 32, 2, "dtype"},
      {"lanes 0", {4}, 2, 32, 0, "dtype"},
      {"float with 7 bits", {4}, 2, 7, 1, "dtype"},
      {"int with 12 bits", {4}, 0, 12, 1, "dtype"},
      {"float8 with 16 bits", {4}, 9, 16, 1, "dtype"},
      {"code above 255", {4}, 256 + 2, 32, 1, "dtype"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    ExpectRaw(raw_->Create(CreateReq(session_, "bad/x", c.shape, c.code, c.bits, c.lanes)),
              grpc::StatusCode::INVALID_ARGUMENT, c.field, "raw Create " + c.what);
    v1::PutRequest header = PutHeader("bad/x", c.shape, c.code, c.bits);
    header.mutable_header()->mutable_dtype()->set_lanes(c.lanes);
    ExpectRaw(raw_->Put({header}), grpc::StatusCode::INVALID_ARGUMENT, c.field,
              "raw Put " + c.what);
    if (c.code <= 255) {
      const DLDataType dtype{static_cast<uint8_t>(c.code), static_cast<uint8_t>(c.bits),
                             static_cast<uint16_t>(c.lanes)};
      ExpectClient(client().Create("bad/x", c.shape, dtype).status(), StatusCode::kInvalidArgument,
                   c.field, "Create " + c.what);
    }
  }
  // Put of a host tensor with a bad shape or dtype, through the client.
  float data[4] = {1, 2, 3, 4};
  std::vector<int64_t> negative = {-1};
  ExpectClient(client().Put("bad/x", HostTensor(data, negative, dtypes::kFloat32)).status(),
               StatusCode::kInvalidArgument, "shape", "Put negative shape");
  std::vector<int64_t> four = {4};
  ExpectClient(client().Put("bad/x", HostTensor(data, four, DLDataType{2, 32, 2})).status(),
               StatusCode::kInvalidArgument, "dtype", "Put lanes 2");
  ASSERT_OK_AND_ASSIGN(BrokerStats stats, client().Stats());
  EXPECT_EQ(stats.pending, 0u);
  EXPECT_EQ(stats.tensors, 0u);
  EXPECT_EQ(stats.used_bytes, 0u);
}

TEST_F(MalformedTest, DevicesAreValidatedAndCudaWithoutAGpuIsRefusedWithTheReason) {
  v1::CreateRequest unknown_device = CreateReq(session_, "bad/x", {4});
  unknown_device.mutable_device()->set_device_type(99);
  ExpectRaw(raw_->Create(unknown_device), grpc::StatusCode::INVALID_ARGUMENT, "device",
            "raw Create device 99");
  // CUDA is a well-formed request; without a usable GPU it is refused with the reason (the
  // daemon's own probe, the same as CudaDevices() here). With one, the gpu tests cover it.
  if (auto gpus = CudaDevices(); !gpus.ok()) {
    v1::CreateRequest cuda = CreateReq(session_, "bad/x", {4});
    cuda.mutable_device()->set_device_type(kDLCUDA);
    ExpectRaw(raw_->Create(cuda), grpc::StatusCode::FAILED_PRECONDITION, "device",
              "raw Create CUDA");
    v1::TensorGrant ignored;
    grpc::Status refused = raw_->Create(cuda, &ignored);
    EXPECT_NE(refused.error_message().find(std::string(gpus.status().message())), std::string::npos)
        << refused.error_message();
  }
  // Malformed device fields are INVALID_ARGUMENT on any machine, GPU or not.
  v1::CreateRequest pinned = CreateReq(session_, "bad/x", {4});
  pinned.mutable_device()->set_device_type(kDLCUDAHost);
  ExpectRaw(raw_->Create(pinned), grpc::StatusCode::INVALID_ARGUMENT, "device.device_type",
            "raw Create kDLCUDAHost");
  v1::CreateRequest short_uuid = CreateReq(session_, "bad/x", {4});
  short_uuid.mutable_device()->set_device_type(kDLCUDA);
  short_uuid.mutable_device()->set_uuid(std::string(5, 'u'));
  ExpectRaw(raw_->Create(short_uuid), grpc::StatusCode::INVALID_ARGUMENT, "device.uuid",
            "raw Create 5-byte uuid");
  v1::CreateRequest negative_ordinal = CreateReq(session_, "bad/x", {4});
  negative_ordinal.mutable_device()->set_device_type(kDLCUDA);
  negative_ordinal.mutable_device()->set_device_id(-1);
  ExpectRaw(raw_->Create(negative_ordinal), grpc::StatusCode::INVALID_ARGUMENT, "device.device_id",
            "raw Create cuda:-1");
  v1::CreateRequest cpu_one = CreateReq(session_, "bad/x", {4});
  cpu_one.mutable_device()->set_device_type(kDLCPU);
  cpu_one.mutable_device()->set_device_id(1);
  ExpectRaw(raw_->Create(cpu_one), grpc::StatusCode::INVALID_ARGUMENT, "device.device_id",
            "raw Create cpu:1");
  // A GPU this daemon does not see (an all-zero UUID is no device's).
  v1::CreateRequest unknown_gpu = CreateReq(session_, "bad/x", {4});
  unknown_gpu.mutable_device()->set_device_type(kDLCUDA);
  unknown_gpu.mutable_device()->set_uuid(std::string(16, '\0'));
  ExpectRaw(raw_->Create(unknown_gpu), grpc::StatusCode::FAILED_PRECONDITION, "device",
            "raw Create unknown GPU uuid");
  // Put refuses the same devices before reading any data.
  v1::PutRequest cuda_put = PutHeader("bad/x", {4});
  cuda_put.mutable_header()->mutable_device()->set_device_type(kDLCUDA);
  cuda_put.mutable_header()->mutable_device()->set_uuid(std::string(16, '\0'));
  ExpectRaw(raw_->Put({cuda_put}), grpc::StatusCode::FAILED_PRECONDITION, "device",
            "raw Put unknown GPU uuid");
  ASSERT_OK_AND_ASSIGN(BrokerStats stats, client().Stats());
  EXPECT_EQ(stats.pending, 0u);
  EXPECT_EQ(stats.tensors, 0u);
  EXPECT_EQ(stats.used_bytes, 0u);
}

TEST_F(MalformedTest, StridesOutsideTheBufferAreInvalidArgument) {
  // 3x4 float32 with transposed strides spans 48 bytes; nbytes = 40 is too small.
  v1::CreateRequest outside = CreateReq(session_, "bad/s", {3, 4});
  outside.add_strides(1);
  outside.add_strides(3);
  outside.set_nbytes(40);
  ExpectRaw(raw_->Create(outside), grpc::StatusCode::INVALID_ARGUMENT, "strides",
            "raw Create strides past nbytes");
  v1::CreateRequest negative = CreateReq(session_, "bad/s", {3, 4});
  negative.add_strides(-4);
  negative.add_strides(1);
  ExpectRaw(raw_->Create(negative), grpc::StatusCode::INVALID_ARGUMENT, "strides",
            "raw Create negative stride");
  v1::CreateRequest wrong_rank = CreateReq(session_, "bad/s", {3, 4});
  wrong_rank.add_strides(1);
  ExpectRaw(raw_->Create(wrong_rank), grpc::StatusCode::INVALID_ARGUMENT, "strides",
            "raw Create strides rank");
  v1::CreateRequest huge_stride = CreateReq(session_, "bad/s", {3, 4});
  huge_stride.add_strides(int64_t{1} << 61);
  huge_stride.add_strides(1);
  ExpectRaw(raw_->Create(huge_stride), grpc::StatusCode::INVALID_ARGUMENT, "strides",
            "raw Create overflowing stride");
  CreateOptions negative_opts;
  negative_opts.strides = {-4, 1};
  ExpectClient(client().Create("bad/s", {3, 4}, dtypes::kFloat32, negative_opts).status(),
               StatusCode::kInvalidArgument, "strides", "Create negative stride");

  // Exactly 48 bytes is fine, and so is a larger buffer.
  v1::CreateRequest fits = CreateReq(session_, "bad/s", {3, 4});
  fits.add_strides(1);
  fits.add_strides(3);
  fits.set_nbytes(48);
  v1::TensorGrant grant;
  grpc::Status ok = raw_->Create(fits, &grant);
  ASSERT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_EQ(grant.region().nbytes(), 48u);
  EXPECT_EQ(grant.region().offset() % 256, 0u);
  ASSERT_TRUE(raw_->Abort(session_, "bad/s").ok());
  ASSERT_TRUE(raw_->Release(session_, grant.lease_id()).ok());
}

TEST_F(MalformedTest, SessionAndLeaseErrors) {
  // A published tensor, so only the session is wrong below.
  ASSERT_OK(PutFloats(client(), "sess/a", {1, 2, 3}));
  for (const std::string& bad : {std::string(""), std::string("no-such-session")}) {
    SCOPED_TRACE("session_id '" + bad + "'");
    const auto kFailed = grpc::StatusCode::FAILED_PRECONDITION;
    ExpectRaw(raw_->Create(CreateReq(bad, "sess/new", {2})), kFailed, "session", "Create");
    ExpectRaw(raw_->Get(bad, "sess/a"), kFailed, "session", "Get");
    ExpectRaw(raw_->Seal(bad, "sess/new"), kFailed, "session", "Seal");
    ExpectRaw(raw_->Abort(bad, "sess/new"), kFailed, "session", "Abort");
    ExpectRaw(raw_->Release(bad, 1), kFailed, "session", "Release");
    ExpectRaw(raw_->Retain(bad, 1), kFailed, "session", "Retain");
  }
  EXPECT_CODE(client().Stat("sess/new"), StatusCode::kNotFound);
  EXPECT_EQ(LeasesOf(client(), "sess/a"), 0);

  // Unknown lease ids.
  ExpectRaw(raw_->Release(session_, 987654321), grpc::StatusCode::NOT_FOUND, "lease",
            "Release unknown lease");
  ExpectRaw(raw_->Release(session_, 0), grpc::StatusCode::NOT_FOUND, "lease", "Release lease 0");
  ExpectRaw(raw_->Retain(session_, 987654321), grpc::StatusCode::NOT_FOUND, "lease_id",
            "Retain unknown lease");
  // A lease is released once; a second time it is unknown.
  v1::TensorGrant grant;
  ASSERT_TRUE(raw_->Get(session_, "sess/a", 0, &grant).ok());
  EXPECT_EQ(LeasesOf(client(), "sess/a"), 1);
  // Another session cannot release it.
  RawBroker other(socket());
  const std::string other_session = other.OpenSession();
  ASSERT_FALSE(other_session.empty());
  // NOT_FOUND, as for an unknown id: lease ids of other sessions must not be probed.
  ExpectRaw(other.Release(other_session, grant.lease_id()), grpc::StatusCode::NOT_FOUND, "lease",
            "Release of another session's lease");
  ExpectRaw(other.Retain(other_session, grant.lease_id()), grpc::StatusCode::NOT_FOUND, "lease_id",
            "Retain of another session's lease");
  EXPECT_EQ(LeasesOf(client(), "sess/a"), 1);
  ASSERT_TRUE(raw_->Release(session_, grant.lease_id()).ok());
  EXPECT_EQ(LeasesOf(client(), "sess/a"), 0);
  ExpectRaw(raw_->Release(session_, grant.lease_id()), grpc::StatusCode::NOT_FOUND, "lease",
            "second Release");
  ExpectRaw(raw_->Retain(session_, grant.lease_id()), grpc::StatusCode::NOT_FOUND, "lease_id",
            "Retain of a released lease");
}

TEST_F(MalformedTest, SealAndAbortInTheWrongState) {
  // Never created: NOT_FOUND (proto: "no such tensor").
  ExpectRaw(raw_->Seal(session_, "seal/none"), grpc::StatusCode::NOT_FOUND, "seal/none",
            "raw Seal of a name never created");
  ExpectClient(client().Seal("seal/none").status(), StatusCode::kNotFound, "seal/none",
               "Seal of a name never created");
  ExpectRaw(raw_->Abort(session_, "seal/none"), grpc::StatusCode::NOT_FOUND, "seal/none",
            "raw Abort of a name never created");
  // Published by Put (no session created it): Seal finds no unsealed tensor.
  ASSERT_OK(PutFloats(client(), "seal/put", {1}));
  ExpectRaw(raw_->Seal(session_, "seal/put"), grpc::StatusCode::NOT_FOUND, "seal/put",
            "raw Seal of a Put tensor");
  // Pending in another session: this session may not touch it (PERMISSION_DENIED).
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw,
                       client().Create("seal/other", {4}, dtypes::kFloat32));
  TensorPtr pending(raw);
  ExpectRaw(raw_->Seal(session_, "seal/other"), grpc::StatusCode::PERMISSION_DENIED, "seal/other",
            "raw Seal of another session's tensor");
  ExpectRaw(raw_->Abort(session_, "seal/other"), grpc::StatusCode::PERMISSION_DENIED, "seal/other",
            "raw Abort of another session's tensor");
  // Delete of a pending name is the wrong state.
  ExpectClient(client().Delete("seal/other"), StatusCode::kFailedPrecondition, "seal/other",
               "Delete of a pending name");
  // Sealing twice: FAILED_PRECONDITION (proto: "a second Seal").
  ASSERT_OK(client().Seal("seal/other"));
  ExpectClient(client().Seal("seal/other").status(), StatusCode::kFailedPrecondition, "seal/other",
               "second Seal");
  v1::TensorGrant grant;
  ASSERT_TRUE(raw_->Create(CreateReq(session_, "seal/raw", {2}), &grant).ok());
  ASSERT_TRUE(raw_->Seal(session_, "seal/raw").ok());
  ExpectRaw(raw_->Seal(session_, "seal/raw"), grpc::StatusCode::FAILED_PRECONDITION, "seal/raw",
            "raw second Seal");
  ASSERT_TRUE(raw_->Release(session_, grant.lease_id()).ok());
}

TEST_F(MalformedTest, GetMissingWaitTimeoutAndWaitForLateSeal) {
  ExpectClient(client().Get("wait/missing").status(), StatusCode::kNotFound, "wait/missing",
               "Get of a missing name");
  ExpectRaw(raw_->Get(session_, "wait/missing"), grpc::StatusCode::NOT_FOUND, "wait/missing",
            "raw Get of a missing name");
  ExpectClient(client().Stat("wait/missing").status(), StatusCode::kNotFound, "wait/missing",
               "Stat of a missing name");
  ExpectRaw(raw_->Read("wait/missing"), grpc::StatusCode::NOT_FOUND, "wait/missing",
            "raw Read of a missing name");
  ExpectClient(client().Delete("wait/missing"), StatusCode::kNotFound, "wait/missing",
               "Delete of a missing name");
  EXPECT_CODE(client().Get("wait/missing", std::chrono::milliseconds(100)),
              StatusCode::kDeadlineExceeded);
  ExpectServing("Get wait timeout");
  const grpc::Status raw_wait = raw_->Get(session_, "wait/missing", 100);
  EXPECT_EQ(raw_wait.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << raw_wait.error_message();
  ExpectServing("raw Get wait timeout");

  // Another thread (with its own client) creates and seals 200 ms after the Get starts waiting.
  std::unique_ptr<Client> producer = NewClient();
  ASSERT_NE(producer, nullptr);
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    auto t = producer->Create("wait/late", {3}, dtypes::kInt32);
    ASSERT_TRUE(t.ok()) << t.status();
    TensorPtr held(*t);
    int32_t* p = reinterpret_cast<int32_t*>(MutableDataOf(held->dl_tensor));
    p[0] = 7;
    p[1] = 8;
    p[2] = 9;
    ASSERT_TRUE(producer->Seal("wait/late").ok());
  });
  auto got = client().Get("wait/late", std::chrono::seconds(20));
  late.join();
  ASSERT_TRUE(got.ok()) << got.status();
  TensorPtr t(*got);
  const int32_t* q = reinterpret_cast<const int32_t*>(DataOf(t->dl_tensor));
  EXPECT_EQ(q[0], 7);
  EXPECT_EQ(q[1], 8);
  EXPECT_EQ(q[2], 9);

  // The same through a raw Get with wait_ms, sealed by this client from another thread.
  std::thread late2([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_OK(PutFloats(client(), "wait/late2", {4.5f}));
  });
  v1::TensorGrant grant;
  const grpc::Status waited = raw_->Get(session_, "wait/late2", 20000, &grant);
  late2.join();
  ASSERT_TRUE(waited.ok()) << waited.error_message();
  EXPECT_EQ(grant.info().name(), "wait/late2");
  EXPECT_EQ(grant.region().nbytes(), 4u);
  ASSERT_TRUE(raw_->Release(session_, grant.lease_id()).ok());
}

TEST_F(MalformedTest, BrokenPutStreamsAreInvalidArgument) {
  ASSERT_OK_AND_ASSIGN(BrokerStats before, client().Stats());
  const auto kInvalid = grpc::StatusCode::INVALID_ARGUMENT;
  // float32 [4] is 16 bytes.
  ExpectRaw(raw_->Put({PutHeader("put/x", {4}), PutData(std::string(12, 'a'))}), kInvalid, "data",
            "Put with too few bytes");
  ExpectRaw(raw_->Put({PutHeader("put/x", {4}), PutData(std::string(20, 'a'))}), kInvalid, "data",
            "Put with too many bytes");
  ExpectRaw(raw_->Put({PutHeader("put/x", {4}), PutData(std::string(10, 'a')),
                       PutData(std::string(10, 'b'))}),
            kInvalid, "data", "Put whose chunks add up to too many bytes");
  ExpectRaw(raw_->Put({PutHeader("put/x", {4})}), kInvalid, "data", "Put with no data");
  ExpectRaw(raw_->Put({PutData(std::string(16, 'a'))}), kInvalid, "header", "Put without header");
  ExpectRaw(raw_->Put({}), kInvalid, "header", "empty Put stream");
  ExpectRaw(raw_->Put({PutHeader("put/x", {4}), PutData(std::string(8, 'a')),
                       PutHeader("put/x", {4}), PutData(std::string(8, 'a'))}),
            kInvalid, "header", "Put with a second header");
  EXPECT_CODE(client().Stat("put/x"), StatusCode::kNotFound);
  ASSERT_OK_AND_ASSIGN(BrokerStats after, client().Stats());
  EXPECT_EQ(after.pending, 0u);
  EXPECT_EQ(after.tensors, before.tensors);
  EXPECT_EQ(after.used_bytes, before.used_bytes) << "a failed Put leaked memory";

  // A correct one, in three chunks, for contrast.
  std::string bytes(16, '\0');
  for (int i = 0; i < 16; ++i) bytes[i] = static_cast<char>(i * 3);
  v1::TensorInfo info;
  const grpc::Status ok = raw_->Put({PutHeader("put/x", {4}), PutData(bytes.substr(0, 5)),
                                     PutData(bytes.substr(5, 7)), PutData(bytes.substr(12))},
                                    &info);
  ASSERT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_EQ(info.nbytes(), 16u);
  EXPECT_TRUE(info.sealed());
  std::string back;
  ASSERT_TRUE(raw_->Read("put/x", &back).ok());
  EXPECT_EQ(back, bytes);
  // Put without replace on a published name.
  ExpectRaw(raw_->Put({PutHeader("put/x", {4}), PutData(bytes)}), grpc::StatusCode::ALREADY_EXISTS,
            "put/x", "Put of a taken name");
}

}  // namespace
}  // namespace tensorbroker::testing
