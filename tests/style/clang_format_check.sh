#!/usr/bin/env bash
# Every tracked C++ file is formatted with the repository's .clang-format (clang-format 14, which
# launch/install-deps installs; other major versions format some constructs differently).
# Fix a failure with: git ls-files '*.cpp' '*.h' | xargs clang-format -i
#   clang_format_check.sh SOURCE_DIR
set -euo pipefail
cd "$1"
command -v clang-format >/dev/null || { echo "clang_format_check: clang-format is not installed (launch/install-deps)" >&2; exit 1; }
version=$(clang-format --version | sed -n 's/.*version \([0-9]*\)\..*/\1/p')
[ "$version" = 14 ] || { echo "clang_format_check: clang-format $version found; the tree is formatted with 14 (launch/install-deps)" >&2; exit 1; }
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.hpp' '*.cc' '*.cu')
else  # a source tree without git (an unpacked archive): every C++ file outside build trees
  mapfile -t files < <(find . \( -name build -o -name '.venv' -o -name '_skbuild' \) -prune -o \
    -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.hpp' -o -name '*.cc' -o -name '*.cu' \) -print | sort)
fi
[ "${#files[@]}" -gt 0 ] || { echo "clang_format_check: no C++ files found under $1" >&2; exit 1; }
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ "${#bad[@]}" -gt 0 ]; then
  echo "clang_format_check: ${#bad[@]} of ${#files[@]} files differ from .clang-format:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "fix: git ls-files '*.cpp' '*.h' | xargs clang-format -i" >&2
  exit 1
fi
echo "clang_format_check: ${#files[@]} files formatted"
