#include "core/autodiff/jacobian.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/tensor/variable.h"

namespace gradtape {
namespace {

// The shape and dtype of the value a source stands for (a variable handle
// stands for the variable).
Shape ValueShape(const Tensor& t) {
  const Variable* var = VariableOf(t);
  return var != nullptr ? var->shape : t.shape();
}

DType ValueDType(const Tensor& t) {
  const Variable* var = VariableOf(t);
  return var != nullptr ? var->dtype : t.dtype();
}

void SetOne(Tensor& t, int64_t k) {
  switch (t.dtype()) {
    case DType::kFloat32:
      t.mutable_data<float>()[k] = 1;
      break;
    case DType::kFloat64:
      t.mutable_data<double>()[k] = 1;
      break;
    case DType::kComplex64:
      t.mutable_data<complex64>()[k] = 1;
      break;
    case DType::kComplex128:
      t.mutable_data<complex128>()[k] = 1;
      break;
    default:
      break;
  }
}

absl::StatusOr<std::vector<Tensor>> Compute(OpExecutor& ctx, Tape& tape,
                                            const Tensor& target,
                                            absl::Span<const Tensor> sources,
                                            Unconnected unconnected,
                                            bool batch) {
  const char* what = batch ? "batch Jacobian" : "Jacobian";
  if (!IsTrainable(target.dtype()) || target.dtype() == DType::kResource) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the target is ", target.DebugString(),
                     "; it must have a floating or complex dtype"));
  }
  if (sources.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": no sources"));
  }
  for (size_t s = 0; s < sources.size(); ++s) {
    if (!IsTrainable(sources[s].dtype())) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": source ", s, " is ", sources[s].DebugString(),
                       "; it must be floating, complex or a variable handle"));
    }
  }
  int64_t batch_size = 1;
  if (batch) {
    if (target.rank() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": the target must have a batch dimension, got a scalar ",
          target.DebugString()));
    }
    batch_size = target.dim(0);
    for (size_t s = 0; s < sources.size(); ++s) {
      const Shape shape = ValueShape(sources[s]);
      if (shape.empty() || shape[0] != batch_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": the batch dimension of source ", s, " (shape ",
            ShapeString(shape), ") must equal the target's (shape ",
            ShapeString(target.shape()), ")"));
      }
    }
  }
  if (tape.used()) {
    return absl::FailedPreconditionError(
        "a non-persistent tape can compute one set of gradients only, and "
        "this one already did; push the tape with persistent=true to call "
        "jacobian more than once");
  }

  // Per batch row (or for the whole target): the number of seeds.
  const int64_t rows =
      batch ? (batch_size == 0 ? 0 : target.num_elements() / batch_size)
            : target.num_elements();
  std::vector<Tensor> results(sources.size());
  std::vector<bool> connected(sources.size(), rows == 0);
  for (size_t s = 0; s < sources.size(); ++s) {
    const Shape src = ValueShape(sources[s]);
    Shape shape;
    if (batch) {
      shape.push_back(batch_size);
      shape.insert(shape.end(), target.shape().begin() + 1,
                   target.shape().end());
      shape.insert(shape.end(), src.begin() + 1, src.end());
    } else {
      shape = target.shape();
      shape.insert(shape.end(), src.begin(), src.end());
    }
    absl::StatusOr<Tensor> zeros = Tensor::Zeros(ValueDType(sources[s]), shape);
    if (!zeros.ok()) {
      return absl::Status(zeros.status().code(),
                          absl::StrCat(what, ": the result for source ", s,
                                       ": ", zeros.status().message()));
    }
    results[s] = *std::move(zeros);
  }

  const bool persistent = tape.persistent();
  tape.set_persistent(true);
  absl::Status status;
  {
    TapeSet::ScopedStop stop(ctx.tapes());
    for (int64_t r = 0; r < rows && status.ok(); ++r) {
      absl::StatusOr<Tensor> zeros =
          Tensor::Zeros(target.dtype(), target.shape());
      if (!zeros.ok()) {
        status = zeros.status();
        break;
      }
      Tensor seed = *std::move(zeros);
      for (int64_t b = 0; b < batch_size; ++b) SetOne(seed, b * rows + r);
      absl::StatusOr<std::vector<Tensor>> grads =
          ctx.Gradient(tape, {target}, sources, {seed}, Unconnected::kNone);
      if (!grads.ok()) {
        status = grads.status();
        break;
      }
      for (size_t s = 0; s < sources.size(); ++s) {
        const Tensor& g = (*grads)[s];
        if (!g.valid()) continue;
        connected[s] = true;
        if (g.num_bytes() == 0) continue;  // an empty source: nothing to copy
        const size_t elem = DTypeSize(g.dtype());
        char* dst = static_cast<char*>(results[s].raw_mutable_data());
        const char* src = static_cast<const char*>(g.raw_data());
        if (batch) {
          // g is [batch] + source.shape[1:]; row b goes to result[b, r, ...].
          const int64_t m = batch_size == 0 ? 0 : g.num_elements() / batch_size;
          for (int64_t b = 0; b < batch_size; ++b) {
            std::memcpy(dst + (b * rows + r) * m * elem, src + b * m * elem,
                        m * elem);
          }
        } else {
          std::memcpy(dst + r * g.num_elements() * elem, src, g.num_bytes());
        }
      }
      for (const Tensor& g : *grads) {
        if (g.valid()) ctx.Forget(g.id());
      }
    }
  }
  tape.set_persistent(persistent);
  if (!persistent) tape.MarkUsed();
  if (!status.ok()) return status;
  for (size_t s = 0; s < sources.size(); ++s) {
    if (connected[s] || unconnected == Unconnected::kZero) {
      results[s] = ctx.Adopt(std::move(results[s]));
    } else {
      results[s] = Tensor();
    }
  }
  return results;
}

}  // namespace

absl::StatusOr<std::vector<Tensor>> Jacobian(OpExecutor& ctx, Tape& tape,
                                             const Tensor& target,
                                             absl::Span<const Tensor> sources,
                                             Unconnected unconnected) {
  return Compute(ctx, tape, target, sources, unconnected, /*batch=*/false);
}

absl::StatusOr<std::vector<Tensor>> BatchJacobian(
    OpExecutor& ctx, Tape& tape, const Tensor& target,
    absl::Span<const Tensor> sources, Unconnected unconnected) {
  return Compute(ctx, tape, target, sources, unconnected, /*batch=*/true);
}

}  // namespace gradtape
