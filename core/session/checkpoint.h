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
// The checkpoint directory is not trusted: restore opens only regular files
// (no symbolic links, FIFOs, devices or directories; it never blocks on
// open), refuses a file larger than the caller's byte budget before reading
// it, and the decoder checks every size a record announces (overflow-checked
// element counts and byte lengths) before using it. Names quoted in messages
// are escaped (QuoteName), so bytes from a file never reach a reply raw.
//
// Variables are matched by name (VarHandleOp's shared_name). Thread-safety:
// the functions touching variables run under the owning session's lock;
// the rest are pure or only touch the file system.
#ifndef GRADTAPE_CORE_SESSION_CHECKPOINT_H_
#define GRADTAPE_CORE_SESSION_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/tensor/tensor.h"
#include "core/tensor/variable.h"

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

// The largest checkpoint file restore reads when the caller has no budget
// of its own (a session without a memory limit).
inline constexpr int64_t kMaxCheckpointFileBytes = int64_t{16} << 30;
// Names (checkpoint and variable names) are at most this many bytes.
inline constexpr size_t kMaxCheckpointNameLength = 200;

// The one rule for checkpoint names, applied by save and restore alike: OK
// for 1..200 characters from [A-Za-z0-9._-] that do not start with '.' (so
// no path separators, no "..", no absolute paths, no hidden files).
// INVALID_ARGUMENT saying what is wrong otherwise.
absl::Status ValidateCheckpointName(absl::string_view name);

// The one rule for the variable names stored in a checkpoint (VarHandleOp's
// shared_name), applied by save (so nothing is written that restore would
// refuse), by the decoder and by restore: at most 200 bytes (any bytes:
// names are quoted escaped). INVALID_ARGUMENT naming the variable otherwise.
absl::Status ValidateVariableName(absl::string_view name);

// `name` for a message: in single quotes, C-escaped with \x escapes for
// every non-printable or non-ASCII byte (so the message is valid UTF-8
// whatever the bytes), cut to its first 64 bytes ("..." and the length
// follow) so a message stays short.
std::string QuoteName(absl::string_view name);

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
// Opens without following a symbolic link and without blocking
// (O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) and reads only a regular file:
// FAILED_PRECONDITION naming the file for a symbolic link, FIFO, device,
// socket or directory. RESOURCE_EXHAUSTED, before reading anything, for a
// file of more than `max_bytes` bytes (the caller's memory budget; see
// kMaxCheckpointFileBytes).
absl::StatusOr<std::string> ReadCheckpointFile(const std::string& dir,
                                               absl::string_view name,
                                               int64_t max_bytes);

// Saves the values of `vars` (initialized, distinct names) to dir/name.
// FAILED_PRECONDITION for an uninitialized variable, INVALID_ARGUMENT for a
// repeated name or one ValidateVariableName refuses; nothing is written then.
absl::StatusOr<CheckpointSummary> SaveVariables(
    const std::string& dir, absl::string_view name,
    absl::Span<Variable* const> vars);
// Reads dir/name and assigns each of `vars` the entry of its name. All or
// nothing: the file is validated and every variable matched (NOT_FOUND for
// a name the file lacks, INVALID_ARGUMENT for another dtype or shape or a
// repeated name) before any is assigned. Entries nobody asked for are
// ignored. The file is read by ReadCheckpointFile with `max_bytes`.
absl::StatusOr<CheckpointSummary> RestoreVariables(
    const std::string& dir, absl::string_view name,
    absl::Span<Variable* const> vars, int64_t max_bytes);

}  // namespace gradtape

#endif  // GRADTAPE_CORE_SESSION_CHECKPOINT_H_
