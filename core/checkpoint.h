// Checkpoints: a session's variables in a file (plain file IO, no gRPC).
//
// The byte format is specified in docs/CHECKPOINT_FORMAT.md: a header with a
// magic number, version, entry count and payload length; one record per
// variable (name, dtype, shape, byte length, bytes); a CRC-32 of everything
// before it. Files are written atomically (a temporary file in the same
// directory, fsync, rename, fsync of the directory), so after a crash a
// checkpoint name holds either the old complete file or the new one.
// Reading validates the whole file before returning anything, and restoring
// matches every variable before assigning any: a bad file or a mismatch
// leaves the variables as they were.
//
// Variables are matched by name (VarHandleOp's shared_name). Thread-safety:
// the functions touching variables run under the owning session's lock;
// the rest are pure or only touch the file system.
#ifndef GRADTAPE_CORE_CHECKPOINT_H_
#define GRADTAPE_CORE_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/tensor.h"
#include "core/variable.h"

namespace gradtape {

struct CheckpointEntry {
  std::string name;
  Tensor value;  // a value dtype (not kResource), any shape
};

// What a save or restore touched.
struct CheckpointSummary {
  std::string name;
  std::vector<std::string> variables;  // in file order (save) / given order
  int64_t file_bytes = 0;
};

// OK for 1..200 characters from [A-Za-z0-9._-] that do not start with '.'
// (so no path separators, no "..", no absolute paths, no hidden files).
// INVALID_ARGUMENT saying what is wrong otherwise.
absl::Status ValidateCheckpointName(absl::string_view name);

// CRC-32 (IEEE 802.3 polynomial, reflected; the one zlib computes).
uint32_t Crc32(absl::string_view data);

// The file contents for `entries` (names must be distinct).
std::string EncodeCheckpoint(absl::Span<const CheckpointEntry> entries);
// Parses and validates a whole file. DATA_LOSS naming what is wrong (bad
// magic, unsupported version, truncated, checksum mismatch, malformed
// record) for anything but a well-formed checkpoint.
absl::StatusOr<std::vector<CheckpointEntry>> DecodeCheckpoint(
    absl::string_view contents);

// Writes dir/name atomically (see above), creating `dir` if needed.
// Returns the file size.
absl::StatusOr<int64_t> WriteCheckpointFile(const std::string& dir,
                                            absl::string_view name,
                                            absl::string_view contents);
// The contents of dir/name; NOT_FOUND if there is no such checkpoint.
absl::StatusOr<std::string> ReadCheckpointFile(const std::string& dir,
                                               absl::string_view name);

// Saves the values of `vars` (initialized, distinct names) to dir/name.
// FAILED_PRECONDITION for an uninitialized variable, INVALID_ARGUMENT for a
// repeated name; nothing is written then.
absl::StatusOr<CheckpointSummary> SaveVariables(
    const std::string& dir, absl::string_view name,
    absl::Span<Variable* const> vars);
// Reads dir/name and assigns each of `vars` the entry of its name. All or
// nothing: the file is validated and every variable matched (NOT_FOUND for
// a name the file lacks, INVALID_ARGUMENT for another dtype or shape or a
// repeated name) before any is assigned. Entries nobody asked for are
// ignored.
absl::StatusOr<CheckpointSummary> RestoreVariables(
    const std::string& dir, absl::string_view name,
    absl::Span<Variable* const> vars);

}  // namespace gradtape

#endif  // GRADTAPE_CORE_CHECKPOINT_H_
