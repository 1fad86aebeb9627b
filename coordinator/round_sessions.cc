#include "coordinator/round_sessions.h"

#include <utility>

namespace localsgd {

void RoundSessions::Supersede(const std::string& member_id,
                              const std::shared_ptr<RoundMember>& stream) {
  std::weak_ptr<RoundMember>& latest = latest_[member_id];
  if (std::shared_ptr<RoundMember> earlier = latest.lock(); earlier && earlier != stream) {
    earlier->Cancel();
    Touch(earlier);
  }
  latest = stream;
}

int64_t RoundSessions::Add(const std::string& member_id, std::shared_ptr<RoundMember> stream) {
  const int64_t id = next_++;
  sessions_[id] = MemberStream{member_id, std::move(stream)};
  return id;
}

std::string RoundSessions::MemberOf(int64_t session) const {
  auto it = sessions_.find(session);
  return it == sessions_.end() ? std::string() : it->second.member_id;
}

int64_t RoundSessions::SessionOf(const std::string& member_id) const {
  for (const auto& [id, session] : sessions_) {
    if (session.member_id == member_id) return id;
  }
  return -1;
}

std::vector<int64_t> RoundSessions::Ids() const {
  std::vector<int64_t> ids;
  for (const auto& [id, session] : sessions_) ids.push_back(id);
  return ids;
}

std::shared_ptr<std::vector<float>> RoundSessions::Scratch(int64_t session) const {
  auto it = sessions_.find(session);
  return it == sessions_.end() ? nullptr : it->second.scratch;
}

bool RoundSessions::Send(int64_t session, std::shared_ptr<const v1::SyncResponse> message) {
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return false;
  it->second.stream->Enqueue(std::move(message));
  Touch(it->second.stream);
  return true;
}

void RoundSessions::End(int64_t session, const absl::Status& status) {
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  it->second.stream->Close(status);
  Touch(it->second.stream);
  sessions_.erase(it);
}

std::vector<std::shared_ptr<RoundMember>> RoundSessions::TakeAll() {
  std::vector<std::shared_ptr<RoundMember>> streams;
  for (auto& [id, session] : sessions_) streams.push_back(std::move(session.stream));
  sessions_.clear();
  return streams;
}

void RoundSessions::EndAll(const absl::Status& status) {
  for (const std::shared_ptr<RoundMember>& stream : TakeAll()) {
    stream->Close(status);
    Touch(stream);
  }
}

}  // namespace localsgd
