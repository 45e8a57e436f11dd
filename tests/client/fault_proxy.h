// A TCP proxy for fault tests: listens on 127.0.0.1 (a free port) and
// forwards each connection to 127.0.0.1:<upstream>, and cuts connections
// (closes both sockets) at byte offsets drawn from a seeded RNG.
//
// How it works. One thread runs a poll() loop over the listener, a wake-up
// pipe and both sockets of every connection (non-blocking; a direction
// reads only when what it read before is written, so a slow side slows the
// other down). Each accepted connection may get one planned cut while the
// plan has cuts left: directions alternate (client to server, then server
// to client, ...), and the offset is uniform in that direction's range,
// counted from the connection's first byte. At the cut, the bytes up to
// the offset are delivered, then both sockets close: the cut can fall in
// the middle of a message (counted as mid_chunk when it splits one read).
#ifndef GRADTAPE_TESTS_CLIENT_FAULT_PROXY_H_
#define GRADTAPE_TESTS_CLIENT_FAULT_PROXY_H_

#include <cstdint>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace gradtape::testing {

struct CutPlan {
  int cuts = 0;  // planned cuts (one per connection at most)
  uint64_t seed = 1;
  // Offsets per direction, inclusive: client to server, server to client.
  int64_t client_min = 1 << 10, client_max = 64 << 10;
  int64_t server_min = 1 << 10, server_max = 16 << 10;
  // -1: alternate directions; 0: client to server only; 1: server to
  // client only.
  int only_direction = -1;
};

struct ProxyCounts {
  int connections = 0;
  int cuts = 0;         // planned cuts done
  int client_cuts = 0;  // in the client-to-server direction
  int server_cuts = 0;
  int mid_chunk_cuts = 0;  // the offset split one read: mid-message
  int forced_cuts = 0;     // CutAll / ArmCut
  int64_t client_bytes = 0;
  int64_t server_bytes = 0;
};

class FaultProxy {
 public:
  static absl::StatusOr<std::unique_ptr<FaultProxy>> Start(int upstream_port,
                                                           CutPlan plan);
  // Stops the thread and closes every socket.
  ~FaultProxy();
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  int port() const { return port_; }
  ProxyCounts counts() const;
  // Each of these returns once the proxy's thread has acted on it.
  // New connections go to `port` from now on.
  void SetUpstream(int port);
  // Closes every open connection now.
  void CutAll();
  // Closes the listener too: connects are refused from now on (a server
  // that is gone).
  void StopListening();
  // Cuts every open connection once `bytes` more bytes went from the
  // server to the client (server_to_client) or the other way.
  void ArmCut(bool server_to_client, int64_t bytes);

 private:
  struct Conn;
  FaultProxy() = default;
  void Loop();
  // Wakes the thread and waits until it has handled the requests so far.
  void WakeAndWait();

  int port_ = 0;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  std::thread thread_;
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_listening_ ABSL_GUARDED_BY(mu_) = false;
  bool cut_all_ ABSL_GUARDED_BY(mu_) = false;
  int64_t arm_bytes_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t requested_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t handled_ ABSL_GUARDED_BY(mu_) = 0;
  bool arm_server_ ABSL_GUARDED_BY(mu_) = false;
  int upstream_port_ ABSL_GUARDED_BY(mu_) = 0;
  CutPlan plan_;
  ProxyCounts counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gradtape::testing

#endif  // GRADTAPE_TESTS_CLIENT_FAULT_PROXY_H_
