// Stateless random numbers, TensorFlow's StatelessRandom* ops: the same
// shape, seed (or key and counter) and dtype give the same numbers as
// TensorFlow's CPU kernels, bit for bit (Philox4x32-10, core/ops/philox.h).
//
// How the numbers are laid out (TensorFlow's FillPhiloxRandom):
//   - Uniform and normal: output group g (4 floats or 2 doubles) comes from
//     the generator's block at counter + g. Uniform float: one 32-bit word
//     per value; double: two. Normal: Box-Muller on pairs of uniforms.
//   - Truncated normal: group g starts at counter + 256 g (float) or
//     counter + 128 g (double) and reads words one by one, keeping the
//     Box-Muller normals with |x| < 2 until the group is full.
//   - The last group may be partial: its first values are kept.
//
// Seeds: the V2 ops take key (uint64[1]) and counter (uint64[2]) and alg
// (1 = Philox; 3 = auto select, Philox on CPU; 2 = ThreeFry is refused).
// gradtape has no uint64 dtype, so key and counter are int64 tensors
// holding the same 64 bits (a client passes the bit pattern). The V1 ops
// take seed (int32 / int64 [2]) and scramble it into a key and counter with
// one Philox block, as TensorFlow's GenerateKey does.
//
// Not differentiable (TensorFlow registers them so): nothing flows back
// into shape or seed.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/base/status_macros.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"
#include "core/ops/parallel.h"
#include "core/ops/philox.h"

namespace gradtape {
namespace {

enum class Dist { kUniform, kNormal, kTruncatedNormal };

// Checks that an optional type attr (kInvalid: inferred) names input i's
// dtype, as TensorFlow's Tshape / T / Tseed do.
absl::Status CheckTypeAttr(const KernelContext& ctx, const char* attr, int i) {
  const DType want = ctx.attrs().Type(attr);
  if (want != DType::kInvalid && want != ctx.input(i).dtype()) {
    return ctx.InvalidArgument("attr ", attr, " is ", DTypeName(want),
                               ", but input ", ctx.op().input_names[i], " is ",
                               DTypeName(ctx.input(i).dtype()));
  }
  return absl::OkStatus();
}

// Input 0 as the output shape, its dtype the one `shape_attr` names.
absl::StatusOr<Shape> OutputShape(const KernelContext& ctx,
                                  const char* shape_attr) {
  RETURN_IF_ERROR(ctx.RequireIndexDType(0));
  RETURN_IF_ERROR(CheckTypeAttr(ctx, shape_attr, 0));
  return ShapeInput(ctx, 0);
}

// The dtype attr: float32 or float64.
absl::StatusOr<DType> OutputDTypeAttr(const KernelContext& ctx) {
  const DType dtype = ctx.attrs().Type("dtype");
  if (!IsFloating(dtype)) {
    return ctx.InvalidArgument("attr dtype is ", DTypeName(dtype),
                               ", expected float32 or float64");
  }
  return dtype;
}

// V1: key and counter from seed (input 1), TensorFlow's GenerateKey: the
// seed words go through one Philox block under a fixed key; its first two
// words are the key, its last two the high half of the counter.
absl::StatusOr<Philox4x32> GeneratorFromSeed(const KernelContext& ctx) {
  RETURN_IF_ERROR(ctx.RequireIndexDType(1));
  RETURN_IF_ERROR(CheckTypeAttr(ctx, "Tseed", 1));
  const Tensor& seed = ctx.input(1);
  if (seed.shape() != Shape{2}) {
    return ctx.InvalidArgument("seed must have shape [2], got shape ",
                               ShapeString(seed.shape()));
  }
  // An int32 seed word widens with its sign, as C++ int -> uint64 does.
  const uint64_t s0 = static_cast<uint64_t>(IndexAt(seed, 0));
  const uint64_t s1 = static_cast<uint64_t>(IndexAt(seed, 1));
  Philox4x32 scramble =
      Philox4x32::FromWords(uint64_t{0x02461e293ec8f720}, s0, s1);
  const Philox4x32::Block mix = scramble.Next();
  return Philox4x32({0, 0, mix[2], mix[3]}, {mix[0], mix[1]});
}

// V2: key (input 1, int64 [1]), counter (input 2, int64 [>= 2]) and alg
// (input 3, int32 scalar).
absl::StatusOr<Philox4x32> GeneratorFromKeyCounter(const KernelContext& ctx) {
  const Tensor &key = ctx.input(1), &counter = ctx.input(2),
               &alg = ctx.input(3);
  if (key.dtype() != DType::kInt64 || key.shape() != Shape{1}) {
    return ctx.InvalidArgument(
        "key must be int64 of shape [1] (uint64 bits), got ",
        DTypeName(key.dtype()), " of shape ", ShapeString(key.shape()));
  }
  // As TensorFlow, a longer counter is accepted and its first two used.
  if (counter.dtype() != DType::kInt64 || counter.rank() != 1 ||
      counter.dim(0) < 2) {
    return ctx.InvalidArgument(
        "counter must be an int64 vector of length at least 2 (uint64 bits) "
        "for Philox, got ",
        DTypeName(counter.dtype()), " of shape ", ShapeString(counter.shape()));
  }
  if (alg.dtype() != DType::kInt32 || alg.rank() != 0) {
    return ctx.InvalidArgument("alg must be an int32 scalar, got ",
                               DTypeName(alg.dtype()), " of shape ",
                               ShapeString(alg.shape()));
  }
  const int32_t a = alg.data<int32_t>()[0];
  if (a == 2) {
    return ctx.InvalidArgument(
        "alg 2 (ThreeFry) is not supported; use 1 (Philox) or 3 (auto "
        "select, Philox on CPU)");
  }
  if (a != 1 && a != 3) {
    return ctx.InvalidArgument("alg ", a,
                               " is not a known algorithm (1 Philox, 3 auto "
                               "select)");
  }
  const int64_t* c = counter.data<int64_t>();
  return Philox4x32::FromWords(static_cast<uint64_t>(key.data<int64_t>()[0]),
                               static_cast<uint64_t>(c[0]),
                               static_cast<uint64_t>(c[1]));
}

// The 32-bit words of a generator one at a time (TensorFlow's
// SingleSampleAdapter): a block is drawn when the last one is used up.
class Words {
 public:
  explicit Words(Philox4x32 gen) : gen_(gen) {}
  uint32_t operator()() {
    if (used_ == 4) {
      block_ = gen_.Next();
      used_ = 0;
    }
    return block_[used_++];
  }

 private:
  Philox4x32 gen_;
  Philox4x32::Block block_{};
  int used_ = 4;
};

// Values per output group: one block's worth (4 floats or 2 doubles).
template <typename T>
constexpr int kGroup = sizeof(T) == 4 ? 4 : 2;

template <typename T>
void UniformGroup(const Philox4x32::Block& b, T* out) {
  if constexpr (sizeof(T) == 4) {
    for (int i = 0; i < 4; ++i) out[i] = PhiloxUniformFloat(b[i]);
  } else {
    out[0] = PhiloxUniformDouble(b[0], b[1]);
    out[1] = PhiloxUniformDouble(b[2], b[3]);
  }
}

template <typename T>
void NormalGroup(const Philox4x32::Block& b, T* out) {
  if constexpr (sizeof(T) == 4) {
    PhiloxNormalFloats(b[0], b[1], &out[0], &out[1]);
    PhiloxNormalFloats(b[2], b[3], &out[2], &out[3]);
  } else {
    PhiloxNormalDoubles(b[0], b[1], b[2], b[3], &out[0], &out[1]);
  }
}

// One truncated-normal group: Box-Muller pairs from consecutive words, each
// value with |x| < 2 kept in order. False if the (generous) bound on pairs
// runs out, which no Philox stream comes near (a pair is all rejected with
// probability 0.002).
template <typename T>
bool TruncatedNormalGroup(Words& words, T* out) {
  int filled = 0;
  for (int pair = 0; pair < (1 << 20); ++pair) {
    T v[2];
    if constexpr (sizeof(T) == 4) {
      const uint32_t x0 = words(), x1 = words();
      PhiloxNormalFloats(x0, x1, &v[0], &v[1]);
    } else {
      const uint32_t x0 = words(), x1 = words(), x2 = words(), x3 = words();
      PhiloxNormalDoubles(x0, x1, x2, x3, &v[0], &v[1]);
    }
    for (int i = 0; i < 2; ++i) {
      if (std::abs(v[i]) < T(2)) {
        out[filled++] = v[i];
        if (filled == kGroup<T>) return true;
      }
    }
  }
  return false;
}

// Philox blocks [0, blocks) from `gen`'s counter as uniform floats (4 per
// block, PhiloxUniformFloat of each word): the numbers of Next() block by
// block. With AVX-512, 16 blocks go through the rounds at once, one word of
// each in a vector (the 32 x 32 -> 64-bit products as even and odd
// _mm512_mul_epu32 halves), and four such sets side by side (Rounds:
// kernel_bench's [32,4,64,64] uniform case 159-165 us with one set, 128-137
// with four); elsewhere block by block. The compiler does not vectorise the
// scalar rounds itself (checked with perf annotate).
void UniformFloatBlocksScalar(Philox4x32 gen, int64_t blocks, float* out) {
  for (int64_t b = 0; b < blocks; ++b) {
    const Philox4x32::Block block = gen.Next();
    for (int j = 0; j < 4; ++j) out[4 * b + j] = PhiloxUniformFloat(block[j]);
  }
}

#if defined(__x86_64__)
// hi and lo words of a * m for each 32-bit lane.
__attribute__((target("avx512f"))) inline void MulHiLo(__m512i a, __m512i m,
                                                       __m512i* hi,
                                                       __m512i* lo) {
  const __m512i even = _mm512_mul_epu32(a, m);
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
  *lo = _mm512_mullo_epi32(a, m);
  *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
}

constexpr int kLanes = 16;

// The counters of the next 16 blocks of `gen`, word w of block i in lane i
// of c[w]; gen moves on by 16. Lane i's counter is the counter + i: the low
// word plus i, carrying into word 1. When the low 64 bits would wrap inside
// these 16 (words 2 and 3 change), they are set one by one instead.
__attribute__((target("avx512f"))) inline void Counters16(Philox4x32& gen,
                                                          __m512i c[4]) {
  const Philox4x32::Block& base = gen.Counter();
  if ((uint64_t{base[1]} << 32 | base[0]) <= ~uint64_t{0} - (kLanes - 1)) {
    const __m512i lane =
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i b0 = _mm512_set1_epi32(static_cast<int>(base[0]));
    const __m512i b1 = _mm512_set1_epi32(static_cast<int>(base[1]));
    c[0] = _mm512_add_epi32(b0, lane);
    const __mmask16 carry = _mm512_cmplt_epu32_mask(c[0], b0);
    c[1] = _mm512_mask_add_epi32(b1, carry, b1, _mm512_set1_epi32(1));
    c[2] = _mm512_set1_epi32(static_cast<int>(base[2]));
    c[3] = _mm512_set1_epi32(static_cast<int>(base[3]));
    gen.Skip(kLanes);
    return;
  }
  alignas(64) uint32_t w[4][kLanes];
  for (int i = 0; i < kLanes; ++i) {
    const Philox4x32::Block& counter = gen.Counter();
    for (int j = 0; j < 4; ++j) w[j][i] = counter[j];
    gen.Skip(1);
  }
  for (int j = 0; j < 4; ++j) c[j] = _mm512_load_si512(w[j]);
}

// Stores 16 blocks of 4 floats, block i's being f[0..3][i], as 64
// consecutive floats (a 4 x 16 transpose): interleave pairs of words, then
// pairs of pairs (each 128-bit lane L then holds block 4L + r of e[r]),
// then gather the lanes of blocks 0-3, 4-7, 8-11 and 12-15.
__attribute__((target("avx512f"))) inline void StoreBlocks16(const __m512 f[4],
                                                             float* to) {
  const __m512d a = _mm512_castps_pd(_mm512_unpacklo_ps(f[0], f[1]));
  const __m512d b = _mm512_castps_pd(_mm512_unpackhi_ps(f[0], f[1]));
  const __m512d c = _mm512_castps_pd(_mm512_unpacklo_ps(f[2], f[3]));
  const __m512d d = _mm512_castps_pd(_mm512_unpackhi_ps(f[2], f[3]));
  const __m512 e0 = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
  const __m512 e1 = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
  const __m512 e2 = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
  const __m512 e3 = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  const __m512 g0 = _mm512_shuffle_f32x4(e0, e1, _MM_SHUFFLE(1, 0, 1, 0));
  const __m512 g1 = _mm512_shuffle_f32x4(e2, e3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m512 g2 = _mm512_shuffle_f32x4(e0, e1, _MM_SHUFFLE(3, 2, 3, 2));
  const __m512 g3 = _mm512_shuffle_f32x4(e2, e3, _MM_SHUFFLE(3, 2, 3, 2));
  _mm512_storeu_ps(to, _mm512_shuffle_f32x4(g0, g1, _MM_SHUFFLE(2, 0, 2, 0)));
  _mm512_storeu_ps(to + 16,
                   _mm512_shuffle_f32x4(g0, g1, _MM_SHUFFLE(3, 1, 3, 1)));
  _mm512_storeu_ps(to + 32,
                   _mm512_shuffle_f32x4(g2, g3, _MM_SHUFFLE(2, 0, 2, 0)));
  _mm512_storeu_ps(to + 48,
                   _mm512_shuffle_f32x4(g2, g3, _MM_SHUFFLE(3, 1, 3, 1)));
}

// Ten Philox rounds on kGroups sets of 16 blocks at once, c[g][w] word w
// of set g's blocks: the sets are independent, so their multiplies overlap
// (one set alone waits on each round's multiply latency).
template <int kGroups>
__attribute__((target("avx512f"))) inline void Rounds(const Philox4x32& gen,
                                                      __m512i c[][4]) {
  const __m512i mul_a = _mm512_set1_epi32(static_cast<int>(Philox4x32::kMulA));
  const __m512i mul_b = _mm512_set1_epi32(static_cast<int>(Philox4x32::kMulB));
  uint32_t k0 = gen.key()[0], k1 = gen.key()[1];
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += Philox4x32::kWeylA;
      k1 += Philox4x32::kWeylB;
    }
    const __m512i key0 = _mm512_set1_epi32(static_cast<int>(k0));
    const __m512i key1 = _mm512_set1_epi32(static_cast<int>(k1));
    for (int g = 0; g < kGroups; ++g) {
      __m512i hi0, lo0, hi1, lo1;
      MulHiLo(c[g][0], mul_a, &hi0, &lo0);
      MulHiLo(c[g][2], mul_b, &hi1, &lo1);
      const __m512i n0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c[g][1]), key0);
      const __m512i n2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c[g][3]), key1);
      c[g][0] = n0;
      c[g][1] = lo1;
      c[g][2] = n2;
      c[g][3] = lo0;
    }
  }
}

// Set g's 16 blocks as 64 uniform floats at `to`.
__attribute__((target("avx512f"))) inline void StoreUniform16(
    const __m512i c[4], float* to) {
  const __m512i mantissa = _mm512_set1_epi32(0x7fffff);
  const __m512i one = _mm512_set1_epi32(127 << 23);
  const __m512 ones = _mm512_set1_ps(1.0f);
  __m512 f[4];
  for (int j = 0; j < 4; ++j) {
    const __m512i bits = _mm512_or_si512(one, _mm512_and_si512(c[j], mantissa));
    f[j] = _mm512_sub_ps(_mm512_castsi512_ps(bits), ones);
  }
  StoreBlocks16(f, to);
}

__attribute__((target("avx512f"))) void UniformFloatBlocksAvx512(Philox4x32 gen,
                                                                 int64_t blocks,
                                                                 float* out) {
  constexpr int kSets = 4;  // 64 blocks a pass
  int64_t first = 0;
  for (; first + kSets * kLanes <= blocks; first += kSets * kLanes) {
    const Philox4x32 keyed = gen;
    __m512i c[kSets][4];
    for (int g = 0; g < kSets; ++g) Counters16(gen, c[g]);
    Rounds<kSets>(keyed, c);
    for (int g = 0; g < kSets; ++g) {
      StoreUniform16(c[g], out + 4 * (first + g * kLanes));
    }
  }
  for (; first + kLanes <= blocks; first += kLanes) {
    const Philox4x32 keyed = gen;
    __m512i c[1][4];
    Counters16(gen, c[0]);
    Rounds<1>(keyed, c);
    StoreUniform16(c[0], out + 4 * first);
  }
  UniformFloatBlocksScalar(gen, blocks - first, out + 4 * first);
}
#endif

void UniformFloatBlocks(Philox4x32 gen, int64_t blocks, float* out) {
#if defined(__x86_64__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) {
    UniformFloatBlocksAvx512(gen, blocks, out);
    return;
  }
#endif
  UniformFloatBlocksScalar(gen, blocks, out);
}

// Fills out[0, n) from gen with the distribution `dist`. Group g comes from
// Philox block g (a truncated-normal group from its own reserved run of
// blocks), so ranges of groups fill in parallel with the same values.
template <typename T>
bool Fill(Dist dist, Philox4x32 gen, T* out, int64_t n) {
  constexpr int kG = kGroup<T>;
  // Blocks reserved per truncated-normal group: 256 words per value.
  constexpr uint64_t kTruncatedSkip = kG * 256 / 4;
  const int64_t groups = (n + kG - 1) / kG;
  std::atomic<bool> ok{true};
  ParallelRange(
      groups, kElementwiseGrain / (4 * kG), [&](int64_t first, int64_t last) {
        Philox4x32 next = gen;
        next.Skip(static_cast<uint64_t>(first));
        if constexpr (std::is_same_v<T, float>) {
          if (dist == Dist::kUniform) {  // every group whole but the last
            const int64_t whole = std::min(last, n / kG) - first;
            if (whole > 0) UniformFloatBlocks(next, whole, out + first * kG);
            next.Skip(static_cast<uint64_t>(std::max<int64_t>(whole, 0)));
            first += std::max<int64_t>(whole, 0);
          }
        }
        T group[kG];
        for (int64_t g = first; g < last; ++g) {
          if (dist == Dist::kTruncatedNormal) {
            Philox4x32 at = gen;
            at.Skip(static_cast<uint64_t>(g) * kTruncatedSkip);
            Words words(at);
            if (!TruncatedNormalGroup(words, group)) {
              ok = false;
              return;
            }
          } else if (dist == Dist::kUniform) {
            UniformGroup(next.Next(), group);
          } else {
            NormalGroup(next.Next(), group);
          }
          const int64_t start = g * kG;
          std::copy(group, group + std::min<int64_t>(kG, n - start),
                    out + start);
        }
      });
  return ok;
}

absl::Status RandomKernel(KernelContext& ctx, Dist dist, bool v2) {
  ASSIGN_OR_RETURN(const DType dtype, OutputDTypeAttr(ctx));
  ASSIGN_OR_RETURN(Shape shape, OutputShape(ctx, v2 ? "Tshape" : "T"));
  ASSIGN_OR_RETURN(Philox4x32 gen,
                   v2 ? GeneratorFromKeyCounter(ctx) : GeneratorFromSeed(ctx));
  ASSIGN_OR_RETURN(Tensor out, AllocateOutput(ctx, dtype, shape));
  bool ok = true;
  DispatchFloat(dtype, [&](auto zero) {
    using T = decltype(zero);
    ok = Fill<T>(dist, gen, out.mutable_data<T>(), out.num_elements());
  });
  if (!ok) {
    return absl::InternalError(absl::StrCat(
        ctx.op().name, ": truncated normal rejection ran out of samples"));
  }
  ctx.set_output(0, std::move(out));
  return absl::OkStatus();
}

// StatelessRandom*V2(shape, key, counter, alg).
Op RandomV2(Op op, Dist dist) {
  return std::move(op.Inputs({"shape", "key", "counter", "alg"})
                       .Outputs({"output"})
                       .Attr("dtype", DType::kFloat32)
                       .Attr("Tshape", DType::kInvalid)
                       .OutputDType(DTypeRule::FromAttr("dtype"))
                       .Forward([dist](KernelContext& ctx) {
                         return RandomKernel(ctx, dist, true);
                       })
                       .NotDifferentiable());
}

// StatelessRandom*(shape, seed).
Op RandomV1(Op op, Dist dist) {
  return std::move(op.Inputs({"shape", "seed"})
                       .Outputs({"output"})
                       .Attr("dtype", DType::kFloat32)
                       .Attr("T", DType::kInvalid)
                       .Attr("Tseed", DType::kInvalid)
                       .OutputDType(DTypeRule::FromAttr("dtype"))
                       .Forward([dist](KernelContext& ctx) {
                         return RandomKernel(ctx, dist, false);
                       })
                       .NotDifferentiable());
}

constexpr char kV2Seeds[] =
    "; key int64[1] and counter int64[2] hold TensorFlow's uint64 bits; alg "
    "1 (Philox) or 3 (auto: Philox), ThreeFry refused; bit-exact with "
    "TensorFlow's CPU kernels";
constexpr char kV1Seeds[] =
    "; seed int32/int64[2] scrambled into a Philox key and counter as "
    "TensorFlow does; bit-exact with TensorFlow's CPU kernels";

}  // namespace

void RegisterRandomOps(OpRegistry& r) {
  r.Add(RandomV2(Op("StatelessRandomUniformV2"), Dist::kUniform)
            .Summary(absl::StrCat("uniform in [0, 1) of shape and dtype "
                                  "(float32, float64), from key and counter",
                                  kV2Seeds)));
  r.Add(RandomV2(Op("StatelessRandomNormalV2"), Dist::kNormal)
            .Summary(absl::StrCat("standard normal (Box-Muller) of shape and "
                                  "dtype, from key and counter",
                                  kV2Seeds)));
  r.Add(RandomV2(Op("StatelessTruncatedNormalV2"), Dist::kTruncatedNormal)
            .Summary(absl::StrCat("standard normal truncated to (-2, 2) by "
                                  "rejection, of shape and dtype, from key "
                                  "and counter",
                                  kV2Seeds)));
  r.Add(RandomV1(Op("StatelessRandomUniform"), Dist::kUniform)
            .Summary(absl::StrCat("uniform in [0, 1) of shape and dtype "
                                  "(float32, float64), from seed",
                                  kV1Seeds)));
  r.Add(RandomV1(Op("StatelessRandomNormal"), Dist::kNormal)
            .Summary(absl::StrCat("standard normal (Box-Muller) of shape and "
                                  "dtype, from seed",
                                  kV1Seeds)));
  r.Add(RandomV1(Op("StatelessTruncatedNormal"), Dist::kTruncatedNormal)
            .Summary(absl::StrCat("standard normal truncated to (-2, 2) by "
                                  "rejection, of shape and dtype, from seed",
                                  kV1Seeds)));
}

}  // namespace gradtape
