#include "exchange/checkpointer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/model_store.h"
#include "common/status_macros.h"

namespace localsgd {

Checkpointer::Checkpointer(HeldModel* held, Options options)
    : held_(held),
      options_(std::move(options)),
      cadence_(options_.every_rounds, options_.share),
      thread_([this] { Run(); }) {}

Checkpointer::~Checkpointer() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void Checkpointer::Offer(const std::string& run_id, int64_t round, int64_t global_step) {
  MutexLock lock(&mu_);
  if (offered_.has_value() && offered_->run_id == run_id && offered_->round == round) return;
  if (!offered_.has_value()) cadence_.Begin(round, absl::Now());
  offered_ = Offered{run_id, round, global_step};
  pending_ = true;
}

bool Checkpointer::Current() const {
  return !offered_.has_value() || (written_.has_value() && written_->run_id == offered_->run_id &&
                                   written_->round == offered_->round);
}

absl::Status Checkpointer::Flush(absl::Duration timeout) {
  MutexLock lock(&mu_);
  if (Current()) return absl::OkStatus();
  forced_ = true;
  pending_ = true;
  const int64_t writes_before = writes_;
  // The write that began before the flush may be of an older round: wait for one after it.
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return Current() || (writes_ > writes_before && !forced_);
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&done), timeout)) {
    return absl::DeadlineExceededError(absl::StrCat("the checkpoint ", options_.path,
                                                    " was not written within ",
                                                    absl::FormatDuration(timeout)));
  }
  return Current() ? absl::OkStatus() : error_;
}

void Checkpointer::Run() {
  while (true) {
    Offered round;
    {
      MutexLock lock(&mu_);
      auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || (pending_ && (forced_ || cadence_.Due(offered_->round)));
      };
      mu_.Await(absl::Condition(&wake));
      if (stop_) return;
      round = *offered_;
      pending_ = false;
    }
    const absl::Time began = absl::Now();
    absl::Status status = Write(round);
    const absl::Time ended = absl::Now();
    if (status.ok() && options_.on_written) {
      options_.on_written(Written{round.run_id, round.round, round.global_step, ended - began});
    }
    MutexLock lock(&mu_);
    ++writes_;
    if (status.ok()) {
      cadence_.Wrote(round.round, began, ended);
      written_ = Written{round.run_id, round.round, round.global_step, ended - began};
      error_ = absl::OkStatus();
      if (Current()) pending_ = false;  // (a Flush asked again for the round just written)
    } else if (absl::IsFailedPrecondition(status) && pending_) {
      continue;  // the model moved on: its newer round is offered already
    } else {
      error_ = status;
      LogWarning(absl::StrCat("checkpoint of round ", round.round, ": ", status.ToString()));
    }
    if (Current() || !status.ok()) forced_ = false;
  }
}

absl::Status Checkpointer::Write(const Offered& round) {
  LOCALSGD_ASSIGN_OR_RETURN(const HeldModel::Lease lease,
                            held_->Open(round.run_id, round.round, options_.chunk_values, 0, -1,
                                        /*momentum=*/true));
  const int chunks = lease.layout.num_chunks();
  absl::StatusOr<ModelStore::Writer> filled = [&]() -> absl::StatusOr<ModelStore::Writer> {
    LOCALSGD_ASSIGN_OR_RETURN(
        ModelStore::Writer writer,
        ModelStore::At(options_.path)
            .Begin(round.run_id, round.round, lease.global_step, lease.layout.num_values,
                   lease.has_momentum ? lease.layout.num_values : 0));
    std::string chunk;
    for (int i = 0; i < chunks; ++i) {
      LOCALSGD_RETURN_IF_ERROR(held_->Read(lease.id, false, &chunk).status());
      LOCALSGD_RETURN_IF_ERROR(writer.AppendGlobal(chunk));
    }
    for (int i = 0; lease.has_momentum && i < chunks; ++i) {
      LOCALSGD_RETURN_IF_ERROR(held_->Read(lease.id, true, &chunk).status());
      LOCALSGD_RETURN_IF_ERROR(writer.AppendMomentum(chunk));
    }
    return writer;
  }();
  // The values are in the file (the page cache): the fsync needs no lease.
  held_->Close(lease.id);
  if (!filled.ok()) return filled.status();
  return filled->Commit();
}

std::optional<Checkpointer::Written> Checkpointer::last_written() const {
  MutexLock lock(&mu_);
  return written_;
}

absl::Status Checkpointer::last_error() const {
  MutexLock lock(&mu_);
  return error_;
}

}  // namespace localsgd
