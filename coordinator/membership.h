#ifndef LOCALSGD_COORDINATOR_MEMBERSHIP_H_
#define LOCALSGD_COORDINATOR_MEMBERSHIP_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/localsgd/v1/coordinator.pb.h"

namespace localsgd {

// One live worker as the coordinator knows it.
struct Member {
  std::string worker_id;  // "<node_name>/<local_rank>"
  v1::WorkerIdentity identity;
  std::string hostname;
  int64_t pid = 0;
  std::string data_address;       // node leaders: where they serve the sharded data plane
  bool node_leader = false;       // its node's member of the rounds (JoinRequest.node_leader)
  int64_t generation = 0;         // how many times this identity has joined
  std::string credential_digest;  // of the credential its latest Join gave it
  int64_t step = 0;
  double loss = 0;
  double samples_per_second = 0;
  bool finished = false;
  double test_accuracy = 0;
  int64_t unsynced_steps = 0;
  v1::CheckpointInfo checkpoint;  // the newest its node wrote (empty path: none)
  absl::Time join_time;
  absl::Time last_seen;
};

// Workers and their leases. A worker is identified by (node name, local rank); Join gives it a
// lease that each Heartbeat renews; ExpireLeases removes those not renewed within the timeout.
// Joining again with the same identity returns the same worker id (its slot).
// Thread-compatible: the caller serialises access (ControlPlane holds a mutex).
class Membership {
 public:
  struct Options {
    absl::Duration lease_timeout = absl::Seconds(15);
    // Refuse new identities beyond this many live members (RESOURCE_EXHAUSTED).
    int max_members = 65536;
  };

  Membership(Options options, std::function<absl::Time()> clock);

  // A joined member and the credential only it was given (JoinResponse.member_credential).
  struct Joined {
    Member member;
    std::string credential;
    // The same process (host and pid) was a live member already: it joined again.
    bool same_process = false;
  };

  // Validates the request and adds (or refreshes) the member with a new credential, which
  // ends the previous generation's. INVALID_ARGUMENT names a bad identity field;
  // FAILED_PRECONDITION when local_world_size disagrees with the node's other live members. A
  // member that joins with node_leader (or as local rank 0 while no other member leads its
  // node) leads its node: that ends the leadership of the node's other members and removes
  // the one it `replaces` at once.
  absl::StatusOr<Joined> Join(const v1::JoinRequest& request);

  // Puts back a member saved by an earlier coordinator (identity, host, pid, generation, join
  // time, the digest of its credential) with a fresh lease, so that it counts while it
  // reconnects. Invalid saved identities are INVALID_ARGUMENT, as in Join.
  absl::Status Restore(const v1::MemberStatus& saved, const std::string& credential_digest);

  // OK when `worker_id` is a live member and `credential` is the one its latest Join gave it:
  // NOT_FOUND for an unknown (or expired) worker id, PERMISSION_DENIED naming
  // member_credential otherwise.
  absl::Status Authenticate(const std::string& worker_id, absl::string_view credential) const;

  // Renews the lease and records progress, once authenticated (as Authenticate).
  absl::Status Heartbeat(const v1::HeartbeatRequest& request);

  // Removes the member, once authenticated (as Authenticate).
  absl::Status Leave(const std::string& worker_id, absl::string_view credential);

  // Removes members whose last Join/Heartbeat is older than the lease timeout; returns their
  // ids.
  std::vector<std::string> ExpireLeases();

  // Live members ordered by worker id.
  std::vector<Member> Members() const;
  const Member* Find(const std::string& worker_id) const;
  int size() const { return static_cast<int>(members_.size()); }

  const Options& options() const { return options_; }

  static std::string WorkerId(const v1::WorkerIdentity& identity);

 private:
  Options options_;
  std::function<absl::Time()> clock_;
  std::map<std::string, Member> members_;
  // Survives Leave and expiry so a rejoining worker's generation keeps increasing.
  absl::flat_hash_map<std::string, int64_t> generations_;
};

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_MEMBERSHIP_H_
