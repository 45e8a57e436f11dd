// Forward values, TensorFlow's conventions and bad inputs of the stateless
// random ops (core/ops/random_ops.cc). The exact values are TensorFlow 2.21's
// CPU kernels (tensorflow-cpu), compared bit for bit; each block names the
// TensorFlow call that printed them (bits via numpy .view(np.uint32 /
// np.uint64)). Statistical checks need no TensorFlow.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/ops/ops.h"
#include "core/ops/philox.h"
#include "gtest/gtest.h"
#include "tests/core/ops/op_test_util.h"

namespace gradtape {
namespace {

Tensor I32(std::vector<int32_t> v) {
  return Tensor::FromVector<int32_t>({static_cast<int64_t>(v.size())}, v);
}
Tensor I64(std::vector<int64_t> v) {
  return Tensor::FromVector<int64_t>({static_cast<int64_t>(v.size())}, v);
}
Tensor Alg(int32_t a) { return Tensor::Scalar<int32_t>(a); }
AttrMap DTypeAttr(DType d) { return {{"dtype", d}}; }

std::vector<uint32_t> Bits32(const Tensor& t) {
  std::vector<uint32_t> v(t.num_elements());
  if (!v.empty()) std::memcpy(v.data(), t.data<float>(), 4 * v.size());
  return v;
}
std::vector<uint64_t> Bits64(const Tensor& t) {
  std::vector<uint64_t> v(t.num_elements());
  if (!v.empty()) std::memcpy(v.data(), t.data<double>(), 8 * v.size());
  return v;
}

class RandomOpsTest : public testing::OpTest {
 protected:
  Tensor V2(const char* op, std::vector<int32_t> shape, int64_t key, int64_t c0,
            int64_t c1, DType dtype, int32_t alg = 1) {
    return MustRun(op, {I32(shape), I64({key}), I64({c0, c1}), Alg(alg)},
                   DTypeAttr(dtype));
  }
};

// tf.raw_ops.StatelessRandomUniformV2(shape=[5], key=[12345],
//     counter=[0, 0], alg=1, dtype=tf.float32 / tf.float64)
TEST_F(RandomOpsTest, UniformV2MatchesTensorFlow) {
  Tensor f = V2("StatelessRandomUniformV2", {5}, 12345, 0, 0, DType::kFloat32);
  EXPECT_EQ(f.dtype(), DType::kFloat32);
  EXPECT_EQ(f.shape(), Shape{5});
  EXPECT_EQ(Bits32(f),
            (std::vector<uint32_t>{0x3f747d02, 0x3f7fd4a2, 0x3f152c22,
                                   0x3ea2ef80, 0x3ed9a4a4}));
  Tensor d = V2("StatelessRandomUniformV2", {5}, 12345, 0, 0, DType::kFloat64);
  EXPECT_EQ(d.dtype(), DType::kFloat64);
  EXPECT_EQ(Bits64(d),
            (std::vector<uint64_t>{0x3fe47d025effd4a2, 0x3fe52c23c65177c0,
                                   0x3fd9a4a493c25d90, 0x3fe5b02b4abe546e,
                                   0x3fe9a92aa8098312}));
}

// tf.raw_ops.StatelessRandomUniformV2(shape=[2, 3],
//     key=tf.constant([2**64 - 1], tf.uint64),
//     counter=tf.constant([7, 2**40], tf.uint64), alg=3, dtype=...):
// the key's bits as int64 -1, and alg 3 (auto select) is Philox.
TEST_F(RandomOpsTest, UniformV2HighBitsAndAutoSelect) {
  const int64_t c1 = int64_t{1} << 40;
  Tensor f =
      V2("StatelessRandomUniformV2", {2, 3}, -1, 7, c1, DType::kFloat32, 3);
  EXPECT_EQ(f.shape(), (Shape{2, 3}));
  EXPECT_EQ(Bits32(f),
            (std::vector<uint32_t>{0x3f4bc19a, 0x3ee0f2ec, 0x3f5b16ac,
                                   0x3f343cc2, 0x3e915478, 0x3ecdb754}));
  Tensor d =
      V2("StatelessRandomUniformV2", {2, 3}, -1, 7, c1, DType::kFloat64, 3);
  EXPECT_EQ(Bits64(d),
            (std::vector<uint64_t>{0x3fd7833608e0f2ec, 0x3feb16ad83b43cc2,
                                   0x3fd15478eccdb754, 0x3fcc06b7de6e3480,
                                   0x3feae5f379c11c48, 0x3fda8d6fed38ca2c}));
}

// tf.raw_ops.StatelessRandomNormalV2(shape=[5], key=[12345],
//     counter=[0, 0], alg=1, dtype=...)
TEST_F(RandomOpsTest, NormalV2MatchesTensorFlow) {
  Tensor f = V2("StatelessRandomNormalV2", {5}, 12345, 0, 0, DType::kFloat32);
  EXPECT_EQ(Bits32(f),
            (std::vector<uint32_t>{0xbaa5512f, 0x3e9b500f, 0x3f71fb6b,
                                   0xbedd357d, 0xbf65ce5c}));
  Tensor d = V2("StatelessRandomNormalV2", {5}, 12345, 0, 0, DType::kFloat64);
  EXPECT_EQ(Bits64(d),
            (std::vector<uint64_t>{0xbfe9ae0250422d88, 0xbfdfdb60ccbd1e4e,
                                   0xbff372c550830f7c, 0xbfe2fa615c22b7ab,
                                   0x3fb96ee9224cc045}));
}

// tf.raw_ops.StatelessTruncatedNormalV2(shape=[7], key=[42],
//     counter=[3, 0], alg=1, dtype=...)
TEST_F(RandomOpsTest, TruncatedNormalV2MatchesTensorFlow) {
  Tensor f = V2("StatelessTruncatedNormalV2", {7}, 42, 3, 0, DType::kFloat32);
  EXPECT_EQ(Bits32(f), (std::vector<uint32_t>{
                           0x3f4d6726, 0xbf3b2633, 0x3f8d1d53, 0x3fa51fa2,
                           0x3f8772ce, 0x3f482f58, 0x3f4a60dc}));
  Tensor d = V2("StatelessTruncatedNormalV2", {7}, 42, 3, 0, DType::kFloat64);
  EXPECT_EQ(Bits64(d),
            (std::vector<uint64_t>{0xbfe903a5c457d6ec, 0x3ff04bc4c2de987c,
                                   0x3feb52ab9876f195, 0xbfd5d2ab4fdcb9cd,
                                   0xbfea3af1baeb06d9, 0xbff27f893e3177ec,
                                   0xbfc640ad88dde6b1}));
}

// tf.raw_ops.StatelessRandomUniform(shape=[5],
//     seed=tf.constant([1, 2], tf.int32) / tf.constant([-3, 2**40],
//     tf.int64), dtype=...)
TEST_F(RandomOpsTest, UniformV1MatchesTensorFlow) {
  const AttrMap f32 = DTypeAttr(DType::kFloat32);
  const AttrMap f64 = DTypeAttr(DType::kFloat64);
  EXPECT_EQ(
      Bits32(MustRun("StatelessRandomUniform", {I32({5}), I32({1, 2})}, f32)),
      (std::vector<uint32_t>{0x3f581458, 0x3e44a788, 0x3f7f087c, 0x3e243c98,
                             0x3e8b424c}));
  EXPECT_EQ(
      Bits64(MustRun("StatelessRandomUniform", {I32({5}), I32({1, 2})}, f64)),
      (std::vector<uint64_t>{0x3fe81458cf3129e2, 0x3fef087c2c290f26,
                             0x3fc6849f8a98ee28, 0x3feb60b64610ae7c,
                             0x3fe07956bf15b35e}));
  const Tensor seed = I64({-3, int64_t{1} << 40});
  EXPECT_EQ(Bits32(MustRun("StatelessRandomUniform", {I32({5}), seed}, f32)),
            (std::vector<uint32_t>{0x3ea70708, 0x3e0c5f18, 0x3dbf64b0,
                                   0x3c1bda80, 0x3f4a40fe}));
  EXPECT_EQ(Bits64(MustRun("StatelessRandomUniform", {I32({5}), seed}, f64)),
            (std::vector<uint64_t>{0x3fe38385dc2317c6, 0x3fe7ec96ba026f6a,
                                   0x3fd481fd9dc5cb60, 0x3fe0f1a0780a0bf0,
                                   0x3fd19ba6dd6f5ab0}));
}

// tf.raw_ops.StatelessRandomNormal(shape=[3],
//     seed=tf.constant([1, 2], tf.int32), dtype=...) and
// tf.raw_ops.StatelessRandomNormal(shape=tf.constant([2, 2], tf.int64),
//     seed=tf.constant([-1, -1], tf.int32), dtype=...): a negative int32
// seed word widens with its sign.
TEST_F(RandomOpsTest, NormalV1MatchesTensorFlow) {
  const AttrMap f32 = DTypeAttr(DType::kFloat32);
  const AttrMap f64 = DTypeAttr(DType::kFloat64);
  EXPECT_EQ(
      Bits32(MustRun("StatelessRandomNormal", {I32({3}), I32({1, 2})}, f32)),
      (std::vector<uint32_t>{0x3f0b4acd, 0x3e545b81, 0x3d96a8e4}));
  EXPECT_EQ(
      Bits64(MustRun("StatelessRandomNormal", {I32({3}), I32({1, 2})}, f64)),
      (std::vector<uint64_t>{0xbfc23745fceed393, 0x3fe7b30df7adce2e,
                             0xbff7813821086c87}));
  Tensor f =
      MustRun("StatelessRandomNormal", {I64({2, 2}), I32({-1, -1})}, f32);
  EXPECT_EQ(f.shape(), (Shape{2, 2}));
  EXPECT_EQ(Bits32(f), (std::vector<uint32_t>{0x3d370230, 0xbf1fab5e,
                                              0x3fc15c29, 0xbfa04c9a}));
  EXPECT_EQ(Bits64(MustRun("StatelessRandomNormal",
                           {I64({2, 2}), I32({-1, -1})}, f64)),
            (std::vector<uint64_t>{0x3fecf85e9341c67c, 0x3fe0b0f2ec049169,
                                   0xbfe527638e19ba55, 0x3ff35a880f43ac18}));
}

// tf.raw_ops.StatelessTruncatedNormal(shape=[6],
//     seed=tf.constant([5, 6], tf.int64), dtype=...)
TEST_F(RandomOpsTest, TruncatedNormalV1MatchesTensorFlow) {
  EXPECT_EQ(Bits32(MustRun("StatelessTruncatedNormal", {I32({6}), I64({5, 6})},
                           DTypeAttr(DType::kFloat32))),
            (std::vector<uint32_t>{0x3f8311ec, 0xbf09ee0c, 0x3fa3c868,
                                   0x3f69797b, 0xbfc83cf8, 0x3fd5dda6}));
  EXPECT_EQ(Bits64(MustRun("StatelessTruncatedNormal", {I32({6}), I64({5, 6})},
                           DTypeAttr(DType::kFloat64))),
            (std::vector<uint64_t>{0x3ffe9382e9ec4ce7, 0xbff044a770607119,
                                   0x3fef36d5c43f01cd, 0x3fe63dd326221d8b,
                                   0xbfc28ffcff01c31a, 0x3ff0770a18eae8a4}));
}

// The default dtype is float32, as TensorFlow's.
TEST_F(RandomOpsTest, DefaultDTypeIsFloat32) {
  Tensor y = MustRun("StatelessRandomUniform", {I32({2}), I32({1, 2})});
  EXPECT_EQ(y.dtype(), DType::kFloat32);
  // The first two of the [5] above: same seed, same numbers.
  EXPECT_EQ(Bits32(y), (std::vector<uint32_t>{0x3f581458, 0x3e44a788}));
}

// Empty shapes give empty outputs; shape [] gives a scalar (the first value
// of the stream).
TEST_F(RandomOpsTest, EmptyAndScalarShapes) {
  Tensor e = MustRun("StatelessRandomNormalV2",
                     {I32({3, 0}), I64({1}), I64({0, 0}), Alg(1)});
  EXPECT_EQ(e.shape(), (Shape{3, 0}));
  Tensor s =
      MustRun("StatelessRandomUniformV2", {Tensor::FromVector<int32_t>({0}, {}),
                                           I64({12345}), I64({0, 0}), Alg(1)});
  EXPECT_EQ(s.rank(), 0);
  EXPECT_EQ(Bits32(s), (std::vector<uint32_t>{0x3f747d02}));
}

// Output group g (4 floats, 2 doubles) comes from the block at counter + g,
// so moving the counter on by one drops the first group; a carry out of the
// low 64 bits reaches the high word.
TEST_F(RandomOpsTest, CounterSelectsTheGroup) {
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    const int group = dt == DType::kFloat32 ? 4 : 2;
    Tensor a = V2("StatelessRandomNormalV2", {12}, 99, 0, 5, dt);
    Tensor b = V2("StatelessRandomNormalV2", {12 - group}, 99, 1, 5, dt);
    std::vector<double> va = testing::Values(a), vb = testing::Values(b);
    EXPECT_EQ(std::vector<double>(va.begin() + group, va.end()), vb);
    Tensor c = V2("StatelessRandomUniformV2", {8}, 99, -1, 4, dt);
    Tensor d = V2("StatelessRandomUniformV2", {8 - group}, 99, 0, 5, dt);
    std::vector<double> vc = testing::Values(c), vd = testing::Values(d);
    EXPECT_EQ(std::vector<double>(vc.begin() + group, vc.end()), vd);
  }
}

// Float32 uniforms are made 16 Philox blocks at a time, in parallel ranges
// (random_ops.cc): every size, including partial batches, tails and a
// counter whose low word carries, gives the numbers of Philox4x32::Next
// block by block.
TEST_F(RandomOpsTest, BatchedUniformFloatsMatchBlockByBlock) {
  // 2^32 - 6: word 0 carries into word 1 inside a batch of 16 blocks; -3:
  // the low 64 bits carry into the high ones.
  for (int64_t c0 : {int64_t{0}, int64_t{4294967290}, int64_t{-3}}) {
    for (int32_t n : {1, 3, 4, 63, 64, 65, 67, 1000, 200003}) {
      Tensor t =
          V2("StatelessRandomUniformV2", {n}, 77, c0, 9, DType::kFloat32);
      Philox4x32 gen = Philox4x32::FromWords(77, static_cast<uint64_t>(c0), 9);
      std::vector<float> want;
      while (static_cast<int32_t>(want.size()) < n) {
        for (uint32_t word : gen.Next())
          want.push_back(PhiloxUniformFloat(word));
      }
      want.resize(n);
      ASSERT_EQ(std::memcmp(t.data<float>(), want.data(), 4 * n), 0)
          << "n=" << n << " counter low word " << c0;
    }
  }
}

TEST_F(RandomOpsTest, SameSeedSameNumbersOtherSeedOthers) {
  for (const char* op : {"StatelessRandomUniform", "StatelessRandomNormal",
                         "StatelessTruncatedNormal"}) {
    Tensor a = MustRun(op, {I32({50}), I32({7, 8})});
    Tensor b = MustRun(op, {I32({50}), I64({7, 8})});
    Tensor c = MustRun(op, {I32({50}), I32({7, 9})});
    EXPECT_EQ(testing::Values(a), testing::Values(b)) << op;
    EXPECT_NE(testing::Values(a), testing::Values(c)) << op;
  }
}

// Mean and variance on 100k samples: the standard errors are about 0.001
// (uniform mean), 0.003 (normal mean) and 0.005 (normal variance); the
// bounds are several of those. Truncated to (-2, 2), the variance of a
// standard normal is 1 - 4 phi(2) / (Phi(2) - Phi(-2)) = 0.7737.
TEST_F(RandomOpsTest, DistributionsHaveTheirMoments) {
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    struct Case {
      const char* op;
      double lo, hi, mean, var;
    } cases[] = {{"StatelessRandomUniformV2", 0, 1, 0.5, 1.0 / 12},
                 {"StatelessRandomNormalV2", -1e9, 1e9, 0, 1},
                 {"StatelessTruncatedNormalV2", -2, 2, 0, 0.7737}};
    for (const Case& c : cases) {
      std::vector<double> v =
          testing::Values(V2(c.op, {100000}, 2024, 11, 0, dt));
      ASSERT_EQ(v.size(), 100000u);
      double sum = 0, sq = 0;
      for (double x : v) {
        EXPECT_GE(x, c.lo) << c.op;
        if (c.hi == 1) {
          ASSERT_LT(x, c.hi) << c.op;  // [0, 1)
        } else {
          ASSERT_LT(x, c.hi) << c.op;
          ASSERT_GT(x, c.lo) << c.op;
        }
        sum += x;
        sq += x * x;
      }
      const double mean = sum / v.size(), var = sq / v.size() - mean * mean;
      EXPECT_NEAR(mean, c.mean, 0.015) << c.op << " " << DTypeName(dt);
      EXPECT_NEAR(var, c.var, 0.025) << c.op << " " << DTypeName(dt);
    }
  }
}

TEST_F(RandomOpsTest, BadInputs) {
  const Tensor s = I32({3});
  const char* u2 = "StatelessRandomUniformV2";
  ExpectInvalid(u2, {s, I64({1}), I64({0, 0}), Alg(2)}, {},
                {"alg 2", "ThreeFry"});
  ExpectInvalid(u2, {s, I64({1}), I64({0, 0}), Alg(7)}, {}, {"alg 7"});
  ExpectInvalid(u2, {s, I64({1}), I64({0, 0}), I32({1})}, {},
                {"alg", "shape [1]"});
  ExpectInvalid(u2, {s, I64({1, 2}), I64({0, 0}), Alg(1)}, {},
                {"key", "shape [2]"});
  ExpectInvalid(u2, {s, I32({1}), I64({0, 0}), Alg(1)}, {}, {"key", "int32"});
  ExpectInvalid("StatelessTruncatedNormalV2", {s, I64({1}), I64({0}), Alg(1)},
                {}, {"counter", "shape [1]"});
  ExpectInvalid("StatelessRandomNormalV2",
                {I32({2, -1}), I64({1}), I64({0, 0}), Alg(1)}, {},
                {"shape[1]", "-1"});
  ExpectInvalid(u2, {s, I64({1}), I64({0, 0}), Alg(1)},
                {{"dtype", DType::kInt32}}, {"dtype", "int32"});
  ExpectInvalid(u2, {s, I64({1}), I64({0, 0}), Alg(1)},
                {{"Tshape", DType::kInt64}}, {"Tshape", "int64"});
  ExpectInvalid("StatelessRandomUniform", {s, I32({1, 2, 3})}, {},
                {"seed", "shape [3]"});
  ExpectInvalid("StatelessRandomNormal", {s, Tensor::Scalar<double>(1.0)}, {},
                {"seed"});
  ExpectInvalid("StatelessTruncatedNormal",
                {Tensor::FromVector<int32_t>({1, 1}, {2}), I32({1, 2})}, {},
                {"shape", "[1,1]"});
  ExpectInvalid("StatelessRandomUniform", {s, I32({1, 2})},
                {{"Tseed", DType::kInt64}}, {"Tseed"});
  // Too many elements fails in Allocate (the size rule), before any
  // memory is touched.
  absl::StatusOr<Tensor> big =
      Run1("StatelessRandomUniform",
           {I64({int64_t{1} << 40, int64_t{1} << 40}), I32({1, 2})});
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("StatelessRandomUniform: "),
            std::string::npos)
      << big.status();
}

}  // namespace
}  // namespace gradtape
