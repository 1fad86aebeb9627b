// NCCL intra-node averaging; compiled only with --config=cuda (see worker/BUILD.bazel).
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "worker/intra_node_averager.h"

namespace localsgd {
namespace {

absl::Status CudaError(cudaError_t e, const char* what) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

absl::Status NcclError(ncclResult_t r, const char* what) {
  return absl::InternalError(absl::StrCat(what, ": ", ncclGetErrorString(r)));
}

class Nccl : public IntraNodeAverager {
 public:
  Nccl(ncclComm_t comm, cudaStream_t stream, int device, int rank, int size,
       std::function<bool()> peers_alive)
      : comm_(comm),
        stream_(stream),
        device_(device),
        rank_(rank),
        size_(size),
        peers_alive_(std::move(peers_alive)) {}
  ~Nccl() override {
    if (!aborted_) ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  absl::Status AllReduceMean(at::Tensor& flat) override {
    return Run(flat, [&](float* data, size_t n) {
      return ncclAllReduce(data, data, n, ncclFloat, ncclAvg, comm_, stream_);
    });
  }

  absl::Status Broadcast(at::Tensor& flat) override {
    return Run(flat, [&](float* data, size_t n) {
      return ncclBroadcast(data, data, n, ncclFloat, /*root=*/0, comm_, stream_);
    });
  }

 private:
  template <typename Op>
  absl::Status Run(at::Tensor& flat, Op op) {
    if (aborted_) return absl::UnavailableError("the NCCL communicator was aborted");
    if (!flat.is_cuda() || flat.get_device() != device_ || !flat.is_contiguous()) {
      return absl::InvalidArgumentError(
          absl::StrCat("NCCL needs a contiguous tensor on cuda:", device_));
    }
    if (cudaError_t e = cudaSetDevice(device_); e != cudaSuccess)
      return CudaError(e, "cudaSetDevice");
    // LibTorch's kernels that produced the tensor ran on its own stream: wait for them.
    if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) return CudaError(e, "sync");
    if (ncclResult_t r = op(flat.data_ptr<float>(), static_cast<size_t>(flat.numel()));
        r != ncclSuccess) {
      return NcclError(r, "NCCL collective");
    }
    return Wait();
  }

  // Waits for the collective; a peer that died makes NCCL wait forever, so this polls.
  absl::Status Wait() {
    absl::Time next_check = absl::Now() + absl::Milliseconds(100);
    while (true) {
      const cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) return absl::OkStatus();
      if (e != cudaErrorNotReady) return CudaError(e, "NCCL stream");
      if (absl::Now() >= next_check) {
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(comm_, &async);
        if (async != ncclSuccess) return Abort(ncclGetErrorString(async));
        if (!peers_alive_()) return Abort("a rank of the node died");
        next_check = absl::Now() + absl::Milliseconds(100);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  absl::Status Abort(absl::string_view why) {
    ncclCommAbort(comm_);
    aborted_ = true;
    return absl::UnavailableError(absl::StrCat("NCCL collective aborted: ", why));
  }

  ncclComm_t comm_;
  cudaStream_t stream_;
  const int device_;
  const int rank_;
  const int size_;
  const std::function<bool()> peers_alive_;
  bool aborted_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<IntraNodeAverager>> MakeNcclAverager(
    const std::string& store_path, int rank, int size, int device, absl::Duration timeout,
    std::function<bool()> peers_alive) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || device < 0 || device >= devices) {
    return absl::FailedPreconditionError(
        absl::StrCat("--device: cuda:", device, " does not exist (", devices, " CUDA devices)"));
  }
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) return CudaError(e, "cudaSetDevice");
  ncclUniqueId id;
  try {
    c10d::FileStore store(store_path + ".nccl", size);
    store.setTimeout(std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)));
    if (rank == 0) {
      if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
        return NcclError(r, "ncclGetUniqueId");
      }
      store.set("nccl_unique_id",
                std::vector<uint8_t>(reinterpret_cast<uint8_t*>(&id),
                                     reinterpret_cast<uint8_t*>(&id) + sizeof(id)));
    } else {
      std::vector<uint8_t> bytes = store.get("nccl_unique_id");
      if (bytes.size() != sizeof(id)) return absl::InternalError("bad NCCL unique id");
      std::memcpy(&id, bytes.data(), sizeof(id));
    }
  } catch (const c10::Error& e) {
    return absl::UnavailableError(
        absl::StrCat("NCCL rendezvous through ", store_path, ": ", e.what_without_backtrace()));
  }
  ncclComm_t comm;
  if (ncclResult_t r = ncclCommInitRank(&comm, size, id, rank); r != ncclSuccess) {
    if (r == ncclInvalidUsage) {
      // Seen on one GPU shared by two ranks: NCCL wants a device per rank.
      return absl::FailedPreconditionError(absl::StrCat(
          "ncclCommInitRank: ", ncclGetErrorString(r), " (do two ranks of this node use cuda:",
          device, "? every rank needs a GPU of its own: --device=cuda:<local_rank>)"));
    }
    return NcclError(r, "ncclCommInitRank");
  }
  cudaStream_t stream;
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); e != cudaSuccess) {
    ncclCommDestroy(comm);
    return CudaError(e, "cudaStreamCreate");
  }
  return std::unique_ptr<IntraNodeAverager>(
      new Nccl(comm, stream, device, rank, size, std::move(peers_alive)));
}

}  // namespace localsgd
