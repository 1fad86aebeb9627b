#ifndef LOCALSGD_COORDINATOR_ROUND_SESSIONS_H_
#define LOCALSGD_COORDINATOR_ROUND_SESSIONS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "exchange/chunk_stream.h"
#include "proto/localsgd/v1/averaging.pb.h"

namespace localsgd {

// One member's Sync stream as the round manager sees it (the gRPC adapter implements it).
class RoundMember : public ChunkStream<v1::SyncResponse> {
 public:
  // Ends the stream at once with CANCELLED, dropping what is queued and cancelling a write in
  // flight (at the next Flush): its member opened a newer stream and does not read this one.
  // Called under the round manager's lock, like Enqueue.
  virtual void Cancel() = 0;
};

// The members' Sync streams as the round manager holds them: the open round's sessions (a
// stream in the round, by session id), each member's latest stream (a newer one cancels it, so
// a member that does not read its answers holds one stream's queue at most), and the streams
// written to since the last flush. Thread-compatible: the round manager's lock guards it, and
// the streams it hands back from TakeTouched are flushed after that lock is released.
class RoundSessions {
 public:
  // `stream` is `member_id`'s latest: cancels an earlier one that is still open.
  void Supersede(const std::string& member_id, const std::shared_ptr<RoundMember>& stream);
  // Forgets the latest streams (a new run).
  void ForgetLatest() { latest_.clear(); }

  // A new session for `member_id`'s stream; its id (never reused).
  int64_t Add(const std::string& member_id, std::shared_ptr<RoundMember> stream);
  bool Contains(int64_t session) const { return sessions_.count(session) != 0; }
  // The member of `session`; empty when it is not open.
  std::string MemberOf(int64_t session) const;
  // The open session of `member_id`, or -1.
  int64_t SessionOf(const std::string& member_id) const;
  // The open sessions, in the order they were added.
  std::vector<int64_t> Ids() const;
  // Star rounds: the buffer `session`'s chunks are decoded into, outside the lock, one at a
  // time; null when it is not open.
  std::shared_ptr<std::vector<float>> Scratch(int64_t session) const;
  // Queues `message` on the session's stream; false when it is not open.
  bool Send(int64_t session, std::shared_ptr<const v1::SyncResponse> message);
  // Ends the session's stream with `status` (after what is queued) and closes the session.
  void End(int64_t session, const absl::Status& status);
  // Closes every session and returns their streams, still open (a commit answers them).
  std::vector<std::shared_ptr<RoundMember>> TakeAll();
  // Closes every session, ending its stream with `status`.
  void EndAll(const absl::Status& status);

  // `stream` was written to or closed: flush it after the lock is released.
  void Touch(const std::shared_ptr<RoundMember>& stream) { touched_.Add(stream); }
  std::vector<std::shared_ptr<RoundMember>> TakeTouched() { return touched_.Take(); }

 private:
  struct MemberStream {
    std::string member_id;
    std::shared_ptr<RoundMember> stream;
    std::shared_ptr<std::vector<float>> scratch = std::make_shared<std::vector<float>>();
  };

  std::map<int64_t, MemberStream> sessions_;
  int64_t next_ = 1;
  std::map<std::string, std::weak_ptr<RoundMember>> latest_;
  TouchedStreams<RoundMember> touched_;
};

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_ROUND_SESSIONS_H_
