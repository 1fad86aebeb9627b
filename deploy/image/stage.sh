#!/usr/bin/env bash
# Builds the localsgd binaries and stages them, with the libraries they load that no Debian
# package provides, under DEST (bin/, lib/). deploy/Dockerfile runs it; it runs as well on a
# development machine (after scripts/setup.sh) to try a build argument without Docker.
#
#   deploy/image/stage.sh cpu DEST    Debian's CPU LibTorch (the runtime image installs
#                                     libtorch1.13 from Debian)
#   deploy/image/stage.sh cuda DEST   a CUDA LibTorch and the CUDA toolkit that the builder
#                                     provides as folders (relative to the current folder):
#       LIBTORCH (default third_party/libtorch): an unpacked C++11-ABI LibTorch, e.g.
#                pytorch.org's libtorch-cxx11-abi-shared-with-deps zip for your CUDA, or a
#                CUDA PyTorch wheel's torch/ folder: include/ and lib/ (with libtorch_cuda.so)
#       CUDA     (default third_party/cuda): the CUDA toolkit with NCCL: include/ with
#                cuda_runtime.h and nccl.h, lib64/ with libcudart.so and libnccl.so
#                (e.g. a copy of /usr/local/cuda with NCCL unpacked into it)
#     The worker is built with --config=cuda against them; their shared libraries go to
#     DEST/lib, which the image puts on LD_LIBRARY_PATH.
set -euo pipefail
torch=${1:-}
dest=${2:-}
if [[ "$torch" != cpu && "$torch" != cuda ]] || [[ -z "$dest" ]]; then
  sed -n '2,17p' "$0" >&2
  exit 2
fi
targets=(//coordinator //coordinator:localsgdctl //worker)
mkdir -p "$dest/bin" "$dest/lib"
if [[ "$torch" == cuda ]]; then
  libtorch=$(realpath -m "${LIBTORCH:-third_party/libtorch}")
  cuda=$(realpath -m "${CUDA:-third_party/cuda}")
  [[ -e "$libtorch/lib/libtorch_cuda.so" && -d "$libtorch/include/torch" ]] || {
    echo "stage.sh: LIBTORCH=$libtorch is not a CUDA LibTorch (no include/torch or lib/libtorch_cuda.so)" >&2
    exit 2
  }
  [[ -e "$cuda/include/cuda_runtime.h" && -e "$cuda/include/nccl.h" ]] || {
    echo "stage.sh: CUDA=$cuda has no include/cuda_runtime.h or include/nccl.h (NCCL goes into the toolkit's folder)" >&2
    exit 2
  }
  # WORKSPACE reads the toolkit from /usr/local/cuda: link it there (an image build) unless a
  # toolkit is there already (a development machine), which must then be the one named.
  if [[ ! -e /usr/local/cuda ]]; then
    ln -s "$cuda" /usr/local/cuda
  elif [[ "$(realpath /usr/local/cuda)" != "$cuda" ]]; then
    echo "stage.sh: /usr/local/cuda is another toolkit than CUDA=$cuda; run with CUDA=/usr/local/cuda" >&2
    exit 2
  fi
  LOCALSGD_TORCH_DIR="$libtorch" bazel build -c opt --config=cuda "${targets[@]}"
  cp -a "$libtorch"/lib/*.so* "$dest/lib/"
  cp -a "$cuda"/lib64/libcudart.so* "$cuda"/lib64/libnccl.so* "$dest/lib/"
else
  bazel build -c opt "${targets[@]}"
fi
cp bazel-bin/coordinator/coordinator bazel-bin/coordinator/localsgdctl bazel-bin/worker/worker \
  "$dest/bin/"
cp deploy/bin/launch-ranks "$dest/bin/"
echo "staged the $torch build in $dest"
