// Gradient-check samples for Einsum (core/ops/einsum_ops.cc): every form
// TensorFlow's CPU kernel has, the list input N = 1 or 2.
#include <string>

#include "tests/core/ops/op_samples.h"

namespace gradtape::testing {

void AddEinsumSamples(SampleList& s) {
  auto one = [&](const char* equation, Tensor x) {
    s.Add("Einsum", equation, {x},
          {{"equation", std::string(equation)}, {"N", int64_t{1}}});
  };
  auto two = [&](const char* equation, Tensor x, Tensor y) {
    s.Add("Einsum", equation, {x, y},
          {{"equation", std::string(equation)}, {"N", int64_t{2}}});
  };
  two("ij,jk->ik", R({2, 3}, 430), R({3, 2}, 431));
  two("bij,bjk->bik", R({2, 2, 3}, 432), R({2, 3, 2}, 433));
  two("...ij,...jk->...ik", R({2, 1, 2, 2}, 434), R({3, 2, 2}, 435));
  two("...ij,jk->...ik", R({2, 2, 3}, 436), R({3, 2}, 437));
  two("i,j->ij", R({2}, 438), R({3}, 439));
  two("ij,k->ik", R({2, 3}, 440), R({2}, 441));
  two("ii,i->i", R({2, 2}, 442), R({2}, 443));
  one("ij->ji", R({2, 3}, 444));
  one("ii->i", R({3, 3}, 445));
  one("ii->", R({2, 2}, 446));
  one("ij->i", R({2, 3}, 447));
  one("...ii->...i", R({2, 2, 2}, 448));
  one("i->ii", R({2}, 449));
}

}  // namespace gradtape::testing
