#ifndef LOCALSGD_COORDINATOR_DIGEST_VOTE_H_
#define LOCALSGD_COORDINATOR_DIGEST_VOTE_H_

#include <optional>
#include <string>
#include <vector>

#include "exchange/model_digest.h"

namespace localsgd {

// The copies of global[r] a sharded round would commit, as the members report them
// (docs/design.md, "Digests"): for each range, the digest a strict majority of the members
// delivered; without one, the range's tie-breaker (its owner's ballot), if any. A pure function: no
// clock, no network.
struct DigestBallot {
  std::string member_id;
  std::vector<DigestPair> range_digests;  // by range
};
struct DigestVote {
  std::vector<std::optional<DigestPair>> agreed;  // by range; nullopt: no majority, no tie-break
  struct Differing {
    std::string member_id;
    std::vector<int> ranges;  // where its digest is not the agreed one
  };
  std::vector<Differing> differing;  // in ballot order
};
// `ballots`: every member still in the round, each with one digest per range; `tie_breakers`:
// by range, the digest that stands without a majority (nullopt: none).
DigestVote VoteOnDigests(const std::vector<DigestBallot>& ballots,
                         const std::vector<std::optional<DigestPair>>& tie_breakers);

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_DIGEST_VOTE_H_
