// libFuzzer target: the input is the contents of a checkpoint file, given to
// DecodeCheckpoint (core/session/checkpoint.h). Whatever decodes must re-encode
// to a file of the same size that decodes to the same content.
//
// Random bytes almost never carry a matching CRC-32, so each input is also
// decoded with its header's payload length and its trailer's CRC rewritten
// to match: that way mutations reach the record parser.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "core/session/checkpoint.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

constexpr size_t kHeaderBytes = 24;  // docs/CHECKPOINT_FORMAT.md
constexpr size_t kTrailerBytes = 4;

void Decode(absl::string_view contents) {
  absl::StatusOr<std::vector<gradtape::CheckpointEntry>> entries =
      gradtape::DecodeCheckpoint(contents);
  if (!entries.ok()) return;
  for (const gradtape::CheckpointEntry& e : *entries) {
    gradtape::fuzz::Require(e.value.valid(), "decoded entries are valid");
  }
  // Bool bytes are normalized to 0 / 1 (any nonzero byte is true), so the
  // file may differ from its re-encoding there; the re-encoding is a fixed
  // point and has the same size.
  const std::string encoded = gradtape::EncodeCheckpoint(*entries);
  gradtape::fuzz::Require(encoded.size() == contents.size(),
                          "re-encoding keeps the size");
  absl::StatusOr<std::vector<gradtape::CheckpointEntry>> again =
      gradtape::DecodeCheckpoint(encoded);
  gradtape::fuzz::Require(again.ok(), "a re-encoding decodes");
  gradtape::fuzz::Require(gradtape::EncodeCheckpoint(*again) == encoded,
                          "decode then encode is a fixed point");
}

// `contents` with the payload length (header bytes 16..23) and the CRC
// (the last 4 bytes) made consistent with its size.
std::string WithValidFraming(absl::string_view contents) {
  std::string fixed(contents);
  if (fixed.size() < kHeaderBytes + kTrailerBytes) return fixed;
  const uint64_t payload = fixed.size() - kHeaderBytes - kTrailerBytes;
  for (int i = 0; i < 8; ++i) {
    fixed[16 + i] = static_cast<char>(payload >> (8 * i));
  }
  const uint32_t crc = gradtape::Crc32(
      absl::string_view(fixed).substr(0, fixed.size() - kTrailerBytes));
  for (int i = 0; i < 4; ++i) {
    fixed[fixed.size() - kTrailerBytes + i] = static_cast<char>(crc >> (8 * i));
  }
  return fixed;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view contents(reinterpret_cast<const char*>(data), size);
  Decode(contents);
  const std::string fixed = WithValidFraming(contents);
  if (fixed != contents) Decode(fixed);
  return 0;
}
