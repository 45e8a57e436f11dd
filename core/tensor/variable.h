// Server-side resource variables (TensorFlow's resource variables).
//
// A variable is reached through a kResource tensor made by VarHandleOp; the
// tensor's buffer owns the Variable, so it lives as long as any id, tape
// entry or op still holds its handle. Values are immutable tensors: an
// assignment replaces `value`, and a tensor read before it keeps the old
// buffer. Guarded by the owning session's lock.
#ifndef GRADTAPE_CORE_TENSOR_VARIABLE_H_
#define GRADTAPE_CORE_TENSOR_VARIABLE_H_

#include <string>

#include "core/tensor/tensor.h"

namespace gradtape {

struct Variable {
  DType dtype = DType::kInvalid;
  Shape shape;
  std::string name;  // VarHandleOp's shared_name, for messages
  Tensor value;      // invalid until the first assignment
};

// The variable behind `handle`, or null if it is not a variable handle.
inline Variable* VariableOf(const Tensor& handle) {
  return handle.dtype() == DType::kResource ? handle.resource<Variable>()
                                            : nullptr;
}

}  // namespace gradtape

#endif  // GRADTAPE_CORE_TENSOR_VARIABLE_H_
