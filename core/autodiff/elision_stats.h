// What the elision registry saves, process-wide (for monitoring).
#ifndef GRADTAPE_CORE_AUTODIFF_ELISION_STATS_H_
#define GRADTAPE_CORE_AUTODIFF_ELISION_STATS_H_

#include <cstdint>

namespace gradtape {

// Bytes the elision registry kept off the tapes since the process started:
// for every recorded op (on each tape that records it), the bytes of the
// inputs and outputs its backward does not read, which a tape keeping
// everything would hold (Tape::RecordOperation counts them). Monotonic; the
// server exports it as gradtape_elision_saved_bytes_total. Thread-safe.
int64_t ElisionSavedBytesTotal();

}  // namespace gradtape

#endif  // GRADTAPE_CORE_AUTODIFF_ELISION_STATS_H_
