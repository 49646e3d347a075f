// Shared helpers for the integration tests: status assertions, a fixture that starts a private
// daemon and connects a client, host DLTensor views, and bounded polling (used only where the
// spec itself states a bound, e.g. "leases of a dead process are released within 1 s").
#ifndef TENSORBROKER_TESTS_INTEGRATION_TEST_UTIL_H_
#define TENSORBROKER_TESTS_INTEGRATION_TEST_UTIL_H_

#include <dlpack/dlpack.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tensorbroker/client.h"
#include "tests/integration/peer_process.h"
#include "tests/integration/shm_inspect.h"
#include "tests/support/daemon_process.h"
#include "tests/support/host_tensor.h"

namespace tensorbroker::testing {

inline absl::Status StatusOf(const absl::Status& s) { return s; }
template <typename T>
absl::Status StatusOf(const absl::StatusOr<T>& s) {
  return s.status();
}

#define TB_CONCAT_INNER(a, b) a##b
#define TB_CONCAT(a, b) TB_CONCAT_INNER(a, b)
#define ASSERT_OK(expr)                                                      \
  do {                                                                       \
    const absl::Status tb_status_ = ::tensorbroker::testing::StatusOf(expr); \
    ASSERT_TRUE(tb_status_.ok()) << #expr << ": " << tb_status_;             \
  } while (0)
#define EXPECT_OK(expr)                                                      \
  do {                                                                       \
    const absl::Status tb_status_ = ::tensorbroker::testing::StatusOf(expr); \
    EXPECT_TRUE(tb_status_.ok()) << #expr << ": " << tb_status_;             \
  } while (0)
// Only in functions returning void (TEST bodies).
#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  TB_ASSERT_OK_AND_ASSIGN_IMPL(TB_CONCAT(tb_statusor_, __LINE__), lhs, expr)
#define TB_ASSERT_OK_AND_ASSIGN_IMPL(tmp, lhs, expr)      \
  auto tmp = (expr);                                      \
  ASSERT_TRUE(tmp.ok()) << #expr << ": " << tmp.status(); \
  lhs = *std::move(tmp)
// The exact gRPC code of a failed call.
#define EXPECT_CODE(expr, code_)                                             \
  do {                                                                       \
    const absl::Status tb_status_ = ::tensorbroker::testing::StatusOf(expr); \
    EXPECT_EQ(tb_status_.code(), code_) << #expr << ": " << tb_status_;      \
  } while (0)

// The exact code and message.
#define EXPECT_STATUS(expr, code_, message_)                                 \
  do {                                                                       \
    const absl::Status tb_status_ = ::tensorbroker::testing::StatusOf(expr); \
    EXPECT_EQ(tb_status_.code(), code_) << #expr << ": " << tb_status_;      \
    EXPECT_EQ(tb_status_.message(), message_) << #expr;                      \
  } while (0)

inline const uint8_t* DataOf(const DLTensor& t) {
  return static_cast<const uint8_t*>(t.data) + t.byte_offset;
}
inline uint8_t* MutableDataOf(DLTensor& t) { return static_cast<uint8_t*>(t.data) + t.byte_offset; }

inline uint64_t ElementsOf(const DLTensor& t) {
  uint64_t n = 1;
  for (int i = 0; i < t.ndim; ++i) n *= static_cast<uint64_t>(t.shape[i]);
  return n;
}
inline uint64_t CompactBytesOf(const DLTensor& t) {
  return ElementsOf(t) * ((t.dtype.bits + 7) / 8);
}

// The bytes of a compact tensor.
inline std::vector<uint8_t> BytesOf(const DLTensor& t) {
  const uint8_t* p = DataOf(t);
  return std::vector<uint8_t>(p, p + CompactBytesOf(t));
}
// n floats counting up from `first`.
inline std::vector<float> Floats(size_t n, float first) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = first + static_cast<float>(i);
  return v;
}

inline std::vector<float> FloatsOf(const DLTensor& t) {
  std::vector<float> out(ElementsOf(t));
  if (!out.empty()) std::memcpy(out.data(), DataOf(t), out.size() * sizeof(float));
  return out;
}
inline std::vector<int64_t> ShapeOf(const DLTensor& t) {
  return std::vector<int64_t>(t.shape, t.shape + t.ndim);
}
inline std::vector<int64_t> StridesOf(const DLTensor& t) {
  if (t.strides == nullptr) return {};
  return std::vector<int64_t>(t.strides, t.strides + t.ndim);
}

// How long a test waits for something it expects to happen: only against a hang, never a
// measurement (a loaded machine may take its time; a bound the product states is passed as
// `limit` by the test that checks it).
inline constexpr std::chrono::seconds kHangGuard{60};

// Polls `pred` every `step` until it holds or `limit` passed; returns whether it held.
template <typename Pred>
bool PollUntil(Pred pred, std::chrono::milliseconds limit = kHangGuard,
               std::chrono::milliseconds step = std::chrono::milliseconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (true) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return pred();
    std::this_thread::sleep_for(step);
  }
}

// Leases of the current version of `name`, or -1 (with a test failure) if Stat failed.
inline int64_t LeasesOf(Client& client, const std::string& name) {
  auto info = client.Stat(name);
  EXPECT_TRUE(info.ok()) << "Stat(" << name << "): " << info.status();
  return info.ok() ? static_cast<int64_t>(info->leases) : -1;
}

// Starts a private daemon (with ExtraArgs()) and connects `client_` to it.
class BrokerTest : public ::testing::Test {
 protected:
  virtual std::vector<std::string> ExtraArgs() const { return {"--log-level", "warning"}; }

  void SetUp() override {
    auto daemon = DaemonProcess::Start(ExtraArgs());
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_.emplace(*std::move(daemon));
    auto client = Client::Connect(socket());
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  void TearDown() override {
    client_.reset();
    if (daemon_.has_value()) {
      auto status = daemon_->Stop();
      EXPECT_TRUE(status.ok()) << status.status();
      if (status.ok()) {
        EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
            << "tensorbrokerd " << DescribeWaitStatus(*status);
      }
    }
  }

  const std::string& socket() const { return daemon_->socket_path(); }
  Client& client() { return *client_; }
  std::unique_ptr<Client> NewClient() {
    auto c = Client::Connect(socket());
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  // Publishes float32 `values` under `name` with Put.
  absl::StatusOr<TensorInfo> PutFloats(Client& c, const std::string& name,
                                       std::vector<float> values, PutOptions options = {}) {
    std::vector<int64_t> shape = {static_cast<int64_t>(values.size())};
    DLTensor t = HostTensor(values.data(), shape, dtypes::kFloat32);
    return c.Put(name, t, options);
  }

  std::optional<DaemonProcess> daemon_;
  std::unique_ptr<Client> client_;
};

}  // namespace tensorbroker::testing

#endif  // TENSORBROKER_TESTS_INTEGRATION_TEST_UTIL_H_
