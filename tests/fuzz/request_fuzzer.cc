// Request validation: arbitrary bytes parsed as each kind of request the coordinator takes
// (Join, Heartbeat, Leave, StartRun, StopRun, InitModel and Sync headers, chunks) and fed, in
// any order, to the control plane and the round manager behind the gRPC services. Nothing
// crashes, and the run's round and global step never go back.
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include "coordinator/control_plane.h"
#include "coordinator/round_manager.h"
#include "proto/localsgd/v1/averaging.pb.h"

namespace {

class NullMember : public localsgd::RoundMember {
 public:
  void Enqueue(std::shared_ptr<const localsgd::v1::SyncResponse>) override {}
  void Close(const absl::Status&) override {}
  void Flush() override {}
  void Cancel() override {}
};

// Parses `bytes` as a Request and, if they parse, hands it to `call` (whose answer is ignored).
template <typename Request, typename Call>
void Feed(const std::string& bytes, Call call) {
  Request request;
  if (request.ParseFromString(bytes)) call(request).IgnoreError();
}

// The credentials Join handed out, by worker id: a request that names a member and carries no
// credential gets that member's, so that the fuzzer reaches past authentication.
std::map<std::string, std::string> credentials;

template <typename Request>
void Authenticate(const std::string& worker_id, Request& request) {
  if (!request.member_credential().empty()) return;
  auto it = credentials.find(worker_id);
  if (it != credentials.end()) request.set_member_credential(it->second);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  auto clock = [&now] { return now; };
  localsgd::ControlPlane::Options options;
  options.clock = clock;
  credentials.clear();
  auto plane = localsgd::ControlPlane::Create(options);
  if (!plane.ok()) std::abort();
  localsgd::RoundManager rounds(plane->get(), localsgd::RoundManager::Options{clock, nullptr});
  int64_t session = 0;
  int64_t round = 0, step = 0;
  // Records: [kind][length][bytes...]
  size_t pos = 0;
  while (pos + 2 <= size) {
    const uint8_t kind = data[pos] % 12;
    const size_t length = std::min<size_t>(data[pos + 1], size - pos - 2);
    const std::string bytes(reinterpret_cast<const char*>(data + pos + 2), length);
    pos += 2 + length;
    localsgd::ControlPlane& p = **plane;
    switch (kind) {
      case 0:
        Feed<localsgd::v1::JoinRequest>(bytes, [&](const auto& r) {
          absl::StatusOr<localsgd::v1::JoinResponse> joined = p.Join(r);
          if (joined.ok()) credentials[joined->worker_id()] = joined->member_credential();
          return joined;
        });
        break;
      case 1:
        Feed<localsgd::v1::HeartbeatRequest>(bytes, [&](auto r) {
          Authenticate(r.worker_id(), r);
          return p.Heartbeat(r);
        });
        break;
      case 2:
        Feed<localsgd::v1::LeaveRequest>(bytes, [&](auto r) {
          Authenticate(r.worker_id(), r);
          return p.Leave(r);
        });
        break;
      case 3:
        Feed<localsgd::v1::StartRunRequest>(bytes, [&](const auto& r) { return p.StartRun(r); });
        break;
      case 4:
        Feed<localsgd::v1::StopRunRequest>(bytes, [&](const auto& r) { return p.StopRun(r); });
        break;
      case 5: {
        localsgd::v1::InitModelHeader r;
        if (!r.ParseFromString(bytes)) break;
        r.set_vector_length(r.vector_length() % 100000);
        Authenticate(r.member_id(), r);
        absl::StatusOr<localsgd::ModelUpload> upload = rounds.BeginInit(r);
        if (upload.ok()) {
          const std::vector<float> values(static_cast<size_t>(upload->layout().chunk_values),
                                          0.25f);
          for (int c = 0; c < upload->layout().num_chunks(); ++c) {
            localsgd::v1::Chunk chunk;
            chunk.set_index(c);
            chunk.set_data(reinterpret_cast<const char*>(values.data()),
                           static_cast<size_t>(upload->layout().size(c)) * sizeof(float));
            upload->Take(false, &chunk).IgnoreError();
          }
          localsgd::v1::InitModelResponse response;
          if (upload->Complete().ok()) {
            rounds.FinishInit(r, *std::move(upload), &response).IgnoreError();
          }
        }
        break;
      }
      case 6: {
        localsgd::v1::SyncHeader r;
        if (!r.ParseFromString(bytes)) break;
        Authenticate(r.member_id(), r);
        absl::StatusOr<int64_t> joined = rounds.Join(r, std::make_shared<NullMember>());
        if (joined.ok()) session = *joined;
        break;
      }
      case 7: {
        localsgd::v1::Chunk r;
        if (r.ParseFromString(bytes)) rounds.AddChunk(session, r).IgnoreError();
        break;
      }
      case 8:
        rounds.EndOfInput(session);
        break;
      case 9:
        rounds.Leave(session, absl::CancelledError("fuzz"));
        break;
      case 10:
        now += absl::Seconds(bytes.empty() ? 1 : static_cast<uint8_t>(bytes[0]));
        p.Tick();
        rounds.Tick();
        break;
      case 11:
        rounds.FetchModel(bytes).IgnoreError();
        p.Status();
        break;
    }
    const localsgd::v1::RunInfo run = p.Run();
    if (run.run_id().empty()) continue;
    if (run.round() < round || run.global_step() < step) {
      // A new run starts from 0; within one run nothing goes back.
      if (run.round() != 0 || run.global_step() != 0) std::abort();
    }
    round = run.round();
    step = run.global_step();
  }
  return 0;
}
