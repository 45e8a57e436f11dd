// Gradient-check samples for the ops of core/ops/segment_ops.cc. Data is
// float64 with distinct values (no ties for Min/Max); ids come as int32 and
// int64, with an empty segment where the op allows one.
#include <string>

#include "tests/core/ops/op_samples.h"

namespace gradtape::testing {
namespace {

Tensor I32(Shape shape, std::vector<int32_t> v) {
  return Tensor::FromVector<int32_t>(shape, v);
}
Tensor I64(Shape shape, std::vector<int64_t> v) {
  return Tensor::FromVector<int64_t>(shape, v);
}

}  // namespace

void AddSegmentSamples(SampleList& s) {
  uint32_t seed = 400;
  for (const char* op :
       {"SegmentSum", "SegmentMean", "SegmentMin", "SegmentMax"}) {
    s.Add(op, "int32 ids, segment 2 empty",
          {R({5, 2}, ++seed), I32({5}, {0, 0, 1, 3, 3})});
    s.Add(op, "int64 ids, vector data",
          {R({4}, ++seed), I64({4}, {0, 1, 1, 1})});
    s.Add(op, "int32 ids, rank-3 data",
          {R({3, 2, 2}, ++seed), I32({3}, {1, 1, 2})});
  }
  for (const char* op : {"UnsortedSegmentSum", "UnsortedSegmentMax"}) {
    s.Add(op, "int32 ids, segment 3 empty",
          {R({5, 2}, ++seed), I32({5}, {2, 0, 2, 1, 0})},
          {{"num_segments", int64_t{4}}});
    s.Add(op, "int64 ids of rank 2",
          {R({2, 3, 2}, ++seed), I64({2, 3}, {1, 0, 2, 2, 1, 1})},
          {{"num_segments", int64_t{3}}});
  }
  for (const char* op : {"UnsortedSegmentSum", "UnsortedSegmentMax"}) {
    s.Add(op, "negative ids drop their rows",
          {R({5, 2}, ++seed), I32({5}, {1, -1, 0, -3, 1})},
          {{"num_segments", int64_t{3}}});
  }
  // num_segments is an input for these (TensorFlow's form).
  for (const char* op : {"UnsortedSegmentMin", "UnsortedSegmentProd"}) {
    const bool prod = std::string(op) == "UnsortedSegmentProd";
    auto data = [&](Shape shape) {
      return prod ? RandomAwayFromZero(shape, 1.5, 0.3, ++seed)
                  : R(shape, ++seed);
    };
    s.Add(
        op, "int32 ids, segment 3 empty",
        {data({5, 2}), I32({5}, {2, 0, 2, 1, 0}), Tensor::Scalar<int32_t>(4)});
    s.Add(op, "int64 ids of rank 2, int64 num_segments",
          {data({2, 3, 2}), I64({2, 3}, {1, 0, 2, 2, 1, 1}),
           Tensor::Scalar<int64_t>(3)});
    s.Add(op, "negative ids drop their rows",
          {data({5, 2}), I32({5}, {1, -1, 0, -3, 1}),
           Tensor::Scalar<int32_t>(3)});
  }
  s.Add("SegmentProd", "int32 ids, segment 2 empty",
        {RandomAwayFromZero({5, 2}, 1.5, 0.3, ++seed),
         I32({5}, {0, 0, 1, 3, 3})});
  s.Add("SegmentProd", "int64 ids, vector data",
        {RandomAwayFromZero({4}, 1.5, 0.3, ++seed), I64({4}, {0, 1, 1, 1})});
  for (const char* op :
       {"SparseSegmentSumWithNumSegments", "SparseSegmentMeanWithNumSegments",
        "SparseSegmentSqrtNWithNumSegments"}) {
    s.Add(op, "int32, repeated index, rows past the last id",
          {R({4, 2}, ++seed), I32({5}, {0, 2, 2, 3, 1}),
           I32({5}, {0, 0, 1, 3, 3}), Tensor::Scalar<int32_t>(6)});
    s.Add(op, "int64 indices and num_segments, vector data",
          {R({3}, ++seed), I64({4}, {2, 0, 1, 2}), I32({4}, {0, 1, 1, 1}),
           Tensor::Scalar<int64_t>(2)});
  }
  for (const char* op :
       {"SparseSegmentSum", "SparseSegmentMean", "SparseSegmentSqrtN"}) {
    s.Add(op, "int32, repeated index, segment 2 empty",
          {R({4, 2}, ++seed), I32({5}, {0, 2, 2, 3, 1}),
           I32({5}, {0, 0, 1, 3, 3})});
    s.Add(op, "int64 indices, int32 ids, vector data",
          {R({3}, ++seed), I64({4}, {2, 0, 1, 2}), I32({4}, {0, 1, 1, 1})});
  }
}

}  // namespace gradtape::testing
