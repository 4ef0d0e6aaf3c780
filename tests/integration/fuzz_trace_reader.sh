#!/bin/bash
# Builds the trace reader's libFuzzer target with clang (ASan + UBSan) and runs it for a while
# from a seed corpus of real trace content. Usage: fuzz_trace_reader.sh SOURCE_DIR WORK_DIR SECONDS
# Exit 77 (skipped) when clang or its libFuzzer runtime is not installed.
set -euo pipefail
src=$1 work=$2 seconds=${3:-30}
source "$(dirname "$0")/fuzz_clang.sh"  # $clang, or exit 77
inc=(-I"$src/core/include" -I"$src/trace/include" -I"$src/analysis/include")
common=("$src/trace/src/TraceFormat.cpp" "$src/core/src/OpKind.cpp")
echo "building the fuzz target with $clang"
"$clang" -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined "${inc[@]}" \
  "$src/analysis/fuzz/TraceReaderFuzz.cpp" "$src/analysis/src/TraceReader.cpp" "${common[@]}" \
  -lsqlite3 -o "$work/trace_reader_fuzz"
"$clang" -std=c++17 -O1 "${inc[@]}" "$src/analysis/fuzz/MakeSeeds.cpp" "$src/trace/src/TraceStore.cpp" \
  "${common[@]}" -lsqlite3 -o "$work/make_seeds"
rm -rf "$work/seeds" "$work/corpus"
mkdir -p "$work/seeds" "$work/corpus"
"$work/make_seeds" "$work/seeds"
run_fuzzer trace_reader_fuzz 65536 "a crash"
