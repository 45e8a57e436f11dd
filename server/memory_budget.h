// The server-wide memory budget and the defaults derived from it
// (gradtape-server's --memory_budget_mb, --session_memory_limit_mb,
// --max_tensor_mb).
//
// How it works. The process may use what the machine or its container
// allows: the smallest of the memory limits of the process's cgroup and its
// ancestors (cgroup v2 memory.max, cgroup v1 memory.limit_in_bytes, read
// from /proc/self/cgroup and the cgroup mounts) and the machine's MemTotal.
// The budget is that less a headroom for the process itself (code, gRPC's
// buffers, threads, the allocator's slack): a fifth of it, at least
// kMinHeadroomBytes. Every charge in the process must fit the budget
// (ProcessMemoryAccount's limit, core/tensor/tensor.h): tensors, tapes'
// saved tensors, kept results, replies being sent, pending chunked puts.
//
// The per-session limit defaults to a quarter of the budget, so one client
// cannot take the whole process, and so does the largest tensor (a tensor
// must fit a session), at most kMaxTensorDefaultBytes.
#ifndef GRADTAPE_SERVER_MEMORY_BUDGET_H_
#define GRADTAPE_SERVER_MEMORY_BUDGET_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gradtape::server {

// The memory the process may use, and where that figure came from.
struct MemoryLimit {
  int64_t bytes = 0;
  // "cgroup v2 /sys/fs/cgroup/kubepods/.../memory.max", "cgroup v1 ...",
  // "MemTotal of /proc/meminfo".
  std::string source;
};

// Reads the limit under `root` ("/" on a real machine; tests pass a
// directory laid out like one: proc/self/cgroup, proc/meminfo,
// sys/fs/cgroup/...). NOT_FOUND when not even MemTotal can be read.
absl::StatusOr<MemoryLimit> DetectMemoryLimit(absl::string_view root = "/");

inline constexpr int64_t kMinHeadroomBytes = int64_t{256} << 20;
inline constexpr int64_t kMaxTensorDefaultBytes = int64_t{16} << 30;

// The budget for a process allowed `limit_bytes`: less a fifth, at least
// kMinHeadroomBytes, kept for the process itself; at least 64 MiB.
int64_t BudgetFor(int64_t limit_bytes);

// What the pool of freed tensor buffers (SetBufferPoolLimit,
// core/tensor/tensor.h) may keep under a budget of `budget_bytes` (0: no
// budget): an eighth of it, at most kMaxBufferPoolBytes. The pool counts in
// the budget and is emptied before any allocation is refused for it.
inline constexpr int64_t kMaxBufferPoolBytes = int64_t{1} << 30;
int64_t BufferPoolLimitFor(int64_t budget_bytes);

// The memory settings in force, from the flags: -1 means "derive it".
struct MemorySettings {
  int64_t budget_bytes = 0;         // 0: none
  int64_t session_limit_bytes = 0;  // 0: none
  int64_t max_tensor_bytes = 0;     // > 0
  std::string budget_source;        // how budget_bytes was chosen
};
// INVALID_ARGUMENT for values below -1 or a budget past 2^40 MiB.
// `detected` is used only when budget_mb is -1 (NOT_FOUND then if it is
// an error).
absl::StatusOr<MemorySettings> ResolveMemorySettings(
    int64_t budget_mb, int64_t session_mb, int64_t max_tensor_mb,
    const absl::StatusOr<MemoryLimit>& detected);

// One line for the server's start-up log: "memory budget ... MiB (...),
// per session ... MiB, per tensor ... MiB".
std::string DescribeMemorySettings(const MemorySettings& settings);

// Gives freed heap memory back to the system (malloc_trim) when a message
// of `bytes` (a request, a reply) is about to be built or was just freed,
// if it is at least kTrimFreedBytes.
//
// Why: glibc serves the blocks of a large message (its parsed copy, the
// serialised reply, gRPC's slices) from per-thread heaps once its dynamic
// mmap threshold has risen, and keeps them after they are freed. Without
// this, RSS grew by about a reply per worker thread and stayed there, past
// the budget, which counts those bytes only while they live (8 sessions
// fetching 8 MiB 40 times: 230 MiB above what was charged). A fixed low
// mmap threshold instead cost tensor kernels 10x (every 4 MiB output
// page-faulted anew). malloc_trim walks the free lists; it is paid only
// around messages of at least kTrimFreedBytes, which cost more to copy.
inline constexpr size_t kTrimFreedBytes = size_t{1} << 20;
void TrimFreedMemory(size_t bytes);

}  // namespace gradtape::server

#endif  // GRADTAPE_SERVER_MEMORY_BUDGET_H_
