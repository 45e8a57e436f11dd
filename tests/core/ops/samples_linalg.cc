// Gradient-check samples for the ops of core/ops/linalg_ops.cc.
#include "tests/core/ops/op_samples.h"

namespace gradtape::testing {

void AddLinalgSamples(SampleList& s) {
  s.Add("BatchMatMul", "batch of 2", {R({2, 2, 3}, 301), R({2, 3, 2}, 302)});
  s.Add("BatchMatMul", "adj_x", {R({2, 3, 2}, 303), R({2, 3, 2}, 304)},
        {{"adj_x", true}});
  s.Add("BatchMatMul", "adj_y", {R({2, 2, 3}, 305), R({2, 2, 3}, 306)},
        {{"adj_y", true}});
  s.Add("BatchMatMul", "adj_x adj_y, two batch dims",
        {R({2, 1, 3, 2}, 307), R({2, 1, 2, 3}, 308)},
        {{"adj_x", true}, {"adj_y", true}});
  s.Add("BatchMatMul", "no batch dims", {R({2, 3}, 309), R({3, 2}, 310)});
  s.Add("BatchMatMulV2", "y broadcast from a matrix",
        {R({2, 2, 3}, 311), R({3, 2}, 312)});
  s.Add("BatchMatMulV2", "both broadcast",
        {R({2, 1, 2, 3}, 313), R({1, 3, 3, 2}, 314)});
  s.Add("BatchMatMulV2", "x broadcast, adj_x",
        {R({1, 3, 2}, 315), R({2, 3, 2}, 316)}, {{"adj_x", true}});
  s.Add("BatchMatMulV2", "adj_y, y broadcast over a batch dim of 1",
        {R({2, 2, 3}, 317), R({1, 2, 3}, 318)}, {{"adj_y", true}});
  s.Add("BatchMatMulV2", "adj_x adj_y, rank 2 x",
        {R({3, 2}, 319), R({2, 2, 3}, 320)},
        {{"adj_x", true}, {"adj_y", true}});
  const AttrMap v3{{"Tout", DType::kFloat64}};
  s.Add("BatchMatMulV3", "y broadcast from a matrix",
        {R({2, 2, 3}, 331), R({3, 2}, 332)}, v3);
  s.Add("BatchMatMulV3", "adj_x, Ta Tb given",
        {R({1, 3, 2}, 333), R({2, 3, 2}, 334)},
        {{"Tout", DType::kFloat64},
         {"Ta", DType::kFloat64},
         {"Tb", DType::kFloat64},
         {"adj_x", true}});
  s.Add("BatchMatMulV3", "adj_x adj_y", {R({2, 2, 3}, 335), R({2, 2, 2}, 336)},
        {{"Tout", DType::kFloat64}, {"adj_x", true}, {"adj_y", true}});
  s.Add("SparseMatMul", "plain", {R({2, 3}, 321), R({3, 2}, 322)});
  s.Add("SparseMatMul", "transpose_a, a_is_sparse",
        {R({3, 2}, 323), R({3, 2}, 324)},
        {{"transpose_a", true}, {"a_is_sparse", true}});
  s.Add("SparseMatMul", "transpose_b, b_is_sparse",
        {R({2, 3}, 325), R({2, 3}, 326)},
        {{"transpose_b", true}, {"b_is_sparse", true}});
  s.Add("SparseMatMul", "both transposed", {R({3, 2}, 327), R({2, 3}, 328)},
        {{"transpose_a", true}, {"transpose_b", true}});
  s.Add("Cross", "one vector", {R({3}, 329), R({3}, 330)});
  s.Add("Cross", "batch of vectors", {R({2, 2, 3}, 331), R({2, 2, 3}, 332)});
}

}  // namespace gradtape::testing
