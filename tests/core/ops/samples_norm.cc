// Gradient-check samples for the ops of core/ops/norm_ops.cc (variances
// positive).
#include "tests/core/ops/op_samples.h"

namespace gradtape::testing {

void AddNormSamples(SampleList& s) {
  for (bool scale : {true, false}) {
    const AttrMap attrs = {{"variance_epsilon", 0.001},
                           {"scale_after_normalization", scale}};
    const std::string label = scale ? "scaled" : "not scaled";
    s.Add("BatchNormWithGlobalNormalization", label,
          {R({2, 2, 2, 3}, 400), R({3}, 401), Positive({3}, 402), R({3}, 403),
           R({3}, 404)},
          attrs);
    s.Add("BatchNormWithGlobalNormalizationGrad", label,
          {R({2, 1, 2, 3}, 405), R({3}, 406), Positive({3}, 407), R({3}, 408),
           R({2, 1, 2, 3}, 409)},
          attrs);
  }
}

}  // namespace gradtape::testing
