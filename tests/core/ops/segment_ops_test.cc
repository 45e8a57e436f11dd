// Forward values of the segment reductions against naive references, their
// input checks, TensorFlow's tie rule in the Min/Max gradients, and the
// self-checking registry catching the seed's mistake about SegmentMax.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "core/autodiff/gradient.h"
#include "core/autodiff/op_executor.h"
#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "gtest/gtest.h"
#include "tests/core/ops/op_samples.h"
#include "tests/core/ops/op_test_util.h"

namespace gradtape {
namespace {

using testing::R;

enum class Kind { kSum, kMean, kSqrtN, kMin, kMax };

Tensor Ids(DType dtype, std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  if (dtype == DType::kInt64) return Tensor::FromVector<int64_t>({n}, v);
  return Tensor::FromVector<int32_t>({n},
                                     std::vector<int32_t>(v.begin(), v.end()));
}

// Naive reduction of rows: row r of data goes into segment ids[r] (the rows
// are picked by `rows` when given: the sparse ops). Empty segments are
// `empty`.
Tensor NaiveSegments(const Tensor& data, const std::vector<int64_t>& ids,
                     const std::vector<int64_t>& rows, int64_t num_segments,
                     Kind kind, double empty) {
  const int64_t inner = data.num_elements() / std::max<int64_t>(1, data.dim(0));
  Shape shape = data.shape();
  shape[0] = num_segments;
  Tensor out = Tensor::Zeros(DType::kFloat64, shape).value();
  double* po = out.mutable_data<double>();
  for (int64_t s = 0; s < num_segments; ++s) {
    for (int64_t j = 0; j < inner; ++j) {
      std::vector<double> v;
      for (size_t k = 0; k < ids.size(); ++k) {
        if (ids[k] != s) continue;
        const int64_t row = rows.empty() ? static_cast<int64_t>(k) : rows[k];
        v.push_back(data.data<double>()[row * inner + j]);
      }
      double r = empty;
      if (!v.empty()) {
        double sum = 0;
        for (double e : v) sum += e;
        const double n = static_cast<double>(v.size());
        switch (kind) {
          case Kind::kSum:
            r = sum;
            break;
          case Kind::kMean:
            r = sum / n;
            break;
          case Kind::kSqrtN:
            r = sum / std::sqrt(n);
            break;
          case Kind::kMin:
            r = *std::min_element(v.begin(), v.end());
            break;
          case Kind::kMax:
            r = *std::max_element(v.begin(), v.end());
            break;
        }
      }
      po[s * inner + j] = r;
    }
  }
  return out;
}

void ExpectNear(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    EXPECT_NEAR(got.ElementAsDouble(i), want.ElementAsDouble(i), 1e-12)
        << "element " << i;
  }
}

class SegmentOpsTest : public testing::OpTest {
 protected:
  // d(sum(op(x, rest...) * w))/dx for a fixed weight w = dy.
  std::vector<double> Grad(absl::string_view op, Tensor x,
                           std::vector<Tensor> rest, AttrMap attrs,
                           const Tensor& dy) {
    x = ctx_.Adopt(x);
    EXPECT_TRUE(ctx_.tapes().Push(8, false, false).ok());
    (*ctx_.tapes().Find(8))->Watch(x);
    rest.insert(rest.begin(), x);
    auto y = Run(op, rest, std::move(attrs));
    EXPECT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(ctx_.tapes().Pop(8).ok());
    auto g = Gradient(ctx_, **ctx_.tapes().Find(8), {(*y)[0]}, {x}, {dy},
                      Unconnected::kZero);
    EXPECT_TRUE(g.ok()) << g.status();
    EXPECT_TRUE(ctx_.tapes().Delete(8).ok());
    std::vector<double> v;
    for (int64_t i = 0; i < (*g)[0].num_elements(); ++i) {
      v.push_back((*g)[0].ElementAsDouble(i));
    }
    return v;
  }
};

// Sorted ids with repeats and gaps (empty segments), first id maybe > 0.
std::vector<int64_t> RandomSortedIds(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int64_t> ids(n);
  int64_t id = rng() % 2;
  for (int64_t k = 0; k < n; ++k) {
    ids[k] = id;
    id += rng() % 3 == 0 ? 1 + rng() % 2 : 0;
  }
  return ids;
}

TEST_F(SegmentOpsTest, SortedSegmentsMatchNaive) {
  const std::vector<std::pair<const char*, Kind>> ops = {
      {"SegmentSum", Kind::kSum},
      {"SegmentMean", Kind::kMean},
      {"SegmentMin", Kind::kMin},
      {"SegmentMax", Kind::kMax}};
  uint32_t seed = 10;
  for (const auto& [op, kind] : ops) {
    for (DType id_type : {DType::kInt32, DType::kInt64}) {
      Tensor data = R({9, 2, 3}, ++seed);
      std::vector<int64_t> ids = RandomSortedIds(9, ++seed);
      auto r = Run(op, {data, Ids(id_type, ids)});
      ASSERT_TRUE(r.ok()) << r.status();
      ExpectNear((*r)[0], NaiveSegments(data, ids, {}, ids.back() + 1, kind,
                                        /*empty=*/0));
    }
  }
}

TEST_F(SegmentOpsTest, EmptySegmentsAreZeroAndNoIdsGiveNoRows) {
  Tensor data = Tensor::FromVector<double>({3}, {-5, -6, -7});
  for (const char* op : {"SegmentMax", "SegmentMin", "SegmentMean"}) {
    auto r = Run(op, {data, Ids(DType::kInt32, {1, 1, 3})});
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ((*r)[0].shape(), (Shape{4}));
    EXPECT_EQ((*r)[0].ElementAsDouble(0), 0.0) << op;
    EXPECT_EQ((*r)[0].ElementAsDouble(2), 0.0) << op;
  }
  auto r = Run("SegmentSum", {Tensor::Zeros(DType::kFloat64, {0, 2}).value(),
                              Ids(DType::kInt64, {})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].shape(), (Shape{0, 2}));
}

TEST_F(SegmentOpsTest, IntegerData) {
  auto r = Run("SegmentSum", {Tensor::FromVector<int32_t>({3}, {1, 2, 4}),
                              Ids(DType::kInt32, {0, 0, 1})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].dtype(), DType::kInt32);
  EXPECT_EQ((*r)[0].ElementAsDouble(0), 3);
  r = Run("UnsortedSegmentMax",
          {Tensor::FromVector<int64_t>({3}, {1, 2, 4}),
           Ids(DType::kInt32, {1, 1, 0})},
          {{"num_segments", int64_t{3}}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].ElementAsDouble(1), 2);
  EXPECT_EQ((*r)[0].ElementAsDouble(2),
            static_cast<double>(std::numeric_limits<int64_t>::lowest()));
}

TEST_F(SegmentOpsTest, UnsortedSegmentsMatchNaive) {
  uint32_t seed = 40;
  for (const auto& [op, kind] : std::vector<std::pair<const char*, Kind>>{
           {"UnsortedSegmentSum", Kind::kSum},
           {"UnsortedSegmentMax", Kind::kMax}}) {
    for (DType id_type : {DType::kInt32, DType::kInt64}) {
      std::mt19937 rng(++seed);
      std::vector<int64_t> ids(8);
      for (int64_t& id : ids) id = rng() % 5;  // some of 0..5 stay empty
      Tensor data = R({8, 3}, ++seed);
      auto r =
          Run(op, {data, Ids(id_type, ids)}, {{"num_segments", int64_t{6}}});
      ASSERT_TRUE(r.ok()) << r.status();
      const double empty =
          kind == Kind::kMax ? std::numeric_limits<double>::lowest() : 0.0;
      ExpectNear((*r)[0], NaiveSegments(data, ids, {}, 6, kind, empty));
    }
  }
  // Ids of rank 2 reduce the two leading dims of data.
  Tensor data = R({2, 2, 3}, 60);
  auto r = Run("UnsortedSegmentSum",
               {data, Tensor::FromVector<int32_t>({2, 2}, {1, 0, 1, 1})},
               {{"num_segments", int64_t{2}}});
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectNear((*r)[0], NaiveSegments(data.Reshaped({4, 3}), {1, 0, 1, 1}, {}, 2,
                                    Kind::kSum, 0));
}

TEST_F(SegmentOpsTest, SparseSegmentsMatchNaive) {
  uint32_t seed = 70;
  for (const auto& [op, kind] : std::vector<std::pair<const char*, Kind>>{
           {"SparseSegmentSum", Kind::kSum},
           {"SparseSegmentMean", Kind::kMean},
           {"SparseSegmentSqrtN", Kind::kSqrtN}}) {
    for (DType id_type : {DType::kInt32, DType::kInt64}) {
      std::mt19937 rng(++seed);
      std::vector<int64_t> rows(10);
      for (int64_t& row : rows) row = rng() % 4;  // repeats allowed
      std::vector<int64_t> ids = RandomSortedIds(10, ++seed);
      Tensor data = R({4, 3}, ++seed);
      auto r = Run(op, {data, Ids(id_type, rows), Ids(DType::kInt64, ids)});
      ASSERT_TRUE(r.ok()) << r.status();
      ExpectNear((*r)[0],
                 NaiveSegments(data, ids, rows, ids.back() + 1, kind, 0));
    }
  }
}

TEST_F(SegmentOpsTest, MinAndMaxShareTheGradientAmongTies) {
  Tensor data = Tensor::FromVector<double>({5}, {1, 3, 3, 2, 2});
  Tensor ids = Ids(DType::kInt32, {0, 0, 0, 1, 1});
  Tensor dy = Tensor::FromVector<double>({2}, {1, 10});
  EXPECT_EQ(Grad("SegmentMax", data, {ids}, {}, dy),
            (std::vector<double>{0, 0.5, 0.5, 5, 5}));
  EXPECT_EQ(Grad("SegmentMin", data, {ids}, {}, dy),
            (std::vector<double>{1, 0, 0, 5, 5}));
  EXPECT_EQ(
      Grad("UnsortedSegmentMax", data, {Ids(DType::kInt64, {1, 0, 0, 1, 2})},
           {{"num_segments", int64_t{4}}},
           Tensor::FromVector<double>({4}, {1, 10, 100, 1000})),
      (std::vector<double>{0, 0.5, 0.5, 10, 100}));
}

TEST_F(SegmentOpsTest, BadInputsAreInvalidArgumentAndRecordNothing) {
  Tensor data = R({4, 2}, 1);
  for (const char* op :
       {"SegmentSum", "SegmentMean", "SegmentMin", "SegmentMax"}) {
    ExpectInvalid(op, {data, Ids(DType::kInt32, {0, 2, 1, 3})}, {},
                  {"not sorted", "segment_ids[2] = 1", "segment_ids[1] = 2"});
    ExpectInvalid(op, {data, Ids(DType::kInt64, {-1, 0, 0, 1})}, {},
                  {"segment_ids[0] = -1", "negative"});
    ExpectInvalid(op, {data, Ids(DType::kInt32, {0, 0, 1})}, {},
                  {"[3]", "[4,2]"});
    ExpectInvalid(op, {data, R({4}, 2)}, {}, {"int32 or int64"});
    ExpectInvalid(op, {R({}, 3), Ids(DType::kInt32, {})}, {}, {"rank >= 1"});
  }
  for (const char* op : {"UnsortedSegmentSum", "UnsortedSegmentMax"}) {
    AttrMap four = {{"num_segments", int64_t{4}}};
    ExpectInvalid(op, {data, Ids(DType::kInt32, {0, 4, 1, 3})}, four,
                  {"segment_ids[1] = 4", "[0, 4)"});
    ExpectInvalid(op, {data, Ids(DType::kInt32, {0, 1, 2})}, four,
                  {"[3]", "[4,2]", "prefix"});
    ExpectInvalid(op, {data, Ids(DType::kInt32, {0, 1, 2, 3})},
                  {{"num_segments", int64_t{-1}}}, {"num_segments", "-1"});
    ExpectInvalid(op, {data, Ids(DType::kInt32, {0, 1, 2, 3})}, {},
                  {"num_segments", "missing"});
  }
  for (const char* op :
       {"SparseSegmentSum", "SparseSegmentMean", "SparseSegmentSqrtN"}) {
    ExpectInvalid(
        op,
        {data, Ids(DType::kInt32, {0, 7, 1}), Ids(DType::kInt32, {0, 0, 1})},
        {}, {"indices[1] = 7", "[0, 4)"});
    ExpectInvalid(
        op,
        {data, Ids(DType::kInt64, {0, -1, 1}), Ids(DType::kInt32, {0, 0, 1})},
        {}, {"indices[1] = -1"});
    ExpectInvalid(
        op,
        {data, Ids(DType::kInt32, {0, 1, 1}), Ids(DType::kInt32, {1, 0, 1})},
        {}, {"not sorted", "segment_ids[1] = 0"});
    ExpectInvalid(
        op,
        {data, Ids(DType::kInt32, {0, 1, 1}), Ids(DType::kInt32, {-3, 0, 1})},
        {}, {"segment_ids[0] = -3"});
    ExpectInvalid(
        op, {data, Ids(DType::kInt32, {0, 1}), Ids(DType::kInt32, {0, 0, 1})},
        {}, {"[2]", "[3]", "same length"});
  }
  ExpectInvalid("SparseSegmentMean",
                {Tensor::FromVector<int32_t>({2}, {1, 2}),
                 Ids(DType::kInt32, {0}), Ids(DType::kInt32, {0})},
                {}, {"float32 or float64"});
}

// A copy of `def` as a builder, every declaration as it was.
Op CopyOf(const OpDef& def) {
  Op op(def.name);
  op.Inputs(def.input_names).Outputs(def.output_names).Forward(def.forward);
  // One rule per output, as the registration declared them.
  if (!def.output_dtypes.empty()) op.OutputDTypes(def.output_dtypes);
  for (const AttrSpec& a : def.attrs) {
    if (a.default_value.has_value()) {
      op.Attr(a.name, *a.default_value);
    } else {
      op.Attr(a.name, a.type);
    }
  }
  if (!def.backward_unsupported.empty()) {
    op.BackwardUnsupported(def.backward_unsupported);
  } else if (def.differentiable()) {
    op.Backward(def.backward)
        .SavesInputs(def.saved_inputs)
        .SavesOutputs(def.saved_outputs);
  } else {
    op.NotDifferentiable();
  }
  std::vector<int> non_differentiable;
  for (int i = 0; i < def.num_inputs(); ++i) {
    if (!def.input_differentiable[i]) non_differentiable.push_back(i);
  }
  op.NonDifferentiableInputs(std::move(non_differentiable));
  return op;
}

// TensorFlow's seed set of ops whose gradient needs no outputs lists
// SegmentMax. A registry that believed it (a copy of every op, with
// SegmentMax declaring no saved outputs) records SegmentMax without its
// output, and the gradient fails loudly instead of reading a tensor the tape
// dropped. The real registration declares the output and succeeds.
TEST(SegmentOpsSeedMistake, SegmentMaxWithoutSavedOutputIsCaught) {
  EXPECT_EQ(DefaultRegistry().Find("SegmentMax")->saved_outputs,
            std::vector<int>{0});
  OpRegistry seed;
  for (const auto& def : DefaultRegistry().ops()) {
    Op op = CopyOf(*def);
    if (def->name == "SegmentMax") op.SavesOutputs({});  // The seed's claim.
    seed.Add(std::move(op));
  }
  Tensor data = Tensor::FromVector<double>({4, 2}, {1, 8, 3, 2, 5, 6, 4, 7});
  Tensor ids = Ids(DType::kInt32, {0, 0, 1, 1});
  auto gradient = [&](const OpRegistry& registry) {
    OpExecutor ctx(registry);
    Tensor x = ctx.Adopt(data);
    EXPECT_TRUE(ctx.tapes().Push(1, false, false).ok());
    Tape* tape = *ctx.tapes().Find(1);
    tape->Watch(x);
    Tensors y;
    EXPECT_TRUE(ctx.Execute("SegmentMax", {x, ctx.Adopt(ids)}, {}, &y).ok());
    EXPECT_TRUE(ctx.tapes().Pop(1).ok());
    const int64_t kept = tape->SavedBytes();
    auto g = Gradient(ctx, *tape, {y[0]}, {x}, {}, Unconnected::kNone);
    return std::make_pair(kept, g.status());
  };
  auto [seed_kept, seed_status] = gradient(seed);
  EXPECT_EQ(seed_kept, data.num_bytes() + ids.num_bytes());  // no output
  EXPECT_EQ(seed_status.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(absl::StrContains(seed_status.message(),
                                "backward of SegmentMax read output 0 "
                                "(output) which its registration does not "
                                "save"))
      << seed_status;
  auto [kept, status] = gradient(DefaultRegistry());
  EXPECT_EQ(kept, data.num_bytes() + ids.num_bytes() + 2 * 2 * 8);
  EXPECT_TRUE(status.ok()) << status;
}

// TensorFlow's CPU kernels drop the rows of negative ids, in the forward
// and the gradient. data rows [1, 2], [3, 4], [5, 6], [7, 8] with ids
// [0, -1, 1, 0] into 3 segments; dy = [[10, 20], [30, 40], [50, 60]].
TEST_F(SegmentOpsTest, UnsortedSegmentsDropNegativeIds) {
  Tensor data = Tensor::FromVector<double>({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  Tensor ids = Ids(DType::kInt32, {0, -1, 1, 0});
  Tensor dy = Tensor::FromVector<double>({3, 2}, {10, 20, 30, 40, 50, 60});
  const double lo = std::numeric_limits<double>::lowest();
  const double hi = std::numeric_limits<double>::max();
  struct Case {
    const char* op;
    std::vector<double> forward, grad;
  };
  for (const Case& c : std::vector<Case>{
           {"UnsortedSegmentSum",
            {8, 10, 5, 6, 0, 0},
            {10, 20, 0, 0, 30, 40, 10, 20}},
           {"UnsortedSegmentMax",
            {7, 8, 5, 6, lo, lo},
            {0, 0, 0, 0, 30, 40, 10, 20}},
           {"UnsortedSegmentMin",
            {1, 2, 5, 6, hi, hi},
            {10, 20, 0, 0, 30, 40, 0, 0}},
           {"UnsortedSegmentProd",
            {7, 16, 5, 6, 1, 1},
            {70, 160, 0, 0, 30, 40, 10, 40}},
       }) {
    SCOPED_TRACE(c.op);
    const bool input = std::string(c.op) == "UnsortedSegmentMin" ||
                       std::string(c.op) == "UnsortedSegmentProd";
    std::vector<Tensor> rest = {ids};
    AttrMap attrs;
    if (input) {
      rest.push_back(Tensor::Scalar<int64_t>(3));
    } else {
      attrs = {{"num_segments", int64_t{3}}};
    }
    std::vector<Tensor> in = {data};
    in.insert(in.end(), rest.begin(), rest.end());
    auto y = Run1(c.op, in, attrs);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_EQ(y->shape(), (Shape{3, 2}));
    EXPECT_EQ(testing::Values(*y), c.forward);
    EXPECT_EQ(Grad(c.op, data, rest, attrs, dy), c.grad);
  }
}

// TensorFlow's product gradient with zeros: one zero in a segment gets the
// product of the others (the rest 0); two zeros give all 0.
TEST_F(SegmentOpsTest, ProdGradientHandlesZeros) {
  Tensor data = Tensor::FromVector<double>({6}, {0, 3, 4, 0, 0, 5});
  Tensor dy = Tensor::FromVector<double>({3}, {1, 2, 3});
  auto y = Run1("SegmentProd", {data, Ids(DType::kInt32, {0, 0, 0, 1, 1, 2})});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(testing::Values(*y), (std::vector<double>{0, 0, 5}));
  EXPECT_EQ(Grad("SegmentProd", data, {Ids(DType::kInt32, {0, 0, 0, 1, 1, 2})},
                 {}, dy),
            (std::vector<double>{12, 0, 0, 0, 0, 3}));
  // The same segments, unsorted: ids [1, 0, 2, 0, 1, 0] over
  // data [0, 3, 5, 4, 0, 0] -> segment 0 {3, 4, 0}, 1 {0, 0}, 2 {5}.
  Tensor shuffled = Tensor::FromVector<double>({6}, {0, 3, 5, 4, 0, 0});
  std::vector<Tensor> rest = {Ids(DType::kInt64, {1, 0, 2, 0, 1, 0}),
                              Tensor::Scalar<int32_t>(3)};
  y = Run1("UnsortedSegmentProd", {shuffled, rest[0], rest[1]});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(testing::Values(*y), (std::vector<double>{0, 0, 5}));
  EXPECT_EQ(Grad("UnsortedSegmentProd", shuffled, rest, {}, dy),
            (std::vector<double>{0, 0, 3, 0, 0, 12}));
}

TEST_F(SegmentOpsTest, ProdAndMinEmptySegmentsAndIntegers) {
  auto y = Run1("SegmentProd", {Tensor::FromVector<double>({3}, {2, 3, 4}),
                                Ids(DType::kInt32, {0, 0, 2})});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(testing::Values(*y), (std::vector<double>{6, 1, 4}));
  y = Run1("UnsortedSegmentMin",
           {Tensor::FromVector<int32_t>({3}, {3, 1, 2}),
            Ids(DType::kInt32, {0, 0, 2}), Tensor::Scalar<int32_t>(3)});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->dtype(), DType::kInt32);
  EXPECT_EQ(testing::Values(*y),
            (std::vector<double>{1, std::numeric_limits<int32_t>::max(), 2}));
  y = Run1("UnsortedSegmentProd",
           {Tensor::FromVector<int64_t>({3}, {3, 5, 2}),
            Ids(DType::kInt32, {1, 1, 1}), Tensor::Scalar<int32_t>(2)});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(testing::Values(*y), (std::vector<double>{1, 30}));
  // No rows at all.
  y = Run1("UnsortedSegmentMin",
           {Tensor::Zeros(DType::kFloat64, {0, 2}).value(),
            Ids(DType::kInt32, {}), Tensor::Scalar<int32_t>(0)});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (Shape{0, 2}));
}

// data rows [1, 2], [3, 4], [5, 6]; indices [0, 2, 1] into segments
// [0, 0, 2] of 4: segment 0 = rows 0 and 2, segment 2 = row 1.
TEST_F(SegmentOpsTest, SparseSegmentsWithNumSegments) {
  Tensor data = Tensor::FromVector<double>({3, 2}, {1, 2, 3, 4, 5, 6});
  const std::vector<Tensor> rest = {Ids(DType::kInt32, {0, 2, 1}),
                                    Ids(DType::kInt64, {0, 0, 2}),
                                    Tensor::Scalar<int32_t>(4)};
  const double r2 = std::sqrt(2.0);
  struct Case {
    const char* op;
    std::vector<double> forward, grad;
  };
  // dy = [1..8]: row 0 and row 2 read segment 0 ([1, 2]), row 1 segment 2.
  for (const Case& c : std::vector<Case>{
           {"SparseSegmentSumWithNumSegments",
            {6, 8, 0, 0, 3, 4, 0, 0},
            {1, 2, 5, 6, 1, 2}},
           {"SparseSegmentMeanWithNumSegments",
            {3, 4, 0, 0, 3, 4, 0, 0},
            {0.5, 1, 5, 6, 0.5, 1}},
           {"SparseSegmentSqrtNWithNumSegments",
            {6 / r2, 8 / r2, 0, 0, 3, 4, 0, 0},
            {1 / r2, 2 / r2, 5, 6, 1 / r2, 2 / r2}},
       }) {
    SCOPED_TRACE(c.op);
    auto y = Run1(c.op, {data, rest[0], rest[1], rest[2]});
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_EQ(y->shape(), (Shape{4, 2}));
    const std::vector<double> got = testing::Values(*y);
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], c.forward[i], 1e-15) << i;
    }
    const std::vector<double> g =
        Grad(c.op, data, rest, {},
             Tensor::FromVector<double>({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8}));
    for (size_t i = 0; i < g.size(); ++i) {
      EXPECT_NEAR(g[i], c.grad[i], 1e-15) << i;
    }
    ExpectInvalid(c.op, {data, rest[0], rest[1], Tensor::Scalar<int32_t>(2)},
                  {}, {"segment_ids has id 2", "num_segments 2"});
    ExpectInvalid(c.op, {data, rest[0], rest[1], Tensor::Scalar<int32_t>(-1)},
                  {}, {"num_segments must be >= 0", "-1"});
    ExpectInvalid(
        c.op, {data, rest[0], rest[1], Tensor::FromVector<int32_t>({1}, {4})},
        {}, {"num_segments", "rank"});
    ExpectInvalid(c.op, {data, rest[0], Ids(DType::kInt32, {0, 2, 1}), rest[2]},
                  {}, {"not sorted"});
  }
}

// Sum, Mean and Prod on complex data rows [1+i, 2-i, i] with ids [0, 0, 2]
// (segment 1 empty): (1+i) + (2-i) = 3, (1+i)(2-i) = 3+i.
TEST_F(SegmentOpsTest, ComplexSumMeanAndProd) {
  using C = complex128;
  const Tensor data = Tensor::FromVector<C>({3}, {{1, 1}, {2, -1}, {0, 1}});
  const Tensor ids = Ids(DType::kInt32, {0, 0, 2});
  struct Case {
    const char* op;
    std::vector<C> want;
  };
  for (const Case& c : {Case{"SegmentSum", {{3, 0}, {0, 0}, {0, 1}}},
                        Case{"SegmentMean", {{1.5, 0}, {0, 0}, {0, 1}}},
                        Case{"SegmentProd", {{3, 1}, {1, 0}, {0, 1}}}}) {
    auto y = Run1(c.op, {data, ids});
    ASSERT_TRUE(y.ok()) << c.op << ": " << y.status();
    ASSERT_EQ(y->dtype(), DType::kComplex128);
    ASSERT_EQ(y->num_elements(), 3);
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(y->data<C>()[k], c.want[k]) << c.op << "[" << k << "]";
    }
  }
  // Unsorted, ids [1, -1, 1] of 3: row 1 dropped; segments 0 and 2 empty.
  const Tensor unsorted = Ids(DType::kInt64, {1, -1, 1});
  auto y = Run1("UnsortedSegmentSum", {data, unsorted},
                {{"num_segments", int64_t{3}}});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->data<C>()[0], C(0, 0));
  EXPECT_EQ(y->data<C>()[1], C(1, 2));
  EXPECT_EQ(y->data<C>()[2], C(0, 0));
  // complex64: (1+i) i = -1+i.
  const Tensor data64 =
      Tensor::FromVector<complex64>({3}, {{1, 1}, {2, -1}, {0, 1}});
  y = Run1("UnsortedSegmentProd",
           {data64, unsorted, Tensor::Scalar<int32_t>(3)});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->data<complex64>()[0], complex64(1, 0));
  EXPECT_EQ(y->data<complex64>()[1], complex64(-1, 1));
  EXPECT_EQ(y->data<complex64>()[2], complex64(1, 0));
}

// Min and Max need an order: complex is refused, naming the op and dtype.
TEST_F(SegmentOpsTest, MinAndMaxRefuseComplex) {
  const Tensor c128 = Tensor::FromVector<complex128>({2}, {{1, 1}, {2, 0}});
  const Tensor c64 = Tensor::FromVector<complex64>({2}, {{1, 1}, {2, 0}});
  const Tensor ids = Ids(DType::kInt32, {0, 1});
  for (const char* op : {"SegmentMin", "SegmentMax"}) {
    ExpectInvalid(op, {c128, ids}, {}, {"data", "complex128"});
    ExpectInvalid(op, {c64, ids}, {}, {"data", "complex64"});
  }
  ExpectInvalid("UnsortedSegmentMax", {c128, ids},
                {{"num_segments", int64_t{2}}}, {"data", "complex128"});
  ExpectInvalid("UnsortedSegmentMin", {c64, ids, Tensor::Scalar<int32_t>(2)},
                {}, {"data", "complex64"});
}

TEST_F(SegmentOpsTest, UnsortedMinAndProdBadInputs) {
  Tensor data = R({4, 2}, 1);
  for (const char* op : {"UnsortedSegmentMin", "UnsortedSegmentProd"}) {
    Tensor four = Tensor::Scalar<int32_t>(4);
    ExpectInvalid(op, {data, Ids(DType::kInt32, {0, 4, 1, 3}), four}, {},
                  {"segment_ids[1] = 4", "[0, 4)"});
    ExpectInvalid(op, {data, Ids(DType::kInt32, {0, 1, 2}), four}, {},
                  {"[3]", "[4,2]", "prefix"});
    ExpectInvalid(
        op,
        {data, Ids(DType::kInt32, {0, 1, 2, 3}), Tensor::Scalar<int64_t>(-1)},
        {}, {"num_segments", "-1"});
    ExpectInvalid(
        op, {data, Ids(DType::kInt32, {0, 1, 2, 3}), Tensor::Scalar<double>(4)},
        {}, {"num_segments", "int32 or int64"});
    ExpectInvalid(op, {data, R({4}, 2), four}, {}, {"int32 or int64"});
  }
  ExpectInvalid("SegmentProd", {data, Ids(DType::kInt32, {0, 2, 1, 3})}, {},
                {"not sorted"});
}

}  // namespace
}  // namespace gradtape
