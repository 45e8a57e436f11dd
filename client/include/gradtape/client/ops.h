// Typed helpers for the ops of the gradtape registry (TensorFlow names).
//
// Each helper buffers one ExecuteOp in the session of its inputs and returns
// the output handles at once (see session.h). The inputs must belong to one
// session; if every input is null there is no session to run in and the
// result is null. Shape and dtype errors are the server's: they surface at
// the next wait point, naming the op, the command's sequence number and the
// shapes. Binary elementwise ops broadcast numpy-style.
#ifndef GRADTAPE_CLIENT_OPS_H_
#define GRADTAPE_CLIENT_OPS_H_

#include <cstdint>
#include <vector>

#include "gradtape/client/session.h"

namespace gradtape::client {

// Execute in the session of the first non-null input (null outputs if none).
std::vector<Tensor> Execute(absl::string_view op,
                            absl::Span<const Tensor> inputs,
                            const Attrs& attrs = {}, int num_outputs = 1);

Tensor Identity(const Tensor& x);
Tensor Add(const Tensor& a, const Tensor& b);  // AddV2
Tensor Sub(const Tensor& a, const Tensor& b);
Tensor Mul(const Tensor& a, const Tensor& b);
Tensor Div(const Tensor& a, const Tensor& b);  // RealDiv
Tensor Neg(const Tensor& x);
Tensor Square(const Tensor& x);
Tensor Sqrt(const Tensor& x);
Tensor Exp(const Tensor& x);
Tensor Log(const Tensor& x);
Tensor Tanh(const Tensor& x);
Tensor Sigmoid(const Tensor& x);
Tensor Relu(const Tensor& x);
// op(a) @ op(b) for 2-D a and b; op transposes when asked.
Tensor MatMul(const Tensor& a, const Tensor& b, bool transpose_a = false,
              bool transpose_b = false);
// value + bias along the last dim.
Tensor BiasAdd(const Tensor& value, const Tensor& bias);
// Reductions over `axes` (empty: all axes; negative axes count from the end).
Tensor Sum(const Tensor& x, std::vector<int64_t> axes = {},
           bool keep_dims = false);
Tensor Mean(const Tensor& x, std::vector<int64_t> axes = {},
            bool keep_dims = false);
// One dim of `shape` may be -1.
Tensor Reshape(const Tensor& x, std::vector<int64_t> shape);
// Empty perm reverses the dims.
Tensor Transpose(const Tensor& x, std::vector<int64_t> perm = {});
Tensor Softmax(const Tensor& logits);  // over the last dim
Tensor LogSoftmax(const Tensor& logits);

struct SoftmaxCrossEntropy {
  Tensor loss;      // [batch]
  Tensor backprop;  // [batch, classes]: softmax(logits) - onehot(labels)
};
// logits [batch, classes] (floating), labels [batch] (int32 or int64).
SoftmaxCrossEntropy SparseSoftmaxCrossEntropyWithLogits(const Tensor& logits,
                                                        const Tensor& labels);
Tensor Cast(const Tensor& x, DType dtype);
Tensor ZerosLike(const Tensor& x);
Tensor OnesLike(const Tensor& x);

// The list ops (ListOps' OpInfo.list_input / list_output): the length attr
// of a list input (N) is filled in from `values`; a list output has as many
// handles as its length attr says. Axes are int32 / int64 scalar tensors
// where TensorFlow takes a tensor, int attrs where it takes an attr.
Tensor ConcatV2(absl::Span<const Tensor> values, const Tensor& axis);
Tensor Pack(absl::Span<const Tensor> values, int64_t axis = 0);
std::vector<Tensor> Unpack(const Tensor& value, int64_t num, int64_t axis = 0);
std::vector<Tensor> Split(const Tensor& split_dim, const Tensor& value,
                          int64_t num_split);
std::vector<Tensor> SplitV(const Tensor& value, const Tensor& size_splits,
                           const Tensor& split_dim, int64_t num_split);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return Add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return Sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return Mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return Div(a, b); }
inline Tensor operator-(const Tensor& x) { return Neg(x); }

}  // namespace gradtape::client

#endif  // GRADTAPE_CLIENT_OPS_H_
