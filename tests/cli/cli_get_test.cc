// End-to-end tests of `tensorbroker get` for tensors the CLI cannot make itself: a strided
// Create (the broker keeps its layout, so get must read through the strides), bfloat16 and
// float8 (written as raw void with a note on stderr), and a mutable tensor. Runs the real CLI
// binary against the real daemon (tests/support/daemon_process.h).
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/npy_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensorbroker/client.h"
#include "tests/support/daemon_process.h"
#include "tests/support/subprocess.h"

namespace tensorbroker {
namespace {

using ::testing::HasSubstr;

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Runs the CLI binary with `args` (Subprocess: fork and at once exec, so it is safe next to
// gRPC's threads), its stdout and stderr captured.
CliResult RunCli(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {TENSORBROKER_CLI_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  testing::SubprocessOptions options;
  options.capture_stdout = true;
  options.capture_stderr = true;
  CliResult result;
  absl::StatusOr<testing::Subprocess> cli = testing::Subprocess::Spawn(argv, options);
  absl::StatusOr<testing::ProcessOutput> done =
      cli.ok() ? cli->Finish() : absl::StatusOr<testing::ProcessOutput>(cli.status());
  if (!done.ok()) {
    ADD_FAILURE() << argv[0] << ": " << done.status();
    return result;
  }
  const int status = done->status;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = std::move(done->out);
  result.err = std::move(done->err);
  return result;
}

class CliGetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A directory of this test's own: ctest runs tests in parallel processes.
    std::string dir = ::testing::TempDir() + "/cli_get_test.XXXXXX";
    ASSERT_NE(::mkdtemp(dir.data()), nullptr) << std::strerror(errno);
    dir_ = dir;
    auto daemon = testing::DaemonProcess::Start({"--capacity", "256M"});
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = std::make_unique<testing::DaemonProcess>(*std::move(daemon));
    auto client = Client::Connect(daemon_->socket_path());
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  // Creates and seals `name` with bytes[i] = fill(i) over the whole buffer.
  void Publish(const std::string& name, const std::vector<int64_t>& shape, DLDataType dtype,
               const CreateOptions& options, const std::vector<uint8_t>& bytes) {
    auto created = client_->Create(name, shape, dtype, options);
    ASSERT_TRUE(created.ok()) << created.status();
    TensorPtr tensor(*created);
    auto* data = static_cast<uint8_t*>(tensor->dl_tensor.data) + tensor->dl_tensor.byte_offset;
    std::memcpy(data, bytes.data(), bytes.size());
    auto sealed = client_->Seal(name);
    ASSERT_TRUE(sealed.ok()) << sealed.status();
  }

  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  std::string Path(const std::string& file) { return dir_ + "/" + file; }

  CliResult Cli(std::vector<std::string> args) {
    args.insert(args.begin(), {"--socket", daemon_->socket_path()});
    return RunCli(args);
  }

  std::string dir_;
  std::unique_ptr<testing::DaemonProcess> daemon_;
  std::unique_ptr<Client> client_;
};

TEST_F(CliGetTest, StridedTensorIsWrittenInCOrder) {
  // Shape {3, 4}, column-major strides {1, 3}: element (i, j) lives at i + 3 j.
  std::vector<float> storage(12);
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 4; ++j) storage[i + 3 * j] = static_cast<float>(10 * i + j);
  }
  std::vector<uint8_t> bytes(48);
  std::memcpy(bytes.data(), storage.data(), 48);
  CreateOptions options;
  options.strides = {1, 3};
  Publish("strided/t", {3, 4}, dtypes::kFloat32, options, bytes);

  CliResult stat = Cli({"stat", "strided/t", "--json"});
  ASSERT_EQ(stat.exit_code, 0) << stat.err;
  EXPECT_THAT(stat.out, HasSubstr("\"strides\": [1, 3]"));

  const std::string path = Path("strided.npy");
  CliResult get = Cli({"get", "strided/t", path});
  ASSERT_EQ(get.exit_code, 0) << get.err;
  EXPECT_EQ(get.err, "");
  const std::string file = ReadWholeFile(path);
  auto header = npy::ParseFile(file);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->descr, "<f4");
  EXPECT_EQ(header->shape, (std::vector<int64_t>{3, 4}));
  EXPECT_FALSE(header->fortran_order);
  std::vector<float> c_order(12);
  std::memcpy(c_order.data(), file.data() + header->data_offset, 48);
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 4; ++j) EXPECT_EQ(c_order[i * 4 + j], 10 * i + j) << i << "," << j;
  }
  // The CLI's lease ended with it.
  auto info = client_->Stat("strided/t");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->leases, 0u);
}

TEST_F(CliGetTest, BFloat16AndFloat8AreWrittenAsRawVoidWithANote) {
  const std::vector<uint8_t> bf16 = {0x80, 0x3f, 0x00, 0x40, 0x40, 0x40};  // 1, 2, 3
  Publish("raw/bf16", {3}, dtypes::kBFloat16, {}, bf16);
  const std::vector<uint8_t> f8 = {0x38, 0x40, 0x44, 0x48};
  Publish("raw/f8", {2, 2}, DLDataType{10, 8, 1}, {}, f8);  // float8_e4m3fn

  struct Case {
    std::string name, descr, dtype_name;
    std::vector<uint8_t> bytes;
  };
  for (const Case& c :
       {Case{"raw/bf16", "|V2", "bfloat16", bf16}, Case{"raw/f8", "|V1", "float8_e4m3fn", f8}}) {
    const std::string path = Path("raw.npy");
    CliResult get = Cli({"get", c.name, path});
    ASSERT_EQ(get.exit_code, 0) << get.err;
    EXPECT_THAT(get.err, HasSubstr("note"));
    EXPECT_THAT(get.err, HasSubstr(c.dtype_name));
    EXPECT_THAT(get.err, HasSubstr(c.descr));
    const std::string file = ReadWholeFile(path);
    EXPECT_THAT(file, HasSubstr("'descr': '" + c.descr + "'"));
    auto header = npy::ParseHeader(file);
    EXPECT_FALSE(header.ok());  // raw void is refused on the way back in...
    CliResult put = Cli({"put", "raw/back", path});
    EXPECT_EQ(put.exit_code, 1);
    EXPECT_THAT(put.err, HasSubstr("void"));
    // ...but the bytes are all there, after the 64-byte-aligned header.
    ASSERT_GE(file.size(), c.bytes.size());
    EXPECT_EQ(file.size() % 64, c.bytes.size());
    EXPECT_EQ(file.substr(file.size() - c.bytes.size()),
              std::string(c.bytes.begin(), c.bytes.end()));

    CliResult stat = Cli({"stat", c.name, "--json"});
    ASSERT_EQ(stat.exit_code, 0) << stat.err;
    EXPECT_THAT(stat.out, HasSubstr("\"dtype\": \"" + c.dtype_name + "\""));
  }
}

TEST_F(CliGetTest, MutableTensorCanBeRead) {
  std::vector<uint8_t> bytes = {1, 2, 3, 4};
  CreateOptions options;
  options.is_mutable = true;
  Publish("mutable/t", {4}, dtypes::kUInt8, options, bytes);
  const std::string path = Path("mutable.npy");
  CliResult get = Cli({"get", "mutable/t", path});
  ASSERT_EQ(get.exit_code, 0) << get.err;
  const std::string file = ReadWholeFile(path);
  auto header = npy::ParseFile(file);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->descr, "|u1");
  EXPECT_EQ(file.substr(header->data_offset), "\x01\x02\x03\x04");
  CliResult stat = Cli({"stat", "mutable/t"});
  EXPECT_THAT(stat.out, ::testing::ContainsRegex("\nmutable: +true\n"));
}

}  // namespace
}  // namespace tensorbroker
