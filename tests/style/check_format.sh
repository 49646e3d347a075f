#!/usr/bin/env bash
# Fails when a C++ source of the tree is not as .clang-format lays it out, naming each such
# file and showing the first lines clang-format would change. Fix: the command it prints.
#   tests/style/check_format.sh [CLANG_FORMAT]     (default: clang-format-14)
set -euo pipefail
cd "$(dirname "$0")/../.."
clang_format=${1:-clang-format-14}

# The tracked sources when this is a git checkout, else every source outside build trees.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files -- '*.cc' '*.h' '*.cu')
else
  mapfile -t files < <(find . -path './build*' -prune -o \
    \( -name '*.cc' -o -name '*.h' -o -name '*.cu' \) -type f -print | sed 's|^\./||' | sort)
fi
[ "${#files[@]}" -gt 0 ] || { echo "check_format: no C++ sources found" >&2; exit 1; }

# One clang-format for the whole tree: it exits non-zero if any file would change.
if "$clang_format" --style=file --dry-run --Werror "${files[@]}" 2>/dev/null; then
  echo "check_format: ${#files[@]} files formatted as .clang-format says"
  exit 0
fi
unformatted=()
for file in "${files[@]}"; do
  "$clang_format" --style=file "$file" | cmp -s - "$file" && continue
  unformatted+=("$file")
  "$clang_format" --style=file "$file" | diff -u --label "$file" --label "$file (formatted)" \
    "$file" - | head -n 20 || true
done
echo "check_format: ${#unformatted[@]} of ${#files[@]} files are not formatted:" \
     "${unformatted[*]}" >&2
echo "check_format: fix with: $clang_format -i ${unformatted[*]}" >&2
exit 1
