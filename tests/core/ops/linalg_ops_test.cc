// Forward values of the linalg ops (MatMul and BatchMatMul* on complex,
// BatchMatMul, BatchMatMulV2, SparseMatMul, Cross) against naive references,
// and their input checks. The gradient check covers the backwards.
#include <complex>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "core/autodiff/gradient.h"
#include "core/autodiff/op_executor.h"
#include "core/base/cancellation.h"
#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "gtest/gtest.h"
#include "tests/core/ops/op_samples.h"
#include "tests/core/ops/op_test_util.h"

namespace gradtape {
namespace {

using testing::R;

class LinalgOpsTest : public testing::OpTest {
 protected:
};

// Element (i, j) of op(m) for a row-major [rows, cols] matrix at p.
double At(const double* p, int64_t cols, bool transposed, int64_t i,
          int64_t j) {
  return transposed ? p[j * cols + i] : p[i * cols + j];
}

// Naive batched op(x) @ op(y) with numpy broadcasting of the batch dims.
Tensor NaiveBatchMatMul(const Tensor& x, const Tensor& y, bool ax, bool ay) {
  const int rx = x.rank(), ry = y.rank();
  const int64_t xr = x.dim(rx - 2), xc = x.dim(rx - 1);
  const int64_t yr = y.dim(ry - 2), yc = y.dim(ry - 1);
  const int64_t m = ax ? xc : xr, k = ax ? xr : xc, n = ay ? yr : yc;
  const int rb = std::max(rx, ry) - 2;
  Shape batch(rb);
  auto dim_of = [&](const Tensor& t, int b) -> int64_t {
    const int pad = rb - (t.rank() - 2);
    return b < pad ? 1 : t.dim(b - pad);
  };
  for (int b = 0; b < rb; ++b) {
    batch[b] = std::max(dim_of(x, b), dim_of(y, b));
  }
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  Tensor z = Tensor::Zeros(DType::kFloat64, out_shape).value();
  const int64_t nb = NumElements(batch);
  for (int64_t o = 0; o < nb; ++o) {
    // Unravel o and ravel it into x's and y's batch dims (1 -> index 0).
    int64_t rest = o, xo = 0, yo = 0, xs = 1, ys = 1;
    for (int b = rb - 1; b >= 0; --b) {
      const int64_t idx = rest % batch[b];
      rest /= batch[b];
      const int64_t dx = dim_of(x, b), dy = dim_of(y, b);
      xo += (dx == 1 ? 0 : idx) * xs;
      yo += (dy == 1 ? 0 : idx) * ys;
      xs *= dx;
      ys *= dy;
    }
    const double* px = x.data<double>() + xo * xr * xc;
    const double* py = y.data<double>() + yo * yr * yc;
    double* pz = z.mutable_data<double>() + o * m * n;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t l = 0; l < k; ++l) {
          s += At(px, xc, ax, i, l) * At(py, yc, ay, l, j);
        }
        pz[i * n + j] = s;
      }
    }
  }
  return z;
}

void ExpectNear(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    EXPECT_NEAR(got.ElementAsDouble(i), want.ElementAsDouble(i), 1e-12)
        << "element " << i;
  }
}

TEST_F(LinalgOpsTest, BatchMatMulMatchesNaive) {
  uint32_t seed = 1;
  for (bool ax : {false, true}) {
    for (bool ay : {false, true}) {
      Tensor x = R(ax ? Shape{2, 3, 5, 4} : Shape{2, 3, 4, 5}, ++seed);
      Tensor y = R(ay ? Shape{2, 3, 2, 5} : Shape{2, 3, 5, 2}, ++seed);
      auto r = Run("BatchMatMul", {x, y}, {{"adj_x", ax}, {"adj_y", ay}});
      ASSERT_TRUE(r.ok()) << r.status();
      ExpectNear((*r)[0], NaiveBatchMatMul(x, y, ax, ay));
    }
  }
}

TEST_F(LinalgOpsTest, BatchMatMulV2BroadcastsBatchDims) {
  struct Case {
    Shape x, y;
    bool ax, ay;
  };
  uint32_t seed = 20;
  for (const Case& c :
       std::vector<Case>{{{2, 1, 3, 4}, {3, 4, 2}, false, false},
                         {{4, 3}, {2, 2, 4, 5}, true, false},
                         {{1, 3, 4}, {2, 1, 5, 4}, false, true},
                         {{3, 1, 4, 3}, {3, 2, 4}, true, true},
                         {{3, 4}, {4, 2}, false, false}}) {
    Tensor x = R(c.x, ++seed), y = R(c.y, ++seed);
    auto r = Run("BatchMatMulV2", {x, y}, {{"adj_x", c.ax}, {"adj_y", c.ay}});
    ASSERT_TRUE(r.ok()) << r.status();
    ExpectNear((*r)[0], NaiveBatchMatMul(x, y, c.ax, c.ay));
  }
  auto r = Run("BatchMatMulV2", {R({2, 1, 3, 4}, 40), R({3, 4, 2}, 41)});
  EXPECT_EQ((*r)[0].shape(), (Shape{2, 3, 3, 2}));
}

TEST_F(LinalgOpsTest, EmptyInnerDimensionGivesZeros) {
  auto r =
      Run("BatchMatMulV2", {Tensor::Zeros(DType::kFloat64, {2, 3, 0}).value(),
                            Tensor::Zeros(DType::kFloat64, {0, 4}).value()});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].shape(), (Shape{2, 3, 4}));
  for (int64_t i = 0; i < (*r)[0].num_elements(); ++i) {
    EXPECT_EQ((*r)[0].ElementAsDouble(i), 0.0);
  }
  r = Run("BatchMatMul", {Tensor::Zeros(DType::kFloat64, {0, 3, 2}).value(),
                          Tensor::Zeros(DType::kFloat64, {0, 2, 4}).value()});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].shape(), (Shape{0, 3, 4}));
}

TEST_F(LinalgOpsTest, Float32BatchMatMul) {
  auto r = Run("BatchMatMulV2",
               {Tensor::FromVector<float>({1, 1, 2}, {1, 2}),
                Tensor::FromVector<float>({2, 2, 1}, {3, 4, 5, 6})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].dtype(), DType::kFloat32);
  EXPECT_EQ((*r)[0].shape(), (Shape{2, 1, 1}));
  EXPECT_EQ((*r)[0].ElementAsDouble(0), 11);
  EXPECT_EQ((*r)[0].ElementAsDouble(1), 17);
}

// A batch of small products is spread over the threads, a product per
// Gemm call: each matrix of the result is bit for bit MatMul's of the same
// operands, whichever thread ran it. Plain batch dims, and broadcast ones
// (x along dim 1, y along dim 0: offsets that jump at every row).
TEST_F(LinalgOpsTest, BatchOfSmallProductsEqualsEachProductAlone) {
  constexpr int64_t m = 16, k = 8, n = 12;
  struct Case {
    Shape x, y;
    int64_t rows, cols;  // the batch of the result
  };
  // 1032 products of 1536 multiply-adds: 8 blocks of 129, which start in
  // the middle of the broadcast case's rows of 43.
  for (const Case& c : {Case{{1032, m, k}, {1032, n, k}, 1, 1032},
                        Case{{24, 1, m, k}, {43, n, k}, 24, 43}}) {
    const Tensor x = R(c.x, 61), y = R(c.y, 62);
    auto r = Run("BatchMatMulV2", {x, y}, {{"adj_y", true}});
    ASSERT_TRUE(r.ok()) << r.status();
    const Tensor& z = (*r)[0];
    ASSERT_EQ(z.num_elements(), c.rows * c.cols * m * n);
    const bool broadcast = c.rows > 1;
    for (int64_t b = 0; b < c.rows * c.cols; ++b) {
      const int64_t xi = broadcast ? b / c.cols : b;
      const int64_t yi = broadcast ? b % c.cols : b;
      const double* px = x.data<double>() + xi * m * k;
      const double* py = y.data<double>() + yi * n * k;
      auto one = Run("MatMul",
                     {Tensor::FromVector<double>({m, k}, {px, px + m * k}),
                      Tensor::FromVector<double>({n, k}, {py, py + n * k})},
                     {{"transpose_b", true}});
      ASSERT_TRUE(one.ok()) << one.status();
      for (int64_t i = 0; i < m * n; ++i) {
        ASSERT_EQ(z.data<double>()[b * m * n + i], (*one)[0].data<double>()[i])
            << "product " << b << ", element " << i;
      }
    }
  }
}

// A cancelled batch fails naming the op (each block runs under the
// caller's cancellation, on whichever thread takes it).
TEST_F(LinalgOpsTest, BatchOfSmallProductsFailsOnCancellation) {
  Cancellation cancel;
  cancel.Cancel(absl::StatusCode::kCancelled);
  ScopedCancellation scope(&cancel);
  auto r = Run("BatchMatMulV2", {R({128, 16, 8}, 63), R({128, 8, 12}, 64)});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "BatchMatMulV2"))
      << r.status();
}

// Strided products (a plan's folded layouts, core/registry/strided_matmul.h)
// on the attention's layouts: q, k, v read from a fused [b * t, 3 * h * d]
// projection, the scores q k^T and the gradients of q and k written into
// one [b * t, 2 * h * d] tensor. Bit for bit BatchMatMulV2 on the
// Reshape, Transpose and Unpack copies, and the Pack, Transpose and
// Reshape of its results; float32 and float64.
TEST_F(LinalgOpsTest, StridedProductsEqualBatchMatMulOnCopies) {
  constexpr int64_t b = 3, t = 5, h = 2, d = 4;
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    SCOPED_TRACE(DTypeName(dtype));
    auto cast = [&](const Tensor& x) {
      return dtype == DType::kFloat64
                 ? x
                 : MustRun("Cast", {x}, {{"DstT", DType::kFloat32}});
    };
    const Tensor qkv = cast(R({b * t, 3 * h * d}, 71));
    const Tensor g = cast(R({b, h, t, t}, 72));
    // [b*t, 3hd] -> [b, t, 3, h, d] -> [3, b, h, t, d] -> q, k, v.
    const Tensor heads =
        MustRun("Transpose",
                {MustRun("Reshape", {qkv},
                         {{"shape", std::vector<int64_t>{b, t, 3, h, d}}})},
                {{"perm", std::vector<int64_t>{2, 0, 3, 1, 4}}});
    auto split =
        Run("Unpack", {heads}, {{"num", int64_t{3}}, {"axis", int64_t{0}}});
    ASSERT_TRUE(split.ok()) << split.status();
    const Tensor &q = (*split)[0], &k = (*split)[1];
    const Tensor scores = MustRun("BatchMatMulV2", {q, k}, {{"adj_y", true}});
    const Tensor dq = MustRun("BatchMatMulV2", {g, k});
    const Tensor dk = MustRun("BatchMatMulV2", {g, q}, {{"adj_x", true}});
    const Tensor packed = MustRun(
        "Reshape",
        {MustRun("Transpose", {MustRun("Pack", {dq, dk}, {{"N", int64_t{2}}})},
                 {{"perm", std::vector<int64_t>{1, 3, 0, 2, 4}}})},
        {{"shape", std::vector<int64_t>{b * t, 2 * h * d}}});

    // Matrix (i, j) of q in qkv: row stride 3hd, batch strides t*3hd and d;
    // k is d * h further. In the packed result: rows 2hd apart, batch
    // strides t*2hd and d, dk at h * d.
    using V = StridedMatMul::View;
    const V vq{0, {t * 3 * h * d, d}, 3 * h * d};
    const V vk{h * d, {t * 3 * h * d, d}, 3 * h * d};
    const V vg{0, {h * t * t, t * t}, t};
    StridedMatMul mm;
    mm.num_inputs = 2;
    mm.shape = {b, h, t, t};
    mm.products = {{0,
                    0,
                    vq,
                    vk,
                    V{0, {h * t * t, t * t}, t},
                    false,
                    true,
                    {b, h},
                    t,
                    t,
                    d}};
    Tensor got;
    ASSERT_TRUE(RunStridedMatMul(mm, {qkv, g}, &got).ok());
    EXPECT_EQ(got.shape(), scores.shape());
    EXPECT_EQ(
        0, std::memcmp(got.raw_data(), scores.raw_data(), scores.num_bytes()));

    StridedMatMul grads;
    grads.num_inputs = 2;
    grads.shape = {b * t, 2 * h * d};
    const V z0{0, {t * 2 * h * d, d}, 2 * h * d};
    const V z1{h * d, {t * 2 * h * d, d}, 2 * h * d};
    grads.products = {{1, 0, vg, vk, z0, false, false, {b, h}, t, d, t},
                      {1, 0, vg, vq, z1, true, false, {b, h}, t, d, t}};
    ASSERT_TRUE(RunStridedMatMul(grads, {qkv, g}, &got).ok());
    EXPECT_EQ(got.shape(), packed.shape());
    EXPECT_EQ(
        0, std::memcmp(got.raw_data(), packed.raw_data(), packed.num_bytes()));

    // Views that leave their tensor, products that do not fill the output,
    // and inputs of the wrong kind are refused.
    auto refused = [&](StridedMatMul bad, std::vector<Tensor> in) {
      Tensor out;
      const absl::Status st = RunStridedMatMul(bad, in, &out);
      EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
      EXPECT_TRUE(absl::StrContains(st.message(), "strided matrix products"))
          << st;
    };
    StridedMatMul bad = mm;
    bad.products[0].vb.offset = 2 * h * d + 1;  // k's last row past the end
    refused(bad, {qkv, g});
    bad = mm;
    bad.products[0].va.ld = d - 1;  // rows overlap
    refused(bad, {qkv, g});
    bad = mm;
    bad.products[0].vz.batch_strides[1] = -1;
    refused(bad, {qkv, g});
    bad = mm;
    bad.shape = {b, h, t, t + 1};  // a column never written
    refused(bad, {qkv, g});
    bad = grads;
    bad.products[1].a = 2;  // no such input
    refused(bad, {qkv, g});
    refused(mm, {qkv});
    refused(mm, {qkv, MustRun("Cast", {g}, {{"DstT", DType::kInt32}})});
  }
}

TEST_F(LinalgOpsTest, SparseMatMulEqualsMatMul) {
  uint32_t seed = 50;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Tensor a = R(ta ? Shape{4, 3} : Shape{3, 4}, ++seed);
      Tensor b = R(tb ? Shape{2, 4} : Shape{4, 2}, ++seed);
      auto sparse = Run("SparseMatMul", {a, b},
                        {{"transpose_a", ta},
                         {"transpose_b", tb},
                         {"a_is_sparse", ta},
                         {"b_is_sparse", !tb}});
      ASSERT_TRUE(sparse.ok()) << sparse.status();
      ExpectNear((*sparse)[0], NaiveBatchMatMul(a, b, ta, tb));
    }
  }
  auto f32 = Run("SparseMatMul", {Tensor::FromVector<float>({1, 2}, {1, 2}),
                                  Tensor::FromVector<float>({2, 1}, {3, 4})});
  ASSERT_TRUE(f32.ok()) << f32.status();
  EXPECT_EQ((*f32)[0].dtype(), DType::kFloat32);
  EXPECT_EQ((*f32)[0].ElementAsDouble(0), 11);
}

// a = [[1+2i, 3], [-1i, 2-1i]]: MatMul's transpose_a transposes, BatchMatMul's
// adj_x also conjugates (TensorFlow's semantics); both on complex64 and
// complex128. SparseMatMul stays real, as TensorFlow's.
TEST_F(LinalgOpsTest, ComplexProductsTransposeOrConjugate) {
  const std::vector<complex128> v = {{1, 2}, {3, 0}, {0, -1}, {2, -1}};
  auto at = [&](int64_t i, int64_t j) { return v[i * 2 + j]; };
  std::vector<complex128> aa(4), ta_a(4), ha_a(4);  // a a, a^T a, a^H a
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) {
      for (int p = 0; p < 2; ++p) {
        aa[i * 2 + j] += at(i, p) * at(p, j);
        ta_a[i * 2 + j] += at(p, i) * at(p, j);
        ha_a[i * 2 + j] += std::conj(at(p, i)) * at(p, j);
      }
    }
  }
  auto check = [&](const Tensor& t, const std::vector<complex128>& want) {
    ASSERT_EQ(t.num_elements(), 4);
    for (int i = 0; i < 4; ++i) {
      const complex128 got = t.dtype() == DType::kComplex128
                                 ? t.data<complex128>()[i]
                                 : complex128(t.data<complex64>()[i]);
      EXPECT_NEAR(std::abs(got - want[i]), 0, 1e-6) << i;
    }
  };
  const Tensor a128 = Tensor::FromVector<complex128>({2, 2}, v);
  const Tensor a64 = Tensor::FromVector<complex64>(
      {2, 2}, std::vector<complex64>(v.begin(), v.end()));
  for (const Tensor& a : {a128, a64}) {
    SCOPED_TRACE(DTypeName(a.dtype()));
    auto r = Run1("MatMul", {a, a});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->dtype(), a.dtype());
    check(*r, aa);
    r = Run1("MatMul", {a, a}, {{"transpose_a", true}});
    ASSERT_TRUE(r.ok()) << r.status();
    check(*r, ta_a);
    for (const char* op : {"BatchMatMul", "BatchMatMulV2"}) {
      r = Run1(op, {a, a}, {{"adj_x", true}});
      ASSERT_TRUE(r.ok()) << r.status();
      check(*r, ha_a);
    }
    r = Run1("BatchMatMulV3", {a, a}, {{"adj_x", true}, {"Tout", a.dtype()}});
    ASSERT_TRUE(r.ok()) << r.status();
    check(*r, ha_a);
  }
  ExpectInvalid("SparseMatMul", {a128, a128}, {}, {"complex128"});
  ExpectInvalid("MatMul", {a128, a64}, {}, {"same dtype"});
}

TEST_F(LinalgOpsTest, CrossProduct) {
  auto r =
      Run("Cross", {Tensor::FromVector<double>({2, 3}, {1, 0, 0, 1, 2, 3}),
                    Tensor::FromVector<double>({2, 3}, {0, 1, 0, 4, 5, 6})});
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<double> want = {0, 0, 1, -3, 6, -3};
  for (int i = 0; i < 6; ++i) EXPECT_EQ((*r)[0].ElementAsDouble(i), want[i]);
  auto ints = Run("Cross", {Tensor::FromVector<int32_t>({3}, {1, 2, 3}),
                            Tensor::FromVector<int32_t>({3}, {4, 5, 6})});
  ASSERT_TRUE(ints.ok()) << ints.status();
  EXPECT_EQ((*ints)[0].dtype(), DType::kInt32);
  EXPECT_EQ((*ints)[0].ElementAsDouble(1), 6);
}

// The backward runs registered ops, so an outer tape differentiates it:
// f = sum(x @ y) with x [2,1,3,4] broadcast against y [3,4,2] gives
// df/dx[b,0,i,k] = sum_{c,j} y[c,k,j], so sum(df/dx) = 2 * 3 * sum(y) and
// its gradient with respect to y is 6 everywhere.
TEST_F(LinalgOpsTest, BatchMatMulV2SecondOrderThroughBroadcast) {
  Tensor x = ctx_.Adopt(R({2, 1, 3, 4}, 90));
  Tensor y = ctx_.Adopt(R({3, 4, 2}, 91));
  ASSERT_TRUE(ctx_.tapes().Push(1, false, false).ok());
  ASSERT_TRUE(ctx_.tapes().Push(2, false, false).ok());
  for (int id : {1, 2}) {
    (*ctx_.tapes().Find(id))->Watch(x);
    (*ctx_.tapes().Find(id))->Watch(y);
  }
  auto z = Run("BatchMatMulV2", {x, y});
  ASSERT_TRUE(z.ok()) << z.status();
  ASSERT_TRUE(ctx_.tapes().Pop(2).ok());
  auto dx = Gradient(ctx_, **ctx_.tapes().Find(2), {(*z)[0]}, {x}, {},
                     Unconnected::kNone);
  ASSERT_TRUE(dx.ok()) << dx.status();
  ASSERT_TRUE(ctx_.tapes().Pop(1).ok());
  auto dy = Gradient(ctx_, **ctx_.tapes().Find(1), {(*dx)[0]}, {y}, {},
                     Unconnected::kNone);
  ASSERT_TRUE(dy.ok()) << dy.status();
  ASSERT_EQ((*dy)[0].shape(), y.shape());
  for (int64_t i = 0; i < y.num_elements(); ++i) {
    EXPECT_NEAR((*dy)[0].ElementAsDouble(i), 6.0, 1e-12);
  }
}

TEST_F(LinalgOpsTest, BadInputsAreInvalidArgumentAndRecordNothing) {
  ExpectInvalid("BatchMatMul", {R({2, 3, 4}, 1), R({3, 4, 5}, 2)}, {},
                {"[2,3,4]", "[3,4,5]", "batch dimensions"});
  ExpectInvalid("BatchMatMul", {R({2, 3, 4}, 1), R({4, 5}, 2)}, {},
                {"[2,3,4]", "[4,5]"});
  ExpectInvalid("BatchMatMulV2", {R({2, 3, 4}, 1), R({3, 4, 5}, 2)}, {},
                {"[2,3,4]", "[3,4,5]", "do not broadcast"});
  ExpectInvalid("BatchMatMulV2", {R({2, 3, 4}, 1), R({2, 3, 5}, 2)}, {},
                {"inner dimensions", "[2,3,4]", "[2,3,5]"});
  ExpectInvalid("BatchMatMul", {R({2, 3, 4}, 1), R({2, 3, 5}, 2)},
                {{"adj_y", true}}, {"inner dimensions", "adj_y"});
  ExpectInvalid("BatchMatMulV2", {R({4}, 1), R({4, 2}, 2)}, {},
                {"rank >= 2", "[4]"});
  ExpectInvalid("BatchMatMulV2",
                {R({2, 2}, 1), Tensor::FromVector<float>({2, 2}, {1, 2, 3, 4})},
                {}, {"same dtype"});
  ExpectInvalid("SparseMatMul", {R({2, 3}, 1), R({2, 3}, 2)}, {},
                {"inner dimensions", "[2,3]"});
  ExpectInvalid("SparseMatMul", {R({2, 2, 3}, 1), R({3, 2}, 2)}, {},
                {"rank 2", "[2,2,3]"});
  ExpectInvalid("Cross", {R({2, 4}, 1), R({2, 4}, 2)}, {},
                {"last dimension", "3", "[2,4]"});
  ExpectInvalid("Cross", {R({2, 3}, 1), R({3, 3}, 2)}, {}, {"[2,3]", "[3,3]"});
  ExpectInvalid("Cross", {R({}, 1), R({}, 2)}, {}, {"last dimension"});
}

// [[1, 2], [3, 4]] @ [[5, 6], [7, 8]] = [[19, 22], [43, 50]]; the output has
// dtype Tout; mixed dtypes are refused (TensorFlow's CPU kernels have one
// dtype for Ta, Tb and Tout among the float types).
TEST_F(LinalgOpsTest, BatchMatMulV3ValuesAndDTypes) {
  Tensor x = Tensor::FromVector<double>({1, 2, 2}, {1, 2, 3, 4});
  Tensor y = Tensor::FromVector<double>({2, 2}, {5, 6, 7, 8});
  absl::StatusOr<Tensor> z =
      Run1("BatchMatMulV3", {x, y}, {{"Tout", DType::kFloat64}});
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ(z->shape(), Shape({1, 2, 2}));
  EXPECT_EQ(testing::Values(*z), std::vector<double>({19, 22, 43, 50}));
  z = Run1("BatchMatMulV3", {x, y},
           {{"Tout", DType::kFloat64}, {"adj_x", true}, {"adj_y", true}});
  ASSERT_TRUE(z.ok());
  // x^T y^T = [[1*5+3*6, 1*7+3*8], [2*5+4*6, 2*7+4*8]]
  EXPECT_EQ(testing::Values(*z), std::vector<double>({23, 31, 34, 46}));
  Tensor xf = Tensor::FromVector<float>({2, 2}, {1, 2, 3, 4});
  Tensor yf = Tensor::FromVector<float>({2, 2}, {5, 6, 7, 8});
  z = Run1("BatchMatMulV3", {xf, yf},
           {{"Tout", DType::kFloat32},
            {"Ta", DType::kFloat32},
            {"Tb", DType::kFloat32}});
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ(z->dtype(), DType::kFloat32);
  EXPECT_EQ(testing::Values(*z), std::vector<double>({19, 22, 43, 50}));
  ExpectInvalid("BatchMatMulV3", {xf, y}, {{"Tout", DType::kFloat64}},
                {"float32", "float64", "one dtype"});
  ExpectInvalid("BatchMatMulV3", {x, y}, {{"Tout", DType::kFloat32}},
                {"Tout", "float32"});
  ExpectInvalid("BatchMatMulV3", {x, y},
                {{"Tout", DType::kFloat64}, {"Ta", DType::kFloat32}},
                {"Ta", "float32"});
  ExpectInvalid("BatchMatMulV3",
                {x, Tensor::FromVector<double>({3, 2}, {1, 2, 3, 4, 5, 6})},
                {{"Tout", DType::kFloat64}}, {"[1,2,2]", "[3,2]"});
  // Tout is required.
  EXPECT_FALSE(Run1("BatchMatMulV3", {x, y}).ok());
}

}  // namespace
}  // namespace gradtape
