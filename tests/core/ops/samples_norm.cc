// Gradient-check samples for the ops of core/ops/norm_ops.cc (variances
// positive).
#include <string>

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
  // FusedBatchNormV3: is_training with the running statistics not read
  // (exponential_avg_factor 1, empty mean and variance) and blended (0.3),
  // inference; channels last and first, 4-D and 5-D.
  struct Mode {
    const char* label;
    bool training;
    double factor;
  };
  for (const Mode& mode :
       {Mode{"training", true, 1.0}, Mode{"training blended", true, 0.3},
        Mode{"inference", false, 1.0}}) {
    const bool given = !mode.training || mode.factor != 1.0;
    for (const char* format : {"NHWC", "NCHW", "NCDHW"}) {
      const bool first = format[1] == 'C';
      const Shape shape = std::string(format) == "NCDHW" ? Shape{2, 2, 1, 2, 1}
                          : first                        ? Shape{2, 3, 1, 2}
                                                         : Shape{2, 1, 2, 3};
      const int64_t c = first ? shape[1] : shape.back();
      const AttrMap attrs = {{"epsilon", 0.01},
                             {"exponential_avg_factor", mode.factor},
                             {"data_format", std::string(format)},
                             {"is_training", mode.training}};
      const std::string label = std::string(mode.label) + " " + format;
      s.Add("FusedBatchNormV3", label,
            {R(shape, 410), Positive({c}, 411), R({c}, 412),
             given ? R({c}, 413) : R({0}, 413),
             given ? Positive({c}, 414) : R({0}, 414)},
            attrs);
      if (mode.factor != 1.0) continue;
      s.Add("FusedBatchNormGradV3", label,
            {R(shape, 415), R(shape, 416), R({c}, 417), R({c}, 418),
             Positive({c}, 419), R({}, 420)},
            {{"epsilon", 0.01},
             {"data_format", std::string(format)},
             {"is_training", mode.training}});
    }
  }
}

}  // namespace gradtape::testing
