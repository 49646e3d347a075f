#include "bench/bench_options.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/byte_size.h"
#include "common/command_line.h"

namespace tensorbroker::bench {

void Usage(const char* argv0) {
  std::printf(
      "usage: %s [flags]\n"
      "  --socket PATH           use the daemon already serving PATH (default: start one)\n"
      "  --daemon PATH           tensorbrokerd to start (default: %s)\n"
      "  --capacity SIZE         --capacity for the daemon we start (default 6G)\n"
      "  --iterations N          timed iterations of the small ops (default 2000)\n"
      "  --warmup N              untimed warm-up iterations of the small ops (default N/10)\n"
      "  --large-iterations N    timed iterations of the large ops (default 5)\n"
      "  --large-warmup N        untimed warm-up iterations of the large ops (default 1)\n"
      "  --size-small SIZE       the small tensor (default 4K)\n"
      "  --size-large SIZE       the large tensor (default 1G; e.g. 64M for a quick run)\n"
      "  --chunk SIZE            gRPC Put data chunk (default 1M; must stay under the\n"
      "                          server's 4 MiB message limit)\n"
      "  --pin-cpu N             pin the bench (and its child processes) to CPU N\n"
      "  --pin-daemon-cpu M      pin the daemon we start to CPU M (default: same as\n"
      "                          --pin-cpu; -1: leave it unpinned)\n"
      "  --json                  also print all figures as one JSON object at the end\n",
      argv0, TENSORBROKERD_PATH);
}

namespace {

// The flags with a value: each takes its text, every occurrence in order (the last wins), and
// converts it after the parse with the bench's own messages.
struct TextFlag {
  const char* flag;
  std::string Options::*field;
};
struct IntFlag {
  const char* flag;
  int Options::*field;
};
struct SizeFlag {
  const char* flag;
  uint64_t Options::*field;
};
const TextFlag kTextFlags[] = {
    {"--socket", &Options::socket},
    {"--daemon", &Options::daemon},
    {"--capacity", &Options::capacity},
    {"--child-read", &Options::child_read},
    {"--child-cycles", &Options::child_cycles},
    {"--python", &Options::python},
};
const IntFlag kIntFlags[] = {
    {"--iterations", &Options::iterations},
    {"--warmup", &Options::warmup},
    {"--large-iterations", &Options::large_iterations},
    {"--large-warmup", &Options::large_warmup},
    {"--pin-cpu", &Options::pin_cpu},
    {"--pin-daemon-cpu", &Options::pin_daemon_cpu},
};
const SizeFlag kSizeFlags[] = {
    {"--size-small", &Options::size_small},
    {"--size-large", &Options::size_large},
    {"--chunk", &Options::chunk},
};

bool Fail(const std::string& message) {
  std::fprintf(stderr, "%s\n", message.c_str());
  return false;
}

bool ToInt(const char* flag, const std::string& s, int* out) {
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (end == s.c_str() || *end != '\0') {
    return Fail(std::string(flag) + ": not an integer: '" + s + "'");
  }
  *out = static_cast<int>(v);
  return true;
}

bool ToSize(const char* flag, const std::string& s, uint64_t* out) {
  // The project's size syntax; the bench additionally refuses 0.
  auto v = ParseByteSize(s, flag);
  if (!v.ok() || *v == 0) return Fail(std::string(flag) + ": not a byte size: '" + s + "'");
  *out = *v;
  return true;
}

// The raw texts of every value flag, by flag, as CLI11 fills them in.
using RawValues = std::map<std::string, std::vector<std::string>>;

void AddValueFlag(CLI::App& app, const char* flag, RawValues& raw) {
  app.add_option(flag, raw[flag])
      ->type_name("a value")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

bool Convert(const RawValues& raw, Options* opt) {
  for (const TextFlag& f : kTextFlags) {
    for (const std::string& v : raw.at(f.flag)) opt->*f.field = v;
  }
  for (const IntFlag& f : kIntFlags) {
    for (const std::string& v : raw.at(f.flag)) {
      if (!ToInt(f.flag, v, &(opt->*f.field))) return false;
    }
  }
  for (const SizeFlag& f : kSizeFlags) {
    for (const std::string& v : raw.at(f.flag)) {
      if (!ToSize(f.flag, v, &(opt->*f.field))) return false;
    }
  }
  return true;
}

}  // namespace

bool ParseArgs(int argc, char** argv, Options* opt) {
  CLI::App app;
  app.set_help_flag();  // Usage() is the help
  app.allow_extras();
  RawValues raw;
  for (const TextFlag& f : kTextFlags) AddValueFlag(app, f.flag, raw);
  for (const IntFlag& f : kIntFlags) AddValueFlag(app, f.flag, raw);
  for (const SizeFlag& f : kSizeFlags) AddValueFlag(app, f.flag, raw);
  bool help = false;
  bool no_python = false;
  app.add_flag("-h,--help", help);
  app.add_flag("--json", opt->json);
  app.add_flag("--no-python", no_python);
  absl::StatusOr<std::vector<std::string>> extra =
      ParseWithCli11(app, std::vector<std::string>(argv, argv + argc));
  if (!extra.ok()) return Fail(std::string(extra.status().message()));
  if (help) {
    Usage(argv[0]);
    std::exit(0);
  }
  if (!extra->empty()) return Fail("unknown flag '" + extra->front() + "' (see --help)");
  if (!Convert(raw, opt)) return false;
  if (no_python) opt->python_bench.clear();
  if (opt->iterations < 1 || opt->large_iterations < 1) {
    return Fail("--iterations and --large-iterations must be >= 1");
  }
  if (opt->warmup < 0) opt->warmup = opt->iterations / 10;
  if (opt->large_warmup < 0) opt->large_warmup = 0;
  if (opt->pin_daemon_cpu == -2) opt->pin_daemon_cpu = opt->pin_cpu;
  return true;
}

}  // namespace tensorbroker::bench
