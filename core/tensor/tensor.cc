#include "core/tensor/tensor.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>

#ifdef __linux__
#include <sys/mman.h>
#endif

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "core/base/status_macros.h"

namespace gradtape {
namespace {

std::atomic<int64_t> g_live_bytes{0};
std::atomic<int64_t> g_peak_bytes{0};
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

DType RealDType(DType dtype) {
  switch (dtype) {
    case DType::kComplex64:
      return DType::kFloat32;
    case DType::kComplex128:
      return DType::kFloat64;
    default:
      return dtype;
  }
}

DType ComplexDType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return DType::kComplex64;
    case DType::kFloat64:
      return DType::kComplex128;
    default:
      return DType::kInvalid;
  }
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

namespace {
std::atomic<int> g_max_rank{TensorLimits().max_rank};
std::atomic<int64_t> g_max_elements{TensorLimits().max_elements};
std::atomic<int64_t> g_max_bytes{TensorLimits().max_bytes};
}  // namespace

void SetTensorLimits(const TensorLimits& limits) {
  g_max_rank.store(limits.max_rank);
  g_max_elements.store(limits.max_elements);
  g_max_bytes.store(limits.max_bytes);
}

TensorLimits GetTensorLimits() {
  TensorLimits limits;
  limits.max_rank = g_max_rank.load();
  limits.max_elements = g_max_elements.load();
  limits.max_bytes = g_max_bytes.load();
  return limits;
}

absl::StatusOr<TensorSize> CheckedTensorSize(DType dtype,
                                             absl::Span<const int64_t> shape) {
  if (!IsValidDType(static_cast<int>(dtype))) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid dtype ", static_cast<int>(dtype)));
  }
  const TensorLimits limits = GetTensorLimits();
  if (static_cast<int64_t>(shape.size()) > limits.max_rank) {
    return absl::InvalidArgumentError(
        absl::StrCat(DTypeName(dtype), " tensor of rank ", shape.size(),
                     ": the server allows rank <= ", limits.max_rank));
  }
  // `nonzero` is the product of the nonzero dims; each step is checked
  // against the cap before it is taken, so it stays <= max_elements.
  int64_t nonzero = 1;
  bool empty = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    const int64_t d = shape[i];
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(DTypeName(dtype), ShapeString(shape), ": dimension ", i,
                       " is negative (", d, ")"));
    }
    if (d == 0) {
      empty = true;
      continue;
    }
    if (nonzero > limits.max_elements / d) {
      return absl::ResourceExhaustedError(absl::StrCat(
          DTypeName(dtype), ShapeString(shape), ": more than ",
          limits.max_elements,
          " elements (the server's cap per tensor, counting nonzero dims)"));
    }
    nonzero *= d;
  }
  TensorSize size;
  size.elements = empty ? 0 : nonzero;
  const int64_t width = static_cast<int64_t>(DTypeSize(dtype));
  if (size.elements > limits.max_bytes / width) {
    return absl::ResourceExhaustedError(
        absl::StrCat(DTypeName(dtype), ShapeString(shape), ": more than ",
                     limits.max_bytes, " bytes (the server's cap per tensor)"));
  }
  size.bytes = size.elements * width;
  return size;
}

bool MemoryAccount::TryChargeOwn(int64_t bytes) {
  const int64_t limit = this->limit();
  if (limit <= 0) {
    bytes_.fetch_add(bytes, std::memory_order_relaxed);
    return true;
  }
  int64_t current = bytes_.load(std::memory_order_relaxed);
  do {
    if (bytes > limit - current) return false;
  } while (!bytes_.compare_exchange_weak(current, current + bytes,
                                         std::memory_order_relaxed));
  return true;
}

const MemoryAccount* MemoryAccount::TryChargeOrRefuser(int64_t bytes) {
  if (!TryChargeOwn(bytes)) return this;
  if (parent_ == nullptr) return nullptr;
  const MemoryAccount* refuser = parent_->TryChargeOrRefuser(bytes);
  // The ancestors charged nothing on refusal: undo our own share only.
  if (refuser != nullptr) bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  return refuser;
}

int64_t MemoryAccount::remaining() const {
  const int64_t limit = this->limit();
  const int64_t own = limit <= 0 ? std::numeric_limits<int64_t>::max()
                                 : std::max<int64_t>(0, limit - bytes());
  return parent_ == nullptr ? own : std::min(own, parent_->remaining());
}

const MemoryAccount* MemoryAccount::OverLimit() const {
  for (const MemoryAccount* a = this; a != nullptr; a = a->parent()) {
    if (a->limit() > 0 && a->bytes() > a->limit()) return a;
  }
  return nullptr;
}

const std::shared_ptr<MemoryAccount>& ProcessMemoryAccount() {
  // Never destroyed: buffers freed during static destruction refund it.
  static const auto* const root = new std::shared_ptr<MemoryAccount>(
      std::make_shared<MemoryAccount>(nullptr, "server"));
  return *root;
}

absl::Status MemoryRefusal(const MemoryAccount& refuser, absl::string_view what,
                           int64_t bytes, absl::string_view advice) {
  if (&refuser == ProcessMemoryAccount().get()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "server memory budget exceeded: ", what, " needs ", bytes, " bytes, ",
        refuser.bytes(), " in use by the whole server, budget ",
        refuser.limit(), " (--memory_budget_mb); ", advice,
        ", or retry when other sessions have released memory"));
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      refuser.name().empty() ? "session" : refuser.name(),
      " memory limit exceeded: ", what, " needs ", bytes, " bytes, ",
      refuser.bytes(), " in use, limit ", refuser.limit(), "; ", advice));
}

ScopedMemoryAccount::ScopedMemoryAccount(std::shared_ptr<MemoryAccount> account)
    : previous_(std::move(t_account)) {
  t_account = std::move(account);
}

ScopedMemoryAccount::~ScopedMemoryAccount() {
  t_account = std::move(previous_);
}

MemoryAccount* CurrentMemoryAccount() { return t_account.get(); }

MemoryCharge::MemoryCharge(int64_t bytes)
    : account_(t_account != nullptr ? t_account : ProcessMemoryAccount()),
      bytes_(bytes) {
  account_->Add(bytes_);
}

MemoryCharge::~MemoryCharge() {
  if (account_ != nullptr) account_->Add(-bytes_);
}

MemoryCharge::MemoryCharge(MemoryCharge&& other) noexcept
    : account_(std::move(other.account_)), bytes_(other.bytes_) {
  other.account_ = nullptr;
}

MemoryCharge& MemoryCharge::operator=(MemoryCharge&& other) noexcept {
  if (this != &other) {
    if (account_ != nullptr) account_->Add(-bytes_);
    account_ = std::move(other.account_);
    bytes_ = other.bytes_;
    other.account_ = nullptr;
  }
  return *this;
}

int64_t LiveTensorBytes() { return g_live_bytes.load(); }

int64_t PeakTensorBytes() { return g_peak_bytes.load(); }

void ResetPeakTensorBytes() { g_peak_bytes.store(g_live_bytes.load()); }

// Buffers. Large ones come straight from mmap, 2 MiB-aligned and asked to
// use transparent huge pages (numpy does the same), which cuts page faults by
// 512x against 4 KiB pages; small ones from the heap. Buffers of
// kPoolMinBytes or more are rounded up to a size class and go back to the
// BufferPool when freed (see SetBufferPoolLimit in tensor.h). Tensor::Empty
// zero-fills what it hands out (fresh mmap pages are already zero);
// Tensor::Uninitialized does not.
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kMmapMinBytes = 4 * kHugePage;
constexpr size_t kPoolMinBytes = size_t{64} << 10;

struct Allocation {
  void* data = nullptr;
  void* mapping = nullptr;  // non-null: munmap(mapping, mapped) frees it
  size_t mapped = 0;
  size_t size = 0;  // usable bytes: Footprint of the request
  bool zeroed = false;
};

// The bookkeeping of one buffer: Tensor::Buffer and its shared_ptr control
// block, and the allocator's header.
constexpr int64_t kBufferOverheadBytes = 128;

// What a buffer for `size` bytes takes from the system: poolable sizes are
// rounded up to one of four classes per power of two (a multiple of a
// quarter of the largest power of two not above them; mmap sizes are then
// whole 2 MiB pages), others to the alignment.
size_t Footprint(size_t size) {
  if (size == 0) return 0;
  if (size >= kPoolMinBytes) {
    const int msb = 63 - __builtin_clzll(size);
    const size_t step = size_t{1} << (msb - 2);
    return (size + step - 1) / step * step;
  }
  return (size + kAlignment - 1) / kAlignment * kAlignment;
}

// `size` is a Footprint > 0. data == nullptr on failure.
Allocation AllocateFresh(size_t size) {
  Allocation a;
  a.size = size;
#ifdef __linux__
  if (size >= kMmapMinBytes) {
    const size_t rounded = (size + kHugePage - 1) / kHugePage * kHugePage;
    // One extra huge page lets the data start on a 2 MiB boundary; untouched
    // pages cost no memory.
    const size_t mapped = rounded + kHugePage;
    void* base = mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) return a;
    const uintptr_t start = reinterpret_cast<uintptr_t>(base);
    const uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
    a.data = reinterpret_cast<void*>(aligned);
    a.mapping = base;
    a.mapped = mapped;
    a.zeroed = true;
    madvise(a.data, rounded, MADV_HUGEPAGE);
    return a;
  }
#endif
  // aligned_alloc needs a size that is a multiple of the alignment (every
  // Footprint is).
  a.data = std::aligned_alloc(kAlignment, size);
  return a;
}

void Free(const Allocation& a) {
#ifdef __linux__
  if (a.mapping != nullptr) {
    munmap(a.mapping, a.mapped);
    return;
  }
#endif
  std::free(a.data);
}

std::atomic<int> g_uninitialized_fill{-1};

// Freed buffers by size class, newest last (reused first: its lines are
// the likeliest to be in cache). One mutex: a training step allocates a few
// thousand buffers a second, far from where a lock would show.
class BufferPool {
 public:
  BufferPool()
      : account_(std::make_shared<MemoryAccount>(ProcessMemoryAccount(),
                                                 "buffer pool")) {}

  static BufferPool& Get() {
    static BufferPool* pool = new BufferPool;  // never destroyed
    return *pool;
  }

  const std::shared_ptr<MemoryAccount>& account() const { return account_; }

  // A cached buffer of class `size`, or one with data == nullptr.
  Allocation Take(size_t size) {
    Allocation a;
    {
      absl::MutexLock lock(&mu_);
      auto it = free_.find(size);
      if (it == free_.end() || it->second.empty()) {
        ++misses_;
        return a;
      }
      a = it->second.back().allocation;
      it->second.pop_back();
      ++hits_;
    }
    account_->Add(-static_cast<int64_t>(size));
    a.zeroed = false;
    return a;
  }

  // Caches `a` if the pool's limit and the budget allow, frees it otherwise.
  void Give(const Allocation& a) {
    if (a.size >= kPoolMinBytes && account_->limit() > 0 &&
        account_->TryCharge(static_cast<int64_t>(a.size))) {
      absl::MutexLock lock(&mu_);
      free_[a.size].push_back({a, generation_});
      return;
    }
    Free(a);
  }

  // Frees every cached buffer; true if there was one.
  bool Release() {
    absl::flat_hash_map<size_t, std::vector<Cached>> cached;
    {
      absl::MutexLock lock(&mu_);
      cached.swap(free_);
    }
    int64_t bytes = 0;
    for (const auto& [size, list] : cached) {
      for (const Cached& c : list) {
        Free(c.allocation);
        bytes += static_cast<int64_t>(size);
      }
    }
    account_->Add(-bytes);
    return bytes > 0;
  }

  // Frees the buffers cached before the previous Trim and not taken since
  // (each class's list is oldest first), then starts a new generation.
  int64_t Trim() {
    std::vector<Allocation> stale;
    {
      absl::MutexLock lock(&mu_);
      for (auto& [size, list] : free_) {
        auto fresh = std::find_if(
            list.begin(), list.end(),
            [&](const Cached& c) { return c.generation == generation_; });
        for (auto it = list.begin(); it != fresh; ++it) {
          stale.push_back(it->allocation);
        }
        list.erase(list.begin(), fresh);
      }
      ++generation_;
    }
    int64_t bytes = 0;
    for (const Allocation& a : stale) {
      Free(a);
      bytes += static_cast<int64_t>(a.size);
    }
    account_->Add(-bytes);
    return bytes;
  }

  BufferPoolStats Stats() {
    absl::MutexLock lock(&mu_);
    return {account_->bytes(), hits_, misses_};
  }

 private:
  struct Cached {
    Allocation allocation;
    uint64_t generation;  // of the Trim period it was cached in
  };
  const std::shared_ptr<MemoryAccount> account_;
  absl::Mutex mu_;
  absl::flat_hash_map<size_t, std::vector<Cached>> free_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace

void SetBufferPoolLimit(int64_t bytes) {
  BufferPool& pool = BufferPool::Get();
  pool.account()->set_limit(std::max<int64_t>(bytes, 0));
  if (bytes <= 0) pool.Release();
}

const std::shared_ptr<MemoryAccount>& BufferPoolAccount() {
  return BufferPool::Get().account();
}

void ReleaseBufferPool() { BufferPool::Get().Release(); }

int64_t TrimBufferPool() { return BufferPool::Get().Trim(); }

BufferPoolStats GetBufferPoolStats() { return BufferPool::Get().Stats(); }

void SetUninitializedFillForTesting(int byte) {
  g_uninitialized_fill.store(byte);
}

int64_t ChargedBytes(int64_t data_bytes) {
  return static_cast<int64_t>(Footprint(static_cast<size_t>(data_bytes))) +
         kBufferOverheadBytes;
}

// Owns one allocation and the charge for it.
struct Tensor::Buffer {
  Buffer(Allocation a, int64_t n, int64_t charge,
         std::shared_ptr<MemoryAccount> acct)
      : allocation(a), bytes(n), charged(charge), account(std::move(acct)) {
    const int64_t live =
        g_live_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    int64_t peak = g_peak_bytes.load(std::memory_order_relaxed);
    while (live > peak && !g_peak_bytes.compare_exchange_weak(
                              peak, live, std::memory_order_relaxed)) {
    }
  }
  ~Buffer() {
    if (allocation.data != nullptr) {
      // Refund first, so the pool's charge fits where this one was.
      if (account) account->Add(-charged);
      BufferPool::Get().Give(allocation);
    } else if (account) {
      account->Add(-charged);
    }
    g_live_bytes.fetch_sub(bytes, std::memory_order_relaxed);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  Allocation allocation;
  int64_t bytes;    // of data
  int64_t charged;  // to the account: ChargedBytes(bytes)
  std::shared_ptr<MemoryAccount> account;
  std::shared_ptr<void> resource;  // kResource only
};

absl::StatusOr<Tensor> Tensor::Allocate(DType dtype,
                                        absl::Span<const int64_t> shape,
                                        bool zero) {
  ASSIGN_OR_RETURN(TensorSize size, CheckedTensorSize(dtype, shape));
  const std::shared_ptr<MemoryAccount>& account =
      t_account != nullptr ? t_account : ProcessMemoryAccount();
  const int64_t charge = ChargedBytes(size.bytes);
  const MemoryAccount* refuser = account->TryChargeOrRefuser(charge);
  // Cached buffers count in the budget: give them back and try once more.
  if (refuser != nullptr && BufferPool::Get().Release()) {
    refuser = account->TryChargeOrRefuser(charge);
  }
  if (refuser != nullptr) {
    return MemoryRefusal(*refuser,
                         absl::StrCat(DTypeName(dtype), ShapeString(shape)),
                         charge, "release tensors or delete tapes");
  }
  Allocation allocation;
  if (size.bytes > 0) {
    const size_t footprint = Footprint(static_cast<size_t>(size.bytes));
    if (footprint >= kPoolMinBytes) {
      allocation = BufferPool::Get().Take(footprint);
    }
    if (allocation.data == nullptr) allocation = AllocateFresh(footprint);
    if (allocation.data == nullptr) {
      account->Add(-charge);
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate ", DTypeName(dtype), ShapeString(shape),
                       ": out of memory for ", size.bytes, " bytes"));
    }
    if (zero) {
      if (!allocation.zeroed) std::memset(allocation.data, 0, size.bytes);
    } else if (const int fill = g_uninitialized_fill.load(); fill >= 0) {
      std::memset(allocation.data, fill, size.bytes);
    }
  }
  Tensor t;
  t.dtype_ = dtype;
  t.shape_.assign(shape.begin(), shape.end());
  t.num_elements_ = size.elements;
  t.buffer_ = std::make_shared<Buffer>(allocation, size.bytes, charge, account);
  return t;
}

absl::StatusOr<Tensor> Tensor::Empty(DType dtype,
                                     absl::Span<const int64_t> shape) {
  return Allocate(dtype, shape, /*zero=*/true);
}

absl::StatusOr<Tensor> Tensor::Uninitialized(DType dtype,
                                             absl::Span<const int64_t> shape) {
  return Allocate(dtype, shape, /*zero=*/false);
}

absl::StatusOr<Tensor> Tensor::Filled(DType dtype,
                                      absl::Span<const int64_t> shape,
                                      double value) {
  absl::StatusOr<Tensor> t = Empty(dtype, shape);
  if (!t.ok() || value == 0) return t;
  DispatchAny(dtype, [&](auto zero) {
    using T = decltype(zero);
    t->flat<T>().setConstant(static_cast<T>(value));
  });
  return t;
}

absl::StatusOr<Tensor> Tensor::Resource(std::shared_ptr<void> object,
                                        int64_t handle) {
  absl::StatusOr<Tensor> t = Empty(DType::kResource, {});
  if (!t.ok()) return t;
  *t->mutable_data<int64_t>() = handle;
  t->buffer_->resource = std::move(object);
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
  ASSIGN_OR_RETURN(TensorSize size, CheckedTensorSize(dtype, shape));
  if (static_cast<int64_t>(bytes.size()) != size.bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(DTypeName(dtype), ShapeString(shape), " needs ",
                     size.bytes, " bytes of data, got ", bytes.size()));
  }
  absl::StatusOr<Tensor> t = Empty(dtype, shape);
  if (!t.ok()) return t;
  if (dtype == DType::kBool) {  // Any nonzero byte is true.
    bool* out = t->mutable_data<bool>();
    for (int64_t i = 0; i < size.elements; ++i) out[i] = bytes[i] != 0;
  } else if (size.bytes > 0) {
    std::memcpy(t->raw_mutable_data(), bytes.data(), size.bytes);
  }
  return t;
}

const void* Tensor::raw_data() const {
  return buffer_ ? buffer_->allocation.data : nullptr;
}

void* Tensor::raw_mutable_data() {
  return buffer_ ? buffer_->allocation.data : nullptr;
}

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
