#!/bin/bash
# Builds the trace reader's libFuzzer target with clang (ASan + UBSan) and runs it for a while
# from a seed corpus of real trace content. Usage: fuzz_trace_reader.sh SOURCE_DIR WORK_DIR SECONDS
# Exit 77 (skipped) when clang or its libFuzzer runtime is not installed.
set -euo pipefail
src=$1 work=$2 seconds=${3:-30}
source "$(dirname "$0")/fuzz_clang.sh"  # $clang, or exit 77
inc=(-I"$src/core/include" -I"$src/exporters/include" -I"$src/analysis/include")
common=("$src/exporters/src/TraceFormat.cpp" "$src/core/src/OpKind.cpp")
echo "building the fuzz target with $clang"
"$clang" -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined "${inc[@]}" \
  "$src/analysis/fuzz/TraceReaderFuzz.cpp" "$src/analysis/src/TraceReader.cpp" "${common[@]}" \
  -lsqlite3 -o "$work/trace_reader_fuzz"
"$clang" -std=c++17 -O1 "${inc[@]}" "$src/analysis/fuzz/MakeSeeds.cpp" "$src/exporters/src/TraceStore.cpp" \
  "${common[@]}" -lsqlite3 -o "$work/make_seeds"
rm -rf "$work/seeds" "$work/corpus"
mkdir -p "$work/seeds" "$work/corpus"
"$work/make_seeds" "$work/seeds"
echo "seeds: $(ls "$work/seeds" | wc -l) files; fuzzing for $seconds s"
cd "$work"
./trace_reader_fuzz -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 -timeout=20 \
  -print_final_stats=1 corpus seeds 2>&1 | tail -25
status=${PIPESTATUS[0]}
if [ "$status" -ne 0 ]; then
  echo "FAILED: the fuzzer found a crash (exit $status); the input is in $work (crash-*, leak-*, timeout-*)"
  exit 1
fi
echo "no crash in $seconds s"
