#include "worker/intra_node_averager.h"

#include <signal.h>
#include <torch/types.h>

#include <algorithm>
#include <chrono>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <vector>

#include "absl/strings/str_cat.h"

namespace localsgd {
namespace {

// The first line of an exception's message (c10 errors append a backtrace).
std::string What(const std::exception& e) {
  const auto* c10 = dynamic_cast<const c10::Error*>(&e);
  std::string what = c10 != nullptr ? c10->what_without_backtrace() : e.what();
  return what.substr(0, what.find('\n'));
}

class SingleRank : public IntraNodeAverager {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  absl::Status AllReduceMean(at::Tensor&) override { return absl::OkStatus(); }
  absl::Status Broadcast(at::Tensor&) override { return absl::OkStatus(); }
};

class Gloo : public IntraNodeAverager {
 public:
  Gloo(c10::intrusive_ptr<c10d::ProcessGroupGloo> group, int rank, int size)
      : group_(std::move(group)), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  absl::Status AllReduceMean(at::Tensor& flat) override {
    if (absl::Status agreed = Agree(kAllReduce, flat.numel()); !agreed.ok()) return agreed;
    try {
      std::vector<at::Tensor> tensors = {flat};
      group_->allreduce(tensors)->wait();
      flat.div_(size_);
    } catch (const std::exception& e) {
      // A peer that died shows as gloo::IoException (not a c10::Error) from wait().
      return absl::UnavailableError(absl::StrCat("intra-node all-reduce failed: ", What(e)));
    }
    return absl::OkStatus();
  }

  absl::Status Broadcast(at::Tensor& flat) override {
    if (absl::Status agreed = Agree(kBroadcast, flat.numel()); !agreed.ok()) return agreed;
    try {
      std::vector<at::Tensor> tensors = {flat};
      c10d::BroadcastOptions options;
      options.rootRank = 0;
      group_->broadcast(tensors, options)->wait();
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("intra-node broadcast failed: ", What(e)));
    }
    return absl::OkStatus();
  }

 private:
  static constexpr int64_t kAllReduce = 1;
  static constexpr int64_t kBroadcast = 2;

  // Every rank says which collective it is about to run, and on how many values, before it
  // runs it (a fixed-size all-reduce, so it always pairs with the others'): ranks out of step
  // (a node re-formed while its ranks were at different steps) get UNAVAILABLE here and re-form
  // again, where Gloo would abort the process on a message of another size.
  absl::Status Agree(int64_t kind, int64_t values) {
    const int64_t mine[4] = {kind, values, -kind, -values};
    at::Tensor header = at::empty({4}, at::kLong);
    std::copy(mine, mine + 4, header.data_ptr<int64_t>());
    try {
      std::vector<at::Tensor> tensors = {header};
      c10d::AllreduceOptions options;
      options.reduceOp = c10d::ReduceOp::MAX;
      group_->allreduce(tensors, options)->wait();
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("intra-node collective failed: ", What(e)));
    }
    // The maxima of x and -x are x's on every rank only when every rank has the same x.
    if (!std::equal(mine, mine + 4, header.data_ptr<int64_t>())) {
      return absl::UnavailableError(absl::StrCat(
          "the node's ranks are at different collectives (this rank: ",
          kind == kAllReduce ? "all-reduce" : "broadcast", " of ", values, " values)"));
    }
    return absl::OkStatus();
  }

  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
  const int rank_;
  const int size_;
};

// Gloo writes to its peers' sockets with writev, which raises SIGPIPE when a peer has died: with
// the default disposition that kills a surviving rank without a word instead of failing its
// collective, which the node survives by re-forming (the likeliest reason rank_death_test under
// ASan once lost a second rank with nothing in its log). So SIGPIPE is ignored, unless the
// program installed its own handler (the library may run in a user's program).
void IgnoreSigpipeUnlessHandled() {
  struct sigaction current = {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
  }
}

}  // namespace

std::unique_ptr<IntraNodeAverager> MakeSingleRankAverager() {
  return std::make_unique<SingleRank>();
}

absl::StatusOr<std::unique_ptr<IntraNodeAverager>> MakeGlooAverager(const std::string& store_path,
                                                                    int rank, int size,
                                                                    absl::Duration timeout) {
  IgnoreSigpipeUnlessHandled();
  try {
    auto store = c10::make_intrusive<c10d::FileStore>(store_path, size);
    auto options = c10d::ProcessGroupGloo::Options::create();
    options->timeout = std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout));
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
    return std::unique_ptr<IntraNodeAverager>(new Gloo(std::move(group), rank, size));
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot form the node's Gloo group through ", store_path, ": ", What(e)));
  }
}

}  // namespace localsgd
