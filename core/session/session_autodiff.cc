// Session commands for Jacobians, watched variables, forward accumulators
// and custom gradients. Same rules as core/session/session.cc: every command is
// atomic, failures poison the ids it would have filled, messages name the
// command, "command <seq>" and the offending id.
#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/autodiff/jacobian.h"
#include "core/base/status_macros.h"
#include "core/session/session.h"
#include "core/tensor/variable.h"

namespace gradtape {

absl::StatusOr<std::vector<Tensor>> Session::Jacobian(
    int64_t seq, const JacobianRequest& request) {
  const int64_t targets[] = {request.target};
  return Run(seq, request.batch ? "BatchJacobian" : "Jacobian",
             request.result_ids,
             [&](const Command& cmd) -> absl::StatusOr<std::vector<Tensor>> {
               ASSIGN_OR_RETURN(
                   Differentiation d,
                   PrepareDifferentiation(cmd, request.tape, targets,
                                          request.sources, request.result_ids));
               RETURN_IF_ERROR(CheckFreeOutputs(cmd, request.result_ids));
               ASSIGN_OR_RETURN(
                   std::vector<Tensor> results,
                   cmd.Annotate(
                       request.batch
                           ? BatchJacobian(exec_, *d.tape, d.targets[0],
                                           d.sources, request.unconnected)
                           : gradtape::Jacobian(exec_, *d.tape, d.targets[0],
                                                d.sources, request.unconnected),
                       [&] {
                         return absl::StrCat("tape ", request.tape,
                                             ", target id ", request.target);
                       }));
               StoreResults(results, request.result_ids, [&](size_t i) {
                 return absl::StrCat(
                     "is a None Jacobian: source id ", request.sources[i],
                     " is not connected to target id ", request.target,
                     " on tape ", request.tape,
                     " (ask for unconnected_gradients=ZERO to get zeros)");
               });
               return results;
             });
}

absl::StatusOr<std::vector<int64_t>> Session::WatchedVariables(int64_t seq,
                                                               int64_t tape) {
  return Run(seq, "WatchedVariables", {},
             [&](const Command& cmd) -> absl::StatusOr<std::vector<int64_t>> {
               ASSIGN_OR_RETURN(Tape * t,
                                cmd.Annotate(exec_.tapes().Find(tape)));
               absl::flat_hash_map<const void*, size_t> order;
               const std::vector<Tensor>& watched = t->watched_variables();
               for (size_t i = 0; i < watched.size(); ++i) {
                 order.try_emplace(watched[i].resource<void>(), i);
               }
               std::vector<std::pair<size_t, int64_t>> found;
               for (const auto& [id, slot] : slots_) {
                 if (slot.kind != Slot::kTensor ||
                     slot.tensor.dtype() != DType::kResource) {
                   continue;
                 }
                 auto it = order.find(slot.tensor.resource<void>());
                 if (it != order.end()) found.emplace_back(it->second, id);
               }
               std::sort(found.begin(), found.end());
               std::vector<int64_t> ids;
               ids.reserve(found.size());
               for (const auto& [position, id] : found) ids.push_back(id);
               return ids;
             });
}

absl::Status Session::PushAccumulator(int64_t seq, int64_t accumulator) {
  return Run(seq, "PushAccumulator", {}, [&](const Command& cmd) {
    return cmd.Annotate(exec_.accumulators().Push(accumulator));
  });
}

absl::Status Session::PopAccumulator(int64_t seq, int64_t accumulator) {
  return Run(seq, "PopAccumulator", {}, [&](const Command& cmd) {
    return cmd.Annotate(exec_.accumulators().Pop(accumulator));
  });
}

absl::Status Session::DeleteAccumulator(int64_t seq, int64_t accumulator) {
  return Run(seq, "DeleteAccumulator", {},
             [&](const Command& cmd) -> absl::Status {
               ASSIGN_OR_RETURN(
                   std::vector<int64_t> owned,
                   cmd.Annotate(exec_.accumulators().Delete(accumulator)));
               for (int64_t id : owned) exec_.Forget(id);
               return absl::OkStatus();
             });
}

absl::Status Session::AccumulatorWatch(int64_t seq, int64_t accumulator,
                                       absl::Span<const int64_t> ids,
                                       absl::Span<const int64_t> tangent_ids) {
  return Run(
      seq, "AccumulatorWatch", {}, [&](const Command& cmd) -> absl::Status {
        ASSIGN_OR_RETURN(ForwardAccumulator * acc,
                         cmd.Annotate(exec_.accumulators().Find(accumulator)));
        if (ids.size() != tangent_ids.size()) {
          return cmd.Error(absl::StatusCode::kInvalidArgument, ids.size(),
                           " ids but ", tangent_ids.size(), " tangent ids");
        }
        Tensors primals, tangents;
        RETURN_IF_ERROR(ResolveAll(cmd, ids, &primals));
        RETURN_IF_ERROR(ResolveAll(cmd, tangent_ids, &tangents));
        for (size_t i = 0; i < ids.size(); ++i) {
          const Tensor& p = primals[i];
          if (!IsTrainable(p.dtype()) || p.dtype() == DType::kResource) {
            return cmd.Error(absl::StatusCode::kInvalidArgument, "tensor id ",
                             ids[i], " is ", p.DebugString(),
                             "; only floating and complex tensors can carry "
                             "tangents");
          }
          if (tangents[i].dtype() != p.dtype() ||
              tangents[i].shape() != p.shape()) {
            return cmd.Error(absl::StatusCode::kInvalidArgument, "tangent id ",
                             tangent_ids[i], " is ", tangents[i].DebugString(),
                             " but tensor id ", ids[i], " is ", p.DebugString(),
                             "; they must match");
          }
        }
        for (size_t i = 0; i < ids.size(); ++i) {
          acc->Set(primals[i].id(), {tangents[i], /*owned=*/false});
        }
        return absl::OkStatus();
      });
}

absl::StatusOr<Tensor> Session::FetchJvp(int64_t seq, int64_t accumulator,
                                         int64_t id, int64_t result_id,
                                         Unconnected unconnected) {
  const int64_t result_ids[] = {result_id};
  return Run(
      seq, "FetchJvp", result_ids,
      [&](const Command& cmd) -> absl::StatusOr<Tensor> {
        ASSIGN_OR_RETURN(ForwardAccumulator * acc,
                         cmd.Annotate(exec_.accumulators().Find(accumulator)));
        ASSIGN_OR_RETURN(Tensor primal, Resolve(cmd, id));
        RETURN_IF_ERROR(CheckFreeOutputs(cmd, result_ids));
        Tensor result;
        ForwardAccumulator::Entry* entry = acc->FindMutable(primal.id());
        if (entry != nullptr) {
          if (entry->owned) {
            // The client's id takes over the trace the accumulator held.
            result = entry->tangent;
            entry->owned = false;
          } else {
            result = exec_.Adopt(entry->tangent);
          }
        } else if (unconnected == Unconnected::kZero &&
                   IsTrainable(primal.dtype()) &&
                   primal.dtype() != DType::kResource) {
          ASSIGN_OR_RETURN(Tensor zeros, cmd.Annotate(Tensor::Zeros(
                                             primal.dtype(), primal.shape())));
          result = exec_.Adopt(std::move(zeros));
        }
        if (!result.valid()) {
          StoreNone(result_id,
                    absl::StrCat("is a None JVP: tensor id ", id,
                                 " has no tangent in accumulator ", accumulator,
                                 " (ask for unconnected_gradients=ZERO to get "
                                 "zeros)"));
          return result;
        }
        Store(result_id, result);
        return result;
      });
}

absl::Status Session::ExecuteOpWithGradient(
    int64_t seq, absl::string_view op_name, absl::Span<const int64_t> inputs,
    absl::Span<const int64_t> outputs, AttrMap attrs, GradientProgram program) {
  return Run(seq, op_name, outputs, [&](const Command& cmd) -> absl::Status {
    Tensors in;
    ASSIGN_OR_RETURN(const OpDef* op,
                     PrepareOp(cmd, inputs, outputs, attrs, &in));
    if (op->has_lists()) {
      return cmd.Error(absl::StatusCode::kInvalidArgument, "op ", op->name,
                       " takes or returns a list: custom gradients of list "
                       "ops are not supported");
    }
    // Captured tensors.
    const std::string captured_what = absl::StrCat(op_name, " custom gradient");
    const Command captured{cmd.seq, captured_what};
    auto resolve = [&](GradientRef& ref) -> absl::Status {
      if (ref.kind != GradientRef::kTensor) return absl::OkStatus();
      ASSIGN_OR_RETURN(ref.tensor, Resolve(captured, ref.client_id));
      return absl::OkStatus();
    };
    for (GradientStep& step : program.steps) {
      for (GradientRef& ref : step.inputs) RETURN_IF_ERROR(resolve(ref));
    }
    for (auto& ref : program.input_grads) {
      if (ref.has_value()) RETURN_IF_ERROR(resolve(*ref));
    }
    RETURN_IF_ERROR(
        cmd.Annotate(ValidateGradientProgram(exec_.registry(), *op, &program)));
    return ExecuteAndStore(
        cmd, *op, inputs, in, outputs, std::move(attrs),
        std::make_shared<const GradientProgram>(std::move(program)));
  });
}

}  // namespace gradtape
