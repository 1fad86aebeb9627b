// The round manager without a network: a control plane with a fake clock, members as fakes of
// the RoundMember interface.
#include "coordinator/round_manager.h"

#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "exchange/codec.h"
#include "exchange/model_digest.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/fake_clock.h"
#include "tests/testutil/status_matchers.h"
#include "tests/testutil/wait_for.h"

namespace localsgd {
namespace {

using ::localsgd::testing::FakeClock;
using ::localsgd::testing::IsOk;
using ::localsgd::testing::StatusIs;

constexpr int64_t kValues = 1000;

// (The project's Mutex, which TSan sees; Debian's abseil is not built with TSan.)
class FakeMember : public RoundMember {
 public:
  void Enqueue(std::shared_ptr<const v1::SyncResponse> message) override {
    MutexLock lock(&mu_);
    if (!closed_) messages_.push_back(*message);
  }
  void Close(const absl::Status& status) override {
    MutexLock lock(&mu_);
    if (!closed_) end_ = status;
    closed_ = true;
  }
  void Flush() override {}
  void Cancel() override {
    MutexLock lock(&mu_);
    cancelled_ = true;
    closed_ = true;
  }
  bool cancelled() {
    MutexLock lock(&mu_);
    return cancelled_;
  }
  bool closed() {
    MutexLock lock(&mu_);
    return closed_;
  }
  std::vector<v1::SyncResponse> messages() {
    MutexLock lock(&mu_);
    return messages_;
  }
  bool committed() {
    MutexLock lock(&mu_);
    for (const v1::SyncResponse& m : messages_) {
      if (m.has_commit()) return true;
    }
    return false;
  }

 private:
  Mutex mu_;
  std::vector<v1::SyncResponse> messages_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status end_ ABSL_GUARDED_BY(mu_);
};

// A snapshot's digest as a fetch from its holders checks it (ModelDigest).
DigestPair DigestOf(const RoundManager::ModelSnapshot& model) {
  return ModelDigest(*model.values,
                     model.momentum != nullptr ? absl::Span<const float>(*model.momentum)
                                               : absl::Span<const float>(),
                     model.layout);
}

class RoundManagerTest : public ::testing::Test {
 protected:
  void SetUp() override { NewPlane(); }

  // A control plane (keeping its run record with `state`, when given) where node "n" (one
  // rank) has joined; ends the round manager first.
  void NewPlane(StateWriter* state = nullptr) {
    rounds_.reset();
    ControlPlane::Options plane_options;
    plane_options.clock = clock_.AsFunction();
    plane_options.state = state;
    plane_ = *ControlPlane::Create(plane_options);
    JoinMember(NodeJoin("n"));
  }

  // Time passes, `d`, with `leaders` heartbeating (their leases are 15 s), and the plane and
  // the rounds ticking.
  void PassWithLeaders(absl::Duration d, const std::vector<std::string>& leaders) {
    for (absl::Duration left = d; left > absl::ZeroDuration(); left -= absl::Seconds(5)) {
      clock_.Advance(std::min(left, absl::Seconds(5)));
      for (const std::string& id : leaders) {
        v1::HeartbeatRequest beat;
        beat.set_worker_id(id);
        beat.set_member_credential(credentials_[id]);
        ASSERT_THAT(plane_->Heartbeat(beat), IsOk());
      }
      plane_->Tick();
      rounds_->Tick();
    }
  }

  static v1::JoinRequest NodeJoin(const std::string& node) {
    v1::JoinRequest join;
    join.mutable_identity()->set_node_name(node);
    join.mutable_identity()->set_local_world_size(1);
    return join;
  }

  // Joins on the plane and keeps the member's credential for its headers and heartbeats.
  void JoinMember(const v1::JoinRequest& join) {
    absl::StatusOr<v1::JoinResponse> joined = plane_->Join(join);
    ASSERT_THAT(joined, IsOk());
    credentials_[joined->worker_id()] = joined->member_credential();
  }

  void Start(RoundManager::Options options, const std::string& exchange, int min_workers = 1) {
    options.clock = clock_.AsFunction();
    rounds_ = std::make_unique<RoundManager>(plane_.get(), options);
    ASSERT_THAT(rounds_->Restore(), IsOk());
    StartRun(exchange, min_workers);
  }

  // Starts a run on the plane and uploads its initial model from `uploader`.
  void StartRun(const std::string& exchange, int min_workers = 1,
                const std::string& uploader = "n/0") {
    v1::StartRunRequest start;
    start.mutable_spec()->mutable_model()->set_builtin("mlp");
    start.mutable_spec()->set_min_workers(min_workers);
    start.mutable_spec()->set_exchange(exchange == "star" ? v1::EXCHANGE_STAR
                                                          : v1::EXCHANGE_SHARDED);
    absl::StatusOr<v1::RunInfo> run = plane_->StartRun(start);
    ASSERT_THAT(run, IsOk());
    run_id_ = run->run_id();
    v1::InitModelHeader init;
    init.set_run_id(run_id_);
    init.set_member_id(uploader);
    init.set_member_credential(credentials_[uploader]);
    init.set_vector_length(kValues);
    ASSERT_THAT(Upload(init, std::vector<float>(kValues, 1.0f)), IsOk());
  }

  // An InitModel stream of `header` with `values`.
  absl::StatusOr<v1::InitModelResponse> Upload(const v1::InitModelHeader& header,
                                               const std::vector<float>& values) {
    LOCALSGD_ASSIGN_OR_RETURN(ModelUpload upload, rounds_->BeginInit(header));
    for (int c = 0; c < upload.layout().num_chunks(); ++c) {
      v1::Chunk chunk;
      chunk.set_index(c);
      chunk.set_data(reinterpret_cast<const char*>(values.data() + upload.layout().begin(c)),
                     static_cast<size_t>(upload.layout().size(c)) * sizeof(float));
      LOCALSGD_RETURN_IF_ERROR(upload.Take(false, &chunk));
    }
    LOCALSGD_RETURN_IF_ERROR(upload.Complete());
    v1::InitModelResponse response;
    LOCALSGD_RETURN_IF_ERROR(rounds_->FinishInit(header, std::move(upload), &response));
    return response;
  }

  // n/0 offers its checkpoint of `round` at `step`, every value `value`.
  absl::StatusOr<v1::InitModelResponse> OfferCheckpoint(int64_t round, int64_t step, float value) {
    v1::InitModelHeader header;
    header.set_run_id(run_id_);
    header.set_member_id("n/0");
    header.set_member_credential(credentials_["n/0"]);
    header.set_vector_length(kValues);
    header.set_from_checkpoint(true);
    header.set_checkpoint_round(round);
    header.set_checkpoint_global_step(step);
    return Upload(header, std::vector<float>(kValues, value));
  }

  v1::SyncHeader Header(int64_t round, const std::string& member_id = "n/0") {
    v1::SyncHeader header;
    header.set_run_id(run_id_);
    header.set_round(round);
    header.set_member_id(member_id);
    header.set_member_credential(credentials_[member_id]);
    header.set_vector_length(kValues);
    header.set_codec(v1::CODEC_FP32);
    header.set_weight(1);
    header.set_step(8 * round);
    header.set_num_workers(1);
    return header;
  }

  // The one chunk of a delta of 0.5 everywhere.
  static v1::Chunk DeltaChunk() {
    v1::Chunk chunk;
    chunk.set_index(0);
    Encode(v1::CODEC_FP32, std::vector<float>(kValues, 0.5f), chunk.mutable_data());
    return chunk;
  }

  // Star round `round` of members `a` and `b` (in that order): their headers and chunks; whether
  // both were told it committed.
  bool StarRoundOfTwo(int64_t round, const std::string& a, const std::string& b) {
    auto first = std::make_shared<FakeMember>();
    auto second = std::make_shared<FakeMember>();
    absl::StatusOr<int64_t> one = rounds_->Join(Header(round, a), first);
    absl::StatusOr<int64_t> two = rounds_->Join(Header(round, b), second);
    if (!one.ok() || !two.ok()) return false;
    const v1::Chunk chunk = DeltaChunk();
    if (!rounds_->AddChunk(*one, chunk).ok() || !rounds_->AddChunk(*two, chunk).ok()) return false;
    return WaitFor([&] { return first->committed() && second->committed(); }, absl::Seconds(5));
  }

  // The member leaves as a preempted worker does.
  void LeavePreempted(const std::string& member_id) {
    v1::LeaveRequest leave;
    leave.set_worker_id(member_id);
    leave.set_member_credential(credentials_[member_id]);
    leave.set_preempted(true);
    ASSERT_THAT(plane_->Leave(leave), IsOk());
  }

  // One star round of the single member: the header and its one chunk.
  std::shared_ptr<FakeMember> StarRound(int64_t round) {
    auto member = std::make_shared<FakeMember>();
    absl::StatusOr<int64_t> session = rounds_->Join(Header(round), member);
    EXPECT_THAT(session, IsOk());
    const v1::Chunk chunk = DeltaChunk();
    EXPECT_THAT(rounds_->AddChunk(*session, chunk), IsOk());
    return member;
  }

  // A state writer on the folder `name` (under the test's folder); it outlives its managers.
  StateWriter* Writer(const std::string& name,
                      std::function<void(const std::string&)> before_write = nullptr) {
    state_dir_ = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
    StateWriter::Options options;
    options.state_dir = state_dir_;
    options.model_save_share = 1;  // every model written as soon as the disk allows
    options.before_write = std::move(before_write);
    absl::StatusOr<std::unique_ptr<StateWriter>> writer = StateWriter::Open(options);
    EXPECT_THAT(writer, IsOk());
    writers_.push_back(std::move(*writer));
    return writers_.back().get();
  }

  // Options for a state folder `name` whose disk is slow: the first save notifies `saving_`
  // and every save of a round's model waits for `release_`.
  RoundManager::Options SlowDisk(const std::string& name) {
    RoundManager::Options options;
    options.state = Writer(name, [this](const std::string& file) {
      if (file != "model.bin") return;  // the run record is written at once
      if (!initial_saved_) {            // the initial model (at Start) goes through
        initial_saved_ = true;
        return;
      }
      if (!saving_.HasBeenNotified()) saving_.Notify();
      release_.WaitForNotification();
    });
    return options;
  }

  // Ends this manager, then starts a new one on the same folder as a restarted coordinator
  // would: the round of the model it restores.
  absl::StatusOr<int64_t> RestoredRound() {
    rounds_.reset();
    RoundManager::Options options;
    options.state = Writer(state_dir_.substr(state_dir_.rfind('/') + 1));
    RoundManager restored(plane_.get(), options);
    LOCALSGD_RETURN_IF_ERROR(restored.Restore());
    LOCALSGD_ASSIGN_OR_RETURN(RoundManager::ModelSnapshot model, restored.FetchModel(""));
    return model.round;
  }

  // What the writers' hooks use, then the writers: they outlive the managers below.
  std::atomic<bool> initial_saved_{false};
  absl::Notification saving_, release_;  // SlowDisk
  std::string state_dir_;
  std::vector<std::unique_ptr<StateWriter>> writers_;
  FakeClock clock_;
  std::unique_ptr<ControlPlane> plane_;
  std::unique_ptr<RoundManager> rounds_;
  std::map<std::string, std::string> credentials_;  // by worker id
  std::string run_id_;
};

// Issue 50, finding 4: a leader that joined declaring 1024 ranks could weigh 1024 alone (one
// member's zero deltas froze the model). A claim beyond what it declared is refused; within
// it, the leader weighs the ranks of its node the coordinator saw join (ControlPlane's
// LiveLeaders, tested there), and its header is taken at that weight.
// Issue 54: a node leader's checkpoint offered as the run's model (docs/design.md,
// "Checkpoints"). Refused with the field named when it does not fit the run, and while the
// coordinator holds a model it may not replace; taken
// by a coordinator that holds none (a restart without model.bin), an older round committed
// again as the next one, and replaced by a newer checkpoint until a round commits on it; a
// round open on the model it replaces is aborted.
TEST_F(RoundManagerTest, ACheckpointIsTakenOnlyWhereItIsTheNewestModel) {
  Start({}, "star");
  StarRound(1);
  StarRound(2);  // the run is at round 2, global step 16
  EXPECT_THAT(OfferCheckpoint(2, 16, 3.0f),
              StatusIs(absl::StatusCode::kAlreadyExists, "already set"));  // its own
  EXPECT_THAT(
      OfferCheckpoint(3, 24, 3.0f),  // (the rest of CheckCheckpointOffer: restore_plan_test)
      StatusIs(absl::StatusCode::kFailedPrecondition, "checkpoint_round"));
  v1::InitModelHeader plain;
  plain.set_run_id(run_id_);
  plain.set_member_id("n/0");
  plain.set_member_credential(credentials_["n/0"]);
  plain.set_vector_length(kValues);
  plain.set_checkpoint_round(1);
  EXPECT_THAT(rounds_->BeginInit(plain),
              StatusIs(absl::StatusCode::kInvalidArgument, "from_checkpoint"));

  // The coordinator restarts without its model: an older checkpoint comes back as round 3, at
  // its own global step.
  RoundManager::Options options;
  options.clock = clock_.AsFunction();
  rounds_ = std::make_unique<RoundManager>(plane_.get(), options);
  absl::StatusOr<v1::InitModelResponse> taken = OfferCheckpoint(1, 8, 3.0f);
  ASSERT_THAT(taken, IsOk());
  EXPECT_EQ(taken->round(), 3);
  EXPECT_EQ(taken->global_step(), 8);
  EXPECT_EQ(plane_->Run().round(), 3);
  EXPECT_EQ(plane_->Run().global_step(), 8);
  absl::StatusOr<RoundManager::ModelSnapshot> model = rounds_->FetchModel(run_id_);
  ASSERT_THAT(model, IsOk());
  EXPECT_EQ((*model->values)[0], 3.0f);
  EXPECT_THAT(OfferCheckpoint(1, 8, 4.0f),
              StatusIs(absl::StatusCode::kAlreadyExists, "already set"));  // not newer

  // A newer one replaces it, and aborts the round open on it.
  auto member = std::make_shared<FakeMember>();
  ASSERT_THAT(rounds_->Join(Header(4), member), IsOk());
  ASSERT_THAT(OfferCheckpoint(2, 16, 5.0f), IsOk());
  EXPECT_TRUE(member->closed());
  EXPECT_EQ(plane_->Run().round(), 4);
  EXPECT_EQ(plane_->Run().global_step(), 16);
  model = rounds_->FetchModel(run_id_);
  ASSERT_THAT(model, IsOk());
  EXPECT_EQ((*model->values)[0], 5.0f);
  bool named = false;
  const v1::CoordinatorStatus status = plane_->Status();
  for (const v1::Event& event : status.events()) {
    named |=
        event.kind() == "model_restored" && absl::StrContains(event.text(), "n/0's checkpoint");
  }
  EXPECT_TRUE(named);

  // Once a round commits on it, no checkpoint replaces it.
  StarRound(5);
  EXPECT_EQ(plane_->Run().round(), 5);
  EXPECT_THAT(OfferCheckpoint(4, 16, 6.0f),
              StatusIs(absl::StatusCode::kAlreadyExists, "already set"));
}

TEST_F(RoundManagerTest, AClaimBeyondTheDeclaredRanksIsRefusedAndOneWithinItTaken) {
  Start(RoundManager::Options(), "star");
  v1::JoinRequest join;
  join.mutable_identity()->set_node_name("big");
  join.mutable_identity()->set_local_world_size(1024);
  JoinMember(join);
  v1::SyncHeader claim = Header(1, "big/0");
  claim.set_num_workers(1024);
  claim.set_weight(1024);
  EXPECT_THAT(rounds_->Join(claim, std::make_shared<FakeMember>()), IsOk());
  claim.set_num_workers(1025);
  claim.set_weight(1025);
  EXPECT_THAT(rounds_->Join(claim, std::make_shared<FakeMember>()),
              StatusIs(absl::StatusCode::kInvalidArgument, "num_workers: must be in [1, 1024]"));
}

// A commit does not wait for the disk (issue 54): while its model is being saved, the members
// hear of the commit, the run record says its round and the model is handed out. A coordinator
// that restarts before the save ends finds model.bin older than the record: it commits the saved
// model again as the next round, at its own global step, and the members adopt it as stale ones.
TEST_F(RoundManagerTest, ACommitIsAnnouncedBeforeItsModelIsOnDiskAndARestartGoesOnFromTheSaved) {
  RoundManager::Options options = SlowDisk("slow-disk");
  Start(options, "star");
  std::shared_ptr<FakeMember> member = StarRound(1);
  saving_.WaitForNotification();
  EXPECT_TRUE(WaitFor([&] { return member->committed(); }, absl::Seconds(5)));
  EXPECT_EQ(plane_->Run().round(), 1);
  EXPECT_EQ(plane_->Run().global_step(), 8);
  absl::StatusOr<RoundManager::ModelSnapshot> model = rounds_->FetchModel("");
  ASSERT_THAT(model, IsOk());
  EXPECT_EQ(model->round, 1);
  EXPECT_FLOAT_EQ((*model->values)[0], 1.5f);
  EXPECT_EQ(model->digest, DigestOf(*model));  // kept at the commit, not computed per fetch

  // A coordinator started on the folder now (the old one's save still blocked) finds round 0.
  RoundManager::Options again;
  again.state = Writer("slow-disk");
  RoundManager restarted(plane_.get(), again);
  ASSERT_THAT(restarted.Restore(), IsOk());
  EXPECT_EQ(plane_->Run().round(), 2);
  EXPECT_EQ(plane_->Run().global_step(), 0);
  absl::StatusOr<RoundManager::ModelSnapshot> restored = restarted.FetchModel("");
  ASSERT_THAT(restored, IsOk());
  EXPECT_EQ(restored->round, 2);
  EXPECT_EQ(restored->global_step, 0);
  EXPECT_FLOAT_EQ((*restored->values)[0], 1.0f);  // the initial model, the one on disk
  EXPECT_EQ(restored->digest, DigestOf(*restored));
  // The member, which holds round 1, offers round 2: it is stale, and told the model to adopt.
  auto ahead = std::make_shared<FakeMember>();
  EXPECT_THAT(restarted.Join(Header(2), ahead),
              StatusIs(absl::StatusCode::kFailedPrecondition, "stale"));
  bool told = false;
  for (const v1::SyncResponse& m : ahead->messages()) {
    if (m.has_stale()) {
      told = true;
      EXPECT_EQ(m.stale().committed_round(), 2);
      EXPECT_EQ(m.stale().global_step(), 0);
    }
  }
  EXPECT_TRUE(told);
  bool warned = false;
  const v1::CoordinatorStatus status = plane_->Status();
  for (const v1::Event& event : status.events()) {
    if (event.kind() == "model_restored") {
      warned = event.severity() == v1::EVENT_SEVERITY_WARNING &&
               absl::StrContains(event.text(), "rounds 1 to 1 were committed after it");
    }
  }
  EXPECT_TRUE(warned);
  release_.Notify();
}

// A member never holds a round the run record has not (issue 54, the image test's restart): a
// commit is announced only once state.textproto holds it, and meanwhile a member that missed
// the round is asked to try again rather than told to adopt it.
TEST_F(RoundManagerTest, ACommitIsAnnouncedOnlyOnceTheRunRecordHoldsIt) {
  auto hold = std::make_shared<std::atomic<bool>>(false);  // shared with the writer's hook
  RoundManager::Options options;
  options.state = Writer("record-first", [hold, this](const std::string& file) {
    if (file != "state.textproto" || !*hold) return;
    if (!saving_.HasBeenNotified()) saving_.Notify();
    release_.WaitForNotification();
  });
  NewPlane(options.state);
  Start(options, "star");
  *hold = true;
  std::shared_ptr<FakeMember> member = StarRound(1);
  saving_.WaitForNotification();
  EXPECT_FALSE(WaitFor([&] { return member->committed(); }, absl::Milliseconds(100)));
  JoinMember(NodeJoin("s"));
  auto late = std::make_shared<FakeMember>();
  EXPECT_THAT(rounds_->Join(Header(1, "s/0"), late),
              StatusIs(absl::StatusCode::kUnavailable, "round 1 is being committed"));
  release_.Notify();
  EXPECT_TRUE(WaitFor([&] { return member->committed(); }, absl::Seconds(5)));
  absl::StatusOr<std::optional<v1::SavedState>> saved = options.state->LoadState();
  ASSERT_THAT(saved, IsOk());
  ASSERT_TRUE(saved->has_value());
  EXPECT_EQ((*saved)->run().round(), 1);
  // The member that was asked to try again is not held to have failed: it is stale now.
  EXPECT_THAT(rounds_->Join(Header(1, "s/0"), late),
              StatusIs(absl::StatusCode::kFailedPrecondition, "stale"));
}

// One state writer for the run record and the model, as in the coordinator: while it is
// blocked inside the save of a commit's model, heartbeats, joins, lease expiry, status and the
// next commits go on (none of them waits for the disk).
TEST_F(RoundManagerTest, HeartbeatsJoinsStatusAndCommitsGoOnWhileTheWriterIsBlockedInASave) {
  // Every write goes through but the save of round 1's model (the second model.bin), which
  // waits for release_. (Shared with the hook: the writer outlives this body.)
  auto models = std::make_shared<std::atomic<int>>(0);
  RoundManager::Options options;
  options.state = Writer("blocked-writer", [models, this](const std::string& file) {
    if (file == "model.bin" && ++*models == 2) {
      saving_.Notify();
      release_.WaitForNotification();
    }
  });
  NewPlane(options.state);
  Start(options, "star");
  std::shared_ptr<FakeMember> member = StarRound(1);
  saving_.WaitForNotification();
  EXPECT_TRUE(WaitFor([&] { return member->committed(); }, absl::Seconds(5)));
  std::shared_ptr<FakeMember> second = StarRound(2);
  EXPECT_TRUE(WaitFor([&] { return second->committed(); }, absl::Seconds(5)));
  EXPECT_EQ(plane_->Run().round(), 2);
  v1::HeartbeatRequest beat;
  beat.set_worker_id("n/0");
  beat.set_member_credential(credentials_["n/0"]);
  EXPECT_THAT(plane_->Heartbeat(beat), IsOk());
  JoinMember(NodeJoin("m"));
  EXPECT_EQ(plane_->Status().members_size(), 2);
  EXPECT_EQ(plane_->Status().run().round(), 2);
  clock_.Advance(absl::Seconds(60));  // every lease expires
  plane_->Tick();
  EXPECT_EQ(plane_->Status().members_size(), 0);
  release_.Notify();
}

// Issue 12, finding 1: StopRun racing a commit. Whichever comes first, the model file and the
// run record agree afterwards, and a coordinator restarts from the folder.
TEST_F(RoundManagerTest, AStopWhileACommitIsBeingSavedRecordsTheCommitFirst) {
  RoundManager::Options options = SlowDisk("stop-during-save");
  Start(options, "star");
  std::shared_ptr<FakeMember> member = StarRound(1);
  saving_.WaitForNotification();
  absl::StatusOr<v1::RunInfo> stopped = absl::UnknownError("");
  std::atomic<bool> stop_returned{false};
  std::thread stop([&] {
    stopped = rounds_->StopRun(v1::StopRunRequest());
    stop_returned = true;
  });
  // A stop that did not wait for the save would return now.
  EXPECT_FALSE(WaitFor([&] { return stop_returned.load(); }, absl::Milliseconds(50)));
  release_.Notify();
  stop.join();
  ASSERT_THAT(stopped, IsOk());
  EXPECT_EQ(stopped->state(), v1::RUN_STATE_STOPPED);
  EXPECT_EQ(stopped->round(), 1);  // the commit was recorded before the stop
  EXPECT_TRUE(member->committed());
  EXPECT_THAT(RestoredRound(), IsOk());
}

TEST_F(RoundManagerTest, AStopAbortsTheOpenRoundAndItsLastChunkCannotCommitIt) {
  RoundManager::Options options;
  options.state = Writer("stop-open-round");
  Start(options, "star");
  auto member = std::make_shared<FakeMember>();
  absl::StatusOr<int64_t> session = rounds_->Join(Header(1), member);
  ASSERT_THAT(session, IsOk());
  ASSERT_THAT(rounds_->StopRun(v1::StopRunRequest()), IsOk());
  EXPECT_TRUE(member->closed());
  const v1::Chunk chunk = DeltaChunk();
  EXPECT_FALSE(rounds_->AddChunk(*session, chunk).ok());  // the last chunk, too late
  EXPECT_FALSE(member->committed());
  EXPECT_EQ(plane_->Run().round(), 0);
  v1::CoordinatorStatus status = plane_->Status();
  ASSERT_EQ(status.recent_rounds_size(), 1);
  EXPECT_EQ(status.recent_rounds(0).reason(), "the run was stopped");
  absl::StatusOr<int64_t> restored = RestoredRound();
  ASSERT_THAT(restored, IsOk());
  EXPECT_EQ(*restored, 0);
}

// Issue 37, finding 10: a header of a run that was stopped (a member that has not learnt of
// the next run yet) is refused and leaves nothing behind: the next run's first round commits
// with that member.
TEST_F(RoundManagerTest, AHeaderOfAStoppedRunLeavesNothingInTheNextRun) {
  Start(RoundManager::Options(), "star");
  ASSERT_THAT(rounds_->StopRun(v1::StopRunRequest()), IsOk());
  auto late = std::make_shared<FakeMember>();
  EXPECT_THAT(rounds_->Join(Header(1), late),
              StatusIs(absl::StatusCode::kFailedPrecondition, "is not running"));
  StartRun("star");
  EXPECT_TRUE(StarRound(1)->committed());
  EXPECT_EQ(plane_->Run().round(), 1);
}

TEST_F(RoundManagerTest, ShardedHeadersWaitForTheLayoutAndAStaleOneGetsAStructuredAnswer) {
  Start(RoundManager::Options(), "sharded");
  auto member = std::make_shared<FakeMember>();
  // The only live leader serves no data plane: the round is laid out and aborts with a hint.
  EXPECT_THAT(rounds_->Join(Header(1), member), IsOk());
  EXPECT_TRUE(member->closed());
  v1::CoordinatorStatus status = plane_->Status();
  ASSERT_EQ(status.recent_rounds_size(), 1);
  EXPECT_EQ(status.recent_rounds(0).outcome(), v1::ROUND_OUTCOME_ABORTED);
  EXPECT_THAT(status.recent_rounds(0).reason(), ::testing::HasSubstr("--data_address"));
  EXPECT_EQ(status.recent_rounds(0).exchange(), v1::EXCHANGE_SHARDED);
}

// A leader whose header for the next round is admitted holds the committed round: it is named
// a holder at once, so a coordinator that knows no holders (restarted, say) learns them as the
// members sync.
TEST_F(RoundManagerTest, ALeaderAdmittedToTheNextRoundIsAHolderOfTheCommittedOne) {
  Start(RoundManager::Options(), "star");
  v1::JoinRequest join = NodeJoin("d");
  join.set_data_address("10.0.0.9:7000");
  JoinMember(join);
  EXPECT_TRUE(rounds_->Holders(run_id_, 0).empty());  // n/0 uploaded it but serves no data plane
  auto member = std::make_shared<FakeMember>();
  ASSERT_THAT(rounds_->Join(Header(1, "d/0"), member), IsOk());
  std::vector<v1::ModelHolder> holders = rounds_->Holders(run_id_, 0);
  ASSERT_EQ(holders.size(), 1u);
  EXPECT_EQ(holders[0].member_id(), "d/0");
  EXPECT_EQ(holders[0].data_address(), "10.0.0.9:7000");
  EXPECT_TRUE(rounds_->Holders(run_id_, 1).empty());  // not a round committed yet
}

// A sharded run's model whose holders all lost their leases (cut off, not dead) is not replaced
// by an older checkpoint at once: an offer waits a lease's time from the first one, so that a
// holder that joins again and syncs holds it again and no committed round is lost; one that
// does not come back within it leaves the checkpoint as the run's model.
TEST_F(RoundManagerTest, ACheckpointReplacesAnUnheldModelOnlyAfterALeasesTime) {
  RoundManager::Options options;
  options.clock = clock_.AsFunction();
  rounds_ = std::make_unique<RoundManager>(plane_.get(), options);
  v1::JoinRequest d = NodeJoin("d");
  d.set_data_address("10.0.0.9:7000");
  JoinMember(d);
  StartRun("sharded", 1, "d/0");  // d/0 holds round 0
  auto offer = [&] { return OfferCheckpoint(0, 0, 3.0f); };
  EXPECT_THAT(offer(), StatusIs(absl::StatusCode::kAlreadyExists, "already set"));
  PassWithLeaders(absl::Seconds(20), {"n/0"});  // d/0's lease expires
  EXPECT_THAT(offer(), StatusIs(absl::StatusCode::kUnavailable, "no live holder"));
  PassWithLeaders(absl::Seconds(10), {"n/0"});
  EXPECT_THAT(offer(), StatusIs(absl::StatusCode::kUnavailable, "no live holder"));
  // d joins again and syncs: it holds the model again.
  JoinMember(d);
  auto member = std::make_shared<FakeMember>();
  ASSERT_THAT(rounds_->Join(Header(1, "d/0"), member), IsOk());
  EXPECT_THAT(offer(), StatusIs(absl::StatusCode::kAlreadyExists, "already set"));
  // Cut off again, for good: the wait counts from the next offer.
  PassWithLeaders(absl::Seconds(20), {"n/0"});
  EXPECT_THAT(offer(), StatusIs(absl::StatusCode::kUnavailable, "no live holder"));
  PassWithLeaders(absl::Seconds(10), {"n/0"});
  EXPECT_THAT(offer(), StatusIs(absl::StatusCode::kUnavailable, "no live holder"));
  PassWithLeaders(absl::Seconds(5), {"n/0"});
  EXPECT_THAT(offer(), IsOk());
}

// Finding 2 of issue 37: a leader that joins and heartbeats but never syncs holds three rounds
// until their deadline, then sits them out (recorded, with an event) and the rounds commit
// without waiting for it; its header is refused, naming why; once its suspension is over it is
// expected again, and a round committed with it clears its record.
TEST_F(RoundManagerTest, ALeaderThatNeverSyncsSitsOutRoundsAndIsReadmittedLater) {
  Start(RoundManager::Options(), "star");  // suspend_after_failed_rounds: 3, for 30 s
  JoinMember(NodeJoin("s"));
  auto wait = [&](absl::Duration d) { PassWithLeaders(d, {"n/0", "s/0"}); };
  for (int64_t round = 1; round <= 3; ++round) {
    std::shared_ptr<FakeMember> member = StarRound(round);
    EXPECT_FALSE(member->committed()) << round;  // waiting for s/0
    wait(absl::Seconds(61));                     // the deadline drops s/0
    EXPECT_TRUE(member->committed()) << round;
  }
  std::shared_ptr<FakeMember> member = StarRound(4);  // s/0 is not waited for
  EXPECT_TRUE(WaitFor([&] { return member->committed(); }, absl::Seconds(5)));
  v1::CoordinatorStatus status = plane_->Status();
  const v1::RoundRecord& last = status.recent_rounds(status.recent_rounds_size() - 1);
  EXPECT_EQ(last.round(), 4);
  ASSERT_EQ(last.suspended_size(), 1);
  EXPECT_EQ(last.suspended(0).member_id(), "s/0");
  EXPECT_THAT(last.suspended(0).reason(), ::testing::HasSubstr("missed the round deadline"));
  auto has_event = [&](const std::string& kind) {
    const v1::CoordinatorStatus now = plane_->Status();
    for (const v1::Event& event : now.events()) {
      if (event.kind() == kind) return true;
    }
    return false;
  };
  EXPECT_TRUE(has_event("member_suspended"));
  auto silent = std::make_shared<FakeMember>();
  EXPECT_THAT(rounds_->Join(Header(5, "s/0"), silent),
              StatusIs(absl::StatusCode::kFailedPrecondition, "suspended from rounds"));
  // Its 30 s are over: readmitted, and expected in the next round again.
  wait(absl::Seconds(30));
  EXPECT_TRUE(has_event("member_readmitted"));
  member = StarRound(5);
  EXPECT_FALSE(member->committed());
  auto back = std::make_shared<FakeMember>();
  absl::StatusOr<int64_t> session = rounds_->Join(Header(5, "s/0"), back);
  ASSERT_THAT(session, IsOk());
  const v1::Chunk chunk = DeltaChunk();
  ASSERT_THAT(rounds_->AddChunk(*session, chunk), IsOk());
  EXPECT_TRUE(WaitFor([&] { return member->committed() && back->committed(); }, absl::Seconds(5)));
}

// Issue 50, finding 6: a leader that synced and then goes silent (heartbeating, no header)
// holds one round until its deadline, not three: the others all arrived. Once it joins again
// (a restarted process) its record is clean.
TEST_F(RoundManagerTest, ALeaderThatGoesSilentSitsOutAfterOneRound) {
  Start(RoundManager::Options(), "star");
  JoinMember(NodeJoin("s"));
  std::shared_ptr<FakeMember> member = StarRound(1);
  auto other = std::make_shared<FakeMember>();
  absl::StatusOr<int64_t> session = rounds_->Join(Header(1, "s/0"), other);
  ASSERT_THAT(session, IsOk());
  ASSERT_THAT(rounds_->AddChunk(*session, DeltaChunk()), IsOk());
  ASSERT_TRUE(WaitFor([&] { return member->committed() && other->committed(); }, absl::Seconds(5)));
  member = StarRound(2);  // s/0 is silent from here on
  EXPECT_FALSE(member->committed());
  PassWithLeaders(absl::Seconds(61), {"n/0", "s/0"});
  EXPECT_TRUE(member->committed());
  auto silent = std::make_shared<FakeMember>();
  EXPECT_THAT(rounds_->Join(Header(3, "s/0"), silent),
              StatusIs(absl::StatusCode::kFailedPrecondition, "suspended from rounds"));
  member = StarRound(3);  // not waited for
  EXPECT_TRUE(WaitFor([&] { return member->committed(); }, absl::Seconds(5)));
  // Restarted, it joins again (a new credential): the old process's record is not held
  // against it.
  JoinMember(NodeJoin("s"));
  auto restarted = std::make_shared<FakeMember>();
  EXPECT_THAT(rounds_->Join(Header(4, "s/0"), restarted), IsOk());
}

// Finding 5 of issue 37: a member's next header cancels its earlier stream (which its member
// may never read), and only that one.
TEST_F(RoundManagerTest, AMembersNewStreamCancelsItsEarlierOne) {
  Start(RoundManager::Options(), "star");
  std::shared_ptr<FakeMember> first = StarRound(1);
  EXPECT_TRUE(first->committed());
  std::shared_ptr<FakeMember> second = StarRound(2);
  EXPECT_TRUE(first->cancelled());
  EXPECT_FALSE(second->cancelled());
  EXPECT_TRUE(second->committed());
}

// Finding 6 of issue 37: a header in another member's name is refused before it touches that
// member's stream.
TEST_F(RoundManagerTest, AHeaderNeedsItsMembersCredential) {
  JoinMember(NodeJoin("m"));
  Start(RoundManager::Options(), "star");
  auto honest = std::make_shared<FakeMember>();
  absl::StatusOr<int64_t> session = rounds_->Join(Header(1, "n/0"), honest);
  ASSERT_THAT(session, IsOk());

  auto impostor = std::make_shared<FakeMember>();
  v1::SyncHeader forged = Header(1, "n/0");
  forged.set_member_credential(credentials_["m/0"]);
  EXPECT_THAT(rounds_->Join(forged, impostor),
              StatusIs(absl::StatusCode::kPermissionDenied, "member_credential"));
  forged.clear_member_credential();
  EXPECT_THAT(rounds_->Join(forged, impostor),
              StatusIs(absl::StatusCode::kPermissionDenied, "member_credential: required"));
  EXPECT_FALSE(honest->cancelled());

  absl::StatusOr<int64_t> other = rounds_->Join(Header(1, "m/0"), std::make_shared<FakeMember>());
  ASSERT_THAT(other, IsOk());
  const v1::Chunk chunk = DeltaChunk();
  ASSERT_THAT(rounds_->AddChunk(*session, chunk), IsOk());
  ASSERT_THAT(rounds_->AddChunk(*other, chunk), IsOk());
  ASSERT_TRUE(WaitFor([&] { return honest->committed(); }, absl::Seconds(5)));
  EXPECT_EQ(plane_->Run().round(), 1);
}

// Finding 9 of issue 37: an ended run's final model can still be fetched once the next run
// started (it was gone then), from memory and, with a state folder, from disk after a restart;
// the coordinator keeps the last three ended runs' models.
TEST_F(RoundManagerTest, TheFinalModelsOfTheLastThreeEndedRunsAreKept) {
  RoundManager::Options options;
  options.state = Writer("kept");
  Start(options, "star");
  std::shared_ptr<FakeMember> member = StarRound(1);
  ASSERT_TRUE(WaitFor([&] { return member->committed(); }, absl::Seconds(5)));
  const std::string first = run_id_;
  ASSERT_THAT(rounds_->StopRun(v1::StopRunRequest()), IsOk());
  StartRun("star");
  absl::StatusOr<RoundManager::ModelSnapshot> kept = rounds_->FetchModel(first);
  ASSERT_THAT(kept, IsOk());
  EXPECT_EQ(kept->run_id, first);
  EXPECT_EQ(kept->round, 1);
  EXPECT_FLOAT_EQ((*kept->values)[0], 1.5f);
  absl::StatusOr<RoundManager::ModelSnapshot> current = rounds_->FetchModel("");
  ASSERT_THAT(current, IsOk());
  EXPECT_EQ(current->run_id, run_id_);
  EXPECT_EQ(current->round, 0);

  // A restarted coordinator reads it from the state folder.
  RoundManager restarted(plane_.get(), options);
  EXPECT_TRUE(WaitFor([&] { return restarted.FetchModel(first).ok(); }, absl::Seconds(5)));
  kept = restarted.FetchModel(first);
  ASSERT_THAT(kept, IsOk());
  EXPECT_EQ(kept->round, 1);
  EXPECT_FLOAT_EQ((*kept->values)[0], 1.5f);
  EXPECT_EQ(kept->digest, DigestOf(*kept));
  EXPECT_THAT(restarted.FetchModel("../state"),
              StatusIs(absl::StatusCode::kNotFound, "no model of run"));
  EXPECT_THAT(restarted.FetchModel("run-never"),
              StatusIs(absl::StatusCode::kNotFound, "last 3 ended runs"));

  // Three more ended runs: the first one's model is no longer kept, in memory or on disk.
  for (int i = 0; i < 3; ++i) {
    ASSERT_THAT(rounds_->StopRun(v1::StopRunRequest()), IsOk());
    StartRun("star");
  }
  EXPECT_THAT(rounds_->FetchModel(first), StatusIs(absl::StatusCode::kNotFound, "no model of run"));
  EXPECT_TRUE(WaitFor([&] { return !restarted.FetchModel(first).ok(); }, absl::Seconds(5)));
}

// A round that aborts because too few members are left (quorum lost) is no member's failure:
// the member left alone keeps offering its rounds and is never suspended for it, and once the
// other member is back the round commits.
TEST_F(RoundManagerTest, RoundsAbortedForLostQuorumDoNotSuspendTheMembersLeft) {
  JoinMember(NodeJoin("m"));
  Start(RoundManager::Options(), "star", /*min_workers=*/2);
  LeavePreempted("m/0");
  for (int attempt = 0; attempt < 5; ++attempt) {
    auto alone = std::make_shared<FakeMember>();
    absl::StatusOr<int64_t> session = rounds_->Join(Header(1), alone);
    if (session.ok()) {
      const v1::Chunk chunk = DeltaChunk();
      rounds_->AddChunk(*session, chunk).IgnoreError();
    }
    rounds_->Tick();
    EXPECT_FALSE(alone->committed());
  }
  const v1::CoordinatorStatus status = plane_->Status();
  for (const v1::Event& event : status.events()) {
    EXPECT_NE(event.kind(), "member_suspended") << event.text();
  }
  JoinMember(NodeJoin("m"));
  EXPECT_TRUE(StarRoundOfTwo(1, "m/0", "n/0"));
  EXPECT_EQ(plane_->Run().round(), 1);
}

// Issue 50, finding 6: rounds that cannot commit (here: too few members for min_workers)
// opened and aborted at every step boundary, thousands a minute. After three aborts in a row
// with the same members, rounds back off (1 s, then doubling): headers meanwhile are answered
// ABORTED, saying so, and open no round; the time passing, or another member joining, ends it.
TEST_F(RoundManagerTest, RoundsThatCannotCommitBackOffUntilTimePassesOrTheMembersChange) {
  JoinMember(NodeJoin("m"));
  Start(RoundManager::Options(), "star", /*min_workers=*/2);
  LeavePreempted("m/0");
  // One header at a boundary: whether a round opened for it (it then aborts: quorum lost).
  auto try_round = [&] {
    auto alone = std::make_shared<FakeMember>();
    absl::StatusOr<int64_t> session = rounds_->Join(Header(1), alone);
    if (absl::IsAborted(session.status()) &&
        absl::StrContains(session.status().message(), "rounds back off")) {
      return false;
    }
    if (session.ok()) {
      const v1::Chunk chunk = DeltaChunk();
      rounds_->AddChunk(*session, chunk).IgnoreError();
    }
    rounds_->Tick();
    EXPECT_FALSE(alone->committed());
    return true;
  };
  int opened = 0;
  for (int i = 0; i < 20; ++i) opened += try_round() ? 1 : 0;
  EXPECT_EQ(opened, 3);
  clock_.Advance(absl::Seconds(1));
  EXPECT_TRUE(try_round());   // the back-off's 1 s are over: one more try
  EXPECT_FALSE(try_round());  // and 2 s now
  clock_.Advance(absl::Seconds(1));
  EXPECT_FALSE(try_round());
  clock_.Advance(absl::Seconds(1));
  EXPECT_TRUE(try_round());
  const v1::CoordinatorStatus status = plane_->Status();
  int backing_off = 0;
  for (const v1::Event& event : status.events()) {
    if (event.kind() == "rounds_backing_off") ++backing_off;
  }
  EXPECT_GE(backing_off, 1);
  // The other member is back: its round opens at once and commits.
  EXPECT_FALSE(try_round());
  JoinMember(NodeJoin("m"));
  EXPECT_TRUE(StarRoundOfTwo(1, "n/0", "m/0"));
}

}  // namespace
}  // namespace localsgd
