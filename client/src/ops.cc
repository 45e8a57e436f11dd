#include "gradtape/client/ops.h"

#include <utility>

#include "client/src/session_core.h"

namespace gradtape::client {

std::vector<Tensor> Execute(absl::string_view op,
                            absl::Span<const Tensor> inputs, const Attrs& attrs,
                            int num_outputs) {
  for (const Tensor& t : inputs) {
    if (internal::SessionCore* core = SessionOf(t)) {
      return core->Execute(op, inputs, attrs, num_outputs);
    }
  }
  return std::vector<Tensor>(num_outputs > 0 ? num_outputs : 0);
}

namespace {

Tensor Unary(absl::string_view op, const Tensor& x, const Attrs& attrs = {}) {
  return std::move(Execute(op, {x}, attrs, 1)[0]);
}

Tensor Binary(absl::string_view op, const Tensor& a, const Tensor& b,
              const Attrs& attrs = {}) {
  return std::move(Execute(op, {a, b}, attrs, 1)[0]);
}

}  // namespace

Tensor Identity(const Tensor& x) { return Unary("Identity", x); }
Tensor Add(const Tensor& a, const Tensor& b) { return Binary("AddV2", a, b); }
Tensor Sub(const Tensor& a, const Tensor& b) { return Binary("Sub", a, b); }
Tensor Mul(const Tensor& a, const Tensor& b) { return Binary("Mul", a, b); }
Tensor Div(const Tensor& a, const Tensor& b) { return Binary("RealDiv", a, b); }
Tensor Neg(const Tensor& x) { return Unary("Neg", x); }
Tensor Square(const Tensor& x) { return Unary("Square", x); }
Tensor Sqrt(const Tensor& x) { return Unary("Sqrt", x); }
Tensor Exp(const Tensor& x) { return Unary("Exp", x); }
Tensor Log(const Tensor& x) { return Unary("Log", x); }
Tensor Tanh(const Tensor& x) { return Unary("Tanh", x); }
Tensor Sigmoid(const Tensor& x) { return Unary("Sigmoid", x); }
Tensor Relu(const Tensor& x) { return Unary("Relu", x); }

Tensor MatMul(const Tensor& a, const Tensor& b, bool transpose_a,
              bool transpose_b) {
  return Binary("MatMul", a, b,
                {{"transpose_a", transpose_a}, {"transpose_b", transpose_b}});
}

Tensor BiasAdd(const Tensor& value, const Tensor& bias) {
  return Binary("BiasAdd", value, bias);
}

Tensor Sum(const Tensor& x, std::vector<int64_t> axes, bool keep_dims) {
  return Unary("Sum", x, {{"axis", std::move(axes)}, {"keep_dims", keep_dims}});
}

Tensor Mean(const Tensor& x, std::vector<int64_t> axes, bool keep_dims) {
  return Unary("Mean", x,
               {{"axis", std::move(axes)}, {"keep_dims", keep_dims}});
}

Tensor Reshape(const Tensor& x, std::vector<int64_t> shape) {
  return Unary("Reshape", x, {{"shape", std::move(shape)}});
}

Tensor Transpose(const Tensor& x, std::vector<int64_t> perm) {
  return Unary("Transpose", x, {{"perm", std::move(perm)}});
}

Tensor Softmax(const Tensor& logits) { return Unary("Softmax", logits); }
Tensor LogSoftmax(const Tensor& logits) { return Unary("LogSoftmax", logits); }

SoftmaxCrossEntropy SparseSoftmaxCrossEntropyWithLogits(const Tensor& logits,
                                                        const Tensor& labels) {
  std::vector<Tensor> out =
      Execute("SparseSoftmaxCrossEntropyWithLogits", {logits, labels}, {}, 2);
  return {std::move(out[0]), std::move(out[1])};
}

Tensor Cast(const Tensor& x, DType dtype) {
  return Unary("Cast", x, {{"DstT", dtype}});
}

Tensor ZerosLike(const Tensor& x) { return Unary("ZerosLike", x); }
Tensor OnesLike(const Tensor& x) { return Unary("OnesLike", x); }

Tensor ConcatV2(absl::Span<const Tensor> values, const Tensor& axis) {
  std::vector<Tensor> inputs(values.begin(), values.end());
  inputs.push_back(axis);
  const int64_t n = static_cast<int64_t>(values.size());
  return std::move(Execute("ConcatV2", inputs, {{"N", n}}, 1)[0]);
}

Tensor Pack(absl::Span<const Tensor> values, int64_t axis) {
  const int64_t n = static_cast<int64_t>(values.size());
  return std::move(Execute("Pack", values, {{"N", n}, {"axis", axis}}, 1)[0]);
}

namespace {

// A count the server refuses (negative, past the list cap) asks for no
// handles; the server's error names it.
int Count(int64_t n) { return n < 0 || n > 65536 ? 0 : static_cast<int>(n); }

}  // namespace

std::vector<Tensor> Unpack(const Tensor& value, int64_t num, int64_t axis) {
  return Execute("Unpack", {value}, {{"num", num}, {"axis", axis}}, Count(num));
}

std::vector<Tensor> Split(const Tensor& split_dim, const Tensor& value,
                          int64_t num_split) {
  return Execute("Split", {split_dim, value}, {{"num_split", num_split}},
                 Count(num_split));
}

std::vector<Tensor> SplitV(const Tensor& value, const Tensor& size_splits,
                           const Tensor& split_dim, int64_t num_split) {
  return Execute("SplitV", {value, size_splits, split_dim},
                 {{"num_split", num_split}}, Count(num_split));
}

}  // namespace gradtape::client
