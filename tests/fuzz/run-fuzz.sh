#!/bin/sh
# Builds the libFuzzer targets (tests/fuzz) in build-fuzz/ with clang, ASan and UBSan, and runs
# `ctest -L fuzz`: every seed and regression input once, then each target for
# TENSORBROKER_FUZZ_SECONDS (default 20) seconds. Exits non-zero when a target crashes or breaks
# an invariant; the input is then in build-fuzz/tests/fuzz/<target>/artifacts/ (README.md).
#   tests/fuzz/run-fuzz.sh
#   TENSORBROKER_FUZZ_SECONDS=120 tests/fuzz/run-fuzz.sh
# Builds only the fuzz programs and the libraries they link (not the daemon, the CLI or the
# Python extension), CPU only.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${TENSORBROKER_FUZZ_BUILD:-$root/build-fuzz}
seconds=${TENSORBROKER_FUZZ_SECONDS:-20}

bash "$root/deploy/install-deps.sh" --with-fuzz
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja \
  -DTENSORBROKER_FUZZ=ON -DTENSORBROKER_BUILD_TESTS=OFF -DTENSORBROKER_BUILD_BENCH=OFF \
  -DTENSORBROKER_CUDA=OFF -DTENSORBROKER_FUZZ_SECONDS="$seconds" >/dev/null
cmake --build "$build" --target fuzz_targets

status=0
ctest --test-dir "$build" -L fuzz --output-on-failure --parallel "$(nproc)" || status=$?

# Per target: how many inputs the timed run executed and the coverage it reached.
echo
echo "fuzz summary (${seconds} s per target):"
awk '
  / Testing: fuzz\..*\.run/ { split($0, a, "Testing: "); name = a[2] }
  name != "" && /^Done [0-9]+ runs/ { runs[name] = $2 }
  name != "" && /^#[0-9]+/ && / cov: / {
    for (i = 1; i <= NF; ++i) if ($i == "cov:") cov[name] = $(i + 1)
  }
  END { for (n in runs) printf "  %-32s %12d runs  cov %s\n", n, runs[n], cov[n] }
' "$build/Testing/Temporary/LastTest.log" | sort
exit "$status"
