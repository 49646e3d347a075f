// The tests' and benches' child processes (tests/support/subprocess.h): exit codes, death by a
// signal, captured output and lines both ways, the environment and working directory, bounded
// waits that kill, the destructor that kills and reaps, Fork()'s function, and running as
// another uid (root only). The only waits for time are the timeouts under test, which are
// short against children that never finish on their own.
#include "tests/support/subprocess.h"

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "tests/support/temp_dir.h"

namespace tensorbroker::testing {
namespace {

SubprocessOptions Captured() {
  SubprocessOptions options;
  options.capture_stdout = true;
  options.capture_stderr = true;
  return options;
}

// Runs `script` with /bin/sh to its end.
ProcessOutput Shell(const std::string& script, const SubprocessOptions& options = Captured()) {
  absl::StatusOr<Subprocess> child = Subprocess::Spawn({"/bin/sh", "-c", script}, options);
  EXPECT_TRUE(child.ok()) << child.status();
  if (!child.ok()) return {};
  absl::StatusOr<ProcessOutput> done = child->Finish();
  EXPECT_TRUE(done.ok()) << done.status();
  return done.value_or(ProcessOutput{});
}

// Whether `pid` is gone, not even a zombie (it was reaped).
bool Gone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

TEST(Subprocess, ReportsTheExitCodeAndBothStreamsApart) {
  const ProcessOutput done = Shell("echo out; echo err >&2; exit 3");
  EXPECT_TRUE(WIFEXITED(done.status) && WEXITSTATUS(done.status) == 3)
      << DescribeWaitStatus(done.status);
  EXPECT_EQ(done.out, "out\n");
  EXPECT_EQ(done.err, "err\n");
}

TEST(Subprocess, AProgramThatCannotBeExecutedExits127) {
  absl::StatusOr<Subprocess> child = Subprocess::Spawn({"/nonexistent/program"});
  ASSERT_TRUE(child.ok()) << child.status();
  absl::StatusOr<int> status = child->Wait();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(DescribeWaitStatus(*status), "exited with status 127");
}

TEST(Subprocess, ReportsDeathByASignal) {
  const ProcessOutput done = Shell("kill -TERM $$");
  EXPECT_TRUE(WIFSIGNALED(done.status) && WTERMSIG(done.status) == SIGTERM)
      << DescribeWaitStatus(done.status);
  EXPECT_EQ(DescribeWaitStatus(done.status), "killed by signal 15 (Terminated)");
}

TEST(Subprocess, StopSignalsAndWaits) {
  absl::StatusOr<Subprocess> child = Subprocess::Spawn({"/bin/sleep", "600"});
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_FALSE(child->ExitStatus().has_value());
  absl::StatusOr<int> status = child->Stop(SIGINT, absl::Seconds(60));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFSIGNALED(*status) && WTERMSIG(*status) == SIGINT);
  EXPECT_EQ(child->pid(), -1);
  EXPECT_EQ(child->ExitStatus(), *status);  // reaped once, reported again
}

TEST(Subprocess, AWaitPastItsTimeoutKillsAndReaps) {
  absl::StatusOr<Subprocess> child = Subprocess::Spawn({"/bin/sleep", "600"});
  ASSERT_TRUE(child.ok()) << child.status();
  const pid_t pid = child->pid();
  absl::StatusOr<int> status = child->Wait(absl::Milliseconds(50));
  EXPECT_EQ(status.status().code(), absl::StatusCode::kDeadlineExceeded) << status.status();
  EXPECT_EQ(child->pid(), -1);
  EXPECT_TRUE(Gone(pid));
}

TEST(Subprocess, FinishPastItsTimeoutKillsAndReaps) {
  absl::StatusOr<Subprocess> child =
      Subprocess::Spawn({"/bin/sh", "-c", "echo started; exec sleep 600"}, Captured());
  ASSERT_TRUE(child.ok()) << child.status();
  const pid_t pid = child->pid();
  absl::StatusOr<ProcessOutput> done = child->Finish(absl::Milliseconds(50));
  EXPECT_EQ(done.status().code(), absl::StatusCode::kDeadlineExceeded) << done.status();
  EXPECT_TRUE(Gone(pid));
}

TEST(Subprocess, TheDestructorKillsAndReaps) {
  pid_t pid = -1;
  {
    absl::StatusOr<Subprocess> child = Subprocess::Spawn({"/bin/sleep", "600"});
    ASSERT_TRUE(child.ok()) << child.status();
    pid = child->pid();
    Subprocess moved = *std::move(child);  // the moved-from one owns nothing
    EXPECT_EQ(moved.pid(), pid);
    EXPECT_FALSE(Gone(pid));
  }
  EXPECT_TRUE(Gone(pid));
}

TEST(Subprocess, AChildTheCallerReapedIsLeftAlone) {
  absl::StatusOr<Subprocess> child = Subprocess::Spawn({"/bin/true"});
  ASSERT_TRUE(child.ok()) << child.status();
  int status = 0;
  ASSERT_EQ(::waitpid(child->pid(), &status, 0), child->pid());
  child->MarkReaped();
  EXPECT_EQ(child->pid(), -1);
}

TEST(Subprocess, LinesGoBothWays) {
  SubprocessOptions options;
  options.pipe_stdin = true;
  options.capture_stdout = true;
  absl::StatusOr<Subprocess> child = Subprocess::Spawn({"/bin/cat"}, options);
  ASSERT_TRUE(child.ok()) << child.status();
  ASSERT_TRUE(child->WriteLine("one").ok());
  EXPECT_EQ(child->ReadLine(absl::Seconds(60)).value_or("?"), "one");
  absl::StatusOr<std::string> none = child->ReadLine(absl::Milliseconds(20));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kDeadlineExceeded) << none.status();
  ASSERT_TRUE(child->WriteLine("two").ok());
  child->CloseStdin();  // cat ends
  EXPECT_EQ(child->ReadLine().value_or("?"), "two");
  absl::StatusOr<std::string> end = child->ReadLine();
  EXPECT_EQ(end.status().code(), absl::StatusCode::kFailedPrecondition) << end.status();
  EXPECT_EQ(child->WriteLine("three").code(), absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<int> status = child->Wait();
  ASSERT_TRUE(status.ok());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0);
}

TEST(Subprocess, ReadToEndReturnsWhatNoLineTookAndTheUnterminatedRest) {
  SubprocessOptions options;
  options.capture_stdout = true;
  absl::StatusOr<Subprocess> child =
      Subprocess::Spawn({"/bin/sh", "-c", "printf 'a\\nb\\nc'"}, options);
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(child->ReadLine().value_or("?"), "a");
  EXPECT_EQ(child->ReadToEnd().value_or("?"), "b\nc");
}

TEST(Subprocess, StderrSoFarDoesNotWaitAndFinishStillReturnsAll) {
  SubprocessOptions options = Captured();
  options.pipe_stdin = true;
  absl::StatusOr<Subprocess> child =
      Subprocess::Spawn({"/bin/sh", "-c", "echo first >&2; read x; echo second >&2"}, options);
  ASSERT_TRUE(child.ok()) << child.status();
  while (child->StderrSoFar().empty()) ::usleep(1000);  // bounded by the test's timeout
  EXPECT_EQ(child->StderrSoFar(), "first\n");
  child->CloseStdin();
  absl::StatusOr<ProcessOutput> done = child->Finish();
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->err, "first\nsecond\n");
}

TEST(Subprocess, EnvironmentIsAddedOrExact) {
  ASSERT_EQ(::setenv("TB_SUBPROCESS_TEST", "old", 1), 0);
  SubprocessOptions added = Captured();
  added.env = {"TB_SUBPROCESS_TEST=new", "TB_SUBPROCESS_OTHER=x"};
  EXPECT_EQ(Shell("env | grep ^TB_SUBPROCESS_ | sort", added).out,
            "TB_SUBPROCESS_OTHER=x\nTB_SUBPROCESS_TEST=new\n");
  EXPECT_EQ(Shell("echo $TB_SUBPROCESS_TEST").out, "old\n");  // no env: this process's
  SubprocessOptions exact = Captured();
  exact.env = {"ONLY=1"};
  exact.exact_env = true;
  absl::StatusOr<Subprocess> child = Subprocess::Spawn({"/usr/bin/env"}, exact);
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(child->Finish().value_or(ProcessOutput{}).out, "ONLY=1\n");
  ::unsetenv("TB_SUBPROCESS_TEST");
}

TEST(Subprocess, RunsInTheWorkingDirectoryAndWritesToGivenDescriptors) {
  TempDir dir("tbsubprocess");
  const std::string path = dir.path() + "/out";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  SubprocessOptions options;
  options.working_dir = dir.path();
  options.stdout_fd = options.stderr_fd = fd;
  absl::StatusOr<Subprocess> child = Subprocess::Spawn({"/bin/sh", "-c", "pwd; ls >&2"}, options);
  ::close(fd);
  ASSERT_TRUE(child.ok()) << child.status();
  ASSERT_TRUE(child->Wait().ok());
  const ProcessOutput read = Shell("cat " + path);
  EXPECT_EQ(read.out, dir.path() + "\nout\n");
}

TEST(Subprocess, ForkRunsTheFunctionAndExitsWithItsResult) {
  SubprocessOptions options;
  options.pipe_stdin = true;
  options.capture_stdout = true;
  absl::StatusOr<Subprocess> child = Subprocess::Fork(
      [] {
        char byte;
        while (::read(STDIN_FILENO, &byte, 1) > 0) {  // EOF: no copy of the parent's end here
          if (::write(STDOUT_FILENO, &byte, 1) != 1) return 1;
        }
        return 7;
      },
      options);
  ASSERT_TRUE(child.ok()) << child.status();
  ASSERT_TRUE(child->WriteLine("echo").ok());
  EXPECT_EQ(child->ReadLine().value_or("?"), "echo");
  child->CloseStdin();
  absl::StatusOr<ProcessOutput> done = child->Finish();
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_TRUE(WIFEXITED(done->status) && WEXITSTATUS(done->status) == 7)
      << DescribeWaitStatus(done->status);
}

TEST(Subprocess, ForkAppliesTheCpuAffinity) {
  cpu_set_t mine;
  ASSERT_EQ(::sched_getaffinity(0, sizeof(mine), &mine), 0);
  int cpu = 0;
  while (!CPU_ISSET(cpu, &mine)) ++cpu;
  SubprocessOptions options;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  options.cpu_affinity = one;
  absl::StatusOr<Subprocess> child = Subprocess::Fork(
      [cpu] {
        cpu_set_t set;
        if (::sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
        return CPU_COUNT(&set) == 1 && CPU_ISSET(cpu, &set) ? 0 : 2;
      },
      options);
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(child->Wait().value_or(-1), 0);
}

TEST(Subprocess, RunsAsAnotherUserWithoutGroups) {
  if (::geteuid() != 0) GTEST_SKIP() << "running as uid 65534 needs root";
  SubprocessOptions options = Captured();
  options.run_as = RunAsUser{65534, 65534};
  EXPECT_EQ(Shell("id -u; id -g; id -G", options).out, "65534\n65534\n65534\n");
  absl::StatusOr<Subprocess> child = Subprocess::Fork(
      [] {
        uid_t r, e, s;
        if (::getresuid(&r, &e, &s) != 0 || r != 65534 || e != 65534 || s != 65534) return 1;
        return ::getgroups(0, nullptr) == 0 && ::getgid() == 65534 ? 0 : 2;
      },
      options);
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(child->Wait().value_or(-1), 0);
}

TEST(Subprocess, ASetupStepThatFailsExits126) {
  SubprocessOptions options;
  options.working_dir = "/nonexistent/directory";
  absl::StatusOr<Subprocess> child = Subprocess::Fork([] { return 0; }, options);
  ASSERT_TRUE(child.ok()) << child.status();
  absl::StatusOr<int> status = child->Wait();
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(DescribeWaitStatus(*status), "exited with status 126");
}

}  // namespace
}  // namespace tensorbroker::testing
