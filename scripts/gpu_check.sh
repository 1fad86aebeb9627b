#!/usr/bin/env bash
# GPU check for a machine that has a GPU and a CUDA-enabled PyTorch but no Bazel and none of
# Debian's C++ libraries (e.g. a lent accelerator machine).
#
#   scripts/gpu_check.sh pack DIR   here, after `bazel build //coordinator:all //worker`:
#                                   copies Debian's absl/gRPC/protobuf/gtest/zlib/Gloo headers
#                                   and libraries, the generated protos, the coordinator
#                                   binaries and the worker's source list (from `bazel query`)
#                                   into DIR (about 40 MB)
#   scripts/gpu_check.sh run DIR    there, from the repository root: builds the worker and
#                                   worker/nccl_averager_test with g++ against PyTorch's
#                                   LibTorch, CUDA and NCCL, runs the test, then a real run
#                                   (coordinator + 2 nodes x 1 rank on cuda:0, the built-in CNN,
#                                   then the same with overlapped rounds) and 2 ranks on one
#                                   GPU (NCCL refuses that: a clear error is expected). Logs
#                                   go to $OUT (or DIR/out).
set -uo pipefail
mode=${1:-}
dir=${2:-}
[[ ( "$mode" == pack || "$mode" == run ) && -n "$dir" ]] || {
  sed -n '2,16p' "$0" >&2
  exit 2
}

if [[ "$mode" == pack ]]; then
  set -e
  rm -rf "$dir"
  mkdir -p "$dir/include/google" "$dir/gloo" "$dir/lib" "$dir/gen/proto/localsgd/v1" "$dir/bin"
  cp -r /usr/include/{absl,grpc,grpcpp,grpc++,gtest} "$dir/include/"
  cp -r /usr/include/gloo "$dir/gloo/"
  cp -r /usr/include/google/protobuf "$dir/include/google/"
  cp /usr/include/zlib.h /usr/include/zconf.h "$dir/include/"
  cp bazel-bin/proto/localsgd/v1/*.pb.{h,cc} "$dir/gen/proto/localsgd/v1/"
  ldd bazel-bin/coordinator/coordinator | awk '$3 ~ /^\// {print $3}' \
    | grep -v -e libstdc -e 'libm\.' -e 'libc\.' -e ld-linux -e libgcc | xargs -I{} cp -L {} "$dir/lib/"
  cp /usr/lib/x86_64-linux-gnu/libgtest.a /usr/lib/x86_64-linux-gnu/libgtest_main.a "$dir/lib/"
  cp -L bazel-bin/coordinator/coordinator bazel-bin/coordinator/localsgdctl "$dir/bin/"
  # The worker's own sources, as Bazel knows them: every branch of its selects appears, so the
  # CPU-only stand-in of the NCCL averager is left out (this build has CUDA).
  bazel query 'kind("source file", deps(//worker:worker))' 2>/dev/null \
    | sed -n 's#^//\([a-z_/]*\):\([a-z_]*\.cc\)$#\1/\2#p' | grep -v '_unavailable\.cc$' \
    > "$dir/sources.txt"
  grep -q '^worker/nccl_averager.cc$' "$dir/sources.txt" || { echo "no sources from bazel query"; exit 1; }
  du -sh "$dir"
  exit 0
fi

out=${OUT:-$dir/out}
mkdir -p "$out"
exec > >(tee "$out/gpu_check.log") 2>&1
dir=$(cd "$dir" && pwd)
nvidia-smi -L
g++ --version | head -1
torch_dir=${TORCH_DIR:-$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')}
abi=${ABI:-$(python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')}
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
echo "LibTorch $torch_dir, C++11 ABI $abi"
cuda=/usr/local/cuda
find_nccl() {  # file name pattern; LibTorch's own nccl.h (a wrapper) is not it
  find -L "$torch_dir/.." /usr/local/cuda /usr/include /usr/lib -path '*/torch/*' -prune \
    -o -name "$1" -print 2>/dev/null | head -1
}
nccl_h=$(find_nccl nccl.h)
nccl_so=$(find_nccl 'libnccl.so*')
echo "nccl.h $nccl_h; $nccl_so"
[[ -n "$nccl_h" && -n "$nccl_so" ]] || { echo "FAIL: no NCCL"; exit 1; }
gloo_inc=()  # PyTorch's own Gloo headers when it ships them, else Debian's
[[ -d "$torch_dir/include/gloo" ]] || gloo_inc=(-isystem "$dir/gloo")

build=$(mktemp -d)
# Debian's headers first: PyTorch ships an older protobuf's headers in its include folder.
flags=(-std=c++17 -O2 -fPIC -D_GLIBCXX_USE_CXX11_ABI="$abi" -DUSE_C10D_GLOO -I. -I"$dir/gen"
       -isystem "$dir/include" -isystem "$torch_dir/include"
       -isystem "$torch_dir/include/torch/csrc/api/include" "${gloo_inc[@]}"
       -isystem "$cuda/include")
# nccl.h beside the system headers needs no flag (-isystem /usr/include breaks #include_next).
[[ "$(dirname "$nccl_h")" == /usr/include ]] || flags+=(-isystem "$(dirname "$nccl_h")")
mapfile -t sources < "$dir/sources.txt"
sources+=("$dir"/gen/proto/localsgd/v1/*.pb.cc worker/nccl_averager_test.cc)
# PyTorch 2.x may need C++20; try C++17 first on one LibTorch file.
if ! g++ "${flags[@]}" -fsyntax-only worker/local_sgd.cc 2>"$build/probe.err"; then
  echo "C++17 failed on LibTorch's headers ($(grep -m1 error "$build/probe.err")); trying C++20"
  flags[0]=-std=c++20
fi
export build CXXFLAGS_STR="${flags[*]}"
start=$(date +%s)
printf '%s\n' "${sources[@]}" | xargs -P "${JOBS:-$(nproc)}" -n 1 bash -c \
  'f="$build/$(echo "$0" | tr / _)"; g++ $CXXFLAGS_STR -c "$0" -o "$f.o" 2>"$f.err" \
     || { echo "FAIL: compiling $0"; grep -m5 -A3 error "$f.err"; }'
echo "compiled in $(( $(date +%s) - start )) s"
o() { for s in "$@"; do echo "$build/$(echo "$s" | tr / _).o"; done; }
libs=("$dir"/lib/*.so* -L"$torch_dir/lib" -Wl,-rpath,"$torch_dir/lib")
for l in torch torch_cpu torch_cuda c10 c10_cuda; do
  [[ -e "$torch_dir/lib/lib$l.so" ]] && libs+=(-l"$l")
done
libs+=(-L"$cuda/lib64" -lcudart "$nccl_so" -lpthread)
export LD_LIBRARY_PATH="$dir/lib:$(dirname "$nccl_so"):$cuda/lib64:${LD_LIBRARY_PATH:-}"
g++ -o "$build/nccl_averager_test" $(o worker/nccl_averager_test.cc worker/nccl_averager.cc) \
  "$dir/lib/libgtest_main.a" "$dir/lib/libgtest.a" "${libs[@]}" \
  && (cd "$build" && TEST_TMPDIR="$build" ./nccl_averager_test) || echo "FAIL: nccl_averager_test"
worker_sources=()
for s in "${sources[@]}"; do [[ "$s" == *_test.cc ]] || worker_sources+=("$s"); done
g++ -o "$build/worker" $(o "${worker_sources[@]}") "${libs[@]}" || { echo "FAIL: linking the worker"; exit 1; }

work=$(mktemp -d)
echo -n gpu-check-token > "$work/token"
"$dir/bin/coordinator" --grpc_address=127.0.0.1:0 --http_address=127.0.0.1:0 \
  --token_file="$work/token" >"$work/coord.out" 2>"$out/coordinator.log" &
coord=$!
for _ in $(seq 1 100); do grep -q '^http listening' "$work/coord.out" && break; sleep 0.1; done
grpc=$(sed -n 's/^grpc listening on //p' "$work/coord.out")
ctl() { "$dir/bin/localsgdctl" --coordinator="$grpc" --token_file="$work/token" "$@"; }
worker() {  # node name, node rank, local rank, local world size, device, log name
  "$build/worker" --coordinator="$grpc" --token_file="$work/token" --node_name="$1" \
    --node_rank="$2" --num_nodes=2 --local_rank="$3" --local_world_size="$4" --device="$5" \
    --rendezvous_dir="$work" --log_every=100 >"$out/$6.out" 2>"$out/$6.err"
}
run_spec() {  # min_workers [overlap_steps]
  cat > "$work/spec.textproto" <<SPEC
model { builtin: "cnn" }
dataset { synthetic_samples: 16384 }
local_sgd_steps: 8
total_steps: 400
batch_size: 64
min_workers: $1
round_deadline_seconds: 30
optimizer { lr: 0.05 momentum: 0.9 }
overlap_steps: ${2:-0}
SPEC
  ctl start --spec="$work/spec.textproto"
}
echo "== 2 nodes x 1 rank on cuda:0"
worker gpu-0 0 0 1 cuda:0 gpu-n0 & w0=$!
worker gpu-1 1 0 1 cuda:0 gpu-n1 & w1=$!
run_spec 2
wait $w0; r0=$?
wait $w1; r1=$?
echo "workers exited $r0 $r1"
grep -h " done: " "$out"/gpu-n*.out
ctl status | head -5
echo "== 2 nodes x 1 rank on cuda:0, overlapped rounds (overlap_steps 4 of 8)"
worker gpu-0 0 0 1 cuda:0 overlap-n0 & w0=$!
worker gpu-1 1 0 1 cuda:0 overlap-n1 & w1=$!
run_spec 2 4
wait $w0; r0=$?
wait $w1; r1=$?
echo "workers exited $r0 $r1"
grep -h " done: " "$out"/overlap-n*.out
ctl status | head -5
echo "== 2 ranks of one node on one GPU (NCCL refuses duplicate GPUs)"
worker dup 0 0 2 cuda:0 dup-0 & d0=$!
worker dup 0 1 2 cuda:0 dup-1 & d1=$!
run_spec 2 >/dev/null 2>&1 || true
( sleep 90; kill $d0 $d1 2>/dev/null ) & watchdog=$!
wait $d0; echo "rank 0 exited $?"; wait $d1; echo "rank 1 exited $?"
kill $watchdog 2>/dev/null
tail -n 3 "$out"/dup-*.err
kill $coord
