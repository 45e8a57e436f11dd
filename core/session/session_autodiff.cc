// Session commands for Jacobians, watched variables, forward accumulators
// and custom gradients. Same rules as core/session/session.cc: every command is
// atomic, failures poison the ids it would have filled, messages name the
// command, "command <seq>" and the offending id.
#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/autodiff/jacobian.h"
#include "core/base/status_macros.h"
#include "core/session/session.h"
#include "core/tensor/variable.h"

namespace gradtape {

absl::StatusOr<std::vector<Tensor>> Session::Jacobian(
    int64_t seq, const JacobianRequest& request) {
  last_seq_ = seq;
  ScopedMemoryAccount scope(account_);
  const char* what = request.batch ? "BatchJacobian" : "Jacobian";
  std::vector<Tensor> results;
  absl::Status status = [&]() -> absl::Status {
    if (request.result_ids.size() != request.sources.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " (command ", seq, "): ", request.sources.size(),
          " sources but ", request.result_ids.size(), " result ids"));
    }
    absl::StatusOr<Tape*> tape = ctx_.tapes().Find(request.tape);
    if (!tape.ok()) return Annotate(tape.status(), seq, what);
    ASSIGN_OR_RETURN(Tensor target, Resolve(seq, what, request.target));
    Tensors sources;
    RETURN_IF_ERROR(ResolveAll(seq, what, request.sources, &sources));
    RETURN_IF_ERROR(CheckFreeOutputs(seq, what, request.result_ids));
    absl::StatusOr<std::vector<Tensor>> jac =
        request.batch
            ? BatchJacobian(ctx_, **tape, target, sources, request.unconnected)
            : gradtape::Jacobian(ctx_, **tape, target, sources,
                                 request.unconnected);
    if (!jac.ok()) {
      return Annotate(
          jac.status(), seq, what,
          absl::StrCat("tape ", request.tape, ", target id ", request.target));
    }
    results = *std::move(jac);
    for (size_t i = 0; i < results.size(); ++i) {
      if (!results[i].valid()) {
        StoreNone(
            request.result_ids[i],
            absl::StrCat("is a None Jacobian: source id ", request.sources[i],
                         " is not connected to target id ", request.target,
                         " on tape ", request.tape,
                         " (ask for unconnected_gradients=ZERO to get "
                         "zeros)"));
        continue;
      }
      Store(request.result_ids[i], results[i]);
    }
    return absl::OkStatus();
  }();
  if (!status.ok()) {
    Poison(seq, request.result_ids, status);
    return status;
  }
  return results;
}

absl::StatusOr<std::vector<int64_t>> Session::WatchedVariables(int64_t seq,
                                                               int64_t tape) {
  last_seq_ = seq;
  absl::StatusOr<Tape*> t = ctx_.tapes().Find(tape);
  if (!t.ok()) return Annotate(t.status(), seq, "WatchedVariables");
  absl::flat_hash_map<const void*, size_t> order;
  const std::vector<Tensor>& watched = (*t)->watched_variables();
  for (size_t i = 0; i < watched.size(); ++i) {
    order.try_emplace(watched[i].resource<void>(), i);
  }
  std::vector<std::pair<size_t, int64_t>> found;
  for (const auto& [id, slot] : slots_) {
    if (slot.kind != Slot::kTensor || slot.tensor.dtype() != DType::kResource) {
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
}

absl::Status Session::PushAccumulator(int64_t seq, int64_t accumulator) {
  last_seq_ = seq;
  absl::Status s = ctx_.accumulators().Push(accumulator);
  return s.ok() ? s : Annotate(s, seq, "PushAccumulator");
}

absl::Status Session::PopAccumulator(int64_t seq, int64_t accumulator) {
  last_seq_ = seq;
  absl::Status s = ctx_.accumulators().Pop(accumulator);
  return s.ok() ? s : Annotate(s, seq, "PopAccumulator");
}

absl::Status Session::DeleteAccumulator(int64_t seq, int64_t accumulator) {
  last_seq_ = seq;
  ScopedMemoryAccount scope(account_);
  absl::StatusOr<std::vector<int64_t>> owned =
      ctx_.accumulators().Delete(accumulator);
  if (!owned.ok()) return Annotate(owned.status(), seq, "DeleteAccumulator");
  for (int64_t id : *owned) ctx_.Forget(id);
  return absl::OkStatus();
}

absl::Status Session::AccumulatorWatch(int64_t seq, int64_t accumulator,
                                       absl::Span<const int64_t> ids,
                                       absl::Span<const int64_t> tangent_ids) {
  last_seq_ = seq;
  constexpr absl::string_view kWhat = "AccumulatorWatch";
  absl::StatusOr<ForwardAccumulator*> acc =
      ctx_.accumulators().Find(accumulator);
  if (!acc.ok()) return Annotate(acc.status(), seq, kWhat);
  if (ids.size() != tangent_ids.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWhat, " (command ", seq, "): ", ids.size(), " ids but ",
                     tangent_ids.size(), " tangent ids"));
  }
  Tensors primals, tangents;
  RETURN_IF_ERROR(ResolveAll(seq, kWhat, ids, &primals));
  RETURN_IF_ERROR(ResolveAll(seq, kWhat, tangent_ids, &tangents));
  for (size_t i = 0; i < ids.size(); ++i) {
    const Tensor& p = primals[i];
    if (!IsTrainable(p.dtype()) || p.dtype() == DType::kResource) {
      return absl::InvalidArgumentError(absl::StrCat(
          kWhat, " (command ", seq, "): tensor id ", ids[i], " is ",
          p.DebugString(),
          "; only floating and complex tensors can carry tangents"));
    }
    if (tangents[i].dtype() != p.dtype() || tangents[i].shape() != p.shape()) {
      return absl::InvalidArgumentError(absl::StrCat(
          kWhat, " (command ", seq, "): tangent id ", tangent_ids[i], " is ",
          tangents[i].DebugString(), " but tensor id ", ids[i], " is ",
          p.DebugString(), "; they must match"));
    }
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    (*acc)->Set(primals[i].id(), {tangents[i], /*owned=*/false});
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> Session::FetchJvp(int64_t seq, int64_t accumulator,
                                         int64_t id, int64_t result_id,
                                         Unconnected unconnected) {
  last_seq_ = seq;
  ScopedMemoryAccount scope(account_);
  constexpr absl::string_view kWhat = "FetchJvp";
  int64_t result_ids[] = {result_id};
  Tensor result;
  absl::Status status = [&]() -> absl::Status {
    absl::StatusOr<ForwardAccumulator*> acc =
        ctx_.accumulators().Find(accumulator);
    if (!acc.ok()) return Annotate(acc.status(), seq, kWhat);
    ASSIGN_OR_RETURN(Tensor primal, Resolve(seq, kWhat, id));
    RETURN_IF_ERROR(CheckFreeOutputs(seq, kWhat, result_ids));
    ForwardAccumulator::Entry* entry = (*acc)->FindMutable(primal.id());
    if (entry != nullptr) {
      if (entry->owned) {
        // The client's id takes over the trace the accumulator held.
        result = entry->tangent;
        entry->owned = false;
      } else {
        result = ctx_.Adopt(entry->tangent);
      }
    } else if (unconnected == Unconnected::kZero &&
               IsTrainable(primal.dtype()) &&
               primal.dtype() != DType::kResource) {
      absl::StatusOr<Tensor> zeros =
          Tensor::Zeros(primal.dtype(), primal.shape());
      if (!zeros.ok()) return Annotate(zeros.status(), seq, kWhat);
      result = ctx_.Adopt(*std::move(zeros));
    }
    if (!result.valid()) {
      StoreNone(result_id,
                absl::StrCat("is a None JVP: tensor id ", id,
                             " has no tangent in accumulator ", accumulator,
                             " (ask for unconnected_gradients=ZERO to get "
                             "zeros)"));
      return absl::OkStatus();
    }
    Store(result_id, result);
    return absl::OkStatus();
  }();
  if (!status.ok()) {
    Poison(seq, result_ids, status);
    return status;
  }
  return result;
}

absl::Status Session::ExecuteOpWithGradient(
    int64_t seq, absl::string_view op_name, absl::Span<const int64_t> inputs,
    absl::Span<const int64_t> outputs, AttrMap attrs, GradientProgram program) {
  last_seq_ = seq;
  ScopedMemoryAccount scope(account_);
  absl::Status status = [&]() -> absl::Status {
    const OpDef* op = ctx_.registry().Find(op_name);
    if (op == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("command ", seq, ": unknown op '", op_name,
                       "' (ListOps returns the registered ops)"));
    }
    if (static_cast<int>(outputs.size()) != op->num_outputs() ||
        static_cast<int>(inputs.size()) != op->num_inputs()) {
      return absl::InvalidArgumentError(absl::StrCat(
          op_name, " (command ", seq, "): takes ", op->num_inputs(),
          " inputs and has ", op->num_outputs(), " outputs, got ",
          inputs.size(), " input ids and ", outputs.size(), " output ids"));
    }
    Tensors in;
    RETURN_IF_ERROR(ResolveAll(seq, op_name, inputs, &in));
    RETURN_IF_ERROR(CheckFreeOutputs(seq, op_name, outputs));
    // Captured tensors.
    auto resolve = [&](GradientRef& ref) -> absl::Status {
      if (ref.kind != GradientRef::kTensor) return absl::OkStatus();
      ASSIGN_OR_RETURN(Tensor t,
                       Resolve(seq, absl::StrCat(op_name, " custom gradient"),
                               ref.client_id));
      ref.tensor = std::move(t);
      return absl::OkStatus();
    };
    for (GradientStep& step : program.steps) {
      for (GradientRef& ref : step.inputs) {
        RETURN_IF_ERROR(resolve(ref));
      }
    }
    for (auto& ref : program.input_grads) {
      if (!ref.has_value()) continue;
      RETURN_IF_ERROR(resolve(*ref));
    }
    if (absl::Status s =
            ValidateGradientProgram(ctx_.registry(), *op, &program);
        !s.ok()) {
      return Annotate(s, seq, op_name);
    }
    Tensors out;
    if (absl::Status s = ctx_.Execute(
            *op, in, std::move(attrs), &out,
            std::make_shared<const GradientProgram>(std::move(program)));
        !s.ok()) {
      return Annotate(s, seq, op_name);
    }
    for (size_t i = 0; i < outputs.size(); ++i) Store(outputs[i], out[i]);
    return absl::OkStatus();
  }();
  if (!status.ok()) Poison(seq, outputs, status);
  return status;
}

}  // namespace gradtape
