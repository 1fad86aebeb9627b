#include "coordinator/state_writer.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/status_macros.h"

namespace localsgd {
namespace {

// A snapshot's momentum, empty when the outer optimizer has none.
absl::Span<const float> Momentum(const ModelSnapshot& model) {
  return model.momentum != nullptr ? absl::Span<const float>(*model.momentum)
                                   : absl::Span<const float>();
}

}  // namespace

absl::StatusOr<std::unique_ptr<StateWriter>> StateWriter::Open(Options options) {
  if (!(options.model_save_share > 0 && options.model_save_share <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model_save_share: ", options.model_save_share, " is not in (0, 1]"));
  }
  LOCALSGD_ASSIGN_OR_RETURN(ModelStore models, ModelStore::Open(options.state_dir));
  LOCALSGD_ASSIGN_OR_RETURN(RunStore runs, RunStore::Open(options.state_dir));
  return std::unique_ptr<StateWriter>(
      new StateWriter(std::move(options), std::move(models), std::move(runs)));
}

StateWriter::StateWriter(Options options, ModelStore models, RunStore runs)
    : options_(std::move(options)), models_(std::move(models)), runs_(std::move(runs)) {
  model_thread_ = std::thread([this] { ModelLoop(); });
  record_thread_ = std::thread([this] { RecordLoop(); });
}

StateWriter::~StateWriter() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  model_thread_.join();
  record_thread_.join();
}

absl::StatusOr<std::optional<v1::SavedState>> StateWriter::LoadState() {
  LOCALSGD_ASSIGN_OR_RETURN(std::optional<v1::SavedState> saved, runs_.Load());
  if (saved.has_value()) {
    MutexLock lock(&mu_);
    written_state_ = saved->SerializeAsString();
  }
  return saved;
}

absl::StatusOr<std::optional<ModelCheckpoint>> StateWriter::LoadModel() const {
  return models_.Load();
}

void StateWriter::SaveModel(std::shared_ptr<const ModelSnapshot> model,
                            std::function<void(const absl::Status&)> durable) {
  MutexLock lock(&mu_);
  Job job{std::move(model), std::move(durable)};
  if (later_.has_value()) {
    job.Supersede(std::move(*later_));
    later_.reset();
  }
  // A model still waiting in the queue is superseded: the newer one takes its place.
  for (Job& queued : queue_) {
    if (queued.archive) continue;
    job.Supersede(std::move(queued));
    queued = std::move(job);
    return;
  }
  queue_.push_back(std::move(job));
}

void StateWriter::SaveModelLater(std::shared_ptr<const ModelSnapshot> model,
                                 std::function<void(const absl::Status&)> durable) {
  MutexLock lock(&mu_);
  Job job{std::move(model), std::move(durable)};
  if (later_.has_value()) job.Supersede(std::move(*later_));
  later_ = std::move(job);
}

void StateWriter::FlushModel() {
  MutexLock lock(&mu_);
  if (later_.has_value()) later_turn_ = absl::InfinitePast();
}

void StateWriter::Job::Supersede(Job other) {
  if (!other.durable) return;
  if (!durable) {
    durable = std::move(other.durable);
    return;
  }
  durable = [earlier = std::move(other.durable),
             later = std::move(durable)](const absl::Status& saved) {
    earlier(saved);
    later(saved);
  };
}

void StateWriter::ArchiveModel(std::shared_ptr<const ModelSnapshot> model) {
  MutexLock lock(&mu_);
  queue_.push_back(Job{std::move(model), nullptr, /*archive=*/true});
}

std::string StateWriter::ArchivePath(const std::string& run_id) const {
  return absl::StrCat(options_.state_dir, "/runs/", run_id, ".bin");
}

absl::StatusOr<std::optional<ModelCheckpoint>> StateWriter::LoadArchivedModel(
    const std::string& run_id) const {
  // Only a name the coordinator could have made is a file name here (never "../x").
  const bool run_id_like =
      !run_id.empty() && run_id[0] != '.' && std::all_of(run_id.begin(), run_id.end(), [](char c) {
        return absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.';
      });
  if (!run_id_like) return std::optional<ModelCheckpoint>();
  return ModelStore::At(ArchivePath(run_id)).Load();
}

void StateWriter::WriteArchive(const ModelSnapshot& model) {
  namespace fs = std::filesystem;
  const std::string folder = absl::StrCat(options_.state_dir, "/runs");
  absl::Status saved = MakeDirectories(folder);
  if (saved.ok()) {
    saved = ModelStore::At(ArchivePath(model.run_id))
                .Save(model.run_id, model.round, model.global_step, *model.values, Momentum(model));
  }
  if (!saved.ok()) {
    LogError(
        absl::StrCat("run ", model.run_id, ": cannot keep its final model: ", saved.ToString()));
    return;
  }
  // The newest kKeptRunModels stay.
  std::vector<std::pair<fs::file_time_type, fs::path>> kept;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(folder, error)) {
    if (entry.path().extension() != ".bin") continue;
    kept.emplace_back(entry.last_write_time(error), entry.path());
  }
  std::sort(kept.begin(), kept.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = kKeptRunModels; i < kept.size(); ++i) fs::remove(kept[i].second, error);
}

void StateWriter::SetStateSource(std::function<StateSnapshot()> source) {
  MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](StateWriter* w) ABSL_NO_THREAD_SAFETY_ANALYSIS { return !w->in_source_; }, this));
  source_ = std::move(source);
}

int64_t StateWriter::StateChanged() {
  MutexLock lock(&mu_);
  // One queued job writes every change made before it starts.
  if (!state_queued_) {
    records_.push_back(Job{});
    state_queued_ = true;
  }
  return ++state_requested_;
}

void StateWriter::SaveStateThen(std::function<void(const absl::Status&)> written) {
  MutexLock lock(&mu_);
  records_.push_back(Job{nullptr, std::move(written)});
  state_queued_ = true;
}

void StateWriter::AwaitState(int64_t ticket) {
  MutexLock lock(&mu_);
  auto written = [this, ticket]()
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return state_written_ >= ticket; };
  mu_.Await(absl::Condition(&written));
}

void StateWriter::RecordLoop() {
  while (true) {
    Job job;
    {
      MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !records_.empty() || stopping_;
      };
      mu_.Await(absl::Condition(&ready));
      if (records_.empty()) return;  // stopping, everything written
      job = std::move(records_.front());
      records_.pop_front();
    }
    const absl::Status written = WriteState();
    if (job.durable) job.durable(written);
  }
}

void StateWriter::ModelLoop() {
  while (true) {
    Job job;
    {
      MutexLock lock(&mu_);
      // A model waiting for its turn is due at its turn, or at once when stopping.
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !queue_.empty() || stopping_ || (later_.has_value() && absl::Now() >= later_turn_);
      };
      while (!ready()) {
        if (later_.has_value()) {
          mu_.AwaitWithTimeout(absl::Condition(&ready), later_turn_ - absl::Now());
        } else {
          mu_.Await(absl::Condition(&ready));
        }
      }
      if (!queue_.empty()) {
        job = std::move(queue_.front());
        queue_.pop_front();
      } else if (later_.has_value()) {
        job = std::move(*later_);
        later_.reset();
      } else {
        return;  // stopping, everything written
      }
    }
    if (job.archive) {
      if (options_.before_write) options_.before_write("runs");
      WriteArchive(*job.model);
      continue;
    }
    if (options_.before_write) options_.before_write("model.bin");
    const ModelSnapshot& model = *job.model;
    const absl::Time start = absl::Now();
    absl::Status saved =
        models_.Save(model.run_id, model.round, model.global_step, *model.values, Momentum(model));
    {
      MutexLock lock(&mu_);
      const absl::Duration took = absl::Now() - start;
      later_turn_ = absl::Now() + took * (1 / options_.model_save_share - 1);
    }
    if (!saved.ok()) {
      LogError(absl::StrCat("run ", model.run_id, ": cannot save the global model of round ",
                            model.round, ": ", saved.ToString()));
    }
    if (job.durable) job.durable(saved);
  }
}

absl::Status StateWriter::WriteState() {
  std::function<StateSnapshot()> source;
  int64_t ticket = 0;
  {
    MutexLock lock(&mu_);
    state_queued_ = false;
    ticket = state_requested_;  // every change up to here is in what the source returns
    source = source_;
    in_source_ = source != nullptr;
  }
  std::optional<StateSnapshot> snapshot;
  if (source) snapshot = source();
  std::string serialized;
  v1::SavedState state;
  if (snapshot.has_value()) {
    *state.mutable_run() = std::move(snapshot->run);
    for (v1::MemberStatus& member : snapshot->members) *state.add_members() = std::move(member);
    for (v1::SavedCredential& credential : snapshot->credentials) {
      *state.add_credentials() = std::move(credential);
    }
    if (snapshot->history != nullptr) {
      for (const v1::RunInfo& run : *snapshot->history) *state.add_history() = run;
    }
    serialized = state.SerializeAsString();
  }
  bool unchanged = true;
  {
    MutexLock lock(&mu_);
    in_source_ = false;
    unchanged = !snapshot.has_value() || serialized == written_state_;
  }
  absl::Status status;
  if (!unchanged) {
    if (options_.before_write) options_.before_write("state.textproto");
    status = runs_.Save(state);
    if (!status.ok()) {
      LogError(absl::StrCat("cannot save the coordinator's state: ", status.ToString()));
    } else {
      MutexLock lock(&mu_);
      written_state_ = std::move(serialized);
    }
  }
  MutexLock lock(&mu_);
  state_written_ = std::max(state_written_, ticket);
  return status;
}

}  // namespace localsgd
