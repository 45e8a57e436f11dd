// Tensor: dtype + shape + a ref-counted, 64-byte aligned buffer (row-major).
//
// A Tensor is a cheap value (copying it shares the buffer). It also carries
// the tape identity `id()`: 0 for a constant nobody can differentiate
// through, otherwise a session-unique id assigned by the OpExecutor when the
// tensor enters the session (TensorFlow's EagerTensor id). Kernels never look
// at ids.
//
// Memory accounting: every buffer is charged to the MemoryAccount that is
// current on the allocating thread (see ScopedMemoryAccount) and refunded when
// the last Tensor sharing it dies, wherever that happens. This is how a
// session's limit sees tensors retained by its tapes as well as its store.
#ifndef GRADTAPE_CORE_TENSOR_TENSOR_H_
#define GRADTAPE_CORE_TENSOR_TENSOR_H_

#include <atomic>
#include <complex>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "Eigen/Core"
#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace gradtape {

// Numbering matches gradtape.v1.DType on the wire.
enum class DType : int8_t {
  kInvalid = 0,
  kFloat32 = 1,
  kFloat64 = 2,
  kInt32 = 3,
  kInt64 = 4,
  kBool = 5,
  kComplex64 = 6,
  kComplex128 = 7,
  // A handle to a server-side object (a variable): a scalar whose buffer
  // also keeps the object alive. Created by ops, never put by clients.
  kResource = 8,
};

using complex64 = std::complex<float>;
using complex128 = std::complex<double>;
// True for the element types complex64 / complex128 (for if constexpr in
// kernels dispatched over several dtypes).
template <typename T>
constexpr bool kIsComplex =
    std::is_same_v<T, complex64> || std::is_same_v<T, complex128>;

size_t DTypeSize(DType dtype);
absl::string_view DTypeName(DType dtype);
bool IsFloating(DType dtype);  // float32, float64
bool IsComplex(DType dtype);   // complex64, complex128
// The real dtype of a complex one (complex64 -> float32, complex128 ->
// float64); any other dtype is its own.
DType RealDType(DType dtype);
// The complex dtype of float32 / float64; kInvalid for any other.
DType ComplexDType(DType dtype);
// Trainable dtypes are the ones a tape records (TensorFlow: floating,
// complex, resource).
inline bool IsTrainable(DType dtype) {
  return IsFloating(dtype) || IsComplex(dtype) || dtype == DType::kResource;
}
bool IsValidDType(int value);

template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kFloat32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::kFloat64;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kInt32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kInt64;
};
template <>
struct DTypeOf<bool> {
  static constexpr DType value = DType::kBool;
};
template <>
struct DTypeOf<complex64> {
  static constexpr DType value = DType::kComplex64;
};
template <>
struct DTypeOf<complex128> {
  static constexpr DType value = DType::kComplex128;
};

using Shape = absl::InlinedVector<int64_t, 4>;
std::string ShapeString(absl::Span<const int64_t> shape);
// Product of dims; -1 if a dim is negative or the product overflows int64.
// For shapes of tensors that exist (their size was checked when they were
// made); a size derived from a client's numbers goes through
// CheckedTensorSize.
int64_t NumElements(absl::Span<const int64_t> shape);

// Server-wide caps on one tensor, set once at start-up (gradtape-server's
// --max_tensor_bytes); every tensor the process makes is within them.
struct TensorLimits {
  int max_rank = 64;
  // Caps the product of the nonzero dims, so a zero-size tensor cannot
  // carry dims that a kernel would loop over for hours.
  int64_t max_elements = int64_t{1} << 32;
  int64_t max_bytes = int64_t{16} << 30;
};
void SetTensorLimits(const TensorLimits& limits);
TensorLimits GetTensorLimits();

struct TensorSize {
  int64_t elements = 0;
  int64_t bytes = 0;
};
// The one place sizes are derived from a dtype and a shape. INVALID_ARGUMENT
// for an invalid dtype, a negative dim or a rank past the cap;
// RESOURCE_EXHAUSTED when the elements or bytes exceed the caps (no
// arithmetic here can overflow: every product is checked against the cap
// before it is formed). Messages name the dtype and the shape.
absl::StatusOr<TensorSize> CheckedTensorSize(DType dtype,
                                             absl::Span<const int64_t> shape);

// What a tensor whose data is `data_bytes` costs its MemoryAccount: the
// memory the allocator really hands out (the data rounded up to 64 bytes,
// or to whole 2 MiB pages for large buffers) plus the buffer's bookkeeping,
// so a session's limit bounds its real footprint even in tiny tensors.
int64_t ChargedBytes(int64_t data_bytes);

class MemoryAccount;

// The pool of freed tensor buffers. A buffer of 64 KiB or more goes back to
// the pool when its last tensor is gone (sizes are rounded up to one of four
// classes per power of two, at most 25% more, and ChargedBytes charges the
// rounded size), and the next tensor of its class takes it instead of fresh
// pages: no page faults, no munmap, warm cache lines. Cached buffers stay
// charged to BufferPoolAccount(), a child of ProcessMemoryAccount(), so they
// count in the server's budget; a buffer is cached only while that account
// fits its limit (SetBufferPoolLimit) and the budget, and an allocation that
// the budget refuses empties the pool and tries once more, so the pool never
// makes a request fail. Thread-safe.
//
// 0 (the default in a bare core) disables it and frees what it holds;
// gradtape-server sets --buffer_pool_mb.
void SetBufferPoolLimit(int64_t bytes);
const std::shared_ptr<MemoryAccount>& BufferPoolAccount();
// Frees every cached buffer.
void ReleaseBufferPool();
// Frees the cached buffers that no allocation has taken since the previous
// call, and returns their bytes: called periodically (gradtape-server's
// reaper, every second), it gives idle memory back within two periods while
// a running training step, which takes its buffers back within
// milliseconds, keeps what it uses.
int64_t TrimBufferPool();
struct BufferPoolStats {
  int64_t cached_bytes = 0;  // charged to BufferPoolAccount()
  int64_t hits = 0;          // allocations served from the pool
  int64_t misses = 0;        // poolable allocations that were not
};
BufferPoolStats GetBufferPoolStats();

// Tests only: every buffer Tensor::Uninitialized hands out is filled with
// `byte` (0-255), so a test can show that a kernel's result does not depend
// on what the buffer held; -1 (the default) leaves it as it was.
void SetUninitializedFillForTesting(int byte);

// Bytes charged to one owner (a session). Thread-safe.
//
// An account may have a parent (a tenant's account, shared by all its
// sessions): every charge and refund goes to both, and TryCharge succeeds
// only when the bytes fit this account's limit and every ancestor's. The
// parent is fixed at construction, so the hot path pays one null check when
// there is none.
class MemoryAccount {
 public:
  MemoryAccount() = default;
  // `name` words refusals of this account ("tenant 'acme'"); empty means
  // "session".
  explicit MemoryAccount(std::shared_ptr<MemoryAccount> parent,
                         std::string name = "")
      : parent_(std::move(parent)), name_(std::move(name)) {}
  MemoryAccount(const MemoryAccount&) = delete;
  MemoryAccount& operator=(const MemoryAccount&) = delete;

  int64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  // Charges `bytes` unless that would take the account or an ancestor past
  // its limit; false (nothing charged anywhere) then.
  bool TryCharge(int64_t bytes) { return TryChargeOrRefuser(bytes) == nullptr; }
  // TryCharge that says who refused: null when charged, else the account
  // (this one or an ancestor) whose limit the bytes did not fit.
  const MemoryAccount* TryChargeOrRefuser(int64_t bytes);
  // Charges without a limit check (bookkeeping that must not fail) or, with
  // a negative delta, refunds. Goes to the ancestors too.
  void Add(int64_t delta) {
    bytes_.fetch_add(delta, std::memory_order_relaxed);
    if (parent_ != nullptr) parent_->Add(delta);
  }
  // 0: unlimited. This account's own limit (the ancestors have theirs).
  int64_t limit() const { return limit_.load(std::memory_order_relaxed); }
  void set_limit(int64_t limit) { limit_.store(limit); }
  // Bytes left before the tightest limit of this account and its ancestors
  // (int64 max when none is limited, 0 when over).
  int64_t remaining() const;
  // The first of this account and its ancestors whose bytes are past its
  // limit (bookkeeping charged with Add can take one there), or null.
  const MemoryAccount* OverLimit() const;
  const MemoryAccount* parent() const { return parent_.get(); }
  const std::string& name() const { return name_; }

 private:
  // Charges this account alone, within its own limit.
  bool TryChargeOwn(int64_t bytes);

  std::atomic<int64_t> bytes_{0};
  std::atomic<int64_t> limit_{0};
  const std::shared_ptr<MemoryAccount> parent_;
  const std::string name_;
};

// The process's account, the root of every session's and tenant's: its
// limit is the server-wide memory budget (gradtape-server's
// --memory_budget_mb; 0, the default in a bare core, is none). Every tensor
// buffer is charged to it, through the current account's chain or, when no
// account is current, directly; so are kept results and replies being sent
// (server/). Refusals by it name the budget.
const std::shared_ptr<MemoryAccount>& ProcessMemoryAccount();

// RESOURCE_EXHAUSTED for `bytes` (needed by `what`, e.g. "float32[4,4]")
// that `refuser` did not fit: "<session|tenant 'x'> memory limit exceeded"
// or "server memory budget exceeded", with what was asked, what is in use
// and the limit, and `advice` after them.
absl::Status MemoryRefusal(const MemoryAccount& refuser, absl::string_view what,
                           int64_t bytes, absl::string_view advice);

// Makes `account` current on this thread for its lifetime (nests).
class ScopedMemoryAccount {
 public:
  explicit ScopedMemoryAccount(std::shared_ptr<MemoryAccount> account);
  ~ScopedMemoryAccount();
  ScopedMemoryAccount(const ScopedMemoryAccount&) = delete;
  ScopedMemoryAccount& operator=(const ScopedMemoryAccount&) = delete;

 private:
  std::shared_ptr<MemoryAccount> previous_;
};
// The account current on this thread (null: none).
MemoryAccount* CurrentMemoryAccount();

// `bytes` of bookkeeping (tape storage, tapes) charged to the account that
// is current where the charge is made (the process's when none is), and
// refunded to it when the charge dies, wherever that happens. Never refused:
// callers that must refuse check the account's limit first. Move-only.
class MemoryCharge {
 public:
  MemoryCharge() = default;
  explicit MemoryCharge(int64_t bytes);
  ~MemoryCharge();
  MemoryCharge(MemoryCharge&& other) noexcept;
  MemoryCharge& operator=(MemoryCharge&& other) noexcept;

 private:
  std::shared_ptr<MemoryAccount> account_;
  int64_t bytes_ = 0;
};

// Bytes held by all live tensor buffers in the process, and the most they
// held since the last ResetPeakTensorBytes (tests: "refused before it was
// allocated").
int64_t LiveTensorBytes();
int64_t PeakTensorBytes();
void ResetPeakTensorBytes();

class Tensor {
 public:
  Tensor() = default;

  // Allocation. The size is checked (CheckedTensorSize) and charged to the
  // current MemoryAccount (with its ancestors, up to the process's) or, when
  // none is current, to ProcessMemoryAccount(), before any memory is taken;
  // RESOURCE_EXHAUSTED names the dtype, the shape and the limit that refused
  // it. Every byte of a new buffer is zero, so no byte a kernel leaves
  // unwritten can carry old heap contents into a reply.
  static absl::StatusOr<Tensor> Empty(DType dtype,
                                      absl::Span<const int64_t> shape);
  // Empty without the zero fill: the bytes are whatever the buffer held
  // before (a freed tensor's, possibly another session's). Only for kernels
  // that write every element before anyone else can see the tensor; the
  // op-sample poison test (tests/core/ops/poison_test.cc) holds every op to
  // it.
  static absl::StatusOr<Tensor> Uninitialized(DType dtype,
                                              absl::Span<const int64_t> shape);
  static absl::StatusOr<Tensor> Zeros(DType dtype,
                                      absl::Span<const int64_t> shape) {
    return Empty(dtype, shape);
  }
  // Every element equal to `value` converted to dtype.
  static absl::StatusOr<Tensor> Filled(DType dtype,
                                       absl::Span<const int64_t> shape,
                                       double value);
  // Tests and examples: an invalid Tensor if allocation fails.
  template <typename T>
  static Tensor FromVector(absl::Span<const int64_t> shape,
                           const std::vector<T>& values);
  template <typename T>
  static Tensor Scalar(T value) {
    return FromVector<T>({}, std::vector<T>{value});
  }
  // A scalar kResource tensor holding `object` (kept alive by every copy of
  // the tensor); its 8 bytes are `handle`, which is what clients see.
  static absl::StatusOr<Tensor> Resource(std::shared_ptr<void> object,
                                         int64_t handle);
  // Raw little-endian bytes; INVALID_ARGUMENT if the size does not match
  // (and for kResource, which only ops create), the errors of Empty
  // otherwise.
  static absl::StatusOr<Tensor> FromBytes(DType dtype,
                                          absl::Span<const int64_t> shape,
                                          absl::string_view bytes);

  bool valid() const { return dtype_ != DType::kInvalid; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t num_elements() const { return num_elements_; }
  // Exact: the size was checked when the tensor was made.
  size_t num_bytes() const { return num_elements_ * DTypeSize(dtype_); }

  int64_t id() const { return id_; }
  void set_id(int64_t id) { id_ = id; }

  const void* raw_data() const;
  void* raw_mutable_data();
  template <typename T>
  const T* data() const {
    return static_cast<const T*>(raw_data());
  }
  template <typename T>
  T* mutable_data() {
    return static_cast<T*>(raw_mutable_data());
  }
  // The object behind a kResource tensor (null otherwise). The caller knows
  // its type from the op that created it.
  template <typename T>
  T* resource() const {
    return static_cast<T*>(ResourceObject());
  }
  // Eigen views of the elements as a flat column array.
  template <typename T>
  Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> flat() const {
    return {data<T>(), num_elements_};
  }
  template <typename T>
  Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> flat() {
    return {mutable_data<T>(), num_elements_};
  }

  // A tensor sharing this buffer with another shape of the same number of
  // elements (the caller checked that, e.g. with CheckedTensorSize).
  Tensor Reshaped(absl::Span<const int64_t> shape) const;
  // Element i converted to double (tests, debugging; complex: real part).
  double ElementAsDouble(int64_t i) const;
  // True if both share one buffer.
  bool SharesBufferWith(const Tensor& other) const {
    return buffer_ != nullptr && buffer_ == other.buffer_;
  }
  std::string DebugString() const;  // "float64[2,3]"

 private:
  struct Buffer;
  static absl::StatusOr<Tensor> Allocate(DType dtype,
                                         absl::Span<const int64_t> shape,
                                         bool zero);
  void* ResourceObject() const;
  DType dtype_ = DType::kInvalid;
  Shape shape_;
  int64_t num_elements_ = 0;
  int64_t id_ = 0;
  std::shared_ptr<Buffer> buffer_;
};

template <typename T>
Tensor Tensor::FromVector(absl::Span<const int64_t> shape,
                          const std::vector<T>& values) {
  absl::StatusOr<Tensor> t = Empty(DTypeOf<T>::value, shape);
  if (!t.ok() || t->num_elements() != static_cast<int64_t>(values.size())) {
    return Tensor();
  }
  std::copy(values.begin(), values.end(), t->mutable_data<T>());
  return *std::move(t);
}

// Calls fn.template operator()<T>() with T the C++ type of a floating dtype;
// returns false (without calling) for other dtypes.
template <typename Fn>
bool DispatchFloat(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32:
      fn(float{});
      return true;
    case DType::kFloat64:
      fn(double{});
      return true;
    default:
      return false;
  }
}
// Same for every numeric dtype (not bool).
template <typename Fn>
bool DispatchNumeric(DType dtype, Fn&& fn) {
  if (DispatchFloat(dtype, fn)) return true;
  if (dtype == DType::kInt32) {
    fn(int32_t{});
  } else if (dtype == DType::kInt64) {
    fn(int64_t{});
  } else {
    return false;
  }
  return true;
}
// Every real dtype including bool (not complex).
template <typename Fn>
bool DispatchAll(DType dtype, Fn&& fn) {
  if (dtype == DType::kBool) {
    fn(bool{});
    return true;
  }
  return DispatchNumeric(dtype, std::forward<Fn>(fn));
}
// complex64, complex128.
template <typename Fn>
bool DispatchComplex(DType dtype, Fn&& fn) {
  if (dtype == DType::kComplex64) {
    fn(complex64{});
  } else if (dtype == DType::kComplex128) {
    fn(complex128{});
  } else {
    return false;
  }
  return true;
}
// Floating and complex dtypes (the ones with arithmetic gradients).
template <typename Fn>
bool DispatchInexact(DType dtype, Fn&& fn) {
  return DispatchFloat(dtype, fn) || DispatchComplex(dtype, fn);
}
// Numeric and complex dtypes (arithmetic).
template <typename Fn>
bool DispatchArithmetic(DType dtype, Fn&& fn) {
  return DispatchNumeric(dtype, fn) || DispatchComplex(dtype, fn);
}
// Every dtype (layout ops that only move elements).
template <typename Fn>
bool DispatchAny(DType dtype, Fn&& fn) {
  return DispatchAll(dtype, fn) || DispatchComplex(dtype, fn);
}

}  // namespace gradtape

#endif  // GRADTAPE_CORE_TENSOR_TENSOR_H_
