#include "exchange/round_uploader.h"

#include <utility>

namespace localsgd {

RoundUploader::RoundUploader(SyncStream* stream, grpc::ClientContext* context)
    : stream_(stream), context_(context), thread_([this] { Run(); }) {}

RoundUploader::~RoundUploader() { Stop(); }

void RoundUploader::OnFailure(const absl::Status& status) {
  {
    MutexLock lock(&mu_);
    if (failure_.ok()) failure_ = status;
  }
  context_->TryCancel();
}

void RoundUploader::Deliver(std::vector<DigestPair> range_digests) {
  MutexLock lock(&mu_);
  deliver_ = std::move(range_digests);
}

void RoundUploader::Unreachable(const std::string& peer_id, const absl::Status& why) {
  auto message = std::make_shared<v1::SyncRequest>();
  message->mutable_unreachable()->set_owner_id(peer_id);
  message->mutable_unreachable()->set_reason(why.ToString());
  MutexLock lock(&mu_);
  reports_.push_back(std::move(message));
}

void RoundUploader::Stop() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

absl::Status RoundUploader::failure() {
  MutexLock lock(&mu_);
  return failure_;
}

void RoundUploader::Run() {
  v1::SyncRequest request;
  while (true) {
    std::optional<std::vector<DigestPair>> deliver;
    {
      MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](RoundUploader* u) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return u->stop_ || u->deliver_.has_value() || !u->reports_.empty();
          },
          this));
      if (stop_) return;
      if (!reports_.empty()) {
        request = *reports_.front();
        reports_.pop_front();
      } else {
        deliver = std::move(deliver_);
        deliver_.reset();
      }
    }
    if (deliver.has_value()) {
      request.Clear();
      for (const DigestPair& range : *deliver) {
        request.mutable_delivered()->add_range_digests(range.with_momentum);
        request.mutable_delivered()->add_value_digests(range.values);
      }
    }                                      // else: a report, copied above
    if (!stream_->Write(request)) return;  // the stream ended: the reader sees why
  }
}

}  // namespace localsgd
