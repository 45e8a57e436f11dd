// Gradient-check samples for the ops of core/ops/complex_ops.cc.
#include "tests/core/op_samples.h"

namespace gradtape::testing {
namespace {

// re + i im, complex128.
Tensor MakeComplex(const Tensor& re, const Tensor& im) {
  Tensor z = Tensor::Empty(DType::kComplex128, re.shape());
  for (int64_t i = 0; i < re.num_elements(); ++i) {
    z.mutable_data<complex128>()[i] =
        complex128(re.data<double>()[i], im.data<double>()[i]);
  }
  return z;
}

}  // namespace

void AddComplexSamples(SampleList& s) {
  s.Add("Complex", "same shape", {R({2, 3}, 201), R({2, 3}, 202)});
  s.Add("Complex", "broadcast", {R({2, 1}, 203), R({3}, 204)});
  s.Add("Real", "matrix", {MakeComplex(R({2, 3}, 205), R({2, 3}, 206))});
  s.Add("Imag", "matrix", {MakeComplex(R({2, 3}, 207), R({2, 3}, 208))});
  // Right half-plane: away from the origin and the branch cut of arg.
  s.Add("Angle", "right half-plane",
        {MakeComplex(Positive({2, 3}, 209), R({2, 3}, 210))});
  s.Add("Conj", "matrix", {MakeComplex(R({2, 3}, 211), R({2, 3}, 212))});
}

}  // namespace gradtape::testing
