// One rank of a bare ring all-reduce, for bench/ring_ceiling_bench.py: what the ring's bytes
// cost over gRPC streaming, and over plain TCP, with nothing of localsgd's round around them (no
// coordinator, no layout, no commit, no codec). --ranks processes, rank r listening on
// --listen and sending to its successor at --successor, average --values fp32 values every
// round: a reduce-scatter, then an all-gather, each of --ranks - 1 steps, in chunks of
// --chunk_bytes, pipelined (a chunk goes on as soon as it came in). One stream (or TCP
// connection) to the successor carries every round.
//
// --transport=grpc: a client-streaming call of raw gRPC buffers (no protobuf), the same
// channel arguments, allocator settings and write batching as localsgd's data plane, each chunk
// copied once into a gRPC slice and read in gRPC's own slices. --transport=tcp: write() straight
// from the vector, read() into a chunk buffer, then added (a sum) or copied (a mean).
//
// Prints, per round, "round R seconds T from S to E" (S and E: Unix seconds, as
// averaging_member prints them), then "max_error X" (the largest distance of any value from the
// exact mean after the rounds) and "cpu_seconds_per_round X" (user + system, all of the
// process's threads, over the rounds after the first).
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/rpc_service_method.h>
#include <grpcpp/impl/codegen/sync_stream.h>
#include <grpcpp/support/method_handler.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/grpc_channel.h"
#include "common/process_tuning.h"
#include "exchange/write_batch.h"

ABSL_FLAG(int, rank, 0, "This process's rank.");
ABSL_FLAG(int, ranks, 2, "Processes in the ring (at least 2).");
ABSL_FLAG(std::string, listen, "127.0.0.1:0", "HOST:PORT this rank receives on.");
ABSL_FLAG(std::string, successor, "", "HOST:PORT of the next rank.");
ABSL_FLAG(int64_t, values, 25'000'000, "fp32 values averaged every round.");
ABSL_FLAG(int, chunk_bytes, 128 << 10, "Bytes per message.");
ABSL_FLAG(int, rounds, 5, "Rounds.");
ABSL_FLAG(std::string, transport, "grpc", "grpc or tcp.");
ABSL_FLAG(bool, batch_writes, true,
          "gRPC: batch a message with the next when that one is ready at once, as localsgd's "
          "data plane does (common/write_batch.h).");

namespace {

constexpr char kMethod[] = "/localsgd.bench.Ring/Pass";

// User + system seconds of the whole process so far.
double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
         (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "ring_ceiling: %s\n", what.c_str());
  std::exit(1);
}

// The ring's schedule: which values each message carries, the same on every rank.
class Schedule {
 public:
  Schedule(int rank, int ranks, int64_t values, int64_t chunk_values)
      : rank_(rank), ranks_(ranks), values_(values), chunk_values_(chunk_values) {
    const int64_t chunks = (values + chunk_values - 1) / chunk_values;
    for (int k = 0; k <= ranks; ++k) segment_start_.push_back(chunks * k / ranks);
    for (int s = 0; s < steps(); ++s) {
      step_start_.push_back(messages_);
      messages_ += SegmentChunks(RecvSegment(s));
    }
  }
  int steps() const { return 2 * (ranks_ - 1); }
  int64_t messages() const { return messages_; }  // received (and sent) per round
  int64_t step_start(int s) const { return step_start_[s]; }
  bool reduces(int s) const { return s < ranks_ - 1; }    // a sum comes in, else a mean
  bool averages(int s) const { return s == ranks_ - 2; }  // the sum is complete after it
  int SendSegment(int s) const {
    return Mod(reduces(s) ? rank_ - s : rank_ + 1 - (s - (ranks_ - 1)));
  }
  int RecvSegment(int s) const {
    return Mod(reduces(s) ? rank_ - s - 1 : rank_ - (s - (ranks_ - 1)));
  }
  int64_t SegmentChunks(int k) const { return segment_start_[k + 1] - segment_start_[k]; }
  // Values [first, first + count) of chunk c of segment k.
  std::pair<int64_t, int64_t> Chunk(int k, int64_t c) const {
    const int64_t first = (segment_start_[k] + c) * chunk_values_;
    return {first, std::min(chunk_values_, values_ - first)};
  }

 private:
  int Mod(int k) const { return ((k % ranks_) + ranks_) % ranks_; }

  int rank_, ranks_;
  int64_t values_, chunk_values_;
  std::vector<int64_t> segment_start_;  // in chunks
  std::vector<int64_t> step_start_;     // first message of each step, within a round
  int64_t messages_ = 0;
};

// Applies a message's bytes, which may come in pieces split anywhere, to a chunk of the vector:
// added (with the mean taken after the last sum) or copied.
class ChunkApplier {
 public:
  ChunkApplier(float* dst, bool add, float scale) : dst_(dst), add_(add), scale_(scale) {}
  void Apply(const char* p, size_t n) {
    while (carried_ > 0 && n > 0) {
      carry_[carried_++] = *p++;
      --n;
      if (carried_ == sizeof(float)) {
        One(carry_);
        carried_ = 0;
      }
    }
    if (carried_ > 0) return;  // the piece ended inside a value
    const size_t whole = n / sizeof(float);
    if (!add_) {
      std::memcpy(dst_, p, whole * sizeof(float));
      dst_ += whole;
    } else {
      for (size_t i = 0; i < whole; ++i) {
        float v;
        std::memcpy(&v, p + i * sizeof(float), sizeof(float));
        dst_[i] = (dst_[i] + v) * scale_;
      }
      dst_ += whole;
    }
    p += whole * sizeof(float);
    n -= whole * sizeof(float);
    std::memcpy(carry_, p, n);
    carried_ = n;
  }

 private:
  void One(const char* bytes) {
    float v;
    std::memcpy(&v, bytes, sizeof(float));
    *dst_ = add_ ? (*dst_ + v) * scale_ : v;
    ++dst_;
  }

  float* dst_;
  bool add_;
  float scale_;
  char carry_[sizeof(float)];
  size_t carried_ = 0;
};

// The rank's vector and how far the rounds have got: the receiving thread applies messages in
// the order they come (one stream) and counts them; the sending thread waits for the message
// it passes on.
class Ring {
 public:
  Ring(const Schedule& schedule, int64_t values, int ranks)
      : schedule_(schedule), data_(values), scale_(1.0f / ranks) {}
  std::vector<float>& data() { return data_; }

  void StartRound(int round) {
    std::lock_guard<std::mutex> lock(mu_);
    round_ = round;
    cv_.notify_all();
  }
  // Blocks until message `index` (counted over all rounds) has been applied.
  void AwaitReceived(int64_t index) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return received_ > index; });
  }
  bool HasReceived(int64_t index) {
    std::lock_guard<std::mutex> lock(mu_);
    return received_ > index;
  }
  // The receiving side: where the next message goes, once this rank is in its round.
  ChunkApplier NextApplier() {
    const int64_t index = received_local_;
    const int64_t per_round = schedule_.messages();
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return round_ >= index / per_round; });
    }
    const int64_t within = index % per_round;
    int s = 0;
    while (s + 1 < schedule_.steps() && schedule_.step_start(s + 1) <= within) ++s;
    const auto [first, count] =
        schedule_.Chunk(schedule_.RecvSegment(s), within - schedule_.step_start(s));
    expected_bytes_ = count * sizeof(float);
    return ChunkApplier(data_.data() + first, schedule_.reduces(s),
                        schedule_.averages(s) ? scale_ : 1.0f);
  }
  size_t expected_bytes() const { return expected_bytes_; }
  void Received() {
    ++received_local_;
    std::lock_guard<std::mutex> lock(mu_);
    received_ = received_local_;
    cv_.notify_all();
  }

 private:
  const Schedule& schedule_;
  std::vector<float> data_;
  const float scale_;
  int64_t received_local_ = 0;  // the receiving thread's own count
  size_t expected_bytes_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t received_ = 0;
  int round_ = -1;
};

// When each round started and ended (Unix seconds), and the process's CPU seconds from the
// second round's start (the first is a warm-up) to the last one's end.
struct Times {
  std::vector<std::pair<double, double>> rounds;
  double cpu_start = 0, cpu_end = 0;
};

// Sends the round's messages in order, each once what it carries has come in: hands `send`
// the chunk's bytes and whether the next message could go at once (for write batching).
template <typename Send>
void SendRound(const Schedule& schedule, Ring* ring, int round, Send send) {
  const int64_t base = static_cast<int64_t>(round) * schedule.messages();
  // Message c of step s waits for message c of step s - 1 to come in.
  auto ready = [&](int s, int64_t c) {
    return s == 0 || ring->HasReceived(base + schedule.step_start(s - 1) + c);
  };
  for (int s = 0; s < schedule.steps(); ++s) {
    const int k = schedule.SendSegment(s);
    const int64_t chunks = schedule.SegmentChunks(k);
    for (int64_t c = 0; c < chunks; ++c) {
      if (s > 0) ring->AwaitReceived(base + schedule.step_start(s - 1) + c);
      const auto [first, count] = schedule.Chunk(k, c);
      const bool more =
          c + 1 < chunks ? ready(s, c + 1) : s + 1 < schedule.steps() && ready(s + 1, 0);
      send(reinterpret_cast<const char*>(ring->data().data() + first), count * sizeof(float), more);
    }
  }
}

// --- gRPC ---

class RingService : public grpc::Service {
 public:
  explicit RingService(Ring* ring) : ring_(ring) {
    AddMethod(new grpc::internal::RpcServiceMethod(
        kMethod, grpc::internal::RpcMethod::CLIENT_STREAMING,
        new grpc::internal::ClientStreamingHandler<RingService, grpc::ByteBuffer, grpc::ByteBuffer>(
            [](RingService* service, grpc::ServerContext*,
               grpc::ServerReader<grpc::ByteBuffer>* reader, grpc::ByteBuffer* response) {
              grpc::Slice empty;
              *response = grpc::ByteBuffer(&empty, 1);  // an empty message, not none
              return service->Pass(reader);
            },
            this)));
  }

 private:
  grpc::Status Pass(grpc::ServerReader<grpc::ByteBuffer>* reader) {
    grpc::ByteBuffer message;
    std::vector<grpc::Slice> slices;
    while (reader->Read(&message)) {
      ChunkApplier applier = ring_->NextApplier();
      if (message.Length() != ring_->expected_bytes()) Die("a message of the wrong size");
      if (!message.Dump(&slices).ok()) Die("unreadable message");
      for (const grpc::Slice& slice : slices) {
        applier.Apply(reinterpret_cast<const char*>(slice.begin()), slice.size());
      }
      ring_->Received();
    }
    return grpc::Status::OK;
  }

  Ring* ring_;
};

void RunGrpc(const Schedule& schedule, Ring* ring, int rounds, Times* times) {
  RingService service(ring);
  grpc::ServerBuilder builder;
  localsgd::UseStreamingArguments(&builder);
  builder.AddListeningPort(absl::GetFlag(FLAGS_listen), grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) Die("cannot listen on " + absl::GetFlag(FLAGS_listen));

  std::shared_ptr<grpc::Channel> channel =
      localsgd::CreateStreamingChannel(absl::GetFlag(FLAGS_successor));
  const grpc::internal::RpcMethod method(kMethod, grpc::internal::RpcMethod::CLIENT_STREAMING,
                                         channel);
  grpc::ClientContext context;
  context.set_wait_for_ready(true);
  grpc::ByteBuffer response;
  std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
      grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(channel.get(), method, &context,
                                                                    &response));
  localsgd::WriteBatch batch;
  for (int r = 0; r < rounds; ++r) {
    if (r == 1) times->cpu_start = CpuSeconds();
    const double start = absl::ToUnixMicros(absl::Now()) / 1e6;
    ring->StartRound(r);
    SendRound(schedule, ring, r, [&](const char* bytes, size_t n, bool more) {
      grpc::Slice slice(n);  // not zero-filled first
      std::memcpy(const_cast<uint8_t*>(slice.begin()), bytes, n);
      const grpc::WriteOptions options =
          absl::GetFlag(FLAGS_batch_writes) ? batch.Next(n, more) : grpc::WriteOptions();
      if (!writer->Write(grpc::ByteBuffer(&slice, 1), options)) {
        Die("the successor's stream broke");
      }
    });
    ring->AwaitReceived((r + 1) * schedule.messages() - 1);
    times->rounds.emplace_back(start, absl::ToUnixMicros(absl::Now()) / 1e6);
  }
  times->cpu_end = CpuSeconds();
  writer->WritesDone();
  const grpc::Status status = writer->Finish();
  if (!status.ok()) Die("the stream ended with " + status.error_message());
  server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
}

// --- TCP ---

sockaddr_in Parse(const std::string& address) {
  std::vector<std::string> parts = absl::StrSplit(address, ':');
  int port = 0;
  sockaddr_in in{};
  in.sin_family = AF_INET;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &port) ||
      inet_pton(AF_INET, parts[0].c_str(), &in.sin_addr) != 1) {
    Die("not an IPv4 HOST:PORT: " + address);
  }
  in.sin_port = htons(port);
  return in;
}

void WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w <= 0) Die("write to the successor failed");
    p += w;
    n -= w;
  }
}

void ReadAll(int fd, char* p, size_t n) {
  while (n > 0) {
    const ssize_t got = read(fd, p, n);
    if (got <= 0) Die("read from the predecessor failed");
    p += got;
    n -= got;
  }
}

void RunTcp(const Schedule& schedule, Ring* ring, int rounds, Times* times) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in own = Parse(absl::GetFlag(FLAGS_listen));
  if (bind(listener, reinterpret_cast<sockaddr*>(&own), sizeof(own)) != 0 ||
      listen(listener, 1) != 0) {
    Die("cannot listen on " + absl::GetFlag(FLAGS_listen));
  }
  const int out = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in successor = Parse(absl::GetFlag(FLAGS_successor));
  while (connect(out, reinterpret_cast<sockaddr*>(&successor), sizeof(successor)) != 0) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  setsockopt(out, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  const int in = accept(listener, nullptr, nullptr);
  if (in < 0) Die("accept failed");

  std::thread reader([&] {
    std::vector<char> buffer;
    for (int64_t m = 0; m < rounds * schedule.messages(); ++m) {
      ChunkApplier applier = ring->NextApplier();
      buffer.resize(ring->expected_bytes());
      ReadAll(in, buffer.data(), buffer.size());
      applier.Apply(buffer.data(), buffer.size());
      ring->Received();
    }
  });
  for (int r = 0; r < rounds; ++r) {
    if (r == 1) times->cpu_start = CpuSeconds();
    const double start = absl::ToUnixMicros(absl::Now()) / 1e6;
    ring->StartRound(r);
    SendRound(schedule, ring, r,
              [&](const char* bytes, size_t n, bool) { WriteAll(out, bytes, n); });
    ring->AwaitReceived((r + 1) * schedule.messages() - 1);
    times->rounds.emplace_back(start, absl::ToUnixMicros(absl::Now()) / 1e6);
  }
  times->cpu_end = CpuSeconds();
  reader.join();
  close(out);
  close(in);
  close(listener);
}

}  // namespace

int main(int argc, char** argv) {
  localsgd::TuneProcess();  // as localsgd's processes are tuned
  absl::ParseCommandLine(argc, argv);
  const int rank = absl::GetFlag(FLAGS_rank);
  const int ranks = absl::GetFlag(FLAGS_ranks);
  const int64_t values = absl::GetFlag(FLAGS_values);
  const int64_t chunk_values = absl::GetFlag(FLAGS_chunk_bytes) / sizeof(float);
  const int rounds = absl::GetFlag(FLAGS_rounds);
  if (ranks < 2 || rank < 0 || rank >= ranks) Die("need 0 <= --rank < --ranks, --ranks >= 2");
  if (chunk_values < 1 || values < ranks * chunk_values) {
    Die("--values must hold at least one --chunk_bytes chunk per rank");
  }
  if (rounds < 2) Die("--rounds must be at least 2 (the first is a warm-up)");

  const Schedule schedule(rank, ranks, values, chunk_values);
  Ring ring(schedule, values, ranks);
  // Rank r starts with i mod 1000 + r: the mean is i mod 1000 + (ranks - 1) / 2.
  for (int64_t i = 0; i < values; ++i) ring.data()[i] = static_cast<float>(i % 1000 + rank);

  Times times;
  const std::string transport = absl::GetFlag(FLAGS_transport);
  if (transport == "grpc") {
    RunGrpc(schedule, &ring, rounds, &times);
  } else if (transport == "tcp") {
    RunTcp(schedule, &ring, rounds, &times);
  } else {
    Die("--transport must be grpc or tcp");
  }
  for (int r = 0; r < rounds; ++r) {
    const auto [start, end] = times.rounds[r];
    std::printf("round %d seconds %.6f from %.6f to %.6f\n", r + 1, end - start, start, end);
  }
  double max_error = 0;
  for (int64_t i = 0; i < values; ++i) {
    const double mean = i % 1000 + (ranks - 1) / 2.0;
    max_error = std::max(max_error, std::abs(ring.data()[i] - mean));
  }
  std::printf("max_error %g\n", max_error);
  std::printf("cpu_seconds_per_round %.4f\n", (times.cpu_end - times.cpu_start) / (rounds - 1));
  return 0;
}
