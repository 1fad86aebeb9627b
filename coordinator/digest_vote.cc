#include "coordinator/digest_vote.h"

#include <utility>

namespace localsgd {

DigestVote VoteOnDigests(const std::vector<DigestBallot>& ballots,
                         const std::vector<std::optional<DigestPair>>& tie_breakers) {
  DigestVote vote;
  const size_t ranges = tie_breakers.size();
  for (size_t s = 0; s < ranges; ++s) {
    std::optional<DigestPair> agreed = tie_breakers[s];
    for (const DigestBallot& ballot : ballots) {
      if (s >= ballot.range_digests.size()) continue;
      int same = 0;
      for (const DigestBallot& other : ballots) {
        same += s < other.range_digests.size() && other.range_digests[s] == ballot.range_digests[s];
      }
      if (2 * same > static_cast<int>(ballots.size())) {
        agreed = ballot.range_digests[s];
        break;
      }
    }
    vote.agreed.push_back(agreed);
  }
  for (const DigestBallot& ballot : ballots) {
    DigestVote::Differing differing{ballot.member_id, {}};
    for (size_t s = 0; s < ranges; ++s) {
      if (!vote.agreed[s].has_value() || s >= ballot.range_digests.size() ||
          ballot.range_digests[s] != *vote.agreed[s]) {
        differing.ranges.push_back(static_cast<int>(s));
      }
    }
    if (!differing.ranges.empty()) vote.differing.push_back(std::move(differing));
  }
  return vote;
}

}  // namespace localsgd
