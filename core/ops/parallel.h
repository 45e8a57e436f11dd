// Intra-op parallelism: ParallelFor splits a kernel's work between the
// calling thread and a small process-wide pool (one worker per core beyond
// the first). The caller always works too. Each thread first runs its own
// contiguous share of the items (the caller the first, pool worker i the
// same share in every call), so a kernel reading the rows the previous
// kernel wrote finds them in its core's cache; then it claims, one at a
// time, what is left of the other shares, so a kernel never waits for a
// pool that other sessions keep busy: it just does more of the items
// itself.
#ifndef GRADTAPE_CORE_OPS_PARALLEL_H_
#define GRADTAPE_CORE_OPS_PARALLEL_H_

#include <cstdint>
#include <functional>

namespace gradtape {

// Threads that can run items at once: the pool's workers plus the caller.
// The environment variable GRADTAPE_INTRA_OP_THREADS sets it (read once, when
// the pool starts; 1 runs every kernel on its caller's thread); by default
// std::thread::hardware_concurrency(), at least 1.
int ParallelismDegree();

// Runs fn(0), ..., fn(n - 1), each exactly once, possibly at the same time
// on different threads; returns when all have finished. fn must not throw.
// Items should be large (tens of microseconds or more): claiming one costs
// an atomic increment, waking a worker a few microseconds.
void ParallelFor(int n, const std::function<void(int)>& fn);

// Runs fn(begin, end) over consecutive blocks that cover [0, n) exactly
// once, through ParallelFor. Blocks hold at least `grain` items (all but
// the last, which ends at n), and there
// are at most four per thread (so a busy pool only shifts blocks to the
// caller); n <= grain, or one thread, is a single call fn(0, n) on the
// caller's thread, so small tensors pay nothing. The blocks depend on the
// thread count: callers keep each output element's arithmetic inside one
// item (never split a sum across blocks), so results do not (but for some
// of Gemm's oneDNN products, whose order of summation can follow the
// block's shape: core/ops/gemm.h).
//
// Grain: a block should take ~10 us or more; kElementwiseGrain is that for
// a simple elementwise pass over float32.
inline constexpr int64_t kElementwiseGrain = 32 * 1024;
void ParallelRange(int64_t n, int64_t grain,
                   const std::function<void(int64_t, int64_t)>& fn);

}  // namespace gradtape

#endif  // GRADTAPE_CORE_OPS_PARALLEL_H_
