// Crash consistency under systemd's descriptor store: a producer puts, replaces, creates and
// seals, and deletes tensors of three sizes (pooled, and dedicated segments that are created
// and freed) while the daemon is SIGKILLed at a random instant; the next instance adopts what
// the store kept. Every adopted tensor must hold exactly the bytes its producer wrote for the
// version the model expects (each tensor carries its name's hash and a stamp in every
// element, so a name pointing at freed, reused or half-written memory shows), a tensor deleted
// before the kill never returns, and nothing the model does not know appears. Only the one
// operation in flight at the kill may have gone either way. A bounded loop: kKills kills, each
// instance adopting what the previous one adopted and changed.
// systemd is not PID 1 here: tests/support/service_manager_harness.h plays its part.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/integration/harnessed_daemon_test.h"
#include "tests/integration/stamped_tensor.h"
#include "tests/integration/test_util.h"

namespace tensorbroker::testing {
namespace {

constexpr int kKills = 12;
constexpr int kNames = 10;

// Pooled, pooled, and a dedicated segment of its own (over the 16 MiB threshold).
constexpr uint64_t kSizes[] = {8, 4096, (17u << 20) / 8};

struct Expected {
  uint64_t stamp = 0;
  uint64_t elements = 0;
};
using Model = std::map<std::string, Expected>;  // names published, and what they hold

class KillLoopTest : public HarnessedDaemonTest {
 protected:
  void Start() { HarnessedDaemonTest::Start({"--capacity", "512M", "--log-level", "warning"}); }
};

// What `name` holds now: its stamp and size, checked element by element; nullopt when absent.
std::optional<Expected> Read(Client& client, const std::string& name) {
  auto got = client.Get(name);
  if (absl::IsNotFound(got.status())) return std::nullopt;
  EXPECT_TRUE(got.ok()) << name << ": " << got.status();
  if (!got.ok()) return std::nullopt;
  TensorPtr tensor(*got);
  const DLTensor& t = tensor->dl_tensor;
  const uint64_t elements = static_cast<uint64_t>(t.shape[0]);
  const auto* values = static_cast<const uint64_t*>(t.data);
  EXPECT_EQ(values[0], NameHash(name)) << name << ": another tensor's bytes";
  Expected seen{values[1], elements};
  if (std::optional<uint64_t> bad = FirstUnstampedElement(name, values, elements)) {
    ADD_FAILURE() << name << ": element " << *bad << " of " << elements << " is " << values[*bad]
                  << ", not what its producer wrote (half-written or reused memory)";
  }
  return seen;
}

TEST_F(KillLoopTest, SigkillAtRandomPointsLeavesAConsistentAdoptedState) {
  const uint32_t seed = static_cast<uint32_t>(::getpid());
  std::mt19937 random(seed);
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  Model model;
  uint64_t next_stamp = 1;
  int operations = 0;
  for (int kill = 0; kill < kKills; ++kill) {
    ASSERT_NO_FATAL_FAILURE(Start());
    ConnectOptions options;
    options.socket_path = socket_;
    options.reconnect_timeout = std::chrono::milliseconds(0);  // a kill ends the workload
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Client::Connect(options));
    // The state adopted from the previous instance is the model's, name for name.
    {
      ASSERT_OK_AND_ASSIGN(std::vector<TensorInfo> listed, client->List());
      std::vector<std::string> names;
      for (const TensorInfo& info : listed) names.push_back(info.name);
      std::vector<std::string> expected;
      for (const auto& [name, held] : model) expected.push_back(name);
      ASSERT_EQ(names, expected) << "after kill " << kill;
      for (const auto& [name, held] : model) {
        std::optional<Expected> seen = Read(*client, name);
        ASSERT_TRUE(seen.has_value()) << name;
        EXPECT_EQ(seen->stamp, held.stamp) << name;
        EXPECT_EQ(seen->elements, held.elements) << name;
      }
    }

    // The kill comes at a random instant of the workload below.
    const int delay_ms = std::uniform_int_distribution<int>(5, 250)(random);
    std::thread killer([pid = pid_, delay_ms] {
      absl::SleepFor(absl::Milliseconds(delay_ms));
      ::kill(pid, SIGKILL);
    });
    std::string in_flight;  // the name of the operation the kill interrupted
    Model before;           // the model before it
    while (true) {
      const std::string name =
          absl::StrCat("t/", std::uniform_int_distribution<int>(0, kNames - 1)(random));
      before = model;
      in_flight = name;
      const int op = std::uniform_int_distribution<int>(0, 9)(random);
      absl::Status status;
      if (op < 2 && model.count(name) != 0) {  // delete
        status = client->Delete(name);
        if (status.ok()) model.erase(name);
      } else {  // put or create+write+seal, replacing what is there
        const uint64_t elements = kSizes[std::uniform_int_distribution<int>(
            0, name == "t/0" || name == "t/1" ? 2 : 1)(random)];
        const uint64_t stamp = next_stamp++;
        std::vector<int64_t> shape = {static_cast<int64_t>(elements)};
        if (op < 6) {
          std::vector<uint64_t> values(elements);
          FillStamped(name, stamp, values.data(), elements);
          PutOptions put;
          put.replace = true;
          status =
              client->Put(name, HostTensor(values.data(), shape, dtypes::kUInt64), put).status();
        } else {
          CreateOptions create;
          create.replace = true;
          auto made = client->Create(name, shape, dtypes::kUInt64, create);
          status = made.status();
          if (made.ok()) {
            TensorPtr writable(*made);
            auto* values = static_cast<uint64_t*>(writable->dl_tensor.data);
            FillStamped(name, stamp, values, elements);
            writable.reset();
            status = client->Seal(name).status();
          }
        }
        if (status.ok()) model[name] = Expected{stamp, elements};
      }
      if (!status.ok()) break;  // the daemon is gone (what the call said does not matter)
      ++operations;
    }
    killer.join();
    int wait_status = 0;
    ASSERT_EQ(::waitpid(pid_, &wait_status, 0), pid_);
    pid_ = -1;
    ASSERT_TRUE(WIFSIGNALED(wait_status) && WTERMSIG(wait_status) == SIGKILL)
        << DescribeWaitStatus(wait_status);
    harness_->Drain();
    client.reset();

    // The interrupted operation went one way or the other: look, then check all the rest.
    ASSERT_NO_FATAL_FAILURE(Start());
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> checker, Client::Connect(socket_));
    std::optional<Expected> now = Read(*checker, in_flight);
    const auto was = before.find(in_flight);
    const auto would = model.find(in_flight);  // set only if the call returned OK
    bool as_before =
        was == before.end() ? !now.has_value() : now.has_value() && now->stamp == was->second.stamp;
    bool as_after = would != model.end() && now.has_value() && now->stamp == would->second.stamp;
    // A put or seal interrupted after the daemon published, before the client heard: the new
    // stamp, which the model never recorded. Its bytes were checked by Read all the same.
    const bool unrecorded_new = now.has_value() && now->stamp == next_stamp - 1;
    // A delete the daemon did before the client heard.
    const bool unrecorded_delete = !now.has_value();
    EXPECT_TRUE(as_before || as_after || unrecorded_new || unrecorded_delete)
        << in_flight << " after kill " << kill;
    model = before;
    if (now.has_value()) {
      model[in_flight] = *now;
    } else {
      model.erase(in_flight);
    }
    checker.reset();
    ::kill(pid_, SIGTERM);
    ASSERT_EQ(::waitpid(pid_, &wait_status, 0), pid_);
    pid_ = -1;
    harness_->Drain();
  }
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> last, Client::Connect(socket_));
  ASSERT_OK_AND_ASSIGN(std::vector<TensorInfo> listed, last->List());
  EXPECT_EQ(listed.size(), model.size());
  for (const auto& [name, held] : model) {
    std::optional<Expected> seen = Read(*last, name);
    ASSERT_TRUE(seen.has_value()) << name;
    EXPECT_EQ(seen->stamp, held.stamp) << name;
  }
  std::cout << kKills << " SIGKILLs at random points, " << operations
            << " operations completed between them; " << model.size()
            << " tensors adopted at the end, every byte as its producer wrote it (seed " << seed
            << ")\n";
}

}  // namespace
}  // namespace tensorbroker::testing
