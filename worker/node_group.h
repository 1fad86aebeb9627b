#ifndef LOCALSGD_WORKER_NODE_GROUP_H_
#define LOCALSGD_WORKER_NODE_GROUP_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "worker/intra_node_averager.h"

namespace localsgd {

// The ranks of one node as a group that outlives the death of some of them (docs/design.md, "One
// round, both modes").
//
// The ranks meet in a node-local folder. Each holds an exclusive flock(2) on alive.<rank> for
// as long as it lives; the kernel drops it when the process dies, however it dies, so the
// others can tell a dead rank from a slow one at once, without a lease. When a collective
// fails, every surviving rank calls Reform(): it tears its group down (so that ranks still
// waiting on it fail too), says it is at generation g+1 (file g<g+1>.rank<rank>), waits until
// every other rank of the group has either said so or died, and forms the next group from
// those that said so, in the order of their original local ranks, through the file store
// g<g+1>.store. When all of a node's ranks are started again after a crash, rank 0 first
// removes the earlier incarnation's g* files and names itself (pid) in `incarnation`; the
// others wait for that before they read anything. Thread-compatible.
class NodeGroup {
 public:
  // Forms the averager of one generation: (store path, rank, size, peers_alive) -> averager.
  // peers_alive() is false once another member of the generation has died; an averager whose
  // collectives can block on a dead peer (NCCL) polls it. Valid as long as the averager.
  using Factory = std::function<absl::StatusOr<std::unique_ptr<IntraNodeAverager>>(
      const std::string& store, int rank, int size, std::function<bool()> peers_alive)>;

  // Joins the node's group as `local_rank` of `local_world` in `dir` (created if missing; the
  // same on every rank of the node, unique per run and node). ALREADY_EXISTS when another live
  // process holds `local_rank` there; the factory's error when the group cannot form.
  // A rank other than 0 waits up to `timeout` for local rank 0, then every rank up to `timeout`
  // for all the others to start (DEADLINE_EXCEEDED names those that did not); CANCELLED as
  // soon as `give_up()` (when given) says to stop waiting, e.g. once the run has ended.
  static absl::StatusOr<std::unique_ptr<NodeGroup>> Form(const std::string& dir, int local_rank,
                                                         int local_world, absl::Duration timeout,
                                                         Factory factory,
                                                         std::function<bool()> give_up = nullptr);
  ~NodeGroup();
  NodeGroup(const NodeGroup&) = delete;
  NodeGroup& operator=(const NodeGroup&) = delete;

  // The current generation's averager; its rank() and size() are this rank's place in the
  // group of the ranks left.
  IntraNodeAverager& averager() { return *averager_; }
  // Original local ranks of the current group's members, ascending (the group's rank i is
  // members()[i]).
  const std::vector<int>& members() const { return members_; }
  int local_rank() const { return local_rank_; }
  int generation() const { return generation_; }

  // After a collective of the current group failed: forms the group of the ranks that are
  // left (see above). DEADLINE_EXCEEDED, naming the ranks, when some rank neither came nor
  // died within the timeout; the factory's error when the new group cannot form.
  absl::Status Reform();

  // For when the run has ended: as this rank's group is destroyed, the last rank of the node
  // to leave removes the node's folder (ranks leaving at once take turns on a lock of the
  // folder, dropping their own liveness lock inside their turn). Without this call the folder
  // stays: a rank that exits while its run goes on may be started again and rejoin there.
  void RemoveFolderOnLeaving() { remove_folder_ = true; }
  // The same for a rank that leaves an ended run without a group (it never formed one): removes
  // the node folder `dir` unless some rank still holds its liveness lock there.
  static void RemoveFolderIfUnused(const std::string& dir);
  // The node folders in `parent` named `prefix`...`suffix`, other than `keep`, that no rank
  // uses any more: those of ended runs whose last ranks were killed, so that none was left to
  // remove them. Each is removed as above, unless some rank still holds its liveness lock
  // there; a folder without any alive.<rank> (not a node folder) is left alone.
  static void RemoveUnusedFolders(const std::string& parent, absl::string_view prefix,
                                  absl::string_view suffix, absl::string_view keep);

 private:
  NodeGroup(std::string dir, int local_rank, int lock_fd, absl::Duration timeout, Factory factory);
  absl::Status FormGeneration();
  bool PeersAlive() const;

  const std::string dir_;
  const int local_rank_;
  const int lock_fd_;
  const absl::Duration timeout_;
  const Factory factory_;
  std::vector<int> members_;
  int generation_ = 0;
  std::unique_ptr<IntraNodeAverager> averager_;
  bool remove_folder_ = false;
};

}  // namespace localsgd

#endif  // LOCALSGD_WORKER_NODE_GROUP_H_
