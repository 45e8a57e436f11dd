// Forward values, TensorFlow's conventions and bad inputs of the list ops
// (core/ops/concat_ops.cc), and the list arguments of the registry
// (OpDef::Instantiate); the generic checks (Jacobian, elision, bad inputs,
// output dtypes) run on their samples. Expected values are numpy's
// concatenate / stack / split on an iota, which tf.concat, tf.stack,
// tf.unstack and tf.split follow.
#include <string>
#include <vector>

#include "core/autodiff/gradient.h"
#include "core/autodiff/op_executor.h"
#include "core/ops/ops.h"
#include "core/session/session.h"
#include "gtest/gtest.h"
#include "tests/core/ops/op_samples.h"
#include "tests/core/ops/op_test_util.h"

namespace gradtape {
namespace {

using testing::Values;

// start, start + 1, ... of `shape`, float64.
Tensor Iota(Shape shape, double start = 0) {
  std::vector<double> v(NumElements(shape));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<double>(i);
  return Tensor::FromVector<double>(shape, v);
}
Tensor I32(std::vector<int32_t> v) {
  return Tensor::FromVector<int32_t>({static_cast<int64_t>(v.size())}, v);
}
Tensor S32(int32_t v) { return Tensor::Scalar<int32_t>(v); }
Tensor S64(int64_t v) { return Tensor::Scalar<int64_t>(v); }
AttrMap N(int64_t n) { return {{"N", n}}; }

class ConcatOpsTest : public testing::OpTest {};

TEST_F(ConcatOpsTest, ConcatV2AlongEachAxis) {
  // np.concatenate([[[0, 1], [2, 3]], [[10], [11]]], axis=1)
  Tensor y =
      MustRun("ConcatV2", {Iota({2, 2}), Iota({2, 1}, 10), S32(1)}, N(2));
  EXPECT_EQ(y.shape(), Shape({2, 3}));
  EXPECT_EQ(Values(y), std::vector<double>({0, 1, 10, 2, 3, 11}));
  // axis -1 is axis 1; an int64 axis.
  y = MustRun("ConcatV2", {Iota({2, 2}), Iota({2, 1}, 10), S64(-1)}, N(2));
  EXPECT_EQ(Values(y), std::vector<double>({0, 1, 10, 2, 3, 11}));
  // Three values along axis 0.
  y = MustRun("ConcatV2",
              {Iota({1, 2}), Iota({2, 2}, 10), Iota({1, 2}, 20), S32(0)}, N(3));
  EXPECT_EQ(y.shape(), Shape({4, 2}));
  EXPECT_EQ(Values(y), std::vector<double>({0, 1, 10, 11, 12, 13, 20, 21}));
}

TEST_F(ConcatOpsTest, ConcatV2EmptyValuesAndIntegerDTypes) {
  // A [2, 0] value adds nothing.
  Tensor y = MustRun("ConcatV2", {Iota({2, 0}), Iota({2, 2}), S32(1)}, N(2));
  EXPECT_EQ(y.shape(), Shape({2, 2}));
  EXPECT_EQ(Values(y), std::vector<double>({0, 1, 2, 3}));
  // All empty: an empty result of the summed shape.
  y = MustRun("ConcatV2", {Iota({0, 3}), Iota({0, 3}), S32(0)}, N(2));
  EXPECT_EQ(y.shape(), Shape({0, 3}));
  // int32 values keep their dtype and exact values.
  y = MustRun("ConcatV2", {I32({1, 2}), I32({-7}), S32(0)}, N(2));
  EXPECT_EQ(y.dtype(), DType::kInt32);
  EXPECT_EQ(Values(y), std::vector<double>({1, 2, -7}));
}

TEST_F(ConcatOpsTest, PackAlongEachAxis) {
  // np.stack([[0, 1, 2], [10, 11, 12]], axis=0 / 1 / -1)
  const Tensor a = Iota({3}), b = Iota({3}, 10);
  Tensor y = MustRun("Pack", {a, b}, N(2));
  EXPECT_EQ(y.shape(), Shape({2, 3}));
  EXPECT_EQ(Values(y), std::vector<double>({0, 1, 2, 10, 11, 12}));
  y = MustRun("Pack", {a, b}, {{"N", int64_t{2}}, {"axis", int64_t{1}}});
  EXPECT_EQ(y.shape(), Shape({3, 2}));
  EXPECT_EQ(Values(y), std::vector<double>({0, 10, 1, 11, 2, 12}));
  y = MustRun("Pack", {a, b}, {{"N", int64_t{2}}, {"axis", int64_t{-1}}});
  EXPECT_EQ(y.shape(), Shape({3, 2}));
  EXPECT_EQ(Values(y), std::vector<double>({0, 10, 1, 11, 2, 12}));
  // Scalars stack into a vector; int64 stays int64.
  y = MustRun("Pack", {S64(4), S64(5), S64(6)}, N(3));
  EXPECT_EQ(y.dtype(), DType::kInt64);
  EXPECT_EQ(y.shape(), Shape({3}));
  EXPECT_EQ(Values(y), std::vector<double>({4, 5, 6}));
  // Empty values: [2, 0].
  y = MustRun("Pack", {Iota({0}), Iota({0})}, N(2));
  EXPECT_EQ(y.shape(), Shape({2, 0}));
}

TEST_F(ConcatOpsTest, UnpackAlongEachAxis) {
  // [[0, 1, 2], [3, 4, 5]] along axis 1: its columns.
  absl::StatusOr<Tensors> out = Run(
      "Unpack", {Iota({2, 3})}, {{"num", int64_t{3}}, {"axis", int64_t{1}}});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 3u);
  EXPECT_EQ((*out)[0].shape(), Shape({2}));
  EXPECT_EQ(Values((*out)[0]), std::vector<double>({0, 3}));
  EXPECT_EQ(Values((*out)[1]), std::vector<double>({1, 4}));
  EXPECT_EQ(Values((*out)[2]), std::vector<double>({2, 5}));
  // axis -2 is axis 0: the rows.
  out = Run("Unpack", {Iota({2, 3})},
            {{"num", int64_t{2}}, {"axis", int64_t{-2}}});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ(Values((*out)[1]), std::vector<double>({3, 4, 5}));
  // A vector unpacks into scalars; a zero-length dim into no outputs.
  out = Run("Unpack", {I32({8, 9})}, {{"num", int64_t{2}}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[1].shape(), Shape({}));
  EXPECT_EQ((*out)[1].dtype(), DType::kInt32);
  EXPECT_EQ(Values((*out)[1]), std::vector<double>({9}));
  out = Run("Unpack", {Iota({0, 2})}, {{"num", int64_t{0}}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(out->empty());
}

TEST_F(ConcatOpsTest, SplitIntoEqualPieces) {
  // np.split(iota([2, 6]), 3, axis=1)
  absl::StatusOr<Tensors> out =
      Run("Split", {S32(1), Iota({2, 6})}, {{"num_split", int64_t{3}}});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 3u);
  EXPECT_EQ((*out)[0].shape(), Shape({2, 2}));
  EXPECT_EQ(Values((*out)[0]), std::vector<double>({0, 1, 6, 7}));
  EXPECT_EQ(Values((*out)[1]), std::vector<double>({2, 3, 8, 9}));
  EXPECT_EQ(Values((*out)[2]), std::vector<double>({4, 5, 10, 11}));
  // split_dim -1 (int64) is the same.
  out = Run("Split", {S64(-1), Iota({2, 6})}, {{"num_split", int64_t{3}}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values((*out)[2]), std::vector<double>({4, 5, 10, 11}));
  // A zero-length dim splits into empty pieces.
  out = Run("Split", {S32(0), Iota({0, 2})}, {{"num_split", int64_t{2}}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[1].shape(), Shape({0, 2}));
}

// Large values take the parallel copies (core/ops/concat_ops.cc): long rows
// in chunks (a piece's row of 64 KiB or more, one row or several), many
// short rows in blocks; each element must land where numpy puts it.
TEST_F(ConcatOpsTest, LargeValuesCopyEveryElementInPlace) {
  // Two rows of 20000 + 5000 float64 (200 KB a row): chunks of each row.
  Tensor y = MustRun("ConcatV2",
                     {Iota({2, 20000}), Iota({2, 5000}, 1e6), S32(1)}, N(2));
  ASSERT_EQ(y.shape(), Shape({2, 25000}));
  std::vector<double> v = Values(y);
  for (int64_t r = 0; r < 2; ++r) {
    for (int64_t c = 0; c < 25000; ++c) {
      const double want =
          c < 20000 ? r * 20000 + c : 1e6 + r * 5000 + c - 20000;
      ASSERT_EQ(v[r * 25000 + c], want) << r << ", " << c;
    }
  }
  // 5000 short rows of 1 + 2: blocks of rows.
  y = MustRun("ConcatV2", {Iota({5000, 1}), Iota({5000, 2}, 1e6), S32(1)},
              N(2));
  v = Values(y);
  for (int64_t r = 0; r < 5000; ++r) {
    ASSERT_EQ(v[r * 3], r);
    ASSERT_EQ(v[r * 3 + 1], 1e6 + 2 * r);
    ASSERT_EQ(v[r * 3 + 2], 1e6 + 2 * r + 1);
  }
  // Pack and Unpack along axis 0 of three [9000] (one row of 72 KB each),
  // each the inverse of the other.
  const Tensor a = Iota({9000}), b = Iota({9000}, 1e5), c = Iota({9000}, 2e5);
  Tensor packed = MustRun("Pack", {a, b, c}, N(3));
  ASSERT_EQ(packed.shape(), Shape({3, 9000}));
  v = Values(packed);
  for (int64_t i = 0; i < 27000; ++i) {
    ASSERT_EQ(v[i], (i / 9000) * 1e5 + i % 9000) << i;
  }
  absl::StatusOr<Tensors> out = Run("Unpack", {packed}, {{"num", int64_t{3}}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values((*out)[0]), Values(a));
  EXPECT_EQ(Values((*out)[1]), Values(b));
  EXPECT_EQ(Values((*out)[2]), Values(c));
  // Split of [3, 2, 30000] along axis 2 into 2: 3 rows of 2 pieces of
  // 240 KB.
  out =
      Run("Split", {S32(2), Iota({3, 2, 30000})}, {{"num_split", int64_t{2}}});
  ASSERT_TRUE(out.ok()) << out.status();
  for (int k = 0; k < 2; ++k) {
    v = Values((*out)[k]);
    ASSERT_EQ(v.size(), 3u * 2 * 15000);
    for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i) {
      ASSERT_EQ(v[i], (i / 15000) * 30000 + k * 15000 + i % 15000)
          << k << ", " << i;
    }
  }
}

TEST_F(ConcatOpsTest, SplitVSizesWithOneUnknown) {
  // size_splits [2, -1, 1] of 5: [0, 1], [2, 3], [4].
  absl::StatusOr<Tensors> out =
      Run("SplitV", {Iota({5}), I32({2, -1, 1}), S32(0)},
          {{"num_split", int64_t{3}}});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 3u);
  EXPECT_EQ(Values((*out)[0]), std::vector<double>({0, 1}));
  EXPECT_EQ(Values((*out)[1]), std::vector<double>({2, 3}));
  EXPECT_EQ(Values((*out)[2]), std::vector<double>({4}));
  // Along axis -1 of [2, 3]: sizes 0 and 3 (an empty first piece).
  out = Run("SplitV", {Iota({2, 3}), I32({0, 3}), S32(-1)},
            {{"num_split", int64_t{2}}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), Shape({2, 0}));
  EXPECT_EQ(Values((*out)[1]), std::vector<double>({0, 1, 2, 3, 4, 5}));
  // -1 alone takes everything.
  out = Run("SplitV", {Iota({2, 3}), I32({-1}), S32(1)},
            {{"num_split", int64_t{1}}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), Shape({2, 3}));
}

TEST_F(ConcatOpsTest, ListLengthsAreCheckedBeforeExpanding) {
  const Tensor x = Iota({2, 2});
  ExpectInvalid("ConcatV2", {x, x, S32(0)}, {}, {"required attr 'N'"});
  ExpectInvalid("ConcatV2", {x, S32(0)}, N(1), {"attr 'N'", "[2, 65536]"});
  ExpectInvalid("ConcatV2", {x, x, S32(0)}, N(100000),
                {"attr 'N'", "got 100000"});
  ExpectInvalid("ConcatV2", {x, x, S32(0)}, N(3), {"takes 4 inputs", "got 3"});
  ExpectInvalid("ConcatV2", {x, x, S32(0)}, {{"N", 2.0}}, {"attr 'N'"});
  ExpectInvalid("Pack", {}, N(0), {"attr 'N'", "got 0"});
  ExpectInvalid("Unpack", {x}, {{"num", int64_t{-1}}},
                {"attr 'num'", "got -1"});
  ExpectInvalid("Split", {S32(0), x}, {{"num_split", int64_t{0}}},
                {"attr 'num_split'", "got 0"});
  ExpectInvalid("SplitV", {x, I32({1, 1}), S32(0)},
                {{"num_split", int64_t{70000}}}, {"attr 'num_split'"});
}

TEST_F(ConcatOpsTest, ConcatV2AndPackBadInputs) {
  const Tensor x = Iota({2, 2});
  ExpectInvalid("ConcatV2", {x, Iota({3, 2}), S32(1)}, N(2),
                {"values_1", "[3,2]", "but for dim 1"});
  ExpectInvalid("ConcatV2", {x, Iota({2}), S32(0)}, N(2), {"values_1"});
  ExpectInvalid("ConcatV2", {x, I32({1, 2, 3, 4}), S32(0)}, N(2),
                {"values_1", "same dtype"});
  ExpectInvalid("ConcatV2", {x, x, S32(2)}, N(2), {"axis 2", "[-2, 2)"});
  ExpectInvalid("ConcatV2", {x, x, S32(-3)}, N(2), {"axis -3"});
  ExpectInvalid("ConcatV2", {x, x, I32({0})}, N(2), {"axis", "scalar"});
  ExpectInvalid("ConcatV2", {x, x, Tensor::Scalar<double>(0)}, N(2),
                {"axis", "int32 or int64"});
  ExpectInvalid("ConcatV2", {S64(1), S64(2), S32(0)}, N(2), {"scalars"});
  ExpectInvalid("Pack", {x, Iota({2, 3})}, N(2), {"values_1", "[2,3]"});
  ExpectInvalid("Pack", {x, x}, {{"N", int64_t{2}}, {"axis", int64_t{3}}},
                {"attr axis 3", "[-3, 3)"});
}

TEST_F(ConcatOpsTest, UnpackAndSplitBadInputs) {
  const Tensor x = Iota({2, 6});
  ExpectInvalid("Unpack", {x}, {{"num", int64_t{3}}}, {"attr num 3", "dim 0"});
  ExpectInvalid("Unpack", {x}, {{"num", int64_t{2}}, {"axis", int64_t{2}}},
                {"attr axis 2"});
  ExpectInvalid("Unpack", {S64(1)}, {{"num", int64_t{1}}}, {"scalar"});
  ExpectInvalid("Split", {S32(1), x}, {{"num_split", int64_t{4}}},
                {"num_split 4", "does not divide", "dim 1"});
  ExpectInvalid("Split", {S32(2), x}, {{"num_split", int64_t{2}}},
                {"split_dim 2"});
  ExpectInvalid("Split", {I32({1}), x}, {{"num_split", int64_t{2}}},
                {"split_dim", "scalar"});
  ExpectInvalid("SplitV", {x, I32({2, 2}), S32(1)}, {{"num_split", int64_t{2}}},
                {"size_splits sum to 4", "6"});
  ExpectInvalid("SplitV", {x, I32({-1, -1}), S32(1)},
                {{"num_split", int64_t{2}}}, {"size_splits[1]", "second -1"});
  ExpectInvalid("SplitV", {x, I32({-2, 8}), S32(1)},
                {{"num_split", int64_t{2}}}, {"size_splits[0] = -2"});
  ExpectInvalid("SplitV", {x, I32({7, -1}), S32(1)},
                {{"num_split", int64_t{2}}},
                {"size_splits[0] = 7", "runs past"});
  ExpectInvalid("SplitV", {x, I32({6}), S32(1)}, {{"num_split", int64_t{2}}},
                {"size_splits", "num_split (2)"});
  ExpectInvalid("SplitV", {x, I32({6}), S32(-3)}, {{"num_split", int64_t{1}}},
                {"split_dim -3"});
}

// The flat instance: names, per-index declarations and dtype rules
// expanded as op_registry.h says.
TEST(ListOpInstance, ExpandsDeclaredPositions) {
  const OpDef* concat = DefaultRegistry().Find("ConcatV2");
  ASSERT_NE(concat, nullptr);
  EXPECT_EQ(concat->num_inputs(), 2);
  auto inst = concat->Instantiate(N(3), 4);
  ASSERT_TRUE(inst.ok()) << inst.status();
  const OpDef& c = **inst;
  EXPECT_EQ(c.input_names, std::vector<std::string>(
                               {"values_0", "values_1", "values_2", "axis"}));
  EXPECT_EQ(c.saved_inputs, std::vector<int>({3}));
  EXPECT_EQ(c.input_differentiable,
            std::vector<bool>({true, true, true, false}));
  EXPECT_FALSE(c.has_lists());
  const OpDef* split = DefaultRegistry().Find("Split");
  auto s = split->Instantiate({{"num_split", int64_t{2}}}, 2);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->output_names,
            std::vector<std::string>({"output_0", "output_1"}));
  ASSERT_EQ((*s)->output_dtypes.size(), 2u);
  EXPECT_EQ((*s)->output_dtypes[1].input, 1);  // value, not split_dim
  // An op without lists is its own instance.
  const OpDef* exp = DefaultRegistry().Find("Exp");
  auto e = exp->Instantiate({}, 1);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->get(), exp);
}

// dA, dB of ConcatV2(A, B) are dy's columns; Split's output gradients that
// never arrive are zeros in dvalue; Unpack's too.
TEST_F(ConcatOpsTest, GradientsSliceAndFillZeros) {
  Tensor a = ctx_.Adopt(Iota({2, 2}));
  Tensor b = ctx_.Adopt(Iota({2, 1}, 10));
  ASSERT_TRUE(ctx_.tapes().Push(1, true, false).ok());
  Tape* tape = *ctx_.tapes().Find(1);
  tape->Watch(a);
  tape->Watch(b);
  Tensor y = MustRun("ConcatV2", {a, b, S32(1)}, N(2));
  absl::StatusOr<Tensors> parts =
      Run("Split", {S32(0), Iota({4, 1})}, {{"num_split", int64_t{2}}});
  absl::StatusOr<Tensors> rows = Run("Unpack", {a}, {{"num", int64_t{2}}});
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_TRUE(parts.ok());
  ASSERT_TRUE(ctx_.tapes().Pop(1).ok());
  Tensor dy = Iota({2, 3}, 100);  // [[100, 101, 102], [103, 104, 105]]
  auto g = Gradient(ctx_, *tape, {y}, {a, b}, {dy}, Unconnected::kNone);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(Values((*g)[0]), std::vector<double>({100, 101, 103, 104}));
  EXPECT_EQ(Values((*g)[1]), std::vector<double>({102, 105}));
  // Only row 1 of Unpack(a) reaches the target: row 0 of da is zeros.
  auto ga = Gradient(ctx_, *tape, {(*rows)[1]}, {a}, {}, Unconnected::kNone);
  ASSERT_TRUE(ga.ok()) << ga.status();
  EXPECT_EQ(Values((*ga)[0]), std::vector<double>({0, 0, 1, 1}));
}

// d/dw of <u, d<w, ConcatV2(x, z)>/dx> = u padded with zeros: SplitV's own
// backward (ConcatV2 with zeros for z's missing part) through two tapes.
TEST_F(ConcatOpsTest, SecondOrderThroughSplitV) {
  Tensor x = ctx_.Adopt(Iota({2, 2}));
  Tensor z = ctx_.Adopt(Iota({2, 1}, 10));
  Tensor w = ctx_.Adopt(testing::R({2, 3}, 7));
  Tensor u = Iota({2, 2}, 1);  // [[1, 2], [3, 4]]
  ASSERT_TRUE(ctx_.tapes().Push(1, false, false).ok());
  Tape* outer = *ctx_.tapes().Find(1);
  outer->Watch(w);
  ASSERT_TRUE(ctx_.tapes().Push(2, false, false).ok());
  Tape* inner = *ctx_.tapes().Find(2);
  inner->Watch(x);
  Tensor y = MustRun("ConcatV2", {x, z, S32(1)}, N(2));
  ASSERT_TRUE(ctx_.tapes().Pop(2).ok());
  auto g = Gradient(ctx_, *inner, {y}, {x}, {w}, Unconnected::kZero);
  ASSERT_TRUE(g.ok()) << g.status();
  Tensor dot = MustRun("Sum", {MustRun("Mul", {(*g)[0], u})},
                       {{"axis", std::vector<int64_t>{}}});
  ASSERT_TRUE(ctx_.tapes().Pop(1).ok());
  auto gw = Gradient(ctx_, *outer, {dot}, {w}, {}, Unconnected::kNone);
  ASSERT_TRUE(gw.ok()) << gw.status();
  EXPECT_EQ(Values((*gw)[0]), std::vector<double>({1, 2, 0, 3, 4, 0}));
}

// Over a session: a list op's arity follows from its attrs, and a wrong
// count of ids names it.
TEST(ConcatOpsSession, ArityFollowsTheLengthAttrs) {
  Session session(DefaultRegistry(), {});
  ASSERT_TRUE(session.PutTensor(1, 10, Iota({2})).ok());
  ASSERT_TRUE(session.PutTensor(2, 11, Iota({3}, 5)).ok());
  ASSERT_TRUE(session.PutTensor(3, 12, S32(0)).ok());
  ASSERT_TRUE(
      session.ExecuteOp(4, "ConcatV2", {10, 11, 10, 12}, {13}, N(3)).ok());
  absl::StatusOr<Tensor> y = session.FetchTensor(5, 13);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(Values(*y), std::vector<double>({0, 1, 5, 6, 7, 0, 1}));
  absl::Status s = session.ExecuteOp(6, "ConcatV2", {10, 11, 12}, {14}, N(3));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("takes 4 inputs, got 3"), std::string::npos) << s;
  s = session.ExecuteOp(7, "Split", {12, 13}, {15, 16},
                        {{"num_split", int64_t{7}}});
  EXPECT_NE(s.message().find("has 7 outputs, got 2"), std::string::npos) << s;
  ASSERT_TRUE(session
                  .ExecuteOp(8, "Unpack", {13}, {20, 21, 22, 23, 24, 25, 26},
                             {{"num", int64_t{7}}})
                  .ok());
  absl::StatusOr<Tensor> last = session.FetchTensor(9, 26);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(Values(*last), std::vector<double>({1}));
}

}  // namespace
}  // namespace gradtape
