#include "core/session/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <random>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"
#include "zlib.h"

namespace gradtape {
namespace {

// docs/CHECKPOINT_FORMAT.md. PNG-style magic: a high-bit byte and a newline
// catch 7-bit and line-ending-converting transfers.
constexpr char kMagic[8] = {'\x89', 'G', 'T', 'C', 'K', 'P', 'T', '\n'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 24;  // magic, version, count, payload length
constexpr size_t kTrailerBytes = 4;  // CRC-32
constexpr size_t kMaxNameLength = kMaxCheckpointNameLength;
constexpr uint32_t kMaxRank = 64;
// The smallest record: name length, dtype, rank, byte length.
constexpr size_t kMinRecordBytes = 4 + 4 + 4 + 8;
// QuoteName keeps this many bytes of a name.
constexpr size_t kMaxQuotedBytes = 64;

static_assert(sizeof(float) == 4 && sizeof(double) == 8);

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

// Little-endian reads from a bounded cursor; each returns false (and reads
// nothing) when fewer bytes remain than it needs.
class Reader {
 public:
  explicit Reader(absl::string_view data) : data_(data) {}
  size_t remaining() const { return data_.size() - pos_; }
  size_t pos() const { return pos_; }
  bool U32(uint32_t* v) {
    uint64_t w;
    if (!Uint(4, &w)) return false;
    *v = static_cast<uint32_t>(w);
    return true;
  }
  bool U64(uint64_t* v) { return Uint(8, v); }
  bool Bytes(size_t n, absl::string_view* out) {
    if (remaining() < n) return false;
    *out = data_.substr(pos_, n);
    pos_ += n;
    return true;
  }

 private:
  bool Uint(int n, uint64_t* v) {
    if (remaining() < static_cast<size_t>(n)) return false;
    uint64_t r = 0;
    for (int i = 0; i < n; ++i) {
      r |= static_cast<uint64_t>(static_cast<unsigned char>(data_[pos_ + i]))
           << (8 * i);
    }
    pos_ += n;
    *v = r;
    return true;
  }
  absl::string_view data_;
  size_t pos_ = 0;
};

std::string PathOf(const std::string& dir, absl::string_view name) {
  return absl::StrCat(dir, "/", name);
}

absl::Status Errno(absl::string_view what, const std::string& path) {
  const int e = errno;
  return absl::Status(
      e == ENOENT ? absl::StatusCode::kNotFound : absl::StatusCode::kInternal,
      absl::StrCat(what, " ", path, ": ", std::strerror(e)));
}

// mkdir -p.
absl::Status MakeDirs(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint directory ", dir, " is not a directory"));
  }
  const size_t slash = dir.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    RETURN_IF_ERROR(MakeDirs(dir.substr(0, slash)));
  }
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return Errno("cannot create checkpoint directory", dir);
  }
  return absl::OkStatus();
}

absl::Status WriteAll(int fd, absl::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("cannot write", path);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

std::string TempName(absl::string_view name) {
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  return absl::StrCat(".", name, ".tmp.", ::getpid(), ".", ++counter, ".",
                      rd());
}

// "'a', 'b', 'c'" (at most 10 names, each quoted by QuoteName).
std::string NameList(const std::vector<CheckpointEntry>& entries) {
  std::vector<std::string> names;
  for (const CheckpointEntry& e : entries) {
    if (names.size() == 10) {
      names.push_back("...");
      break;
    }
    names.push_back(QuoteName(e.name));
  }
  return absl::StrJoin(names, ", ");
}

absl::Status CheckDistinctNames(absl::Span<Variable* const> vars) {
  absl::flat_hash_set<absl::string_view> seen;
  for (const Variable* var : vars) {
    if (!seen.insert(var->name).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "two variables are named ", QuoteName(var->name),
          "; checkpoints match variables by name, so give each VarHandleOp "
          "a distinct shared_name (or list only one of them)"));
    }
  }
  return absl::OkStatus();
}

// Every variable name of `vars` passes ValidateVariableName.
absl::Status CheckVariableNames(absl::Span<Variable* const> vars) {
  for (const Variable* var : vars) {
    RETURN_IF_ERROR(ValidateVariableName(var->name));
  }
  return absl::OkStatus();
}

}  // namespace

std::string QuoteName(absl::string_view name) {
  if (name.size() <= kMaxQuotedBytes) {
    return absl::StrCat("'", absl::CHexEscape(name), "'");
  }
  return absl::StrCat("'", absl::CHexEscape(name.substr(0, kMaxQuotedBytes)),
                      "...' (", name.size(), " bytes)");
}

absl::Status ValidateVariableName(absl::string_view name) {
  if (name.size() > kMaxNameLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable name ", QuoteName(name), " is too long for a checkpoint (",
        name.size(), " bytes; at most ", kMaxNameLength,
        "): give the VarHandleOp a shorter shared_name"));
  }
  return absl::OkStatus();
}

absl::Status ValidateCheckpointName(absl::string_view name) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad checkpoint name ", QuoteName(name), ": ", why,
                     " (use 1-", kMaxNameLength,
                     " characters from A-Z a-z 0-9 . _ -, not starting with "
                     "'.')"));
  };
  if (name.empty()) return bad("empty");
  if (name.size() > kMaxNameLength) return bad("too long");
  if (name.find('/') != absl::string_view::npos ||
      name.find('\\') != absl::string_view::npos) {
    return bad(
        "path separators are not allowed (names are files in the "
        "server's checkpoint directory)");
  }
  if (name.find("..") != absl::string_view::npos) {
    return bad("'..' is not allowed");
  }
  if (name[0] == '.') return bad("a leading '.' is not allowed");
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok)
      return bad(absl::StrCat("character ", QuoteName(absl::string_view(&c, 1)),
                              " is not allowed"));
  }
  return absl::OkStatus();
}

uint32_t Crc32(absl::string_view data) {
  // crc32_z: a size_t length (crc32's is 32 bits; checkpoints may be larger).
  return static_cast<uint32_t>(
      crc32_z(0, reinterpret_cast<const Bytef*>(data.data()), data.size()));
}

std::string EncodeCheckpoint(absl::Span<const CheckpointEntry> entries) {
  std::string payload;
  for (const CheckpointEntry& e : entries) {
    PutU32(&payload, static_cast<uint32_t>(e.name.size()));
    payload.append(e.name);
    PutU32(&payload, static_cast<uint32_t>(e.value.dtype()));
    PutU32(&payload, static_cast<uint32_t>(e.value.rank()));
    for (int64_t d : e.value.shape())
      PutU64(&payload, static_cast<uint64_t>(d));
    PutU64(&payload, e.value.num_bytes());
    payload.append(static_cast<const char*>(e.value.raw_data()),
                   e.value.num_bytes());
  }
  std::string out(kMagic, sizeof(kMagic));
  PutU32(&out, kVersion);
  PutU32(&out, static_cast<uint32_t>(entries.size()));
  PutU64(&out, payload.size());
  out.append(payload);
  PutU32(&out, Crc32(out));
  return out;
}

namespace {

// DecodeCheckpoint's steps. Every failure is DATA_LOSS "corrupt checkpoint:
// ..." (Loss).

template <typename... Pieces>
absl::Status Loss(const Pieces&... pieces) {
  return absl::DataLossError(absl::StrCat("corrupt checkpoint: ", pieces...));
}

struct Header {
  uint32_t count = 0;
  uint64_t payload_length = 0;
};

// Magic, version, and that the file is exactly header + payload + trailer.
absl::StatusOr<Header> DecodeHeader(absl::string_view contents) {
  if (contents.size() < kHeaderBytes + kTrailerBytes) {
    return Loss("truncated: ", contents.size(), " bytes, shorter than the ",
                kHeaderBytes + kTrailerBytes, "-byte minimum");
  }
  if (contents.substr(0, sizeof(kMagic)) !=
      absl::string_view(kMagic, sizeof(kMagic))) {
    return Loss("bad magic number (not a gradtape checkpoint)");
  }
  Reader reader(contents.substr(sizeof(kMagic)));
  uint32_t version = 0;
  Header header;
  reader.U32(&version);
  reader.U32(&header.count);
  reader.U64(&header.payload_length);
  if (version != kVersion) {
    return Loss("format version ", version, ", this server reads version ",
                kVersion);
  }
  if (header.payload_length > contents.size()) {
    return Loss("truncated: the header announces a ", header.payload_length,
                "-byte payload, the file has ", contents.size(), " bytes");
  }
  const uint64_t expected =
      kHeaderBytes + header.payload_length + kTrailerBytes;
  if (contents.size() != expected) {
    return Loss(contents.size() < expected ? "truncated" : "trailing bytes",
                ": the header announces ", expected, " bytes, the file has ",
                contents.size());
  }
  return header;
}

// The stored CRC-32 covers everything before it (a size DecodeHeader
// checked).
absl::Status CheckTrailer(absl::string_view contents, const Header& header) {
  const absl::string_view covered =
      contents.substr(0, kHeaderBytes + header.payload_length);
  Reader trailer(contents.substr(covered.size()));
  uint32_t stored_crc = 0;
  trailer.U32(&stored_crc);
  const uint32_t crc = Crc32(covered);
  if (crc != stored_crc) {
    return Loss("checksum mismatch (stored CRC-32 ", stored_crc, ", computed ",
                crc, "): the file was modified or damaged");
  }
  return absl::OkStatus();
}

// Record `i` at the cursor of `r`; `names` holds the names read so far.
absl::StatusOr<CheckpointEntry> DecodeRecord(
    Reader& r, uint32_t i, absl::flat_hash_set<std::string>& names) {
  auto bad = [&](absl::string_view what) {
    return Loss("record ", i, " at payload offset ", r.pos(), ": ", what);
  };
  uint32_t name_length = 0, dtype = 0, rank = 0;
  absl::string_view name, data;
  if (!r.U32(&name_length) || name_length > r.remaining() ||
      !r.Bytes(name_length, &name)) {
    return bad("bad name length");
  }
  if (absl::Status s = ValidateVariableName(name); !s.ok()) {
    return bad(s.message());
  }
  const std::string quoted = QuoteName(name);
  if (!names.insert(std::string(name)).second) {
    return bad(absl::StrCat("variable ", quoted, " appears twice"));
  }
  if (!r.U32(&dtype) || !IsValidDType(static_cast<int>(dtype)) ||
      static_cast<DType>(dtype) == DType::kResource ||
      static_cast<DType>(dtype) == DType::kInvalid) {
    return bad(absl::StrCat("bad dtype ", dtype, " for ", quoted));
  }
  if (!r.U32(&rank) || rank > kMaxRank) {
    return bad(absl::StrCat("bad rank for ", quoted));
  }
  std::vector<uint64_t> dims(rank);
  for (uint32_t d = 0; d < rank; ++d) {
    if (!r.U64(&dims[d])) return bad(absl::StrCat("bad shape for ", quoted));
  }
  // The size rule every tensor obeys (core/tensor/tensor.h).
  auto not_a_size = [&](absl::string_view why) {
    return bad(absl::StrCat("shape [", absl::StrJoin(dims, ","), "] of ",
                            quoted, " is not a tensor size: ", why));
  };
  Shape shape;
  for (uint64_t d : dims) {
    if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return not_a_size("a dim past int64");
    }
    shape.push_back(static_cast<int64_t>(d));
  }
  absl::StatusOr<TensorSize> size =
      CheckedTensorSize(static_cast<DType>(dtype), shape);
  if (!size.ok()) return not_a_size(size.status().message());
  const uint64_t expected_bytes = static_cast<uint64_t>(size->bytes);
  uint64_t length = 0;
  if (!r.U64(&length) || length > r.remaining() ||
      !r.Bytes(static_cast<size_t>(length), &data)) {
    return bad(absl::StrCat("bad data length for ", quoted));
  }
  if (length != expected_bytes) {
    return bad(absl::StrCat(quoted, " has ", length, " data bytes, its ",
                            DTypeName(static_cast<DType>(dtype)),
                            " shape needs ", expected_bytes));
  }
  absl::StatusOr<Tensor> value =
      Tensor::FromBytes(static_cast<DType>(dtype), shape, data);
  if (!value.ok()) {
    return bad(
        absl::StrCat("variable ", quoted, ": ", value.status().message()));
  }
  return CheckpointEntry{std::string(name), *std::move(value)};
}

}  // namespace

absl::StatusOr<std::vector<CheckpointEntry>> DecodeCheckpoint(
    absl::string_view contents) {
  ASSIGN_OR_RETURN(const Header header, DecodeHeader(contents));
  RETURN_IF_ERROR(CheckTrailer(contents, header));
  if (header.count > header.payload_length / kMinRecordBytes) {
    return Loss("the header announces ", header.count, " records, more than a ",
                header.payload_length, "-byte payload can hold");
  }
  Reader r(contents.substr(kHeaderBytes, header.payload_length));
  std::vector<CheckpointEntry> entries;
  absl::flat_hash_set<std::string> names;
  for (uint32_t i = 0; i < header.count; ++i) {
    ASSIGN_OR_RETURN(CheckpointEntry entry, DecodeRecord(r, i, names));
    entries.push_back(std::move(entry));
  }
  if (r.remaining() != 0) {
    return Loss(r.remaining(), " bytes after the last of ", header.count,
                " records");
  }
  return entries;
}

absl::StatusOr<int64_t> WriteCheckpointFile(const std::string& dir,
                                            absl::string_view name,
                                            absl::string_view contents) {
  RETURN_IF_ERROR(ValidateCheckpointName(name));
  RETURN_IF_ERROR(MakeDirs(dir));
  const std::string tmp = PathOf(dir, TempName(name));
  const std::string path = PathOf(dir, name);
  const int fd =
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot create", tmp);
  absl::Status status = WriteAll(fd, contents, tmp);
  if (status.ok() && ::fsync(fd) != 0) status = Errno("cannot fsync", tmp);
  if (::close(fd) != 0 && status.ok()) status = Errno("cannot close", tmp);
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    status = Errno("cannot rename to", path);
  }
  if (!status.ok()) {
    ::unlink(tmp.c_str());
    return status;
  }
  // The rename is durable once the directory is.
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return Errno("cannot open directory", dir);
  if (::fsync(dir_fd) != 0) status = Errno("cannot fsync directory", dir);
  ::close(dir_fd);
  if (!status.ok()) return status;
  return static_cast<int64_t>(contents.size());
}

absl::StatusOr<std::string> ReadCheckpointFile(const std::string& dir,
                                               absl::string_view name,
                                               int64_t max_bytes) {
  RETURN_IF_ERROR(ValidateCheckpointName(name));
  const std::string path = PathOf(dir, name);
  const std::string quoted = QuoteName(name);
  // O_NOFOLLOW: a symbolic link fails with ELOOP instead of being followed
  // (to any file the server can read, or /dev/zero); O_NONBLOCK: opening a
  // FIFO without a writer returns at once instead of blocking forever (the
  // fstat below then refuses it); O_CLOEXEC: no descriptor leaks to a child.
  const int fd =
      ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat("no checkpoint named ", quoted, " in ", dir));
    }
    if (errno == ELOOP) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ", quoted, " in ", dir,
          " is a symbolic link; checkpoints are read only from regular files"));
    }
    return Errno("cannot open", path);
  }
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0) return Errno("cannot stat", path);
  if (!S_ISREG(st.st_mode)) {
    const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a regular file";
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint ", quoted, " in ", dir, " is ", kind,
                     "; checkpoints are read only from regular files"));
  }
  const int64_t limit = std::max<int64_t>(max_bytes, 0);
  auto too_big = [&](int64_t size) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "checkpoint ", quoted, " in ", dir, " has ", size,
        " bytes, more than the ", limit,
        " bytes this restore may read (the session's remaining memory)"));
  };
  if (st.st_size > limit) return too_big(st.st_size);
  std::string contents;
  contents.reserve(static_cast<size_t>(st.st_size));
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("cannot read", path);
    }
    if (n == 0) break;
    // The file may grow while it is read: the bound holds for what is read.
    if (static_cast<int64_t>(contents.size()) + n > limit) {
      return too_big(static_cast<int64_t>(contents.size()) + n);
    }
    contents.append(buffer, static_cast<size_t>(n));
  }
  return contents;
}

absl::StatusOr<CheckpointSummary> SaveVariables(
    const std::string& dir, absl::string_view name,
    absl::Span<Variable* const> vars) {
  RETURN_IF_ERROR(ValidateCheckpointName(name));
  RETURN_IF_ERROR(CheckVariableNames(vars));
  RETURN_IF_ERROR(CheckDistinctNames(vars));
  CheckpointSummary summary;
  summary.name = std::string(name);
  std::vector<CheckpointEntry> entries;
  entries.reserve(vars.size());
  for (const Variable* var : vars) {
    if (!var->value.valid()) {
      return absl::FailedPreconditionError(
          absl::StrCat("variable ", QuoteName(var->name),
                       " is uninitialized; assign it before saving"));
    }
    entries.push_back({var->name, var->value});
    summary.variables.push_back(var->name);
  }
  ASSIGN_OR_RETURN(int64_t bytes,
                   WriteCheckpointFile(dir, name, EncodeCheckpoint(entries)));
  summary.file_bytes = bytes;
  return summary;
}

absl::StatusOr<CheckpointSummary> RestoreVariables(
    const std::string& dir, absl::string_view name,
    absl::Span<Variable* const> vars, int64_t max_bytes) {
  RETURN_IF_ERROR(CheckVariableNames(vars));
  RETURN_IF_ERROR(CheckDistinctNames(vars));
  ASSIGN_OR_RETURN(std::string contents,
                   ReadCheckpointFile(dir, name, max_bytes));
  absl::StatusOr<std::vector<CheckpointEntry>> entries =
      DecodeCheckpoint(contents);
  if (!entries.ok()) {
    return absl::Status(
        entries.status().code(),
        absl::StrCat(entries.status().message(), "; no variable was changed"));
  }
  absl::flat_hash_map<absl::string_view, const CheckpointEntry*> by_name;
  for (const CheckpointEntry& e : *entries) by_name[e.name] = &e;
  // Match everything first: all or nothing.
  std::vector<const CheckpointEntry*> matched;
  matched.reserve(vars.size());
  for (const Variable* var : vars) {
    auto it = by_name.find(var->name);
    if (it == by_name.end()) {
      return absl::NotFoundError(absl::StrCat(
          "the file has no variable ", QuoteName(var->name),
          " (it holds: ", NameList(*entries), "); no variable was changed"));
    }
    const Tensor& value = it->second->value;
    if (value.dtype() != var->dtype || value.shape() != var->shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the file holds variable ", QuoteName(var->name), " as ",
          value.DebugString(), " but the session's is ", DTypeName(var->dtype),
          ShapeString(var->shape), "; no variable was changed"));
    }
    matched.push_back(it->second);
  }
  CheckpointSummary summary;
  summary.name = std::string(name);
  summary.file_bytes = static_cast<int64_t>(contents.size());
  for (size_t i = 0; i < vars.size(); ++i) {
    vars[i]->value = matched[i]->value;
    summary.variables.push_back(vars[i]->name);
  }
  return summary;
}

}  // namespace gradtape
