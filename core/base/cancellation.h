// Cancellation of running work: a flag (with the reason: CANCELLED or
// DEADLINE_EXCEEDED) and an optional deadline, made current on a thread for
// a scope the way ScopedMemoryAccount makes a memory account current.
//
//   Cancellation cancel(deadline);          // owned by the caller (a call)
//   ScopedCancellation scope(&cancel);      // the thread applying commands
//   ... another thread: cancel.Cancel(absl::StatusCode::kCancelled);
//
// Long kernels check it at block boundaries (GEMM blocks, convolution
// chunks): they read CurrentCancellation() once on the calling thread and
// pass the pointer into their ParallelFor items, since pool threads have no
// current cancellation of their own. A check is one relaxed atomic load
// (Requested); Poll also reads the clock against the deadline and is meant
// for places that run rarely (between commands, before a block of millions
// of multiply-adds).
//
// Thread-safety: Cancel, Requested, Poll and Check may be called from any
// thread at once. The Cancellation must outlive every scope and every
// kernel that sees it.
#ifndef GRADTAPE_CORE_BASE_CANCELLATION_H_
#define GRADTAPE_CORE_BASE_CANCELLATION_H_

#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace gradtape {

class Cancellation {
 public:
  // No deadline: only Cancel stops the work.
  Cancellation() = default;
  explicit Cancellation(absl::Time deadline) : deadline_(deadline) {}
  Cancellation(const Cancellation&) = delete;
  Cancellation& operator=(const Cancellation&) = delete;

  // Requests cancellation with `code` (kCancelled or kDeadlineExceeded);
  // the first request's code wins.
  void Cancel(absl::StatusCode code) {
    int expected = 0;
    code_.compare_exchange_strong(expected, static_cast<int>(code),
                                  std::memory_order_relaxed);
  }

  // Asks the work to stop before its next command, and gives the command in
  // progress kBetweenCommandsGrace to finish before kernels see the request
  // (Poll turns it into Cancel then). For a client that went away (the call
  // was cancelled or its connection broke): a resuming client resends the
  // batch, and a command stopped half-way would have failed for good (its
  // outputs poisoned, its failure kept as its result), where one left to
  // finish is answered from the result cache; the grace bounds what a
  // client gone costs (a huge MatMul still stops within a block after it).
  static constexpr absl::Duration kBetweenCommandsGrace = absl::Seconds(1);
  void CancelBetweenCommands(absl::StatusCode code) {
    escalate_at_ns_.store(
        absl::ToUnixNanos(absl::Now() + kBetweenCommandsGrace),
        std::memory_order_relaxed);
    int expected = 0;
    between_code_.compare_exchange_strong(expected, static_cast<int>(code),
                                          std::memory_order_relaxed);
  }

  // True once Cancel was called (or Poll saw the deadline pass).
  bool Requested() const { return code_.load(std::memory_order_relaxed) != 0; }

  // Poll, or CancelBetweenCommands was called: for the loop over commands.
  bool PollBetweenCommands() {
    return Poll() || between_code_.load(std::memory_order_relaxed) != 0;
  }

  // The code of the request that stopped the work (Cancel's first, else
  // CancelBetweenCommands'); OK if none.
  absl::StatusCode StopCode() const {
    const int code = code_.load(std::memory_order_relaxed);
    return static_cast<absl::StatusCode>(
        code != 0 ? code : between_code_.load(std::memory_order_relaxed));
  }

  // Requested(), after turning a passed deadline into a request.
  bool Poll() {
    if (Requested()) return true;
    if (deadline_ != absl::InfiniteFuture() && absl::Now() >= deadline_) {
      Cancel(absl::StatusCode::kDeadlineExceeded);
    }
    const int between = between_code_.load(std::memory_order_relaxed);
    if (between != 0 && absl::ToUnixNanos(absl::Now()) >=
                            escalate_at_ns_.load(std::memory_order_relaxed)) {
      Cancel(static_cast<absl::StatusCode>(between));
    }
    return Requested();
  }

  absl::Time deadline() const { return deadline_; }

  // OK, or CANCELLED / DEADLINE_EXCEEDED "<what>: <why> ...".
  absl::Status Check(absl::string_view what) const {
    const int code = code_.load(std::memory_order_relaxed);
    if (code == 0) return absl::OkStatus();
    const auto status_code = static_cast<absl::StatusCode>(code);
    return absl::Status(
        status_code,
        absl::StrCat(what, ": stopped at a block boundary because ",
                     status_code == absl::StatusCode::kDeadlineExceeded
                         ? "the call's deadline passed"
                         : "the call was cancelled",
                     "; nothing of it was applied"));
  }

 private:
  // 0 (not requested) or an absl::StatusCode.
  std::atomic<int> code_{0};
  std::atomic<int> between_code_{0};        // CancelBetweenCommands
  std::atomic<int64_t> escalate_at_ns_{0};  // ... turns into Cancel then
  const absl::Time deadline_ = absl::InfiniteFuture();
};

namespace cancellation_internal {
inline thread_local Cancellation* t_current = nullptr;
}  // namespace cancellation_internal

// The cancellation current on this thread (null: none; work cannot be
// cancelled).
inline Cancellation* CurrentCancellation() {
  return cancellation_internal::t_current;
}

// Makes `cancel` (may be null) current on this thread for its lifetime;
// nests.
class ScopedCancellation {
 public:
  explicit ScopedCancellation(Cancellation* cancel)
      : previous_(cancellation_internal::t_current) {
    cancellation_internal::t_current = cancel;
  }
  ~ScopedCancellation() { cancellation_internal::t_current = previous_; }
  ScopedCancellation(const ScopedCancellation&) = delete;
  ScopedCancellation& operator=(const ScopedCancellation&) = delete;

 private:
  Cancellation* const previous_;
};

}  // namespace gradtape

#endif  // GRADTAPE_CORE_BASE_CANCELLATION_H_
