#ifndef LOCALSGD_EXCHANGE_WRITE_BATCH_H_
#define LOCALSGD_EXCHANGE_WRITE_BATCH_H_

#include <grpcpp/impl/call_op_set.h>

#include <cstdint>

namespace localsgd {

// Write options for the messages of one gRPC stream, so that a writer that has several
// messages ready sends them in one write (docs/design.md, "Copies"). gRPC sends each message
// on its own: a system call, a wake-up of its poller, frames. With the buffer hint it keeps a
// message until a message without the hint comes, or until it holds its write buffer. This
// gives the hint to a message only when another follows at once (`more`), and to at most
// `max_held_bytes` in a row: a message waits only for messages already ready behind it, and a
// burst goes out in writes of about that size at most (on a slow link a large write deepens a
// ring's pipeline, as a large chunk does).
//
// A stream's first message never has the hint. On a server stream it carries the response's
// initial metadata, and gRPC's HTTP/2 transport neither starts a write for initial metadata sent
// with a hinted message nor completes the write until that metadata is on the wire: with
// nothing else to send on the connection, the write would never finish, and an outbox that
// waits for it (common/stream_outbox.h) would hang until the call's deadline.
// Not thread-safe: one per stream, used by its writer.
class WriteBatch {
 public:
  static constexpr int64_t kDefaultMaxHeldBytes = 1 << 20;

  explicit WriteBatch(int64_t max_held_bytes = kDefaultMaxHeldBytes)
      : max_held_bytes_(max_held_bytes) {}

  // The options for the next message, of `bytes`.
  grpc::WriteOptions Next(int64_t bytes, bool more);

 private:
  const int64_t max_held_bytes_;
  bool first_ = true;
  int64_t held_bytes_ = 0;  // given the hint since the last message without it
};

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_WRITE_BATCH_H_
