#include "coordinator/membership.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/member_credential.h"
#include "common/proto_time.h"
#include "common/run_spec.h"
#include "common/status_macros.h"
#include "common/status_util.h"

namespace localsgd {
namespace {

constexpr size_t kMaxNodeNameLength = 128;
constexpr size_t kMaxHostnameLength = 255;

absl::Status ValidateIdentity(const v1::JoinRequest& request) {
  if (!request.has_identity()) return absl::InvalidArgumentError("identity: required");
  const v1::WorkerIdentity& id = request.identity();
  if (id.node_name().empty() || id.node_name().size() > kMaxNodeNameLength) {
    return absl::InvalidArgumentError("identity.node_name: must be 1 to 128 characters");
  }
  for (char c : id.node_name()) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '-') {
      return absl::InvalidArgumentError(
          absl::StrCat("identity.node_name: ", Quoted(id.node_name()),
                       " may only hold letters, digits, '.', '_' and '-'"));
    }
  }
  if (id.local_world_size() < 1 || id.local_world_size() > kMaxRanksPerNode) {
    return absl::InvalidArgumentError(absl::StrCat("identity.local_world_size: must be in [1, ",
                                                   kMaxRanksPerNode, "], got ",
                                                   id.local_world_size()));
  }
  if (id.local_rank() < 0 || id.local_rank() >= id.local_world_size()) {
    return absl::InvalidArgumentError(absl::StrCat("identity.local_rank: must be in [0, ",
                                                   id.local_world_size() - 1, "], got ",
                                                   id.local_rank()));
  }
  if (request.hostname().size() > kMaxHostnameLength) {
    return absl::InvalidArgumentError("hostname: longer than 255 characters");
  }
  if (request.pid() < 0) return absl::InvalidArgumentError("pid: must be >= 0");
  return absl::OkStatus();
}

}  // namespace

Membership::Membership(Options options, std::function<absl::Time()> clock)
    : options_(options), clock_(std::move(clock)) {}

std::string Membership::WorkerId(const v1::WorkerIdentity& identity) {
  return absl::StrCat(identity.node_name(), "/", identity.local_rank());
}

absl::StatusOr<Membership::Joined> Membership::Join(const v1::JoinRequest& request) {
  LOCALSGD_RETURN_IF_ERROR(ValidateIdentity(request));
  const v1::WorkerIdentity& identity = request.identity();
  std::string id = WorkerId(identity);
  for (const auto& [other_id, other] : members_) {
    if (other_id != id && other.identity.node_name() == identity.node_name() &&
        other.identity.local_world_size() != identity.local_world_size()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "identity.local_world_size: ", identity.local_world_size(), " disagrees with ",
          other.identity.local_world_size(), " of live member ", other_id));
    }
  }
  // Local rank 0 leads by default, unless another member of its node took the lead (a rank 0
  // started again while its node's group runs on without it does not take it back).
  bool leader = request.node_leader();
  if (identity.local_rank() == 0 && !leader) {
    leader = std::none_of(members_.begin(), members_.end(), [&](const auto& entry) {
      return entry.first != id && entry.second.node_leader &&
             entry.second.identity.node_name() == identity.node_name();
    });
  }
  if (!request.replaces().empty()) {
    const std::string node_prefix = absl::StrCat(identity.node_name(), "/");
    if (!request.node_leader()) {
      return absl::InvalidArgumentError("replaces: only with node_leader");
    }
    if (!absl::StartsWith(request.replaces(), node_prefix) || request.replaces() == id) {
      return absl::InvalidArgumentError(absl::StrCat("replaces: ", Quoted(request.replaces()),
                                                     " is not another worker of node ",
                                                     Quoted(identity.node_name())));
    }
  }
  auto it = members_.find(id);
  if (it == members_.end() && size() >= options_.max_members) {
    return absl::ResourceExhaustedError(
        absl::StrCat("membership is full (", options_.max_members, " members)"));
  }
  const bool same_process = it != members_.end() && it->second.pid == request.pid() &&
                            it->second.hostname == request.hostname();
  absl::Time now = clock_();
  Member& member = members_[id];
  if (it == members_.end()) {
    member.worker_id = id;
    member.join_time = now;
  }
  member.identity = identity;
  member.hostname = request.hostname();
  member.pid = request.pid();
  member.data_address = request.data_address();
  // A new process (or the same one after its lease ran out) says again with its heartbeats
  // whether it finished; a restarted worker has not.
  member.finished = false;
  member.generation = ++generations_[id];
  Joined joined{{}, NewMemberCredential(), same_process};
  member.credential_digest = MemberCredentialDigest(joined.credential);
  member.last_seen = now;
  member.node_leader = leader;
  if (leader) {
    for (auto& [other_id, other] : members_) {
      if (other_id != id && other.identity.node_name() == identity.node_name()) {
        other.node_leader = false;
      }
    }
    if (!request.replaces().empty()) members_.erase(request.replaces());
  }
  joined.member = members_.at(id);
  return joined;
}

absl::Status Membership::Restore(const v1::MemberStatus& saved,
                                 const std::string& credential_digest) {
  v1::JoinRequest request;
  *request.mutable_identity() = saved.identity();
  request.set_hostname(saved.hostname());
  request.set_pid(saved.pid());
  request.set_data_address(saved.data_address());
  request.set_node_leader(saved.node_leader());
  LOCALSGD_ASSIGN_OR_RETURN(Joined joined, Join(request));
  Member& restored = members_[joined.member.worker_id];
  generations_[restored.worker_id] = std::max(saved.generation(), restored.generation);
  restored.generation = generations_[restored.worker_id];
  restored.credential_digest = credential_digest;
  if (saved.has_join_time()) restored.join_time = FromProtoTime(saved.join_time());
  return absl::OkStatus();
}

absl::Status Membership::Heartbeat(const v1::HeartbeatRequest& request) {
  if (request.worker_id().empty()) return absl::InvalidArgumentError("worker_id: required");
  if (request.step() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("step: must be >= 0, got ", request.step()));
  }
  if (!std::isfinite(request.samples_per_second()) || request.samples_per_second() < 0) {
    return absl::InvalidArgumentError("samples_per_second: must be finite and >= 0");
  }
  if (!(request.test_accuracy() >= 0 && request.test_accuracy() <= 1)) {
    return absl::InvalidArgumentError("test_accuracy: must be in [0, 1]");
  }
  if (request.unsynced_steps() < 0 || request.unsynced_steps() > request.step()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsynced_steps: must be in [0, step = ", request.step(), "], got ",
                     request.unsynced_steps()));
  }
  if (request.has_checkpoint()) {
    const v1::CheckpointInfo& checkpoint = request.checkpoint();
    if (checkpoint.round() < 0 || checkpoint.global_step() < 0) {
      return absl::InvalidArgumentError("checkpoint: round and global_step must be >= 0");
    }
    if (checkpoint.path().empty() || checkpoint.path().size() > 4096) {
      return absl::InvalidArgumentError("checkpoint.path: must be 1 to 4096 bytes");
    }
    if (checkpoint.run_id().empty() || checkpoint.run_id().size() > 256 ||
        !checkpoint.worker_id().empty()) {
      return absl::InvalidArgumentError(
          "checkpoint: run_id must be 1 to 256 bytes, worker_id empty (the coordinator fills it)");
    }
  }
  LOCALSGD_RETURN_IF_ERROR(Authenticate(request.worker_id(), request.member_credential()));
  Member& member = members_.at(request.worker_id());
  if (request.has_checkpoint()) {
    member.checkpoint = request.checkpoint();
    member.checkpoint.set_worker_id(request.worker_id());
  }
  member.step = request.step();
  member.loss = request.loss();
  member.samples_per_second = request.samples_per_second();
  member.finished = request.finished();
  member.test_accuracy = request.test_accuracy();
  member.unsynced_steps = request.unsynced_steps();
  member.last_seen = clock_();
  return absl::OkStatus();
}

absl::Status Membership::Authenticate(const std::string& worker_id,
                                      absl::string_view credential) const {
  if (worker_id.empty()) return absl::InvalidArgumentError("worker_id: required");
  auto it = members_.find(worker_id);
  if (it == members_.end()) {
    return absl::NotFoundError(absl::StrCat("worker_id: ", Quoted(worker_id),
                                            " is not a member (lease expired?); join again"));
  }
  if (credential.empty()) {
    return absl::PermissionDeniedError(
        absl::StrCat("member_credential: required (the one Join gave ", Quoted(worker_id), ")"));
  }
  if (!MemberCredentialMatches(credential, it->second.credential_digest)) {
    return absl::PermissionDeniedError(
        absl::StrCat("member_credential: not the one the latest Join gave ", Quoted(worker_id),
                     " (generation ", it->second.generation, ")"));
  }
  return absl::OkStatus();
}

absl::Status Membership::Leave(const std::string& worker_id, absl::string_view credential) {
  LOCALSGD_RETURN_IF_ERROR(Authenticate(worker_id, credential));
  members_.erase(worker_id);
  return absl::OkStatus();
}

std::vector<std::string> Membership::ExpireLeases() {
  absl::Time now = clock_();
  std::vector<std::string> expired;
  for (auto it = members_.begin(); it != members_.end();) {
    if (now - it->second.last_seen > options_.lease_timeout) {
      expired.push_back(it->first);
      it = members_.erase(it);
    } else {
      ++it;
    }
  }
  return expired;
}

std::vector<Member> Membership::Members() const {
  std::vector<Member> out;
  out.reserve(members_.size());
  for (const auto& [id, member] : members_) out.push_back(member);
  return out;
}

const Member* Membership::Find(const std::string& worker_id) const {
  auto it = members_.find(worker_id);
  return it == members_.end() ? nullptr : &it->second;
}

}  // namespace localsgd
