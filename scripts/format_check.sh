#!/usr/bin/env bash
# Fails when a C++ file in git differs from the repository's .clang-format (Debian's
# clang-format-14: Google style, includes sorted in their blocks) or a BUILD file's label lists
# are out of order (scripts/build_order.py). With --fix, formats them in place instead.
set -uo pipefail
cd "$(dirname "$0")/.."
format=$(command -v clang-format-14 || command -v clang-format) || {
  echo "format: clang-format is not installed (scripts/setup.sh installs it)" >&2
  exit 1
}
mapfile -t files < <(git ls-files '*.cc' '*.h')
if [[ "${1:-}" == --fix ]]; then
  "$format" -i "${files[@]}"
  exec scripts/build_order.py --fix
fi
scripts/build_order.py --check || exit 1
bad=()
for f in "${files[@]}"; do
  "$format" "$f" | cmp -s - "$f" || bad+=("$f")
done
if [[ ${#bad[@]} -gt 0 ]]; then
  echo "format: ${#bad[@]} file(s) differ from .clang-format (fix: scripts/format_check.sh --fix):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "format: ${#files[@]} C++ files follow .clang-format; BUILD label lists in order"
