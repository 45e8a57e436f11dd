#include "core/registry/fused_loop.h"

namespace gradtape {

std::optional<FusedLoop::Code> FusedLoop::CodeOf(absl::string_view op_name) {
  if (op_name == "AddV2" || op_name == "Add") return kAdd;
  if (op_name == "Sub") return kSub;
  if (op_name == "Mul") return kMul;
  if (op_name == "RealDiv" || op_name == "Div") return kDiv;
  if (op_name == "Neg") return kNeg;
  if (op_name == "Square") return kSquare;
  if (op_name == "Exp") return kExp;
  if (op_name == "Erf") return kErf;
  if (op_name == "Softmax") return kSoftmax;
  if (op_name == "Equal") return kEqual;
  if (op_name == "NotEqual") return kNotEqual;
  if (op_name == "Greater") return kGreater;
  if (op_name == "GreaterEqual") return kGreaterEqual;
  if (op_name == "Less") return kLess;
  if (op_name == "LessEqual") return kLessEqual;
  if (op_name == "Cast" || op_name == "BroadcastTo") return kCopy;
  return std::nullopt;
}

}  // namespace gradtape
