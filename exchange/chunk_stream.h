#ifndef LOCALSGD_EXCHANGE_CHUNK_STREAM_H_
#define LOCALSGD_EXCHANGE_CHUNK_STREAM_H_

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace localsgd {

// A stream that carries chunks, as the code that fills it sees it: a member's Sync stream on
// the coordinator, a member's Reduce stream on a shard owner (their gRPC adapters implement
// it; tests use fakes). Messages are shared, never copied, between the streams they go to.
template <typename Message>
class ChunkStream {
 public:
  virtual ~ChunkStream() = default;
  // Queues a message. Called under the filler's lock: must not block or call into gRPC.
  virtual void Enqueue(std::shared_ptr<const Message> message) = 0;
  // Queues the end of the stream with `status`, after the queued messages.
  virtual void Close(const absl::Status& status) = 0;
  // Sends what is queued. Called without locks.
  virtual void Flush() = 0;
};

// The streams a filler touched under its lock: Add them there, Take them before releasing
// it, and Flush what was taken after (each stream once).
template <typename Stream>
class TouchedStreams {
 public:
  void Add(std::shared_ptr<Stream> stream) { streams_.push_back(std::move(stream)); }
  std::vector<std::shared_ptr<Stream>> Take() { return std::move(streams_); }
  static void Flush(std::vector<std::shared_ptr<Stream>> streams) {
    std::sort(streams.begin(), streams.end());
    streams.erase(std::unique(streams.begin(), streams.end()), streams.end());
    for (const auto& stream : streams) stream->Flush();
  }

 private:
  std::vector<std::shared_ptr<Stream>> streams_;
};

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_CHUNK_STREAM_H_
