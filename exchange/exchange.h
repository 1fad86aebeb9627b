#ifndef LOCALSGD_EXCHANGE_EXCHANGE_H_
#define LOCALSGD_EXCHANGE_EXCHANGE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "exchange/held_model.h"
#include "exchange/sync_stream.h"

namespace localsgd {

// One round as a node leader sees it: the node's parameters in, and global[r-1] (with the
// outer momentum when the exchange keeps it) to turn into global[r]; with fragments
// (RunSpec.fragments), those of the round's fragment only.
struct ExchangeRound {
  int64_t round = 0;
  int64_t step = 0;  // the node's optimizer steps so far
  absl::Span<const float> params;
  absl::Span<float> global;
  absl::Span<float> momentum;  // empty unless keeps_momentum()
  absl::Duration timeout;
  int fragment = 0;  // RunSpec.fragments: the fragment the spans are of
  // The whole model's values (0: the spans'): with fragments, what bounds a peer's stream in
  // any round (the rounds' fragments differ in size).
  int64_t model_values = 0;
  // Where `global` and `momentum` lie, when others read them (the node's data plane serves
  // them): the commit changes them through HeldModel::Commit. Null: in place, unguarded.
  HeldModel* held = nullptr;
  // With `held`: where `global` and `momentum` begin in its values (the fragment's first).
  int64_t offset = 0;
};

struct ExchangeResult {
  int64_t round = 0;
  int64_t global_step = 0;
  std::vector<std::string> members;  // whose deltas are in the update
};

// A node leader's side of a round (docs/design.md, "The exchange layer"), on flat float
// vectors (no LibTorch): StarExchange (through the coordinator) or ShardedExchange (between
// the leaders, all-to-all or in a ring). NodeLeader holds one for the run; each owns its
// scratch buffers. One Run at a time.
class Exchange {
 public:
  virtual ~Exchange() = default;
  // One round. On commit `global` becomes global[r] (and `momentum` advances); on any error
  // both are unchanged. A stale round's error carries the StaleRound (StaleRoundOf); ABORTED:
  // the round ended without an update for this member (keep the local weights and sync at
  // the next boundary).
  virtual absl::StatusOr<ExchangeResult> Run(const SyncMember& member,
                                             const ExchangeRound& round) = 0;
  // Whether members keep the outer momentum (and fetch it with the model).
  virtual bool keeps_momentum() const = 0;
};

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_EXCHANGE_H_
