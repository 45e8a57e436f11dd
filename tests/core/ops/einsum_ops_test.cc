// Einsum's parser and forward (core/ops/einsum.h), called directly: values
// worked out by hand or by explicit loops here, and the equation checks.
// Then the registered op through the executor and a tape.
#include <complex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "core/autodiff/gradient.h"
#include "core/autodiff/op_executor.h"
#include "core/ops/einsum.h"
#include "core/registry/op_registry.h"
#include "gtest/gtest.h"
#include "tests/core/ops/op_test_util.h"

namespace gradtape {
namespace {

using testing::Values;

template <typename T = double>
Tensor Make(const Shape& shape, const std::vector<double>& v) {
  return Tensor::FromVector<T>(shape, std::vector<T>(v.begin(), v.end()));
}

// 0.5 * (i + 1) * (-1)^i, a deterministic fill.
std::vector<double> Fill(int64_t n) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(0.5 * (i + 1) * (i % 2 ? -1 : 1));
  return v;
}

class EinsumTest : public ::testing::Test {
 protected:
  EinsumTest() { def_.name = "Einsum"; }
  absl::StatusOr<Tensor> Einsum(const std::string& equation,
                                std::vector<Tensor> in) {
    AttrMap attrs = {{"equation", equation}};
    Tensors out;
    KernelContext ctx(def_, in, attrs, &out);
    return EinsumForward(ctx, in);
  }
  void ExpectEinsum(const std::string& equation, std::vector<Tensor> in,
                    const Shape& shape, const std::vector<double>& want) {
    absl::StatusOr<Tensor> r = Einsum(equation, std::move(in));
    ASSERT_TRUE(r.ok()) << equation << ": " << r.status();
    EXPECT_EQ(r->shape(), shape) << equation;
    ASSERT_EQ(r->num_elements(), static_cast<int64_t>(want.size()));
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(r->ElementAsDouble(i), want[i], 1e-12)
          << equation << " " << i;
    }
  }
  void ExpectInvalid(const std::string& equation, std::vector<Tensor> in,
                     std::vector<std::string> mentions) {
    absl::StatusOr<Tensor> r = Einsum(equation, std::move(in));
    ASSERT_FALSE(r.ok()) << equation;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(r.status().message(), "Einsum: "))
        << r.status();
    for (const std::string& m : mentions) {
      EXPECT_TRUE(absl::StrContains(r.status().message(), m))
          << r.status() << " should mention " << m;
    }
  }
  OpDef def_;
};

const Tensor kA = Make({2, 2}, {1, 2, 3, 4});

TEST_F(EinsumTest, ParsesLabelsAndTheEllipsis) {
  absl::StatusOr<EinsumEquation> eq =
      ParseEinsumEquation("...ij,...jk->...ik", {{2, 1, 2, 3}, {4, 3, 5}});
  ASSERT_TRUE(eq.ok()) << eq.status();
  const int e = EinsumEquation::kEllipsisLabel;
  // Ellipsis ranks 2 and 1, right aligned: b's ellipsis dim is the 2nd.
  EXPECT_EQ(eq->inputs[0], (std::vector<int>{e, e + 1, 'i', 'j'}));
  EXPECT_EQ(eq->inputs[1], (std::vector<int>{e + 1, 'j', 'k'}));
  EXPECT_EQ(eq->output, (std::vector<int>{e, e + 1, 'i', 'k'}));
  EXPECT_EQ(eq->output_shape, (Shape{2, 4, 2, 5}));
}

TEST_F(EinsumTest, MatrixProductsAndTransposes) {
  const Tensor b = Make({2, 2}, {5, 6, 7, 8});
  ExpectEinsum("ij,jk->ik", {kA, b}, {2, 2}, {19, 22, 43, 50});
  ExpectEinsum("ij,jk->ki", {kA, b}, {2, 2}, {19, 43, 22, 50});
  ExpectEinsum("ij,kj->ik", {kA, b}, {2, 2}, {17, 23, 39, 53});
  ExpectEinsum("ij->ji", {kA}, {2, 2}, {1, 3, 2, 4});
  ExpectEinsum("ij->ij", {kA}, {2, 2}, {1, 2, 3, 4});
  // Matrix-vector and a full contraction.
  ExpectEinsum("ij,j->i", {kA, Make({2}, {1, -1})}, {2}, {-1, -1});
  ExpectEinsum("ij,ij->", {kA, b}, {}, {5 + 12 + 21 + 32});
}

TEST_F(EinsumTest, DiagonalsTracesAndReductions) {
  ExpectEinsum("ii->i", {kA}, {2}, {1, 4});
  ExpectEinsum("ii->", {kA}, {}, {5});
  ExpectEinsum("ij->i", {kA}, {2}, {3, 7});
  ExpectEinsum("ij->j", {kA}, {2}, {4, 6});
  ExpectEinsum("ij->", {kA}, {}, {10});
  // A diagonal and a reduction inside a binary equation:
  // diag(a) * v = (1 * 2, 4 * 3); "ij,k->ik" = rowsum(a) outer v.
  ExpectEinsum("ii,i->i", {kA, Make({2}, {2, 3})}, {2}, {2, 12});
  ExpectEinsum("ij,k->ik", {kA, Make({3}, {1, 0, -1})}, {2, 3},
               {3, 0, -3, 7, 0, -7});
}

// A label repeated in the output inflates (TensorFlow's form for the
// gradient of a diagonal): the values on the diagonal, zeros elsewhere.
TEST_F(EinsumTest, RepeatedOutputLabelsInflate) {
  ExpectEinsum("i->ii", {Make({2}, {3, 5})}, {2, 2}, {3, 0, 0, 5});
  ExpectEinsum("ij->iij", {kA}, {2, 2, 2}, {1, 2, 0, 0, 0, 0, 3, 4});
  // Of a product: out[i, i] = sum_j a[i, j] v[j] = (-1, -1).
  ExpectEinsum("ij,j->ii", {kA, Make({2}, {1, -1})}, {2, 2}, {-1, 0, 0, -1});
}

TEST_F(EinsumTest, OuterProductsAndElementwise) {
  ExpectEinsum("i,j->ij", {Make({2}, {1, 2}), Make({3}, {3, 4, 5})}, {2, 3},
               {3, 4, 5, 6, 8, 10});
  ExpectEinsum("ij,ij->ij", {kA, kA}, {2, 2}, {1, 4, 9, 16});
  ExpectEinsum("ij,ij->i", {kA, kA}, {2}, {5, 25});
}

// out[b, i, k] = sum_j x[b, i, j] y[b, j, k], by loops.
std::vector<double> BatchProduct(const std::vector<double>& x,
                                 const std::vector<double>& y, int nb, int m,
                                 int k, int n, bool broadcast_y = false) {
  std::vector<double> out(nb * m * n, 0.0);
  for (int b = 0; b < nb; ++b) {
    const int yb = broadcast_y ? 0 : b;
    for (int i = 0; i < m; ++i) {
      for (int l = 0; l < n; ++l) {
        for (int j = 0; j < k; ++j) {
          out[(b * m + i) * n + l] +=
              x[(b * m + i) * k + j] * y[(yb * k + j) * n + l];
        }
      }
    }
  }
  return out;
}

TEST_F(EinsumTest, BatchDims) {
  const std::vector<double> x = Fill(2 * 3 * 4), y = Fill(2 * 4 * 2);
  ExpectEinsum("bij,bjk->bik", {Make({2, 3, 4}, x), Make({2, 4, 2}, y)},
               {2, 3, 2}, BatchProduct(x, y, 2, 3, 4, 2));
  ExpectEinsum("...ij,...jk->...ik", {Make({2, 3, 4}, x), Make({2, 4, 2}, y)},
               {2, 3, 2}, BatchProduct(x, y, 2, 3, 4, 2));
}

TEST_F(EinsumTest, EllipsisDimsBroadcast) {
  // x [3, 2, 2] against y [1, 2, 2] (and against y [2, 2], no ellipsis dim):
  // y's matrix is shared by the 3 batches.
  const std::vector<double> x = Fill(12), y = {1, -2, 0.5, 3};
  const std::vector<double> want = BatchProduct(x, y, 3, 2, 2, 2, true);
  ExpectEinsum("...ij,...jk->...ik", {Make({3, 2, 2}, x), Make({1, 2, 2}, y)},
               {3, 2, 2}, want);
  ExpectEinsum("...ij,...jk->...ik", {Make({3, 2, 2}, x), Make({2, 2}, y)},
               {3, 2, 2}, want);
  // As in TensorFlow, broadcast dims need "..." in the output, and an
  // ellipsis of no dims is nothing.
  ExpectInvalid("...ij,...jk->ik", {Make({3, 2, 2}, x), Make({2, 2}, y)},
                {"1 broadcast dims", "no \"...\""});
  ExpectEinsum("...ij->ji", {kA}, {2, 2}, {1, 3, 2, 4});
  // Unary: "...ii->...i", the diagonal of each batch matrix.
  ExpectEinsum("...ii->...i", {Make({3, 2, 2}, x)}, {3, 2},
               {x[0], x[3], x[4], x[7], x[8], x[11]});
}

// Mixed forms, against TensorFlow 2.21's Einsum on the same Fill inputs.
TEST_F(EinsumTest, MixedFormsMatchTensorFlow) {
  auto f = [](const Shape& shape) {
    return Make(shape, Fill(NumElements(shape)));
  };
  ExpectEinsum("bij,bkj->bik", {f({2, 2, 3}), f({2, 2, 3})}, {2, 2, 2},
               {3.5, -8.0, -8.0, 19.25, 48.5, -66.5, -66.5, 91.25});
  ExpectEinsum("iij->j", {f({2, 2, 3})}, {3}, {-4.5, 4.5, -4.5});
  ExpectEinsum("...i,...i->...", {f({2, 1, 3}), f({4, 3})}, {2, 4},
               {3.5, -8.0, 12.5, -17.0, -8.0, 19.25, -30.5, 41.75});
  ExpectEinsum(
      "ab,cd->dcba", {f({2, 1}), f({3, 2})}, {2, 3, 1, 2},
      {0.25, -0.5, 0.75, -1.5, 1.25, -2.5, -0.5, 1.0, -1.0, 2.0, -1.5, 3.0});
  ExpectEinsum("ii,jj->ij", {f({2, 2}), f({3, 3})}, {2, 3},
               {0.25, 1.25, 2.25, -1.0, -5.0, -9.0});
  ExpectEinsum("ij,ij->ji", {f({2, 3}), f({2, 3})}, {3, 2},
               {0.25, 4.0, 1.0, 6.25, 2.25, 9.0});
  ExpectEinsum("ijk,ikj->", {f({2, 2, 2}), f({2, 2, 2})}, {}, {2.5});
  ExpectEinsum("iji->j", {f({2, 3, 2})}, {3}, {-3.5, -3.5, -3.5});
}

TEST_F(EinsumTest, EmptyAndFloat32) {
  // A contracted label of size 0: zeros.
  ExpectEinsum("ij,jk->ik", {Make({2, 0}, {}), Make({0, 3}, {})}, {2, 3},
               std::vector<double>(6, 0.0));
  ExpectEinsum("ij,jk->ik", {Make({0, 2}, {}), Make({2, 3}, Fill(6))}, {0, 3},
               {});
  absl::StatusOr<Tensor> r = Einsum(
      "ij,jk->ik",
      {Make<float>({2, 2}, {1, 2, 3, 4}), Make<float>({2, 2}, {5, 6, 7, 8})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->dtype(), DType::kFloat32);
  EXPECT_EQ(Values(*r), (std::vector<double>{19, 22, 43, 50}));
}

// Complex operands multiply as complex numbers, without conjugating:
// [[1+i, 2], [0, -i]] @ [[1, i], [1-i, 2]] and the trace of the first.
TEST_F(EinsumTest, Complex) {
  using C = complex128;
  const Tensor a =
      Tensor::FromVector<C>({2, 2}, {{1, 1}, {2, 0}, {0, 0}, {0, -1}});
  const Tensor b =
      Tensor::FromVector<C>({2, 2}, {{1, 0}, {0, 1}, {1, -1}, {2, 0}});
  absl::StatusOr<Tensor> r = Einsum("ij,jk->ik", {a, b});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->dtype(), DType::kComplex128);
  const std::vector<C> want = {{3, -1}, {3, 1}, {-1, -1}, {0, -2}};
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(std::abs(r->data<C>()[i] - want[i]), 0, 1e-12) << i;
  }
  r = Einsum("ii->", {a});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(std::abs(r->data<C>()[0] - C(1, 0)), 0, 1e-12);
  const Tensor a64 = Tensor::FromVector<complex64>({1, 1}, {{0, 1}});
  r = Einsum("ij,jk->ik", {a64, a64});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->data<complex64>()[0], complex64(-1, 0));
  ExpectInvalid("ij,jk->ik", {a, a64}, {"one float or complex dtype"});
}

// TensorFlow's equation rules (core/ops/einsum.h), one test each: the
// refused equation, and where the rule has a boundary, the accepted one next
// to it. TensorFlow 2.21's tf.raw_ops.Einsum refuses each refused equation
// here in graph mode (its shape function) and accepts each accepted one,
// with the same values, except rule 3: the op takes a digit or a space as
// a label ("i1->i" sums axis 1); only tf.einsum refuses it.

TEST_F(EinsumTest, Rule1ExactlyOneArrow) {
  const Tensor b = Make({2, 3}, Fill(6));
  ExpectInvalid("ij,jk", {kA, b},
                {"exactly one \"->\"", "\"ij,jk->ik\", not \"ij,jk\"",
                 "(equation \"ij,jk\")"});
  ExpectInvalid("ij->j->i", {kA}, {"exactly one", "\"ij->j->i\""});
  ExpectInvalid("ij-", {kA}, {"exactly one"});
  // An empty output is explicit: the full sum.
  ExpectEinsum("ij->", {kA}, {}, {1 + 2 + 3 + 4});
}

TEST_F(EinsumTest, Rule2OneOrTwoOperandsAsManyAsInputs) {
  const Tensor b = Make({2, 3}, Fill(6));
  ExpectInvalid("i,i,i->i", {kA, kA, kA}, {"1 or 2 inputs, got 3"});
  ExpectInvalid("ij->i", {kA, b},
                {"1 operand subscripts for 2 inputs", "\"ij->i\""});
  ExpectInvalid("ij,jk->ik", {kA}, {"2 operand subscripts for 1 inputs"});
  // Two scalars, and a scalar against a vector: operands with no labels.
  ExpectEinsum(",->", {Make({}, {3}), Make({}, {-2})}, {}, {-6});
  ExpectEinsum("i,->i", {Make({2}, {1, 2}), Make({}, {3})}, {2}, {3, 6});
}

TEST_F(EinsumTest, Rule3LabelsAreLetters) {
  ExpectInvalid("i1->i", {kA}, {"operand 0 \"i1\" has '1'", "letters"});
  ExpectInvalid("ij->i_", {kA}, {"the output \"i_\" has '_'"});
  ExpectInvalid("i j->j i", {kA}, {"operand 0 \"i j\" has ' '"});
  // Upper and lower case are distinct labels: "iI->Ii" is a transpose.
  ExpectEinsum("iI->Ii", {Make({2, 3}, {1, 2, 3, 4, 5, 6})}, {3, 2},
               {1, 4, 2, 5, 3, 6});
}

TEST_F(EinsumTest, Rule4EllipsisIsThreePeriodsAtMostOnce) {
  ExpectInvalid("i....->i", {kA}, {"operand 0 \"i....\" has '.'"});
  ExpectInvalid(".i..->i", {kA}, {"operand 0 \".i..\" has '.'"});
  ExpectInvalid("...i...->i", {kA}, {"operand 0", "two ellipses"});
  ExpectInvalid("...i->i..", {kA}, {"the output \"i..\" has '.'"});
  ExpectInvalid("...i->......i", {kA}, {"the output", "two ellipses"});
  ExpectEinsum("...i->...i", {kA}, {2, 2}, {1, 2, 3, 4});
}

TEST_F(EinsumTest, Rule5RankMatchesTheLabels) {
  ExpectInvalid("ijk->i", {kA}, {"operand 0 \"ijk\" has 3 labels", "[2,2]"});
  ExpectInvalid("i->i", {kA}, {"1 labels", "[2,2]"});
  ExpectInvalid("...ijk->i", {kA}, {"3 labels and \"...\"", "[2,2]"});
  ExpectInvalid("ij,...ijk->i", {kA, kA}, {"operand 1", "[2,2]"});
  // "..." covers the rest, none at all included.
  ExpectEinsum("...ij->ji", {kA}, {2, 2}, {1, 3, 2, 4});
  ExpectEinsum("...j->...", {kA}, {2}, {3, 7});
}

TEST_F(EinsumTest, Rule6ANamedLabelHasOneSize) {
  const Tensor b = Make({2, 3}, Fill(6));
  ExpectInvalid("ij,kj->ik", {kA, b}, {"label 'j' is 2 and 3", "[2,3]"});
  ExpectInvalid("ii->i", {b}, {"label 'i' is 2 and 3", "operand 0"});
  // Unlike an ellipsis dim, a named label of size 1 does not broadcast, and
  // size 0 is a size like any other.
  ExpectInvalid("i,i->i", {Make({1}, {2}), Make({3}, {1, 2, 3})},
                {"label 'i' is 1 and 3", "operand 1 has shape [3]"});
  ExpectInvalid("i,i->i", {Make({0}, {}), Make({3}, {1, 2, 3})},
                {"label 'i' is 0 and 3"});
  ExpectEinsum("i,i->i", {Make({1}, {2}), Make({1}, {3})}, {1}, {6});
}

TEST_F(EinsumTest, Rule7EllipsisDimsBroadcast) {
  ExpectInvalid("...i,...i->...i",
                {Make({2, 2}, Fill(4)), Make({3, 2}, Fill(6))},
                {"ellipsis dims of operand 1 [3,2]", "broadcast"});
  // [1, 2] against [3, 2]: out[b, i] = x[0, i] * y[b, i].
  ExpectEinsum("...i,...i->...i",
               {Make({1, 2}, {1, 2}), Make({3, 2}, {1, 2, 3, 4, 5, 6})}, {3, 2},
               {1, 4, 3, 8, 5, 12});
}

TEST_F(EinsumTest, Rule8BroadcastDimsNeedAnOutputEllipsis) {
  const Tensor x = Make({3, 2, 2}, Fill(12));
  ExpectInvalid("...ij,...jk->ik", {x, kA},
                {"1 broadcast dims", "no \"...\"", "\"...ij,...jk->ik\""});
  // Even broadcast dims of size 1.
  ExpectInvalid("...ij,...jk->ik", {Make({1, 2, 2}, Fill(4)), kA},
                {"1 broadcast dims"});
  // An ellipsis of no dims needs nothing, and "..." in the output without
  // one in the operands is no dims.
  ExpectEinsum("...ij,...jk->ik", {kA, kA}, {2, 2}, {7, 10, 15, 22});
  ExpectEinsum("ij->i...", {kA}, {2}, {3, 7});
  ExpectEinsum("ij->...", {kA}, {}, {10});
}

TEST_F(EinsumTest, Rule9OutputLabelsAreInAnOperand) {
  ExpectInvalid("ij->k", {kA}, {"output label 'k' is in no operand"});
  ExpectInvalid("i,j->ijk", {Make({2}, {1, 2}), Make({2}, {1, 2})},
                {"output label 'k'", "\"i,j->ijk\""});
  ExpectEinsum("i,j->ji", {Make({2}, {1, 2}), Make({2}, {3, 4})}, {2, 2},
               {3, 6, 4, 8});
}

// Not a rule: TensorFlow's op accepts a label repeated in the output (only
// tf.einsum's Python wrapper refuses it), and its gradients use it. "ab->aa"
// puts the row sums (1 + 2 + 3, 4 + 5 + 6) on the diagonal.
TEST_F(EinsumTest, ARepeatedOutputLabelIsAcceptedAsTensorFlowsOpDoes) {
  ExpectEinsum("ab->aa", {Make({2, 3}, {1, 2, 3, 4, 5, 6})}, {2, 2},
               {6, 0, 0, 15});
  // The gradient of "ii,ij->ij" for its first operand: dy[i, j] * y[i, j]
  // summed over j, on the diagonal.
  ExpectEinsum("ij,ij->ii", {kA, kA}, {2, 2}, {1 + 4, 0, 0, 9 + 16});
}

TEST_F(EinsumTest, InputsHaveOneFloatOrComplexDType) {
  ExpectInvalid("ij->i", {Make<int32_t>({2, 2}, {1, 2, 3, 4})},
                {"one float or complex dtype", "int32[2,2]"});
  ExpectInvalid("ij,jk->ik", {kA, Make<float>({2, 2}, {1, 2, 3, 4})},
                {"input 1", "float32[2,2]"});
}

// The registered op: the list input through the executor, and the tape
// gradient of "ij,jk->ik" by hand (dy = ones: da = dy b^T, db = a^T dy).
class EinsumOpTest : public testing::OpTest {};

TEST_F(EinsumOpTest, RunsAndDifferentiatesThroughTheTape) {
  const AttrMap attrs = {{"equation", std::string("ij,jk->ik")},
                         {"N", int64_t{2}}};
  std::vector<Tensor> in = {ctx_.Adopt(kA),
                            ctx_.Adopt(Make({2, 2}, {5, 6, 7, 8}))};
  ASSERT_TRUE(ctx_.tapes().Push(1, false, false).ok());
  Tape* tape = *ctx_.tapes().Find(1);
  for (const Tensor& t : in) tape->Watch(t);
  absl::StatusOr<Tensors> y = Run("Einsum", in, attrs);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(Values((*y)[0]), (std::vector<double>{19, 22, 43, 50}));
  ASSERT_TRUE(ctx_.tapes().Pop(1).ok());
  auto grads = Gradient(ctx_, *tape, {(*y)[0]}, in,
                        {Make({2, 2}, {1, 1, 1, 1})}, Unconnected::kNone);
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_EQ(Values((*grads)[0]), (std::vector<double>{11, 15, 11, 15}));
  EXPECT_EQ(Values((*grads)[1]), (std::vector<double>{4, 4, 6, 6}));
  ASSERT_TRUE(ctx_.tapes().Delete(1).ok());
  ExpectInvalid("Einsum", {kA, kA, kA},
                {{"equation", std::string("i,i,i->i")}, {"N", int64_t{3}}},
                {"1 or 2 inputs, got 3"});
}

}  // namespace
}  // namespace gradtape
