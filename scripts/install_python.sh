#!/usr/bin/env bash
# Installs the Python package `localsgd` (python/, docs/python.md): builds its native module
# and copies the package into an interpreter's site-packages (the user's own when that is not
# writable). Both README commands run it, for Debian's python3 (the one with python3-torch, the
# same LibTorch as the C++ side) and, when another python3 of the same version comes first on
# PATH, for that one too: it then finds Debian's torch through a .pth file.
#
# Usage: scripts/install_python.sh [-c opt|fastbuild] [PYTHON...]
#   PYTHON: interpreters to install for (default: as above); e.g. a virtual environment's
#   bin/python made with --system-site-packages from Debian's python3.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=opt
if [[ ${1:-} == -c ]]; then
  mode=$2
  shift 2
fi
torch_python="${LOCALSGD_PYTHON:-/usr/bin/python3}"
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  targets=("$torch_python")
  first=$(command -v python3 || true)
  if [[ -n $first && $(readlink -f "$first") != $(readlink -f "$torch_python") ]]; then
    targets+=("$first")
  fi
fi

bazel build -c "$mode" //python:localsgd 2>&1 | tail -n 1
module="$(bazel info -c "$mode" bazel-bin 2>/dev/null)/python/localsgd/_C.so"
tag() { "$1" -c 'import sys; print(sys.implementation.cache_tag)'; }
torch_tag=$(tag "$torch_python")
torch_parent=$("$torch_python" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')

for python in "${targets[@]}"; do
  if [[ $(tag "$python") != "$torch_tag" ]]; then
    echo "install_python: skipping $python: not $torch_tag like $torch_python" >&2
    continue
  fi
  site=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  if ! mkdir -p "$site" 2>/dev/null || [[ ! -w $site ]]; then
    site=$("$python" -m site --user-site)
    mkdir -p "$site"
  fi
  rm -rf "$site/localsgd"
  mkdir -p "$site/localsgd"
  cp python/localsgd/*.py "$site/localsgd/"
  cp "$module" "$site/localsgd/_C.so"
  chmod u+w "$site/localsgd/_C.so"
  rm -f "$site/localsgd-torch.pth"
  if ! "$python" -c 'import torch' 2>/dev/null; then
    echo "$torch_parent" > "$site/localsgd-torch.pth"  # Debian's torch, for this interpreter
  fi
  "$python" -c 'import localsgd' || { echo "install_python: import failed for $python" >&2; exit 1; }
  echo "install_python: localsgd installed for $python in $site"
done
