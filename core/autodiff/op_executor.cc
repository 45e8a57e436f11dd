#include "core/autodiff/op_executor.h"

#include <new>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"

namespace gradtape {
namespace {

// Kernels allocate tensors through Tensor::Empty (a status, never a throw),
// but the standard library they use for scratch throws std::bad_alloc when
// memory runs out; this is the one place that turns it into a status, so no
// request can end the process that way.
absl::Status RunKernel(const OpDef& op, KernelContext& kernel) {
  try {
    return op.forward(kernel);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat(op.name, ": out of memory for the kernel's scratch"));
  }
}

}  // namespace

absl::Status OpExecutor::Execute(
    const OpDef& declared, absl::Span<const Tensor> inputs, AttrMap attrs,
    Tensors* outputs, std::shared_ptr<const GradientProgram> custom) {
  // A list op runs as its flat instance for these attrs, which the tape
  // entries recording it keep alive.
  std::shared_ptr<const OpDef> instance;
  if (declared.has_lists()) {
    RETURN_IF_ERROR(declared.ResolveAttrs(&attrs));
    ASSIGN_OR_RETURN(
        instance, declared.Instantiate(attrs, static_cast<int>(inputs.size())));
  } else if (static_cast<int>(inputs.size()) != declared.num_inputs()) {
    return absl::InvalidArgumentError(
        absl::StrCat(declared.name, ": takes ", declared.num_inputs(),
                     " inputs, got ", inputs.size()));
  }
  const OpDef& op = instance != nullptr ? *instance : declared;
  RETURN_IF_ERROR(op.ResolveAttrs(&attrs));
  RETURN_IF_ERROR(op.CheckInputKinds(inputs));
  outputs->clear();
  outputs->resize(op.num_outputs());
  KernelContext kernel(op, inputs, attrs, outputs);
  if (absl::Status s = RunKernel(op, kernel); !s.ok()) {
    outputs->clear();
    return s;
  }
  if (absl::Status s = CheckMemoryLimit(op.name); !s.ok()) {
    outputs->clear();
    return s;
  }
  for (Tensor& out : *outputs) {
    if (!out.valid()) {
      outputs->clear();
      return absl::InternalError(
          absl::StrCat(op.name, ": kernel did not set every output"));
    }
    out.set_id(++last_id_);
    if (created_ids_ != nullptr) created_ids_->push_back(out.id());
  }
  if (observer_ != nullptr)
    observer_->Executed(declared, attrs, inputs, *outputs);
  // The fast path: no tape could record, so inputs are never looked at.
  if (tapes_.CouldRecord() && (op.differentiable() || custom != nullptr)) {
    tapes_.Record(op, attrs, inputs, *outputs, std::move(custom), instance);
  }
  // Forward mode: one check when no accumulator is active.
  if (!accumulators_.CouldAccumulate()) return absl::OkStatus();
  if (absl::Status s = Accumulate(*this, op, attrs, inputs, *outputs);
      !s.ok()) {
    for (const Tensor& out : *outputs) Forget(out.id());
    outputs->clear();
    return s;
  }
  return absl::OkStatus();
}

void OpExecutor::Forget(int64_t id) {
  tapes_.DeleteTrace(id);
  if (accumulators_.size() == 0) return;
  std::vector<int64_t> owned;
  accumulators_.Forget(id, &owned);
  for (int64_t tangent : owned) Forget(tangent);
}

absl::Status OpExecutor::CheckMemoryLimit(absl::string_view what) const {
  const MemoryAccount* over =
      account_ != nullptr ? account_->OverLimit() : nullptr;
  if (over == nullptr) return absl::OkStatus();
  const bool server = over == ProcessMemoryAccount().get();
  return absl::ResourceExhaustedError(absl::StrCat(
      what, ": ",
      server ? std::string("server memory budget exceeded")
             : absl::StrCat(over->name().empty() ? "session" : over->name(),
                            " memory limit exceeded"),
      " (", over->bytes(), " bytes with this command's result, ",
      server ? "budget " : "limit ", over->limit(),
      server ? " (--memory_budget_mb)" : "",
      "); release tensors or delete tapes"));
}

absl::Status OpExecutor::Execute(absl::string_view op_name,
                                 absl::Span<const Tensor> inputs, AttrMap attrs,
                                 Tensors* outputs) {
  const OpDef* op = registry_.Find(op_name);
  if (op == nullptr) {
    return absl::NotFoundError(absl::StrCat("unknown op '", op_name, "'"));
  }
  return Execute(*op, inputs, std::move(attrs), outputs);
}

}  // namespace gradtape
