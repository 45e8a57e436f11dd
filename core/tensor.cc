#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <limits>

#ifdef __linux__
#include <sys/mman.h>
#endif

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gradtape {
namespace {

std::atomic<int64_t> g_live_bytes{0};
thread_local std::shared_ptr<MemoryAccount> t_account;

constexpr size_t kAlignment = 64;

}  // namespace

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kFloat64:
    case DType::kInt64:
      return 8;
    case DType::kBool:
      return 1;
    case DType::kComplex64:
      return 8;
    case DType::kComplex128:
      return 16;
    case DType::kResource:
      return 8;
    case DType::kInvalid:
      return 0;
  }
  return 0;
}

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kBool:
      return "bool";
    case DType::kComplex64:
      return "complex64";
    case DType::kComplex128:
      return "complex128";
    case DType::kResource:
      return "resource";
    case DType::kInvalid:
      return "invalid";
  }
  return "invalid";
}

bool IsFloating(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat64;
}

bool IsComplex(DType dtype) {
  return dtype == DType::kComplex64 || dtype == DType::kComplex128;
}

bool IsValidDType(int value) {
  return value >= static_cast<int>(DType::kFloat32) &&
         value <= static_cast<int>(DType::kResource);
}

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

int64_t NumElements(absl::Span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return -1;
    n *= d;
  }
  return n;
}

ScopedMemoryAccount::ScopedMemoryAccount(std::shared_ptr<MemoryAccount> account)
    : previous_(std::move(t_account)) {
  t_account = std::move(account);
}

ScopedMemoryAccount::~ScopedMemoryAccount() {
  t_account = std::move(previous_);
}

int64_t LiveTensorBytes() { return g_live_bytes.load(); }

// Large buffers come straight from mmap (glibc's threshold), so every one
// of their 4 KiB pages faults on first touch and is unmapped again on free:
// for a 64 MiB elementwise op that cost more than the arithmetic. Buffers of
// at least 8 MiB are 2 MiB-aligned and asked to use transparent huge pages
// (numpy does the same), which cuts the faults by 512x; rounding up to whole
// huge pages costs at most 25% more memory from 8 MiB up. `size` is a
// multiple of kAlignment.
namespace {
void* AllocateBuffer(size_t size) {
#ifdef __linux__
  constexpr size_t kHugePage = size_t{2} << 20;
  if (size >= 4 * kHugePage) {
    const size_t huge = (size + kHugePage - 1) / kHugePage * kHugePage;
    void* data = std::aligned_alloc(kHugePage, huge);
    if (data != nullptr) madvise(data, huge, MADV_HUGEPAGE);
    return data;
  }
#endif
  return std::aligned_alloc(kAlignment, size);
}
}  // namespace

struct Tensor::Buffer {
  Buffer(size_t n, std::shared_ptr<MemoryAccount> acct)
      : bytes(n), account(std::move(acct)) {
    // aligned_alloc needs a size that is a multiple of the alignment.
    size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    data = rounded == 0 ? nullptr : AllocateBuffer(rounded);
    g_live_bytes.fetch_add(bytes, std::memory_order_relaxed);
    if (account) account->Add(bytes);
  }
  ~Buffer() {
    std::free(data);
    g_live_bytes.fetch_sub(bytes, std::memory_order_relaxed);
    if (account) account->Add(-static_cast<int64_t>(bytes));
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data = nullptr;
  size_t bytes;
  std::shared_ptr<MemoryAccount> account;
  std::shared_ptr<void> resource;  // kResource only
};

Tensor Tensor::Empty(DType dtype, absl::Span<const int64_t> shape) {
  Tensor t;
  int64_t n = NumElements(shape);
  if (n < 0 || dtype == DType::kInvalid) return t;
  if (n > kMaxTensorBytes / static_cast<int64_t>(DTypeSize(dtype))) return t;
  t.dtype_ = dtype;
  t.shape_.assign(shape.begin(), shape.end());
  t.num_elements_ = n;
  t.buffer_ = std::make_shared<Buffer>(n * DTypeSize(dtype), t_account);
  return t;
}

absl::StatusOr<Tensor> Tensor::TryEmpty(DType dtype,
                                        absl::Span<const int64_t> shape) {
  const int64_t n = NumElements(shape);
  const int64_t size = static_cast<int64_t>(DTypeSize(dtype));
  auto refuse = [&](absl::string_view why) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot allocate ", DTypeName(dtype), ShapeString(shape), ": ", why));
  };
  if (n < 0 || (size > 0 && n > kMaxTensorBytes / size)) {
    return refuse(absl::StrCat("more than ", kMaxTensorBytes, " bytes"));
  }
  const int64_t bytes = n * size;
  if (t_account != nullptr && t_account->limit() > 0 &&
      t_account->bytes() + bytes > t_account->limit()) {
    return refuse(absl::StrCat(bytes,
                               " bytes would exceed the session's "
                               "memory limit of ",
                               t_account->limit()));
  }
  Tensor t = Empty(dtype, shape);
  if (!t.valid() || (bytes > 0 && t.raw_data() == nullptr)) {
    return refuse(absl::StrCat("out of memory for ", bytes, " bytes"));
  }
  return t;
}

Tensor Tensor::Zeros(DType dtype, absl::Span<const int64_t> shape) {
  Tensor t = Empty(dtype, shape);
  if (t.valid() && t.num_bytes() > 0) {
    std::memset(t.raw_mutable_data(), 0, t.num_bytes());
  }
  return t;
}

Tensor Tensor::Filled(DType dtype, absl::Span<const int64_t> shape,
                      double value) {
  Tensor t = Empty(dtype, shape);
  if (!t.valid()) return t;
  DispatchAny(dtype, [&](auto zero) {
    using T = decltype(zero);
    t.flat<T>().setConstant(static_cast<T>(value));
  });
  return t;
}

Tensor Tensor::Resource(std::shared_ptr<void> object, int64_t handle) {
  Tensor t = Empty(DType::kResource, {});
  *t.mutable_data<int64_t>() = handle;
  t.buffer_->resource = std::move(object);
  return t;
}

void* Tensor::ResourceObject() const {
  return buffer_ != nullptr ? buffer_->resource.get() : nullptr;
}

absl::StatusOr<Tensor> Tensor::FromBytes(DType dtype,
                                         absl::Span<const int64_t> shape,
                                         absl::string_view bytes) {
  if (dtype == DType::kInvalid) {
    return absl::InvalidArgumentError("dtype is not set");
  }
  if (dtype == DType::kResource) {
    return absl::InvalidArgumentError(
        "resource tensors are made by ops (VarHandleOp), not sent");
  }
  int64_t n = NumElements(shape);
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid shape ", ShapeString(shape)));
  }
  size_t expected = n * DTypeSize(dtype);
  if (bytes.size() != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat(DTypeName(dtype), ShapeString(shape), " needs ", expected,
                     " bytes of data, got ", bytes.size()));
  }
  Tensor t = Empty(dtype, shape);
  if (dtype == DType::kBool) {  // Any nonzero byte is true.
    bool* out = t.mutable_data<bool>();
    for (int64_t i = 0; i < n; ++i) out[i] = bytes[i] != 0;
  } else if (expected > 0) {
    std::memcpy(t.raw_mutable_data(), bytes.data(), expected);
  }
  return t;
}

const void* Tensor::raw_data() const {
  return buffer_ ? buffer_->data : nullptr;
}

void* Tensor::raw_mutable_data() { return buffer_ ? buffer_->data : nullptr; }

Tensor Tensor::Reshaped(absl::Span<const int64_t> shape) const {
  Tensor t = *this;
  t.shape_.assign(shape.begin(), shape.end());
  t.id_ = 0;
  return t;
}

double Tensor::ElementAsDouble(int64_t i) const {
  double out = 0;
  DispatchAll(dtype_, [&](auto zero) {
    using T = decltype(zero);
    out = static_cast<double>(data<T>()[i]);
  });
  DispatchComplex(dtype_, [&](auto zero) {
    using T = decltype(zero);
    out = static_cast<double>(data<T>()[i].real());
  });
  return out;
}

std::string Tensor::DebugString() const {
  return absl::StrCat(DTypeName(dtype_), ShapeString(shape_));
}

}  // namespace gradtape
