#include "coordinator/suspensions.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace localsgd {

std::vector<Suspensions::Verdict> Suspensions::RoundEnded(absl::Time now,
                                                          const std::vector<std::string>& committed,
                                                          const std::vector<RoundFault>& faults) {
  if (options_.strikes <= 0) return {};
  for (const std::string& id : committed) records_.erase(id);
  // Who is to blame, once per member and round.
  std::map<std::string, std::string> blamed;
  std::set<std::string> silent;
  for (const RoundFault& fault : faults) {
    if (fault.reported_by.empty()) {
      blamed.emplace(fault.member_id, fault.reason);
      if (fault.silent) silent.insert(fault.member_id);
      continue;
    }
    Record& claimant = records_[fault.reported_by];
    claimant.owners_named.insert(fault.member_id);
    if (claimant.owners_named.size() >= 2) {
      blamed.emplace(fault.reported_by,
                     absl::StrCat("reported ", claimant.owners_named.size(),
                                  " different owners unreachable (last: ", fault.member_id, ")"));
    } else {
      blamed.emplace(fault.member_id,
                     absl::StrCat(fault.reported_by, " could not reach it: ", fault.reason));
    }
  }
  std::vector<Verdict> verdicts;
  for (auto& [id, reason] : blamed) {
    Record& record = records_[id];
    if (record.until > now) continue;  // suspended already
    ++record.strikes;
    record.reason = std::move(reason);
    if (!record.probation && record.strikes < options_.strikes && silent.count(id) == 0) continue;
    absl::Duration length = options_.first;
    for (int i = 0; i < record.suspensions && length < options_.longest; ++i) length *= 2;
    length = std::min(length, options_.longest);
    verdicts.push_back(Verdict{id, length, record.strikes, record.reason});
    record.until = now + length;
    record.strikes = 0;
    record.probation = true;
    record.announced = false;
    ++record.suspensions;
  }
  return verdicts;
}

bool Suspensions::Suspended(const std::string& member_id, absl::Time now, std::string* why) const {
  auto it = records_.find(member_id);
  if (it == records_.end() || it->second.until <= now) return false;
  if (why != nullptr) {
    *why = absl::StrCat("suspended from rounds for another ",
                        absl::FormatDuration(absl::Ceil(it->second.until - now, absl::Seconds(1))),
                        " after failing rounds (last: ", it->second.reason, ")");
  }
  return true;
}

std::vector<std::string> Suspensions::TakeReadmitted(absl::Time now) {
  std::vector<std::string> readmitted;
  for (auto& [id, record] : records_) {
    if (!record.announced && record.until <= now) {
      record.announced = true;
      readmitted.push_back(id);
    }
  }
  return readmitted;
}

std::string Describe(const Suspensions::Verdict& verdict) {
  return absl::StrCat(verdict.member_id, " sits out rounds for ",
                      absl::FormatDuration(verdict.length), " after failing ",
                      verdict.failed_rounds, " round(s) in a row (last: ", verdict.reason, ")");
}

std::string Readmitted(const std::string& member_id) {
  return absl::StrCat(member_id,
                      " takes part in rounds again, on probation (its next failed round "
                      "suspends it again)");
}

}  // namespace localsgd
