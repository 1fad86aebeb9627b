#include "worker/members_behind.h"

namespace localsgd {

bool MembersBehind(const v1::RunInfo& run, const std::string& self) {
  if (run.state() != v1::RUN_STATE_COMPLETED && run.state() != v1::RUN_STATE_STOPPED &&
      run.state() != v1::RUN_STATE_FAILED) {
    return false;
  }
  for (const v1::MemberResult& member : run.member_results()) {
    if (member.worker_id() != self && member.left_reason().empty() &&
        member.step() < run.global_step()) {
      return true;
    }
  }
  return false;
}

}  // namespace localsgd
