#!/usr/bin/env bash
# The folders say what depends on LibTorch and what does not (docs/ARCHITECTURE.md#parts): this
# keeps them true. Three checks, each failing with the file or target that breaks the rule:
#  1. includes: a torch-free folder includes no LibTorch header (torch/, ATen/, c10/, caffe2/)
#     and, of attnscope's parts, only those below it: core <- trace, exporters <- reporter;
#     core, trace <- analysis (the analysis reads traces; it never needs the exporters);
#  2. links: the link closures that tests/style/LinkClosure.cmake wrote at configure time: the
#     trace and the analysis link core and SQLite alone; nothing torch-free links LibTorch;
#  3. the built attnscope-analyze needs no LibTorch, prometheus-cpp or libmicrohttpd at run time.
#   boundaries_check.sh SOURCE_DIR CLOSURE_DIR ATTNSCOPE_ANALYZE
set -euo pipefail
src=$1 closures=$2 analyze=$3
errors=0
fail() {
  echo "boundaries_check: $*" >&2
  errors=$((errors + 1))
}

# 1. Includes. The attnscope parts each torch-free folder may include (its own among them).
declare -A parts=(
  [core]="core"
  [trace]="core trace"
  [exporters]="core exporters"
  [reporter]="core trace exporters reporter"
  [analysis]="core trace analysis")
scanned=0
for folder in "${!parts[@]}"; do
  [ -d "$src/$folder" ] || { fail "$folder/ is missing (the rules above name it)"; continue; }
  while IFS= read -r -d '' file; do
    scanned=$((scanned + 1))
    rel=${file#"$src"/}
    while IFS= read -r hit; do
      fail "$rel:${hit%%:*} includes LibTorch (${hit#*:}): $folder/ is torch-free; such code belongs in plugin/ or collectors/"
    done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"](torch|ATen|c10|caffe2)/' "$file" || true)
    while IFS= read -r hit; do
      [[ $hit =~ [\<\"]attnscope/([A-Za-z_]+)/ ]] && part=${BASH_REMATCH[1]}
      case " ${parts[$folder]} " in
        *" $part "*) ;;
        *) fail "$rel:${hit%%:*} includes attnscope/$part/: $folder/ may include only ${parts[$folder]}" ;;
      esac
    done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]attnscope/[A-Za-z_]+/' "$file" || true)
  done < <(find "$src/$folder" -type f \( -name '*.h' -o -name '*.cpp' \) -print0)
done
[ "$scanned" -gt 0 ] || fail "no C++ files found under $src"

# 2. Links. only TARGET ALLOWED...: every library in TARGET's closure is one of ALLOWED.
only() {
  local target=$1 file="$closures/$1.txt"
  shift
  [ -f "$file" ] || { fail "$file is missing (written at configure time)"; return; }
  while IFS= read -r lib; do
    [ -n "$lib" ] || continue
    case " $* " in
      *" $lib "*) ;;
      *) fail "$target links $lib: it may link only $*" ;;
    esac
  done <"$file"
}
# never TARGET: no LibTorch and no torch-linked part in TARGET's closure.
never_torch() {
  local file="$closures/$1.txt"
  [ -f "$file" ] || { fail "$file is missing (written at configure time)"; return; }
  while IFS= read -r lib; do
    case "$lib" in
      *torch* | *c10* | *caffe2* | attnscope | attnscope_collectors) fail "$1 links $lib: it is torch-free" ;;
    esac
  done <"$file"
}
only attnscope_trace attnscope_core SQLite::SQLite3 Threads::Threads
only attnscope_analysis attnscope_trace attnscope_core SQLite::SQLite3 Threads::Threads
only attnscope-analyze attnscope_analysis attnscope_trace attnscope_core SQLite::SQLite3 Threads::Threads
for target in attnscope_core attnscope_trace attnscope_exporters attnscope_reporter attnscope_analysis; do
  never_torch "$target"
done

# 3. What the analysis tool loads.
if needed=$(ldd "$analyze"); then
  grep -q 'libc\.so' <<<"$needed" || fail "ldd $analyze lists no libc: $needed"
  while IFS= read -r lib; do
    fail "attnscope-analyze loads ${lib%% *}: it must build and run without LibTorch and the exporters"
  done < <(grep -oE '(libtorch|libc10|libprometheus|libmicrohttpd)[^ ]*' <<<"$needed" || true)
else
  fail "ldd $analyze failed"
fi

if [ "$errors" -gt 0 ]; then
  echo "boundaries_check: $errors rule(s) broken (docs/ARCHITECTURE.md#parts says where code goes)" >&2
  exit 1
fi
echo "boundaries_check: $scanned files in ${!parts[*]}, link closures and attnscope-analyze keep the boundaries"
