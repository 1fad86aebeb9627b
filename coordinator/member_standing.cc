#include "coordinator/member_standing.h"

#include <utility>

namespace localsgd {
namespace {

Suspensions::Options SuspensionsFor(const v1::RunSpec& spec) {
  Suspensions::Options options;
  options.strikes = spec.suspend_after_failed_rounds();
  return options;
}

}  // namespace

MemberStanding::MemberStanding(const v1::RunSpec& spec) : suspensions_(SuspensionsFor(spec)) {}

void MemberStanding::Heard(const std::string& member_id, const std::string& credential) {
  if (auto [known, inserted] = credentials_.try_emplace(member_id, credential);
      !inserted && known->second != credential) {
    known->second = credential;
    suspensions_.Forget(member_id);
    heard_in_run_.erase(member_id);
  }
  heard_in_run_.insert(member_id);
  heard_since_commit_.insert(member_id);
}

void MemberStanding::RefuseBefore(const std::string& member_id, int64_t round, std::string reason) {
  refused_[member_id] = {round, std::move(reason)};
}

std::vector<std::pair<std::string, std::string>> MemberStanding::TakeRefusals(int64_t round) {
  std::vector<std::pair<std::string, std::string>> refusals;
  for (auto& [member_id, refused] : refused_) {
    if (refused.first == round) refusals.emplace_back(member_id, std::move(refused.second));
  }
  refused_.clear();
  return refusals;
}

std::vector<Suspensions::Verdict> MemberStanding::RoundEnded(
    absl::Time now, const std::vector<std::string>& committed, std::vector<RoundFault> faults) {
  for (RoundFault& fault : faults) {
    fault.silent &=
        heard_in_run_.count(fault.member_id) > 0 && heard_since_commit_.count(fault.member_id) == 0;
  }
  if (!committed.empty()) heard_since_commit_.clear();
  return suspensions_.RoundEnded(now, committed, faults);
}

}  // namespace localsgd
