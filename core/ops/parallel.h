// Intra-op parallelism: ParallelFor splits a kernel's work between the
// calling thread and a small process-wide pool (one worker per core beyond
// the first). The caller always works too, and work items are claimed one
// at a time by whichever thread is free, so a kernel never waits for a pool
// that other sessions keep busy: it just does more of the items itself.
#ifndef GRADTAPE_CORE_OPS_PARALLEL_H_
#define GRADTAPE_CORE_OPS_PARALLEL_H_

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

}  // namespace gradtape

#endif  // GRADTAPE_CORE_OPS_PARALLEL_H_
