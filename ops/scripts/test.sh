#!/usr/bin/env bash
# Build and run the whole test suite: the format and static checks
# (ops/scripts/lint.sh), the release build, then the same tests
# under AddressSanitizer + UndefinedBehaviorSanitizer, the fuzzers' CI run
# (when ops/scripts/fuzz_ci.sh exists), then ThreadSanitizer. Each pass prints
# its time: CI's budget is 30 minutes in all (README, "Sanitizers").
# Usage: ops/scripts/test.sh [--no-lint] [--no-asan] [--no-fuzz] [--no-tsan]
# The build folders are build, build-asan and build-tsan unless
# CONFKV_BUILD, CONFKV_BUILD_ASAN, CONFKV_BUILD_TSAN name others.
set -euo pipefail
cd "$(dirname "$0")/../.."
jobs=$(nproc)
b=${CONFKV_BUILD:-build} ba=${CONFKV_BUILD_ASAN:-build-asan} bt=${CONFKV_BUILD_TSAN:-build-tsan}
asan=1 fuzz=1 tsan=1 lint=1
for a in "$@"; do
  case $a in
    --no-asan) asan=0 ;;
    --no-fuzz) fuzz=0 ;;
    --no-tsan) tsan=0 ;;
    --no-lint) lint=0 ;;
    *) echo "usage: $0 [--no-lint] [--no-asan] [--no-fuzz] [--no-tsan]" >&2; exit 2 ;;
  esac
done
t0=$SECONDS
took() { echo "test.sh: $1 pass: $((SECONDS - t0)) s"; t0=$SECONDS; }

# Format and static checks first: a minute, and they fail fast.
if [ "$lint" = 1 ]; then
  bash ops/scripts/lint.sh
  took lint
fi

cmake -S . -B "$b" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$b" -j"$jobs"
ctest --test-dir "$b" --output-on-failure -j"$jobs"
took release

# The sanitizer builds skip CUDA: nvcc objects are not instrumented.
if [ "$asan" = 1 ]; then
  cmake -S . -B "$ba" -DCMAKE_BUILD_TYPE=Debug -DCONFKV_SANITIZE=ON -DCONFKV_CUDA=OFF >/dev/null
  cmake --build "$ba" -j"$jobs"
  # -LE slow: nothing is labelled slow today (svc_restart runs here too).
  # Not here: the comparisons with llama.cpp's logits and tokens (tok_pre_*)
  # and with jinja2's renderings (byte-for-byte output checks, three quarters
  # of their time in llama.cpp and Python under this build's slow start-up);
  # the code they drive runs under ASan through test_arch, test_jinja,
  # test_chat, test_tok_pre, cli_generate, the vocab suites and the fuzz
  # replays. Nor the operator
  # scripts that time phases of load (svc_tune, svc_tuning, svc_alerts_live:
  # their readers and the tuner run here through test_tuner, test_svc_route,
  # fuzz_prom and svc_reload).
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir "$ba" --output-on-failure -j"$jobs" -LE slow \
    -E '^(llamacpp_.*|tok_pre_.*|jinja_oracle|jinja_render_only|svc_tune|svc_tuning|svc_alerts_live)$'
  took asan
fi

# ---- fuzzing: ops/scripts/fuzz_ci.sh (its own builds), about 5 minutes ----
if [ "$fuzz" = 1 ] && [ -f ops/scripts/fuzz_ci.sh ]; then
  bash ops/scripts/fuzz_ci.sh 15
  took fuzz
fi

# ThreadSanitizer: confkvd's loop thread and engine thread, librdkafka's and
# libuv's threads. The unit tests (test_*), the service's scripts (svc_*) and
# tsan_canary (a race TSan must report: the pass can fail), but not
# svc_restart, svc_reload, svc_redis and svc_scale_out_grace/_eager (hundreds
# of jobs: past their timeouts at TSan's speed; the release and ASan passes
# run them, svc_cache and test_svc_redis cover the Redis tier's threads here,
# svc_scale_out the rebalance paths) nor svc_compose (no code of ours); the
# one-threaded format and tokenizer suites (vocab_*, llamacpp_*, fuzz_*
# replays) have no threads to check. OpenMP teams are one thread in this
# build (tests/CMakeLists.txt: libgomp is not instrumented; the
# OMP_THREAD_LIMIT below covers the tests of tests/'s subfolders too).
# Reports go to files, so that one from a process nobody waits for (a broker
# killed at the end of a script) still fails the pass.
if [ "$tsan" = 1 ]; then
  cmake -S . -B "$bt" -DCMAKE_BUILD_TYPE=Debug -DCONFKV_SANITIZE=thread -DCONFKV_CUDA=OFF >/dev/null
  cmake --build "$bt" -j"$jobs"
  reports=$(mktemp -d)
  rc=0
  OMP_THREAD_LIMIT=1 \
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:log_path=$reports/tsan:suppressions=$PWD/tests/tsan.supp" \
    ctest --test-dir "$bt" --output-on-failure -j"$jobs" \
    -R '^(test_|svc_|tsan_canary$)' -E '^(svc_restart|svc_redis|svc_compose|svc_reload|svc_tune|svc_tuning|svc_alerts_live|svc_scale_out_grace|svc_scale_out_eager)$' || rc=$?
  if [ -n "$(ls -A "$reports")" ]; then
    cat "$reports"/* >&2
    echo "test.sh: ThreadSanitizer reports above" >&2
    rc=1
  fi
  rm -rf "$reports"
  [ "$rc" = 0 ] || exit "$rc"
  took tsan
fi
