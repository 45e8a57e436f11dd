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
  return std::nullopt;
}

}  // namespace gradtape
