#!/usr/bin/env bash
# A bad ATTNSCOPE_* value stops the program at start-up, before any training work, with the
# variable, the value and what is allowed; an unknown name only warns.
set -euo pipefail
example="$1"

expect_error() {  # VAR VALUE EXPECTED-MESSAGE
  local rc=0 err
  err=$(env "$1=$2" "$example" --layers 1 --steps 3 --d-model 16 --heads 2 --seq 8 --batch 2 2>&1 >/dev/null) || rc=$?
  if [ "$rc" -ne 2 ]; then echo "$1=$2: exit $rc, expected 2"; exit 1; fi
  if [ "$err" != "train_transformer: $3" ]; then
    printf '%s=%s:\n  got:      %s\n  expected: %s\n' "$1" "$2" "$err" "train_transformer: $3"; exit 1
  fi
}
expect_error ATTNSCOPE_SAMPLE_EVERY abc 'ATTNSCOPE_SAMPLE_EVERY="abc" is not an integer; allowed: an integer from 1 to 1000000'
expect_error ATTNSCOPE_SAMPLE_EVERY 0 'ATTNSCOPE_SAMPLE_EVERY="0" is out of range; allowed: an integer from 1 to 1000000'
expect_error ATTNSCOPE_LOG_LEVEL loud 'ATTNSCOPE_LOG_LEVEL="loud" is not a log level; allowed: one of off, error, warn, info, debug'
expect_error ATTNSCOPE_ENABLE maybe 'ATTNSCOPE_ENABLE="maybe" is not a boolean; allowed: one of 1, 0, true, false, on, off, yes, no'
expect_error ATTNSCOPE_SUMMARY_JSON /nonexistent-dir/s.json 'ATTNSCOPE_SUMMARY_JSON="/nonexistent-dir/s.json" is in a directory that does not exist (/nonexistent-dir); allowed: a file path in an existing, writable directory ({rank} expands to the rank)'

# No training output before the error: the check runs before the model is built.
out=$(ATTNSCOPE_INTERVAL_S=-1 "$example" --layers 1 --steps 3 2>/dev/null || true)
[ -z "$out" ] || { echo "training ran before the configuration error: $out"; exit 1; }

# Unknown names warn and the run goes on.
err=$(ATTNSCOPE_SAMPLE_EVRY=2 ATTNSCOPE_LOG_LEVEL=warn "$example" --layers 1 --steps 2 --d-model 16 --heads 2 --seq 8 --batch 2 --quiet 2>&1)
echo "$err" | grep -q 'unknown variable ATTNSCOPE_SAMPLE_EVRY is ignored (did you mean ATTNSCOPE_SAMPLE_EVERY?)' \
  || { echo "no warning for an unknown name: $err"; exit 1; }
echo "bad configuration handled"
