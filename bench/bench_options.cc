#include "bench/bench_options.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/byte_size.h"

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

bool ParseArgs(int argc, char** argv, Options* opt) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    bool has_value = false;
    if (const size_t eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    }
    auto next = [&](std::string* out) {
      if (has_value) {
        *out = value;
        return true;
      }
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", arg.c_str());
        return false;
      }
      *out = argv[++i];
      return true;
    };
    auto next_int = [&](int* out) {
      std::string s;
      if (!next(&s)) return false;
      char* end = nullptr;
      const long v = std::strtol(s.c_str(), &end, 10);
      if (end == s.c_str() || *end != '\0') {
        std::fprintf(stderr, "%s: not an integer: '%s'\n", arg.c_str(), s.c_str());
        return false;
      }
      *out = static_cast<int>(v);
      return true;
    };
    auto next_size = [&](uint64_t* out) {
      std::string s;
      if (!next(&s)) return false;
      // The project's size syntax; the bench additionally refuses 0.
      auto v = ParseByteSize(s, arg);
      if (!v.ok() || *v == 0) {
        std::fprintf(stderr, "%s: not a byte size: '%s'\n", arg.c_str(), s.c_str());
        return false;
      }
      *out = *v;
      return true;
    };
    bool ok = true;
    if (arg == "--help" || arg == "-h") {
      Usage(argv[0]);
      std::exit(0);
    } else if (arg == "--socket") {
      ok = next(&opt->socket);
    } else if (arg == "--daemon") {
      ok = next(&opt->daemon);
    } else if (arg == "--capacity") {
      ok = next(&opt->capacity);
    } else if (arg == "--iterations") {
      ok = next_int(&opt->iterations);
    } else if (arg == "--warmup") {
      ok = next_int(&opt->warmup);
    } else if (arg == "--large-iterations") {
      ok = next_int(&opt->large_iterations);
    } else if (arg == "--large-warmup") {
      ok = next_int(&opt->large_warmup);
    } else if (arg == "--size-small") {
      ok = next_size(&opt->size_small);
    } else if (arg == "--size-large") {
      ok = next_size(&opt->size_large);
    } else if (arg == "--chunk") {
      ok = next_size(&opt->chunk);
    } else if (arg == "--pin-cpu") {
      ok = next_int(&opt->pin_cpu);
    } else if (arg == "--pin-daemon-cpu") {
      ok = next_int(&opt->pin_daemon_cpu);
    } else if (arg == "--json") {
      opt->json = true;
    } else if (arg == "--child-read") {
      ok = next(&opt->child_read);
    } else if (arg == "--child-cycles") {
      ok = next(&opt->child_cycles);
    } else if (arg == "--python") {
      ok = next(&opt->python);
    } else if (arg == "--no-python") {
      opt->python_bench.clear();
    } else {
      std::fprintf(stderr, "unknown flag '%s' (see --help)\n", argv[i]);
      ok = false;
    }
    if (!ok) return false;
  }
  if (opt->iterations < 1 || opt->large_iterations < 1) {
    std::fprintf(stderr, "--iterations and --large-iterations must be >= 1\n");
    return false;
  }
  if (opt->warmup < 0) opt->warmup = opt->iterations / 10;
  if (opt->large_warmup < 0) opt->large_warmup = 0;
  if (opt->pin_daemon_cpu == -2) opt->pin_daemon_cpu = opt->pin_cpu;
  return true;
}

}  // namespace tensorbroker::bench
