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
