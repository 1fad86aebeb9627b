// A delay line for the network-namespace harness (docs/development.md, "Links with a round
// trip"): holds every packet that netfilter queues to NFQUEUE `--queue` for `--delay_ms`, then
// accepts it, in the order the packets came. The harness queues each host's incoming packets
// (iptables INPUT), so the round trip between two hosts is the sum of their delays; the rate
// limit stays on egress (tc tbf). Holding packets on the sender's own egress would stall TCP
// (its small-queue limit counts packets held in the sending host).
//
// Speaks nfnetlink_queue directly: metadata-only copies (no payload crosses to user space),
// GSO packets queued whole, one batch verdict for every packet that is due. Runs until SIGTERM
// or SIGINT; writes `--ready_file` once the queue is bound, so the caller adds its iptables rule
// only then (a rule to a queue nobody holds drops every packet).
//
// Usage: delay_line --queue=N --delay_ms=D [--ready_file=PATH]
#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <linux/netlink.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

volatile sig_atomic_t stopping = 0;
void OnSignal(int) { stopping = 1; }

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "delay_line: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

// One nfnetlink_queue request under construction: netlink header, nfgenmsg, attributes.
class Request {
 public:
  Request(uint16_t type, uint16_t queue) {
    buffer_.resize(NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(nfgenmsg)));
    auto* header = reinterpret_cast<nlmsghdr*>(buffer_.data());
    header->nlmsg_type = (NFNL_SUBSYS_QUEUE << 8) | type;
    header->nlmsg_flags = NLM_F_REQUEST;
    auto* gen = reinterpret_cast<nfgenmsg*>(buffer_.data() + NLMSG_HDRLEN);
    gen->nfgen_family = AF_UNSPEC;
    gen->version = NFNETLINK_V0;
    gen->res_id = htons(queue);
  }
  template <typename T>
  Request& Add(uint16_t type, const T& value) {
    const size_t at = buffer_.size();
    buffer_.resize(at + NLA_ALIGN(NLA_HDRLEN + sizeof(T)));
    auto* attr = reinterpret_cast<nlattr*>(buffer_.data() + at);
    attr->nla_type = type;
    attr->nla_len = NLA_HDRLEN + sizeof(T);
    std::memcpy(buffer_.data() + at + NLA_HDRLEN, &value, sizeof(T));
    return *this;
  }
  void Send(int fd, bool acked) {
    auto* header = reinterpret_cast<nlmsghdr*>(buffer_.data());
    header->nlmsg_len = buffer_.size();
    if (acked) header->nlmsg_flags |= NLM_F_ACK;
    sockaddr_nl kernel{};
    kernel.nl_family = AF_NETLINK;
    if (sendto(fd, buffer_.data(), buffer_.size(), 0, reinterpret_cast<sockaddr*>(&kernel),
               sizeof(kernel)) < 0) {
      Die("sending to nfnetlink");
    }
  }

 private:
  std::vector<char> buffer_;
};

// Waits for the kernel's answer to an acked request; exits naming `what` on an error.
void ExpectAck(int fd, const std::string& what) {
  char buffer[8192];
  int n = static_cast<int>(recv(fd, buffer, sizeof(buffer), 0));
  if (n < 0) Die(what);
  for (auto* m = reinterpret_cast<nlmsghdr*>(buffer); NLMSG_OK(m, n); m = NLMSG_NEXT(m, n)) {
    if (m->nlmsg_type != NLMSG_ERROR) continue;
    const int error = -reinterpret_cast<nlmsgerr*>(NLMSG_DATA(m))->error;
    if (error == 0) return;
    errno = error;
    Die(what);
  }
}

struct Held {
  uint32_t id;
  Clock::time_point due;
};

// The id of the packet a NFQNL_MSG_PACKET message tells of; false for any other message.
bool PacketId(const nlmsghdr* m, uint32_t* id) {
  if ((m->nlmsg_type & 0xff) != NFQNL_MSG_PACKET) return false;
  const int preamble = NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(nfgenmsg));
  int left = static_cast<int>(m->nlmsg_len) - preamble;
  const char* at = reinterpret_cast<const char*>(m) + preamble;
  while (left >= NLA_HDRLEN) {
    const auto* attr = reinterpret_cast<const nlattr*>(at);
    if (attr->nla_len < NLA_HDRLEN || attr->nla_len > left) return false;
    if ((attr->nla_type & NLA_TYPE_MASK) == NFQA_PACKET_HDR &&
        attr->nla_len >= NLA_HDRLEN + sizeof(nfqnl_msg_packet_hdr)) {
      nfqnl_msg_packet_hdr header;
      std::memcpy(&header, at + NLA_HDRLEN, sizeof(header));
      *id = ntohl(header.packet_id);
      return true;
    }
    left -= NLA_ALIGN(attr->nla_len);
    at += NLA_ALIGN(attr->nla_len);
  }
  return false;
}

bool Flag(std::string_view arg, std::string_view name, std::string* value) {
  if (arg.substr(0, name.size()) != name) return false;
  *value = std::string(arg.substr(name.size()));
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  long queue = -1;
  double delay_ms = -1;
  std::string ready_file, value;
  for (int i = 1; i < argc; ++i) {
    if (Flag(argv[i], "--queue=", &value)) {
      queue = std::strtol(value.c_str(), nullptr, 10);
    } else if (Flag(argv[i], "--delay_ms=", &value)) {
      delay_ms = std::strtod(value.c_str(), nullptr);
    } else if (!Flag(argv[i], "--ready_file=", &ready_file)) {
      std::fprintf(stderr, "delay_line: unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  if (queue < 0 || queue > 65535 || !(delay_ms >= 0 && delay_ms <= 10000)) {
    std::fprintf(stderr,
                 "usage: delay_line --queue=0..65535 --delay_ms=0..10000 "
                 "[--ready_file=PATH]\n");
    return 2;
  }
  const auto delay = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double, std::milli>(delay_ms));

  const int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
  if (fd < 0) Die("opening a netfilter netlink socket");
  // Every packet in flight on the link waits in the kernel, its metadata in this socket: a large
  // buffer keeps a burst from overflowing it (an overflow drops the packets it could not tell).
  const int buffer_bytes = 64 << 20;
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buffer_bytes, sizeof(buffer_bytes)) < 0) {
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof(buffer_bytes));
  }
  sockaddr_nl local{};
  local.nl_family = AF_NETLINK;
  if (bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) < 0) Die("binding netlink");

  const auto q = static_cast<uint16_t>(queue);
  nfqnl_msg_config_cmd bind_cmd{};
  bind_cmd.command = NFQNL_CFG_CMD_BIND;
  Request(NFQNL_MSG_CONFIG, q).Add(NFQA_CFG_CMD, bind_cmd).Send(fd, true);
  ExpectAck(fd, "binding queue " + std::to_string(queue) + " (is NFQUEUE built in, are we root?)");
  nfqnl_msg_config_params params{};
  params.copy_range = htonl(0);
  params.copy_mode = NFQNL_COPY_META;
  const uint32_t max_len = htonl(1 << 20);
  const uint32_t flags = htonl(NFQA_CFG_F_GSO);
  Request(NFQNL_MSG_CONFIG, q)
      .Add(NFQA_CFG_PARAMS, params)
      .Add(NFQA_CFG_QUEUE_MAXLEN, max_len)
      .Add(NFQA_CFG_MASK, flags)
      .Add(NFQA_CFG_FLAGS, flags)
      .Send(fd, true);
  ExpectAck(fd, "configuring queue " + std::to_string(queue));

  // A late verdict is added latency: ask for the CPU first where the scheduler allows it.
  sched_param priority{};
  priority.sched_priority = 10;
  sched_setscheduler(0, SCHED_FIFO, &priority);

  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  if (!ready_file.empty()) std::ofstream(ready_file) << getpid() << "\n";

  std::deque<Held> held;
  std::vector<char> buffer(1 << 20);
  uint64_t packets = 0;
  while (!stopping) {
    const auto now = Clock::now();
    uint32_t last_due = 0;
    bool any_due = false;
    while (!held.empty() && held.front().due <= now) {
      last_due = held.front().id;
      any_due = true;
      held.pop_front();
    }
    if (any_due) {
      nfqnl_msg_verdict_hdr verdict{};
      verdict.verdict = htonl(NF_ACCEPT);
      verdict.id = htonl(last_due);
      Request(NFQNL_MSG_VERDICT_BATCH, q).Add(NFQA_VERDICT_HDR, verdict).Send(fd, false);
    }
    timespec wait{1, 0};
    if (!held.empty()) {
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(held.front().due - now);
      wait = {static_cast<time_t>(ns.count() / 1000000000),
              static_cast<long>(ns.count() % 1000000000)};
    }
    pollfd readable{fd, POLLIN, 0};
    if (ppoll(&readable, 1, &wait, nullptr) <= 0) continue;
    // Drain what came (one datagram a packet), then see what is due again.
    for (int reads = 0; reads < 1024; ++reads) {
      const ssize_t n = recv(fd, buffer.data(), buffer.size(), MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) break;
        if (errno == ENOBUFS) {
          std::fprintf(stderr, "delay_line: queue %ld: socket overflowed, packets dropped\n",
                       queue);
          continue;
        }
        Die("receiving from nfnetlink");
      }
      const auto due = Clock::now() + delay;
      int left = static_cast<int>(n);
      for (auto* m = reinterpret_cast<nlmsghdr*>(buffer.data()); NLMSG_OK(m, left);
           m = NLMSG_NEXT(m, left)) {
        uint32_t id;
        if (PacketId(m, &id)) {
          held.push_back({id, due});
          ++packets;
        }
      }
    }
  }
  // Let go of what is still held, so a stop never strands packets in the kernel.
  if (!held.empty()) {
    nfqnl_msg_verdict_hdr verdict{};
    verdict.verdict = htonl(NF_ACCEPT);
    verdict.id = htonl(held.back().id);
    Request(NFQNL_MSG_VERDICT_BATCH, q).Add(NFQA_VERDICT_HDR, verdict).Send(fd, false);
  }
  std::fprintf(stderr, "delay_line: queue %ld: %llu packets held %.3g ms each\n", queue,
               static_cast<unsigned long long>(packets), delay_ms);
  return 0;
}
