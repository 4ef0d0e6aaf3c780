#!/bin/bash
# Builds the metrics endpoint's libFuzzer target (exporters/fuzz/MetricsEndpointFuzz.cpp: the
# request handling libmicrohttpd hands over) with clang (ASan + UBSan) and runs it for a while from a
# seed corpus of real requests. Usage: fuzz_metrics_endpoint.sh SOURCE_DIR WORK_DIR SECONDS
# Exit 77 (skipped) when clang or its libFuzzer runtime is not installed.
set -euo pipefail
src=$1 work=$2 seconds=${3:-30}
source "$(dirname "$0")/fuzz_clang.sh"  # $clang, or exit 77
echo "building the fuzz target with $clang"
"$clang" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$src/core/include" -I"$src/exporters/include" -I"$src/exporters/src" \
  "$src/exporters/fuzz/MetricsEndpointFuzz.cpp" "$src/exporters/src/MetricsEndpoint.cpp" \
  "$src/exporters/src/MetricsSnapshot.cpp" "$src/core/src/Config.cpp" "$src/core/src/Log.cpp" \
  -lprometheus-cpp-core -lpthread -o "$work/metrics_endpoint_fuzz"
rm -rf "$work/seeds" "$work/corpus"
mkdir -p "$work/seeds" "$work/corpus"
seed() { printf '%s' "$2" > "$work/seeds/$1"; }
seed scrape $'GET\n/metrics\n\n\n'
seed head $'HEAD\n/metrics?x=1\n\n\n'
seed basic $'GET\n/metrics\nBasic cHJvbTpzM2NyZXQ=\nc\n'
seed basic-wrong $'GET\n/metrics\nBasic cHJvbTp3cm9uZw==\nc\n'
seed root $'GET\n/\n\nct\n'
seed outside $'GET\n/../etc/passwd\n\n\n'
seed pause $'POST\n/control\nBearer tok\nt\naction=pause'
seed query $'POST\n/control?sample_every=8\nBearer tok\nt\naction=resume'
seed state $'GET\n/control\nBearer tok\nt\n'
seed bad-value $'POST\n/control\nBearer tok\nt\nsample_every=0'
seed no-token $'POST\n/control\n\nt\naction=pause'
seed delete $'DELETE\n/control\nBearer tok\nt\n'
seed too-large $'POST\n/control\nBearer tok\ntL\n'
seed headers $'GET\n/metrics\n\nH\n'
seed layers $'POST\n/control\nBearer tok\nt\nlayers=on'
seed layers-rank $'POST\n/control?layers=off\nBearer tok\ntr\nlayers=on'
seed job-on-rank $'POST\n/control\nBearer tok\ntr\naction=pause'
run_fuzzer metrics_endpoint_fuzz 8192 "a crash or a broken contract"
