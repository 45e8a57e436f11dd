#include "tests/client/fault_proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gradtape::testing {

// Side 0 is the client's socket, side 1 the server's; direction d carries
// what side d sends.
struct FaultProxy::Conn {
  int fd[2] = {-1, -1};
  std::string pending[2];  // read from side d, to write to the other side
  int64_t sent[2] = {0, 0};
  int64_t cut_at[2] = {-1, -1};
  bool planned[2] = {false, false};
  bool closed = false;

  void Close() {
    for (int& f : fd) {
      if (f >= 0) ::close(f);
      f = -1;
    }
    closed = true;
  }
};

namespace {

void SetNonBlocking(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

sockaddr_in Loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return addr;
}

int ConnectUpstream(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr = Loopback(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  SetNonBlocking(fd);
  return fd;
}

// Writes what it can of `data` to `fd` (non-blocking); erases it.
bool WriteSome(int fd, std::string& data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK;
    data.erase(0, static_cast<size_t>(n));
  }
  return true;
}

// Writes all of `data` to `fd`, waiting up to a second for room.
void WriteAll(int fd, const char* data, size_t size) {
  for (int spins = 0; size > 0 && spins < 100; ++spins) {
    const ssize_t n = ::write(fd, data, size);
    if (n > 0) {
      data += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return;
    pollfd p{fd, POLLOUT, 0};
    ::poll(&p, 1, 10);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<FaultProxy>> FaultProxy::Start(int upstream_port,
                                                              CutPlan plan) {
  std::unique_ptr<FaultProxy> proxy(new FaultProxy());
  proxy->plan_ = plan;
  proxy->SetUpstream(upstream_port);
  proxy->listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(proxy->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr = Loopback(0);
  socklen_t len = sizeof(addr);
  if (::bind(proxy->listen_fd_, reinterpret_cast<sockaddr*>(&addr),
             sizeof(addr)) != 0 ||
      ::listen(proxy->listen_fd_, 64) != 0 ||
      ::getsockname(proxy->listen_fd_, reinterpret_cast<sockaddr*>(&addr),
                    &len) != 0 ||
      ::pipe(proxy->wake_) != 0) {
    return absl::InternalError(absl::StrCat("FaultProxy: listen on 127.0.0.1: ",
                                            std::strerror(errno)));
  }
  SetNonBlocking(proxy->listen_fd_);
  SetNonBlocking(proxy->wake_[0]);
  proxy->port_ = ntohs(addr.sin_port);
  proxy->thread_ = std::thread([p = proxy.get()] { p->Loop(); });
  return proxy;
}

FaultProxy::~FaultProxy() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  const char c = 1;
  (void)!::write(wake_[1], &c, 1);
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  for (int fd : wake_) {
    if (fd >= 0) ::close(fd);
  }
}

ProxyCounts FaultProxy::counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

void FaultProxy::SetUpstream(int port) {
  absl::MutexLock lock(&mu_);
  upstream_port_ = port;
}

void FaultProxy::CutAll() {
  {
    absl::MutexLock lock(&mu_);
    cut_all_ = true;
  }
  WakeAndWait();
}

void FaultProxy::StopListening() {
  {
    absl::MutexLock lock(&mu_);
    stop_listening_ = true;
  }
  WakeAndWait();
}

void FaultProxy::ArmCut(bool server_to_client, int64_t bytes) {
  {
    absl::MutexLock lock(&mu_);
    arm_bytes_ = bytes;
    arm_server_ = server_to_client;
  }
  WakeAndWait();
}

void FaultProxy::WakeAndWait() {
  int64_t ticket;
  {
    absl::MutexLock lock(&mu_);
    ticket = ++requested_;
  }
  const char c = 1;
  (void)!::write(wake_[1], &c, 1);
  absl::MutexLock lock(&mu_);
  const auto handled = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return handled_ >= ticket;
  };
  // Bounded: the loop wakes at least every 100 ms.
  mu_.AwaitWithTimeout(absl::Condition(&handled), absl::Seconds(5));
}

void FaultProxy::Loop() {
  std::mt19937_64 gen(plan_.seed);
  int planned = 0;
  int next_direction = 0;
  std::vector<std::unique_ptr<Conn>> conns;
  char buf[64 << 10];
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (stop_) break;
      if (stop_listening_ && listen_fd_ >= 0) {
        ::close(listen_fd_);
        listen_fd_ = -1;
      }
      if (cut_all_ || stop_listening_) {
        for (auto& c : conns) {
          if (!c->closed) ++counts_.forced_cuts;
          c->Close();
        }
        cut_all_ = false;
      }
      if (arm_bytes_ >= 0) {
        const int d = arm_server_ ? 1 : 0;
        for (auto& c : conns) c->cut_at[d] = c->sent[d] + arm_bytes_;
        arm_bytes_ = -1;
      }
      handled_ = requested_;
    }
    std::vector<pollfd> fds = {{wake_[0], POLLIN, 0}};
    if (listen_fd_ >= 0) fds.push_back({listen_fd_, POLLIN, 0});
    const size_t first_conn = fds.size();
    for (auto& c : conns) {
      for (int s = 0; s < 2; ++s) {
        const short events =
            static_cast<short>((c->pending[s].empty() ? POLLIN : 0) |
                               (c->pending[1 - s].empty() ? 0 : POLLOUT));
        fds.push_back({c->fd[s], events, 0});
      }
    }
    ::poll(fds.data(), fds.size(), 100);
    while (::read(wake_[0], buf, sizeof(buf)) > 0) {
    }
    if (listen_fd_ >= 0 && (fds[1].revents & POLLIN)) {
      const int client = ::accept(listen_fd_, nullptr, nullptr);
      if (client >= 0) {
        int port;
        {
          absl::MutexLock lock(&mu_);
          port = upstream_port_;
          ++counts_.connections;
        }
        const int server = ConnectUpstream(port);
        if (server < 0) {
          ::close(client);
        } else {
          int one = 1;
          ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
          SetNonBlocking(client);
          auto c = std::make_unique<Conn>();
          c->fd[0] = client;
          c->fd[1] = server;
          if (planned < plan_.cuts) {
            ++planned;
            const int d = plan_.only_direction >= 0 ? plan_.only_direction
                                                    : next_direction;
            next_direction = 1 - next_direction;
            std::uniform_int_distribution<int64_t> offset(
                d == 0 ? plan_.client_min : plan_.server_min,
                d == 0 ? plan_.client_max : plan_.server_max);
            c->cut_at[d] = offset(gen);
            c->planned[d] = true;
          }
          conns.push_back(std::move(c));
        }
      }
    }
    for (size_t i = 0; i + first_conn < fds.size(); ++i) {
      Conn& c = *conns[i / 2];
      const int s = static_cast<int>(i % 2);
      const short revents = fds[first_conn + i].revents;
      if (c.closed || revents == 0) continue;
      if ((revents & POLLOUT) && !WriteSome(c.fd[s], c.pending[1 - s])) {
        c.Close();
        continue;
      }
      if (!(revents & (POLLIN | POLLHUP | POLLERR)) || !c.pending[s].empty()) {
        continue;
      }
      const ssize_t n = ::read(c.fd[s], buf, sizeof(buf));
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      if (n <= 0) {
        c.Close();
        continue;
      }
      if (c.cut_at[s] >= 0 && c.sent[s] + n >= c.cut_at[s]) {
        const int64_t k = c.cut_at[s] - c.sent[s];
        WriteSome(c.fd[1 - s], c.pending[1 - s]);
        WriteAll(c.fd[1 - s], buf, static_cast<size_t>(k));
        absl::MutexLock lock(&mu_);
        (s == 0 ? counts_.client_bytes : counts_.server_bytes) += k;
        if (c.planned[s]) {
          ++counts_.cuts;
          ++(s == 0 ? counts_.client_cuts : counts_.server_cuts);
          if (k > 0 && k < n) ++counts_.mid_chunk_cuts;
        } else {
          ++counts_.forced_cuts;
        }
        c.Close();
        continue;
      }
      c.sent[s] += n;
      {
        absl::MutexLock lock(&mu_);
        (s == 0 ? counts_.client_bytes : counts_.server_bytes) += n;
      }
      c.pending[s].append(buf, static_cast<size_t>(n));
      if (!WriteSome(c.fd[1 - s], c.pending[s])) c.Close();
    }
    for (size_t i = 0; i < conns.size();) {
      if (conns[i]->closed) {
        conns.erase(conns.begin() + static_cast<ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
  }
  for (auto& c : conns) c->Close();
}

}  // namespace gradtape::testing
