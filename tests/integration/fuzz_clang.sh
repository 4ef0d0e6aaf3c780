# Sourced by the fuzz scripts: sets $clang to a clang++ that links -fsanitize=fuzzer (probed in
# $work), or exits 77 (skipped) with what to install. Needs $work.
clang=$(command -v clang++-14 || command -v clang++ || true)
if [ -z "$clang" ]; then
  echo "SKIPPED: no clang++ (the fuzz target needs clang's libFuzzer: apt-get install clang libclang-rt-14-dev)"
  exit 77
fi
mkdir -p "$work"
if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' |
     "$clang" -x c++ -fsanitize=fuzzer - -o "$work/probe" 2>/dev/null; then
  echo "SKIPPED: $clang cannot link -fsanitize=fuzzer (install libclang-rt-14-dev)"
  exit 77
fi

# run_fuzzer BINARY MAX_LEN WHAT: runs $work/BINARY for $seconds from $work/corpus and
# $work/seeds; exits 1 naming WHAT ("a crash", "a crash or a broken contract") when it fails.
run_fuzzer() {
  echo "seeds: $(ls "$work/seeds" | wc -l) files; fuzzing for $seconds s"
  (cd "$work" && "./$1" -max_total_time="$seconds" -max_len="$2" -rss_limit_mb=2048 -timeout=20 \
    -print_final_stats=1 corpus seeds 2>&1 | tail -25; exit "${PIPESTATUS[0]}") || {
    echo "FAILED: the fuzzer found $3 (exit $?); the input is in $work (crash-*, leak-*, timeout-*)"
    exit 1
  }
  echo "no crash in $seconds s"
}
