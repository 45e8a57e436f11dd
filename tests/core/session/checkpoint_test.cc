// Checkpoints (core/session/checkpoint.h,
// Session::SaveCheckpoint/RestoreCheckpoint): exact round trips into a new
// session, refusal of cut-short and corrupted files (every truncation length,
// every flipped byte) with the session unchanged, name validation,
// all-or-nothing restore, atomic writes.
#include "core/session/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <future>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "core/session/session.h"
#include "gtest/gtest.h"
#include "tests/temp_dir.h"

namespace gradtape {
namespace {

using ::absl::StatusCode;

using ::gradtape::testing::TempDir;

std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void WriteFileBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// One session with a few variables, driven by ids.
class CheckpointSession {
 public:
  explicit CheckpointSession(const std::string& dir)
      : s_(DefaultRegistry(), Options(dir)) {}

  static SessionOptions Options(const std::string& dir) {
    SessionOptions o;
    o.checkpoint_dir = dir;
    return o;
  }
  // A variable `name` of value's dtype and shape, assigned `value` unless
  // it is invalid. Returns the handle id.
  int64_t Var(const std::string& name, DType dtype, Shape shape,
              const Tensor& value = Tensor()) {
    const int64_t handle = next_id_++;
    EXPECT_TRUE(s_.ExecuteOp(++seq_, "VarHandleOp", {}, {handle},
                             {{"dtype", dtype},
                              {"shape", std::vector<int64_t>(shape.begin(),
                                                             shape.end())},
                              {"shared_name", name}})
                    .ok());
    if (value.valid()) Assign(handle, value);
    return handle;
  }
  void Assign(int64_t handle, const Tensor& value) {
    const int64_t id = next_id_++;
    ASSERT_TRUE(s_.PutTensor(++seq_, id, value).ok());
    ASSERT_TRUE(
        s_.ExecuteOp(++seq_, "AssignVariableOp", {handle, id}, {}, {}).ok());
  }
  // The variable's value as raw bytes ("" if it cannot be read).
  std::string Bytes(int64_t handle) {
    const int64_t id = next_id_++;
    if (!s_.ExecuteOp(++seq_, "ReadVariableOp", {handle}, {id}, {}).ok()) {
      return "";
    }
    absl::StatusOr<Tensor> t = s_.FetchTensor(++seq_, id);
    if (!t.ok()) return "";
    return std::string(static_cast<const char*>(t->raw_data()), t->num_bytes());
  }
  absl::StatusOr<CheckpointSummary> Save(const std::string& name,
                                         std::vector<int64_t> ids = {}) {
    return s_.SaveCheckpoint(++seq_, name, ids);
  }
  absl::StatusOr<CheckpointSummary> Restore(const std::string& name,
                                            std::vector<int64_t> ids = {}) {
    return s_.RestoreCheckpoint(++seq_, name, ids);
  }
  Session& session() { return s_; }
  int64_t seq() const { return seq_; }

 private:
  Session s_;
  int64_t seq_ = 0;
  int64_t next_id_ = 1;
};

Tensor Floats(Shape shape, std::vector<float> v) {
  return Tensor::FromVector<float>(shape, v);
}
Tensor Doubles(Shape shape, std::vector<double> v) {
  return Tensor::FromVector<double>(shape, v);
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.path().empty()); }
  TempDir dir_;
};

TEST(CheckpointFormat, Crc32IsTheStandardOne) {
  EXPECT_EQ(Crc32("123456789"), 0xCBF43926u);  // the CRC-32 check value
  EXPECT_EQ(Crc32(""), 0u);
}

TEST(CheckpointFormat, LayoutMatchesTheDocumentation) {
  // docs/CHECKPOINT_FORMAT.md: one float32 scalar named "a" = 1.0f.
  const std::string bytes = EncodeCheckpoint({{"a", Tensor::Scalar(1.0f)}});
  const std::string payload = std::string("\x01\0\0\0a", 5) +
                              std::string("\x01\0\0\0", 4) +  // float32
                              std::string("\0\0\0\0", 4) +    // rank 0
                              std::string("\x04\0\0\0\0\0\0\0", 8) +
                              std::string("\0\0\x80\x3f", 4);  // 1.0f
  std::string expected = std::string("\x89GTCKPT\n", 8) +
                         std::string("\x01\0\0\0", 4) +          // version
                         std::string("\x01\0\0\0", 4) +          // count
                         std::string("\x19\0\0\0\0\0\0\0", 8) +  // 25 bytes
                         payload;
  const uint32_t crc = Crc32(expected);
  for (int i = 0; i < 4; ++i)
    expected.push_back(static_cast<char>(crc >> (8 * i)));
  EXPECT_EQ(bytes, expected);
  absl::StatusOr<std::vector<CheckpointEntry>> decoded =
      DecodeCheckpoint(bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->size(), 1u);
  EXPECT_EQ((*decoded)[0].name, "a");
  EXPECT_EQ((*decoded)[0].value.ElementAsDouble(0), 1.0);
}

TEST_F(CheckpointTest, RoundTripIntoANewSessionIsExact) {
  // Values with bits that a text round trip would lose.
  const Tensor w = Floats({2, 3}, {0.1f, -1e-30f, 3.4e38f, 1.0f / 3, -0.0f, 7});
  const Tensor b = Doubles({4}, {M_PI, -1e-300, 1.0 / 3, 2.5e307});
  const Tensor step = Tensor::FromVector<int64_t>({}, {int64_t{1} << 53});
  const Tensor flags = Tensor::FromVector<bool>({2}, {true, false});
  std::string saved_names;
  {
    CheckpointSession a(dir_.path());
    a.Var("dense/w", DType::kFloat32, {2, 3}, w);
    a.Var("dense/b", DType::kFloat64, {4}, b);
    a.Var("step", DType::kInt64, {}, step);
    a.Var("flags", DType::kBool, {2}, flags);
    absl::StatusOr<CheckpointSummary> saved = a.Save("model-1");
    ASSERT_TRUE(saved.ok()) << saved.status();
    // Empty ids: every variable, sorted by name.
    EXPECT_EQ(saved->variables, (std::vector<std::string>{"dense/b", "dense/w",
                                                          "flags", "step"}));
    EXPECT_GT(saved->file_bytes, 28);
  }
  // The only file is the checkpoint: no temporary left behind.
  EXPECT_EQ(dir_.Files(), std::vector<std::string>{"model-1"});

  CheckpointSession b_session(dir_.path());
  const int64_t hw = b_session.Var("dense/w", DType::kFloat32, {2, 3});
  const int64_t hb = b_session.Var("dense/b", DType::kFloat64, {4},
                                   Doubles({4}, {0, 0, 0, 0}));
  const int64_t hs = b_session.Var("step", DType::kInt64, {});
  const int64_t hf = b_session.Var("flags", DType::kBool, {2});
  absl::StatusOr<CheckpointSummary> restored = b_session.Restore("model-1");
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->variables.size(), 4u);
  auto raw = [](const Tensor& t) {
    return std::string(static_cast<const char*>(t.raw_data()), t.num_bytes());
  };
  EXPECT_EQ(b_session.Bytes(hw), raw(w));
  EXPECT_EQ(b_session.Bytes(hb), raw(b));
  EXPECT_EQ(b_session.Bytes(hs), raw(step));
  EXPECT_EQ(b_session.Bytes(hf), raw(flags));
}

// tests/core/testdata/checkpoint_v1_fixture.gtckpt was written by
// Session::SaveCheckpoint before Crc32 moved from a hand-written table to
// zlib: files saved then must still restore, bit for bit.
TEST(CheckpointFormat, FileWrittenByAnEarlierBuildRestoresExactly) {
  const std::string dir =
      std::string(GRADTAPE_SOURCE_DIR) + "/tests/core/testdata";
  const std::string name = "checkpoint_v1_fixture.gtckpt";
  const Tensor weights =
      Floats({2, 3}, {1.5f, -0.0f, std::numeric_limits<float>::max(),
                      std::numeric_limits<float>::min(),
                      std::numeric_limits<float>::denorm_min(), -2.71828182f});
  const Tensor bias =
      Doubles({3}, {0.1, -1e300, std::numeric_limits<double>::denorm_min()});
  const Tensor step = Tensor::FromVector<int64_t>(
      {2}, {9007199254740993, std::numeric_limits<int64_t>::min()});
  auto raw = [](const Tensor& t) {
    return std::string(static_cast<const char*>(t.raw_data()), t.num_bytes());
  };

  const std::string bytes = ReadFileBytes(dir + "/" + name);
  ASSERT_EQ(bytes.size(), 199u) << "cannot read " << dir << "/" << name;
  absl::StatusOr<std::vector<CheckpointEntry>> decoded =
      DecodeCheckpoint(bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->size(), 3u);
  EXPECT_EQ((*decoded)[0].name, "weights");
  EXPECT_EQ((*decoded)[1].name, "bias");
  EXPECT_EQ((*decoded)[2].name, "step");
  // Re-encoding gives the same bytes, checksum included.
  EXPECT_EQ(EncodeCheckpoint(*decoded), bytes);

  CheckpointSession session(dir);
  const int64_t hw = session.Var("weights", DType::kFloat32, {2, 3});
  const int64_t hb = session.Var("bias", DType::kFloat64, {3});
  const int64_t hs = session.Var("step", DType::kInt64, {2});
  absl::StatusOr<CheckpointSummary> restored = session.Restore(name);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->file_bytes, 199);
  EXPECT_EQ(session.Bytes(hw), raw(weights));
  EXPECT_EQ(session.Bytes(hb), raw(bias));
  EXPECT_EQ(session.Bytes(hs), raw(step));
}

TEST_F(CheckpointTest, SaveAndRestoreChosenVariables) {
  CheckpointSession a(dir_.path());
  const int64_t w = a.Var("w", DType::kFloat64, {2}, Doubles({2}, {1, 2}));
  const int64_t other =
      a.Var("other", DType::kFloat64, {2}, Doubles({2}, {3, 4}));
  absl::StatusOr<CheckpointSummary> saved = a.Save("only-w", {w});
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->variables, std::vector<std::string>{"w"});
  a.Assign(w, Doubles({2}, {9, 9}));
  a.Assign(other, Doubles({2}, {8, 8}));
  ASSERT_TRUE(a.Restore("only-w", {w}).ok());
  const std::vector<double> want = {1, 2}, other_want = {8, 8};
  EXPECT_EQ(a.Bytes(w),
            std::string(reinterpret_cast<const char*>(want.data()), 16));
  EXPECT_EQ(a.Bytes(other),
            std::string(reinterpret_cast<const char*>(other_want.data()), 16));
  // Restoring every variable needs "other", which the file lacks.
  absl::StatusOr<CheckpointSummary> all = a.Restore("only-w");
  EXPECT_EQ(all.status().code(), StatusCode::kNotFound) << all.status();
  EXPECT_TRUE(absl::StrContains(all.status().message(), "no variable 'other'"))
      << all.status();
}

TEST_F(CheckpointTest, TruncatedFilesAreRefusedAndChangeNothing) {
  CheckpointSession a(dir_.path());
  const int64_t w = a.Var("w", DType::kFloat32, {3}, Floats({3}, {1, 2, 3}));
  ASSERT_TRUE(a.Save("ckpt").ok());
  const std::string path = dir_.path() + "/ckpt";
  const std::string good = ReadFileBytes(path);
  a.Assign(w, Floats({3}, {7, 8, 9}));
  const std::string current = a.Bytes(w);
  for (size_t n = 0; n < good.size(); ++n) {
    SCOPED_TRACE(absl::StrCat("cut to ", n, " of ", good.size(), " bytes"));
    WriteFileBytes(path, good.substr(0, n));
    absl::StatusOr<CheckpointSummary> r = a.Restore("ckpt");
    ASSERT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status();
    EXPECT_TRUE(absl::StrContains(r.status().message(), "truncated"))
        << r.status();
    EXPECT_TRUE(absl::StrContains(r.status().message(), "RestoreCheckpoint"))
        << r.status();
    EXPECT_TRUE(absl::StrContains(r.status().message(), "'ckpt'"))
        << r.status();
    EXPECT_TRUE(
        absl::StrContains(r.status().message(), "no variable was changed"))
        << r.status();
    ASSERT_EQ(a.Bytes(w), current);
  }
  WriteFileBytes(path, good);
  ASSERT_TRUE(a.Restore("ckpt").ok());
  EXPECT_NE(a.Bytes(w), current);
}

TEST_F(CheckpointTest, EveryFlippedByteIsRefusedAndChangesNothing) {
  CheckpointSession a(dir_.path());
  const int64_t w =
      a.Var("w", DType::kFloat64, {2, 2}, Doubles({2, 2}, {1, 2, 3, 4}));
  const int64_t v = a.Var("v", DType::kFloat32, {1}, Floats({1}, {5}));
  ASSERT_TRUE(a.Save("ckpt").ok());
  const std::string path = dir_.path() + "/ckpt";
  const std::string good = ReadFileBytes(path);
  a.Assign(w, Doubles({2, 2}, {0, 0, 0, 0}));
  const std::string w_now = a.Bytes(w), v_now = a.Bytes(v);
  for (size_t i = 0; i < good.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("byte ", i, " of ", good.size()));
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x10);
    WriteFileBytes(path, bad);
    absl::StatusOr<CheckpointSummary> r = a.Restore("ckpt");
    ASSERT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status();
    EXPECT_TRUE(absl::StrContains(r.status().message(), "corrupt checkpoint"))
        << r.status();
    ASSERT_EQ(a.Bytes(w), w_now);
    ASSERT_EQ(a.Bytes(v), v_now);
  }
  // The checksum message for a payload byte.
  std::string bad = good;
  bad[40] ^= 1;
  WriteFileBytes(path, bad);
  EXPECT_TRUE(absl::StrContains(a.Restore("ckpt").status().message(),
                                "checksum mismatch"));
}

TEST_F(CheckpointTest, BadNamesAreRefused) {
  CheckpointSession a(dir_.path());
  a.Var("w", DType::kFloat32, {1}, Floats({1}, {1}));
  const std::vector<std::string> names = {"",
                                          "..",
                                          "../escape",
                                          "a/../../b",
                                          "/etc/passwd",
                                          "sub/dir",
                                          ".hidden",
                                          "a\\b",
                                          "with space",
                                          std::string("nul\0x", 5),
                                          std::string(201, 'a')};
  for (const std::string& name : names) {
    SCOPED_TRACE(absl::CEscape(name));
    absl::StatusOr<CheckpointSummary> saved = a.Save(name);
    EXPECT_EQ(saved.status().code(), StatusCode::kInvalidArgument)
        << saved.status();
    EXPECT_TRUE(
        absl::StrContains(saved.status().message(), "bad checkpoint name"))
        << saved.status();
    EXPECT_TRUE(absl::StrContains(saved.status().message(), "SaveCheckpoint"))
        << saved.status();
    EXPECT_EQ(a.Restore(name).status().code(), StatusCode::kInvalidArgument);
  }
  EXPECT_TRUE(dir_.Files().empty());
  EXPECT_TRUE(a.Save("ok_name-1.ckpt").ok());
}

TEST_F(CheckpointTest, MismatchesRestoreNothing) {
  CheckpointSession a(dir_.path());
  a.Var("a", DType::kFloat32, {2}, Floats({2}, {1, 2}));
  a.Var("b", DType::kFloat32, {2}, Floats({2}, {3, 4}));
  ASSERT_TRUE(a.Save("ckpt").ok());

  CheckpointSession b(dir_.path());
  const int64_t ha = b.Var("a", DType::kFloat32, {2}, Floats({2}, {0, 0}));
  const int64_t hb = b.Var("b", DType::kFloat32, {3}, Floats({3}, {0, 0, 0}));
  const std::string a_before = b.Bytes(ha);
  absl::StatusOr<CheckpointSummary> r = b.Restore("ckpt");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "float32[2]"))
      << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "float32[3]"))
      << r.status();
  // "a" matched but was not assigned: all or nothing.
  EXPECT_EQ(b.Bytes(ha), a_before);
  EXPECT_TRUE(b.Restore("ckpt", {ha}).ok());
  EXPECT_NE(b.Bytes(ha), a_before);
  (void)hb;
}

TEST_F(CheckpointTest, OtherErrors) {
  CheckpointSession a(dir_.path());
  // No variables at all.
  EXPECT_EQ(a.Save("x").status().code(), StatusCode::kFailedPrecondition);
  const int64_t u = a.Var("u", DType::kFloat32, {1});
  absl::StatusOr<CheckpointSummary> uninit = a.Save("x");
  EXPECT_EQ(uninit.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(
      absl::StrContains(uninit.status().message(), "'u' is uninitialized"))
      << uninit.status();
  a.Assign(u, Floats({1}, {1}));
  a.Var("u", DType::kFloat32, {1}, Floats({1}, {2}));
  absl::StatusOr<CheckpointSummary> dup = a.Save("x");
  EXPECT_EQ(dup.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(dup.status().message(), "named 'u'"))
      << dup.status();
  // Unknown and non-variable ids.
  absl::StatusOr<CheckpointSummary> unknown = a.Save("x", {12345});
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(unknown.status().message(), "12345"));
  ASSERT_TRUE(a.session().PutTensor(a.seq() + 1, 777, Floats({1}, {1})).ok());
  absl::StatusOr<CheckpointSummary> not_var = a.Save("x", {777});
  EXPECT_EQ(not_var.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      absl::StrContains(not_var.status().message(), "not a variable handle"));
  // Missing file.
  absl::StatusOr<CheckpointSummary> missing = a.Restore("nope", {u});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "'nope'"));
  EXPECT_TRUE(dir_.Files().empty());
  // Overwriting a checkpoint replaces it.
  ASSERT_TRUE(a.Save("x", {u}).ok());
  a.Assign(u, Floats({1}, {5}));
  ASSERT_TRUE(a.Save("x", {u}).ok());
  a.Assign(u, Floats({1}, {6}));
  ASSERT_TRUE(a.Restore("x", {u}).ok());
  float five = 5;
  EXPECT_EQ(a.Bytes(u), std::string(reinterpret_cast<char*>(&five), 4));
  EXPECT_EQ(dir_.Files(), std::vector<std::string>{"x"});
}

// --- A hostile checkpoint directory (issue 11, class 5) ---------------------

void PutLe(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out->push_back(static_cast<char>(v >> (8 * i)));
}
// One record as docs/CHECKPOINT_FORMAT.md lays it out, sizes as given.
std::string Record(const std::string& name, uint32_t dtype,
                   std::vector<uint64_t> dims, uint64_t length,
                   const std::string& data) {
  std::string r;
  PutLe(&r, name.size(), 4);
  r += name;
  PutLe(&r, dtype, 4);
  PutLe(&r, dims.size(), 4);
  for (uint64_t d : dims) PutLe(&r, d, 8);
  PutLe(&r, length, 8);
  r += data;
  return r;
}
// A whole file (valid header and CRC) around `records`.
std::string File(const std::vector<std::string>& records) {
  std::string payload;
  for (const std::string& r : records) payload += r;
  std::string out("\x89GTCKPT\n", 8);
  PutLe(&out, 1, 4);
  PutLe(&out, records.size(), 4);
  PutLe(&out, payload.size(), 8);
  out += payload;
  PutLe(&out, Crc32(out), 4);
  return out;
}
bool IsAscii(absl::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}
constexpr uint32_t kF32 = static_cast<uint32_t>(DType::kFloat32);

TEST_F(CheckpointTest, FifoIsRefusedPromptly) {
  const std::string fifo = dir_.path() + "/pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  CheckpointSession a(dir_.path());
  const int64_t w = a.Var("w", DType::kFloat32, {1}, Floats({1}, {1}));
  std::future<absl::StatusOr<CheckpointSummary>> restore =
      std::async(std::launch::async, [&] { return a.Restore("pipe", {w}); });
  if (restore.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    ADD_FAILURE() << "RestoreCheckpoint of a FIFO blocks";
    // Unblock the open (it waits for a writer) so the test can end.
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  }
  const absl::Status s = restore.get().status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "'pipe'")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "a FIFO")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "RestoreCheckpoint")) << s;
  // The session still works.
  EXPECT_TRUE(a.Save("after").ok());
}

TEST_F(CheckpointTest, SymlinksAndNonRegularFilesAreRefused) {
  CheckpointSession a(dir_.path());
  const int64_t w = a.Var("w", DType::kFloat32, {1}, Floats({1}, {1}));
  ASSERT_TRUE(a.Save("real").ok());
  ASSERT_EQ(::symlink("real", (dir_.path() + "/link").c_str()), 0);
  ASSERT_EQ(::symlink("/dev/zero", (dir_.path() + "/zero").c_str()), 0);
  for (const char* name : {"link", "zero"}) {
    SCOPED_TRACE(name);
    const absl::Status s = a.Restore(name, {w}).status();
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), absl::StrCat("'", name, "'")))
        << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "symbolic link")) << s;
  }
  const std::string sub = dir_.path() + "/subdir";
  ASSERT_EQ(::mkdir(sub.c_str(), 0755), 0);
  const absl::Status s = a.Restore("subdir", {w}).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "'subdir'")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "a directory")) << s;
  ::rmdir(sub.c_str());
  EXPECT_TRUE(a.Restore("real", {w}).ok());
}

TEST_F(CheckpointTest, OversizeFileIsRefusedBeforeReading) {
  // Not a checkpoint at all: a decode would say DATA_LOSS, so
  // RESOURCE_EXHAUSTED shows the size was refused before reading.
  WriteFileBytes(dir_.path() + "/big", std::string(2 << 20, 'x'));
  absl::StatusOr<std::string> read =
      ReadCheckpointFile(dir_.path(), "big", 1 << 20);
  EXPECT_EQ(read.status().code(), StatusCode::kResourceExhausted)
      << read.status();
  EXPECT_TRUE(absl::StrContains(read.status().message(), "'big'"))
      << read.status();
  EXPECT_TRUE(absl::StrContains(read.status().message(), "2097152 bytes"))
      << read.status();
  EXPECT_TRUE(absl::StrContains(read.status().message(), "1048576"))
      << read.status();
  EXPECT_EQ(ReadCheckpointFile(dir_.path(), "big", 2 << 20)->size(),
            size_t{2} << 20);

  // Through a session: its remaining memory is the bound.
  SessionOptions options = CheckpointSession::Options(dir_.path());
  options.memory_limit_bytes = 1 << 20;
  Session s(DefaultRegistry(), options);
  ASSERT_TRUE(s.ExecuteOp(1, "VarHandleOp", {}, {1},
                          {{"dtype", DType::kFloat32},
                           {"shape", std::vector<int64_t>{1}},
                           {"shared_name", std::string("w")}})
                  .ok());
  const absl::Status r = s.RestoreCheckpoint(2, "big", {}).status();
  EXPECT_EQ(r.code(), StatusCode::kResourceExhausted) << r;
  EXPECT_TRUE(absl::StrContains(r.message(), "RestoreCheckpoint")) << r;
  EXPECT_TRUE(absl::StrContains(r.message(), "2097152 bytes")) << r;
}

TEST(CheckpointFormat, CraftedRecordSizesAreRefused) {
  struct Case {
    std::vector<uint64_t> dims;
    uint64_t length;
    std::string shown;
  };
  const std::vector<Case> cases = {
      // n * 4 wraps to 4: the length check would pass.
      {{4611686018427387905u}, 4, "[4611686018427387905]"},
      {{4611686018427387905u, 4}, 16, "[4611686018427387905,4]"},
      // A negative dim as int64.
      {{uint64_t{1} << 63}, 0, "[9223372036854775808]"},
      // Products that overflow int64 through several dims.
      {{uint64_t{1} << 32, uint64_t{1} << 32, 2}, 8, "[4294967296,"},
      // Over the per-tensor cap (1 TiB), no overflow.
      {{uint64_t{1} << 40}, 4, "[1099511627776]"},
      // A zero dim does not excuse a huge other one.
      {{0, 4611686018427387905u}, 0, "[0,4611686018427387905]"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.shown);
    const std::string file =
        File({Record("w", kF32, c.dims, c.length, std::string(c.length, 'a'))});
    absl::StatusOr<std::vector<CheckpointEntry>> d = DecodeCheckpoint(file);
    EXPECT_EQ(d.status().code(), StatusCode::kDataLoss) << d.status();
    EXPECT_TRUE(absl::StrContains(d.status().message(), c.shown)) << d.status();
    EXPECT_TRUE(absl::StrContains(d.status().message(), "'w'")) << d.status();
    EXPECT_TRUE(absl::StrContains(d.status().message(), "not a tensor size"))
        << d.status();
  }
  // A length that disagrees with a sane shape.
  absl::StatusOr<std::vector<CheckpointEntry>> d =
      DecodeCheckpoint(File({Record("w", kF32, {2}, 4, "abcd")}));
  EXPECT_EQ(d.status().code(), StatusCode::kDataLoss) << d.status();
  EXPECT_TRUE(absl::StrContains(
      d.status().message(), "'w' has 4 data bytes, its float32 shape needs 8"))
      << d.status();
  // A count no payload can hold.
  std::string many = File({});
  many[12] = '\xff';
  many[13] = '\xff';
  many.resize(many.size() - 4);
  PutLe(&many, Crc32(many), 4);
  d = DecodeCheckpoint(many);
  EXPECT_EQ(d.status().code(), StatusCode::kDataLoss) << d.status();
  EXPECT_TRUE(absl::StrContains(d.status().message(), "65535 records"))
      << d.status();
}

TEST_F(CheckpointTest, CraftedHugeShapeRestoreFailsAndSessionWorks) {
  WriteFileBytes(dir_.path() + "/huge",
                 File({Record("w", kF32, {4611686018427387905u}, 4, "abcd")}));
  CheckpointSession a(dir_.path());
  const int64_t w = a.Var("w", DType::kFloat32, {1}, Floats({1}, {1}));
  const std::string before = a.Bytes(w);
  const absl::Status s = a.Restore("huge").status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "4611686018427387905")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "no variable was changed")) << s;
  EXPECT_EQ(a.Bytes(w), before);
  EXPECT_TRUE(a.Save("fine").ok());
}

TEST_F(CheckpointTest, NamesFromAFileAreEscapedInMessages) {
  const std::string bad_utf8 = "v\xff\xfe\xc3";
  WriteFileBytes(dir_.path() + "/odd",
                 File({Record(bad_utf8, kF32, {1}, 4, "abcd")}));
  CheckpointSession a(dir_.path());
  const int64_t w = a.Var("w", DType::kFloat32, {1}, Floats({1}, {1}));
  // The file lacks 'w' and lists what it holds.
  const absl::Status s = a.Restore("odd", {w}).status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "'v\\xff\\xfe\\xc3'")) << s;
  EXPECT_TRUE(IsAscii(s.message())) << absl::CHexEscape(s.message());
  // The decoder's own messages too.
  absl::StatusOr<std::vector<CheckpointEntry>> d =
      DecodeCheckpoint(File({Record(bad_utf8, kF32, {1}, 4, "abcd"),
                             Record(bad_utf8, kF32, {1}, 4, "abcd")}));
  EXPECT_EQ(d.status().code(), StatusCode::kDataLoss) << d.status();
  EXPECT_TRUE(absl::StrContains(d.status().message(),
                                "'v\\xff\\xfe\\xc3' appears twice"))
      << d.status();
  EXPECT_TRUE(IsAscii(d.status().message()));
  // Long names are cut.
  EXPECT_EQ(QuoteName(std::string(150, '\xff')),
            absl::StrCat("'", absl::CHexEscape(std::string(64, '\xff')),
                         "...' (150 bytes)"));
}

TEST_F(CheckpointTest, OneNameRuleForSaveAndRestore) {
  const std::string long_name(300, 'v');
  CheckpointSession a(dir_.path());
  const int64_t v = a.Var(long_name, DType::kFloat32, {1}, Floats({1}, {1}));
  const absl::Status saved = a.Save("x", {v}).status();
  EXPECT_EQ(saved.code(), StatusCode::kInvalidArgument) << saved;
  EXPECT_TRUE(absl::StrContains(saved.message(), "SaveCheckpoint")) << saved;
  EXPECT_TRUE(absl::StrContains(saved.message(), "is too long")) << saved;
  EXPECT_TRUE(absl::StrContains(saved.message(), "300 bytes; at most 200"))
      << saved;
  EXPECT_TRUE(dir_.Files().empty());
  // Restore says the same (not "the file has no variable").
  const absl::Status restored = a.Restore("x", {v}).status();
  EXPECT_EQ(restored.code(), StatusCode::kInvalidArgument) << restored;
  EXPECT_TRUE(absl::StrContains(restored.message(), "300 bytes; at most 200"))
      << restored;
  // And so does the decoder for such a record.
  absl::StatusOr<std::vector<CheckpointEntry>> d =
      DecodeCheckpoint(File({Record(long_name, kF32, {1}, 4, "abcd")}));
  EXPECT_EQ(d.status().code(), StatusCode::kDataLoss) << d.status();
  EXPECT_TRUE(absl::StrContains(d.status().message(), "300 bytes; at most 200"))
      << d.status();
  // 200 bytes is fine both ways.
  const int64_t ok =
      a.Var(std::string(200, 'o'), DType::kFloat32, {1}, Floats({1}, {2}));
  EXPECT_TRUE(a.Save("y", {ok}).ok());
  EXPECT_TRUE(a.Restore("y", {ok}).ok());
}

TEST(CheckpointDisabled, FailedPrecondition) {
  CheckpointSession a("");
  a.Var("w", DType::kFloat32, {1}, Floats({1}, {1}));
  absl::StatusOr<CheckpointSummary> saved = a.Save("x");
  EXPECT_EQ(saved.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(saved.status().message(), "--checkpoint_dir"))
      << saved.status();
  EXPECT_EQ(a.Restore("x").status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace gradtape
