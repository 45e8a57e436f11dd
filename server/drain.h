// Graceful drain (SIGTERM): the pieces of Server::Drain that live outside
// server.cc.
//
// DrainRegistry is the TapeService's view of a drain: it knows the open
// Stream calls (each registers while it lives) and the unary Run calls in
// flight, refuses new work once the drain began, tells every open stream to
// end cleanly, and lets the server wait until nothing is in flight.
//
// Stream lifecycle across a drain (StreamReactor in tape_service.cc):
// BeginDrain lets the batch in progress (if any) be applied and its reply
// queued, stops reading, and finishes the call with kDrainStatus once the
// queued replies are written. A batch that arrives after that is not
// applied. A Stream opened during the drain is finished at once.
//
// CheckpointSessions saves every session's named variables for
// --checkpoint_on_drain (see DrainCheckpointName).
#ifndef GRADTAPE_SERVER_DRAIN_H_
#define GRADTAPE_SERVER_DRAIN_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace gradtape::server {

class SessionManager;

// The message of the UNAVAILABLE status that ends a Stream during a drain
// and refuses new Streams; clients report it as is.
inline constexpr char kStreamDrainMessage[] =
    "server draining; reconnect (to another replica, or to this one after "
    "its restart) and recreate the session";
// The message of the UNAVAILABLE status CreateSession returns during a
// drain.
inline constexpr char kCreateDrainMessage[] =
    "server is draining; create the session on another replica or retry "
    "after the restart";

// A call that can be asked to end cleanly. Implemented by StreamReactor.
class DrainableCall {
 public:
  virtual ~DrainableCall() = default;
  // Starts ending the call (see the file comment). Idempotent; called
  // without any DrainRegistry lock held; may call Finish.
  virtual void BeginDrain() = 0;
};

// Thread-safe.
class DrainRegistry {
 public:
  // Adds a live call. Returns false if the drain already began: the call
  // is not registered and must end itself (Finish with kStreamDrainMessage).
  bool Register(DrainableCall* call);
  // Called from the call's OnDone. True: the caller deletes the call now.
  // False: BeginDrain is running on it right now; the registry deletes it
  // when that returns.
  bool Unregister(DrainableCall* call);

  // Marks a unary batch in flight for its lifetime.
  class InFlight {
   public:
    explicit InFlight(DrainRegistry& registry);
    ~InFlight();
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;

   private:
    DrainRegistry& registry_;
  };

  bool draining() const;
  // Begins the drain (idempotent): draining() turns true and every
  // registered call gets BeginDrain.
  void BeginDrain();
  // Waits until no call is registered and no InFlight lives, or until
  // `deadline`. True if idle.
  bool AwaitIdle(absl::Time deadline);

 private:
  bool IdleLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  struct Entry {
    int pins = 0;       // BeginDrain calls running on it
    bool done = false;  // Unregister came while pinned
  };

  mutable absl::Mutex mu_;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<DrainableCall*, Entry> calls_ ABSL_GUARDED_BY(mu_);
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

// The checkpoint name --checkpoint_on_drain gives a session's variables:
// "drain-<session id>" (in the server's --checkpoint_dir).
std::string DrainCheckpointName(absl::string_view session_id);

// What CheckpointSessions did.
struct DrainCheckpointReport {
  int sessions = 0;           // sessions looked at
  int saved = 0;              // checkpoints written
  int without_variables = 0;  // sessions with no variable: nothing written
  int failed = 0;             // reported on stderr, one line each
  int64_t variables = 0;      // variables in the checkpoints written
  int64_t bytes = 0;          // bytes of the files written
};

// Saves the named variables of every open session of `sessions` to
// `checkpoint_dir` under DrainCheckpointName (SaveCheckpoint's format and
// atomic write). Must run when no call can touch the sessions (after the
// gRPC server stopped) and before they are freed. Writes one line per
// failure and one summary line to stderr (session ids and statuses only:
// tokens are never printed).
DrainCheckpointReport CheckpointSessions(SessionManager& sessions,
                                         const std::string& checkpoint_dir);

}  // namespace gradtape::server

#endif  // GRADTAPE_SERVER_DRAIN_H_
