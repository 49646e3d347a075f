// Layouts and dtypes: a strided Put (a transpose, a broadcast, a slice, with byte_offset) is
// stored compact and comes back in C order with compact strides; a strided Create keeps its
// layout while Read streams C order; every dtype (code, bits) round-trips through Put, Create,
// Stat and another process; 0-d and zero-size tensors work; strides are never null.
#include <grpcpp/grpcpp.h>
#include <sys/wait.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensorbroker/v1/broker.grpc.pb.h"
#include "tests/integration/test_util.h"

namespace tensorbroker::testing {
namespace {

using LayoutTest = BrokerTest;

// Streams `name` out through the raw Read RPC.
std::string ReadBytes(const std::string& socket, const std::string& name, v1::TensorInfo* info) {
  auto stub = v1::Broker::NewStub(
      grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::ReadRequest req;
  req.set_name(name);
  auto reader = stub->Read(&ctx, req);
  v1::ReadResponse msg;
  std::string out;
  bool first = true;
  while (reader->Read(&msg)) {
    if (first) *info = msg.info();
    first = false;
    out += msg.data();
  }
  const grpc::Status s = reader->Finish();
  EXPECT_TRUE(s.ok()) << s.error_message();
  return out;
}

std::vector<float> ReadFloats(const std::string& socket, const std::string& name) {
  v1::TensorInfo info;
  const std::string bytes = ReadBytes(socket, name, &info);
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

TEST_F(LayoutTest, TransposedPutWithByteOffsetIsStoredCompactInCOrder) {
  // A 4x3 row-major matrix B[i][j] = 10*i + j after 4 floats of junk (byte_offset 16).
  std::vector<float> buffer(4 + 12, -99.0f);
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 3; ++j) buffer[4 + i * 3 + j] = static_cast<float>(10 * i + j);
  }
  // Its transpose T = B^T: shape {3, 4}, strides {1, 3}.
  std::vector<int64_t> shape = {3, 4};
  std::vector<int64_t> strides = {1, 3};
  DLTensor t = HostTensor(buffer.data(), shape, dtypes::kFloat32, strides.data(), 16);
  ASSERT_OK_AND_ASSIGN(TensorInfo info, client().Put("nc/t", t));
  EXPECT_EQ(info.shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(info.strides, (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(info.nbytes, 48u);

  std::vector<float> expected(12);
  for (int j = 0; j < 3; ++j) {
    for (int i = 0; i < 4; ++i) expected[j * 4 + i] = static_cast<float>(10 * i + j);
  }
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, client().Get("nc/t"));
  TensorPtr got(raw);
  EXPECT_EQ(ShapeOf(got->dl_tensor), (std::vector<int64_t>{3, 4}));
  ASSERT_NE(got->dl_tensor.strides, nullptr);
  EXPECT_EQ(StridesOf(got->dl_tensor), (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(FloatsOf(got->dl_tensor), expected);
  EXPECT_EQ(ReadFloats(socket(), "nc/t"), expected);
  // And in another process.
  ASSERT_OK_AND_ASSIGN(PeerResult peer, RunPeer(socket(), {"get", "nc/t"}));
  ASSERT_TRUE(WIFEXITED(peer.status) && WEXITSTATUS(peer.status) == 0) << peer.out;
  const auto f = ParseFields(peer.out);
  EXPECT_EQ(f.at("shape"), "3,4");
  EXPECT_EQ(f.at("strides"), "4,1");
  EXPECT_EQ(f.at("hash"), HashBytes(expected.data(), 48));
}

TEST_F(LayoutTest, BroadcastAndSlicedPutsAreMaterialisedCompact) {
  // Broadcast: shape {2, 3}, strides {0, 1} over {7, 8, 9}.
  std::vector<float> row = {7, 8, 9};
  std::vector<int64_t> shape = {2, 3};
  std::vector<int64_t> strides = {0, 1};
  ASSERT_OK(
      client().Put("nc/bcast", HostTensor(row.data(), shape, dtypes::kFloat32, strides.data())));
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, client().Get("nc/bcast"));
  TensorPtr b(raw);
  EXPECT_EQ(FloatsOf(b->dl_tensor), (std::vector<float>{7, 8, 9, 7, 8, 9}));
  EXPECT_EQ(StridesOf(b->dl_tensor), (std::vector<int64_t>{3, 1}));

  // Every other column of a 3x6 int16 matrix, starting at column 1: shape {3, 3}, strides {6, 2},
  // byte_offset 2.
  std::vector<int16_t> m(18);
  for (int i = 0; i < 18; ++i) m[i] = static_cast<int16_t>(100 + i);
  std::vector<int64_t> s_shape = {3, 3};
  std::vector<int64_t> s_strides = {6, 2};
  ASSERT_OK(
      client().Put("nc/slice", HostTensor(m.data(), s_shape, dtypes::kInt16, s_strides.data(), 2)));
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw2, client().Get("nc/slice"));
  TensorPtr s(raw2);
  std::vector<int16_t> got(9);
  std::memcpy(got.data(), DataOf(s->dl_tensor), 18);
  EXPECT_EQ(got, (std::vector<int16_t>{101, 103, 105, 107, 109, 111, 113, 115, 117}));
  EXPECT_EQ(StridesOf(s->dl_tensor), (std::vector<int64_t>{3, 1}));

  // A 3-d permutation (2,3,4) -> axes (2,0,1) of uint8.
  std::vector<uint8_t> cube(24);
  for (int i = 0; i < 24; ++i) cube[i] = static_cast<uint8_t>(i);
  std::vector<int64_t> p_shape = {4, 2, 3};
  std::vector<int64_t> p_strides = {1, 12, 4};
  ASSERT_OK(
      client().Put("nc/perm", HostTensor(cube.data(), p_shape, dtypes::kUInt8, p_strides.data())));
  std::vector<uint8_t> expected;
  for (int a = 0; a < 4; ++a) {
    for (int b2 = 0; b2 < 2; ++b2) {
      for (int c = 0; c < 3; ++c) expected.push_back(static_cast<uint8_t>(a + 12 * b2 + 4 * c));
    }
  }
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw3, client().Get("nc/perm"));
  TensorPtr p(raw3);
  EXPECT_EQ(BytesOf(p->dl_tensor), expected);
  EXPECT_EQ(StridesOf(p->dl_tensor), (std::vector<int64_t>{6, 3, 1}));
}

TEST_F(LayoutTest, StridedCreateKeepsItsLayoutAndReadStreamsCOrder) {
  CreateOptions options;
  options.strides = {1, 3};  // a column-major 3x4
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw,
                       client().Create("nc/colmajor", {3, 4}, dtypes::kFloat32, options));
  TensorPtr w(raw);
  EXPECT_EQ(StridesOf(w->dl_tensor), (std::vector<int64_t>{1, 3}));
  float* p = reinterpret_cast<float*>(MutableDataOf(w->dl_tensor));
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 4; ++j) p[i * 1 + j * 3] = static_cast<float>(10 * i + j);
  }
  ASSERT_OK_AND_ASSIGN(TensorInfo info, client().Seal("nc/colmajor"));
  EXPECT_EQ(info.strides, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(info.nbytes, 48u);
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw2, client().Get("nc/colmajor"));
  TensorPtr g(raw2);
  EXPECT_EQ(StridesOf(g->dl_tensor), (std::vector<int64_t>{1, 3}));
  const float* q = reinterpret_cast<const float*>(DataOf(g->dl_tensor));
  std::vector<float> c_order;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 4; ++j) {
      EXPECT_EQ(q[i + j * 3], static_cast<float>(10 * i + j));
      c_order.push_back(static_cast<float>(10 * i + j));
    }
  }
  EXPECT_EQ(ReadFloats(socket(), "nc/colmajor"), c_order) << "Read must stream C order";

  // Padded rows: shape {2, 3}, strides {4, 1} spans 7 elements.
  CreateOptions padded;
  padded.strides = {4, 1};
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw3,
                       client().Create("nc/padded", {2, 3}, dtypes::kFloat32, padded));
  TensorPtr w2(raw3);
  float* r = reinterpret_cast<float*>(MutableDataOf(w2->dl_tensor));
  r[0] = 1;
  r[1] = 2;
  r[2] = 3;
  r[3] = -1;  // padding
  r[4] = 4;
  r[5] = 5;
  r[6] = 6;
  ASSERT_OK_AND_ASSIGN(TensorInfo pinfo, client().Seal("nc/padded"));
  EXPECT_EQ(pinfo.nbytes, 28u);
  EXPECT_EQ(ReadFloats(socket(), "nc/padded"), (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

struct DTypeCase {
  const char* name;
  DLDataType dtype;
};

const std::vector<DTypeCase>& AllDTypes() {
  static const auto* cases = new std::vector<DTypeCase>{
      {"bool", {6, 8, 1}},       {"int8", {0, 8, 1}},       {"int16", {0, 16, 1}},
      {"int32", {0, 32, 1}},     {"int64", {0, 64, 1}},     {"uint8", {1, 8, 1}},
      {"uint16", {1, 16, 1}},    {"uint32", {1, 32, 1}},    {"uint64", {1, 64, 1}},
      {"float16", {2, 16, 1}},   {"float32", {2, 32, 1}},   {"float64", {2, 64, 1}},
      {"bfloat16", {4, 16, 1}},  {"complex64", {5, 64, 1}}, {"complex128", {5, 128, 1}},
      {"float8_7", {7, 8, 1}},   {"float8_8", {8, 8, 1}},   {"float8_9", {9, 8, 1}},
      {"float8_10", {10, 8, 1}}, {"float8_11", {11, 8, 1}}, {"float8_12", {12, 8, 1}},
      {"float8_13", {13, 8, 1}}, {"float8_14", {14, 8, 1}},
  };
  return *cases;
}

TEST_F(LayoutTest, EveryDTypeRoundTripsByCodeAndBits) {
  for (const DTypeCase& c : AllDTypes()) {
    SCOPED_TRACE(c.name);
    const size_t item = (c.dtype.bits + 7) / 8;
    std::vector<int64_t> shape = {2, 3};
    std::vector<uint8_t> bytes(6 * item);
    for (size_t i = 0; i < bytes.size(); ++i) {
      // Bool holds 0/1 bytes; everything else an arbitrary pattern.
      bytes[i] = c.dtype.code == kDLBool ? static_cast<uint8_t>(i % 2)
                                         : static_cast<uint8_t>(i * 37 + c.dtype.code);
    }
    const std::string put_name = absl::StrCat("dt/put/", c.name);
    ASSERT_OK_AND_ASSIGN(TensorInfo info,
                         client().Put(put_name, HostTensor(bytes.data(), shape, c.dtype)));
    EXPECT_EQ(info.dtype.code, c.dtype.code);
    EXPECT_EQ(info.dtype.bits, c.dtype.bits);
    EXPECT_EQ(info.dtype.lanes, 1);
    EXPECT_EQ(info.nbytes, bytes.size());
    ASSERT_OK_AND_ASSIGN(TensorInfo stat, client().Stat(put_name));
    EXPECT_EQ(stat.dtype.code, c.dtype.code);
    EXPECT_EQ(stat.dtype.bits, c.dtype.bits);
    ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, client().Get(put_name));
    TensorPtr got(raw);
    EXPECT_EQ(got->dl_tensor.dtype.code, c.dtype.code);
    EXPECT_EQ(got->dl_tensor.dtype.bits, c.dtype.bits);
    EXPECT_EQ(got->dl_tensor.dtype.lanes, 1);
    ASSERT_NE(got->dl_tensor.strides, nullptr);
    EXPECT_EQ(StridesOf(got->dl_tensor), (std::vector<int64_t>{3, 1}));
    EXPECT_EQ(BytesOf(got->dl_tensor), bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(got->dl_tensor.data) % 256, 0u);

    // Create path, and another process sees the same dtype and bytes.
    const std::string create_name = absl::StrCat("dt/create/", c.name);
    ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw2,
                         client().Create(create_name, {2, 3}, c.dtype));
    TensorPtr w(raw2);
    EXPECT_EQ(w->dl_tensor.dtype.code, c.dtype.code);
    EXPECT_EQ(w->dl_tensor.dtype.bits, c.dtype.bits);
    std::memcpy(MutableDataOf(w->dl_tensor), bytes.data(), bytes.size());
    ASSERT_OK(client().Seal(create_name));
    ASSERT_OK_AND_ASSIGN(PeerResult peer, RunPeer(socket(), {"get", create_name}));
    ASSERT_TRUE(WIFEXITED(peer.status) && WEXITSTATUS(peer.status) == 0) << peer.out;
    const auto f = ParseFields(peer.out);
    EXPECT_EQ(f.at("code"), absl::StrCat(c.dtype.code));
    EXPECT_EQ(f.at("bits"), absl::StrCat(c.dtype.bits));
    EXPECT_EQ(f.at("nbytes"), absl::StrCat(bytes.size()));
    EXPECT_EQ(f.at("hash"), HashBytes(bytes.data(), bytes.size()));
  }
}

TEST_F(LayoutTest, ZeroDimensionalTensor) {
  double value = 3.25;
  std::vector<int64_t> shape;  // 0-d
  ASSERT_OK_AND_ASSIGN(TensorInfo info,
                       client().Put("zd/scalar", HostTensor(&value, shape, dtypes::kFloat64)));
  EXPECT_TRUE(info.shape.empty());
  EXPECT_TRUE(info.strides.empty());
  EXPECT_EQ(info.nbytes, 8u);
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, client().Get("zd/scalar"));
  TensorPtr got(raw);
  EXPECT_EQ(got->dl_tensor.ndim, 0);
  EXPECT_NE(got->dl_tensor.strides, nullptr) << "strides must never be null";
  double back = 0;
  std::memcpy(&back, DataOf(got->dl_tensor), 8);
  EXPECT_EQ(back, 3.25);

  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw2,
                       client().Create("zd/created", {}, dtypes::kInt64));
  TensorPtr w(raw2);
  EXPECT_EQ(w->dl_tensor.ndim, 0);
  EXPECT_NE(w->dl_tensor.strides, nullptr);
  const int64_t v = -5;
  std::memcpy(MutableDataOf(w->dl_tensor), &v, 8);
  ASSERT_OK(client().Seal("zd/created"));
  ASSERT_OK_AND_ASSIGN(PeerResult peer, RunPeer(socket(), {"get", "zd/created"}));
  ASSERT_TRUE(WIFEXITED(peer.status) && WEXITSTATUS(peer.status) == 0) << peer.out;
  const auto f = ParseFields(peer.out);
  EXPECT_EQ(f.at("ndim"), "0");
  EXPECT_EQ(f.at("nbytes"), "8");
  EXPECT_EQ(f.at("hash"), HashBytes(&v, 8));
}

TEST_F(LayoutTest, ZeroSizeTensor) {
  float dummy = 0;
  std::vector<int64_t> shape = {0, 5};
  ASSERT_OK_AND_ASSIGN(TensorInfo info,
                       client().Put("zs/put", HostTensor(&dummy, shape, dtypes::kFloat32)));
  EXPECT_EQ(info.shape, (std::vector<int64_t>{0, 5}));
  EXPECT_EQ(info.strides, (std::vector<int64_t>{5, 1}));
  EXPECT_EQ(info.nbytes, 0u);
  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw, client().Get("zs/put"));
  TensorPtr got(raw);
  EXPECT_EQ(ShapeOf(got->dl_tensor), (std::vector<int64_t>{0, 5}));
  ASSERT_NE(got->dl_tensor.strides, nullptr);
  EXPECT_EQ(StridesOf(got->dl_tensor), (std::vector<int64_t>{5, 1}));
  v1::TensorInfo read_info;
  EXPECT_EQ(ReadBytes(socket(), "zs/put", &read_info), "");
  EXPECT_EQ(read_info.nbytes(), 0u);
  EXPECT_EQ(LeasesOf(client(), "zs/put"), 1);

  ASSERT_OK_AND_ASSIGN(DLManagedTensorVersioned * raw2,
                       client().Create("zs/created", {5, 0}, dtypes::kComplex128));
  TensorPtr w(raw2);
  ASSERT_NE(w->dl_tensor.strides, nullptr);
  ASSERT_OK_AND_ASSIGN(TensorInfo sealed, client().Seal("zs/created"));
  EXPECT_EQ(sealed.nbytes, 0u);
  ASSERT_OK_AND_ASSIGN(PeerResult peer, RunPeer(socket(), {"get", "zs/created"}));
  ASSERT_TRUE(WIFEXITED(peer.status) && WEXITSTATUS(peer.status) == 0) << peer.out;
  const auto f = ParseFields(peer.out);
  EXPECT_EQ(f.at("shape"), "5,0");
  EXPECT_EQ(f.at("strides"), "1,1");
  EXPECT_EQ(f.at("nbytes"), "0");
}

}  // namespace
}  // namespace tensorbroker::testing
