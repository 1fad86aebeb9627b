#ifndef LOCALSGD_EXCHANGE_STREAM_OUTBOX_H_
#define LOCALSGD_EXCHANGE_STREAM_OUTBOX_H_

#include <grpcpp/support/status.h>

#include <deque>
#include <functional>
#include <memory>
#include <utility>

#include "common/mutex.h"
#include "common/status_util.h"

namespace localsgd {

// The sending side of a server stream in gRPC's callback API: a queue of messages with at most
// one write in flight, then Finish after the last one. Enqueue and Close only take the
// outbox's own lock, so they may be called while holding other locks; Flush (and the reactor's
// OnWriteDone) call into gRPC and must be called without them.
//
// Lifetime: Finish is called exactly once and never while a write is in flight, so the reactor
// (which gRPC deletes only after Finish) outlives every call the outbox makes into it.
// Thread-safe.
template <typename Message>
class StreamOutbox {
 public:
  // `start_write` gets the message itself (kept until the write is done), so that a writer
  // may share its bytes with gRPC beyond that, and whether more messages are queued behind it
  // (for WriteBatch, common/write_batch.h). `cancel` cancels the call (the reactor's
  // context's TryCancel), for Cancel; null when the outbox is never cancelled.
  StreamOutbox(std::function<void(const std::shared_ptr<const Message>&, bool more)> start_write,
               std::function<void(const grpc::Status&)> finish,
               std::function<void()> cancel = nullptr)
      : start_write_(std::move(start_write)),
        finish_(std::move(finish)),
        cancel_(std::move(cancel)) {}

  // Queues a message; ignored once Close was called.
  void Enqueue(std::shared_ptr<const Message> message) {
    MutexLock lock(&mu_);
    if (closing_) return;
    queue_.push_back(std::move(message));
  }

  // Ends the stream with `status` after the queued messages (the first Close wins).
  void Close(const grpc::Status& status) {
    MutexLock lock(&mu_);
    if (closing_) return;
    closing_ = true;
    status_ = status;
  }

  // Ends the stream as soon as the write in flight is done, dropping what is queued.
  void Abandon(const grpc::Status& status) {
    {
      MutexLock lock(&mu_);
      DropQueue(status);
    }
    Flush();
  }

  // Ends the stream with `status` as soon as it can, dropping what is queued, even after a
  // Close whose messages are not all written; at the next Flush a write in flight is cancelled
  // with the call (its reader does not read). Only takes the outbox's own lock, like Enqueue.
  void Cancel(const grpc::Status& status) {
    MutexLock lock(&mu_);
    queue_.clear();
    closing_ = true;
    status_ = status;
    cancel_wanted_ = true;
  }

  // Starts the next write, or the Finish, when nothing is in flight.
  void Flush() { Next(/*write_done=*/false); }

  // To be called from the reactor's OnWriteDone.
  void OnWriteDone(bool ok) {
    if (!ok) {
      MutexLock lock(&mu_);
      DropQueue(ToGrpcStatus(absl::UnavailableError("stream write failed")));
    }
    Next(/*write_done=*/true);
  }

 private:
  // Forgets what is queued and closes with `status` (unless already closing).
  void DropQueue(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    queue_.clear();
    if (!closing_) {
      closing_ = true;
      status_ = status;
    }
  }

  void Next(bool write_done) {
    std::shared_ptr<const Message> next;
    bool more = false;
    grpc::Status finish_status;
    bool finish = false;
    bool cancel = false;
    {
      MutexLock lock(&mu_);
      if (write_done) in_flight_ = nullptr;
      if (finished_ || cancelling_) return;
      if (in_flight_ != nullptr) {
        if (!cancel_wanted_ || cancel_ == nullptr || cancelled_) return;
        // Not finished, and nothing finishes while cancelling_ holds: the reactor is alive
        // for the cancel, whose failed write may come back on this thread.
        cancelled_ = true;
        cancelling_ = true;
        cancel = true;
      } else if (!queue_.empty()) {
        next = std::move(queue_.front());
        queue_.pop_front();
        more = !queue_.empty();
        in_flight_ = next;
      } else if (closing_) {
        finished_ = true;
        finish = true;
        finish_status = status_;
      } else {
        return;
      }
    }
    if (cancel) {
      cancel_();
      {
        MutexLock lock(&mu_);
        cancelling_ = false;
      }
      Next(/*write_done=*/false);
    } else if (finish) {
      finish_(finish_status);
    } else {
      start_write_(next, more);
    }
  }

  const std::function<void(const std::shared_ptr<const Message>&, bool)> start_write_;
  const std::function<void(const grpc::Status&)> finish_;
  const std::function<void()> cancel_;
  Mutex mu_;
  std::deque<std::shared_ptr<const Message>> queue_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const Message> in_flight_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool cancel_wanted_ ABSL_GUARDED_BY(mu_) = false;  // Cancel was called
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;      // and cancel_ was (or is being) called
  bool cancelling_ ABSL_GUARDED_BY(mu_) = false;     // cancel_ is running: nothing finishes
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_STREAM_OUTBOX_H_
