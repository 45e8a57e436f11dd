#include "core/autodiff/jacobian.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/autodiff/gradient.h"
#include "core/base/status_macros.h"

namespace gradtape {
namespace {

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

// What one Jacobian computes: `rows` reverse passes, each seeding one
// element of every batch row of the target (batch_size is 1 for a plain
// Jacobian).
struct JacobianShape {
  const char* what;
  bool batch;
  int64_t batch_size = 1;
  int64_t rows = 0;
};

// The target and sources have the dtypes (and, for a batch Jacobian, the
// batch dimensions) a Jacobian needs; sets the shape's batch size and rows.
absl::Status CheckArguments(const Tensor& target,
                            absl::Span<const Tensor> sources,
                            JacobianShape& js) {
  const char* what = js.what;
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
  js.rows = target.num_elements();
  if (!js.batch) return absl::OkStatus();
  if (target.rank() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": the target must have a batch dimension, got a scalar ",
        target.DebugString()));
  }
  js.batch_size = target.dim(0);
  for (size_t s = 0; s < sources.size(); ++s) {
    const Shape shape = ValueShape(sources[s]);
    if (shape.empty() || shape[0] != js.batch_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": the batch dimension of source ", s, " (shape ",
                       ShapeString(shape), ") must equal the target's (shape ",
                       ShapeString(target.shape()), ")"));
    }
  }
  // Per batch row: the number of seeds.
  js.rows = js.batch_size == 0 ? 0 : target.num_elements() / js.batch_size;
  return absl::OkStatus();
}

// Zeros of every result's shape, filled row by row.
absl::StatusOr<std::vector<Tensor>> AllocateResults(
    const Tensor& target, absl::Span<const Tensor> sources,
    const JacobianShape& js) {
  std::vector<Tensor> results(sources.size());
  for (size_t s = 0; s < sources.size(); ++s) {
    // CheckArguments passed: the shape exists.
    ASSIGN_OR_RETURN(
        Shape shape,
        JacobianResultShape(target.shape(), ValueShape(sources[s]), js.batch));
    absl::StatusOr<Tensor> zeros = Tensor::Zeros(ValueDType(sources[s]), shape);
    if (!zeros.ok()) {
      return absl::Status(zeros.status().code(),
                          absl::StrCat(js.what, ": the result for source ", s,
                                       ": ", zeros.status().message()));
    }
    results[s] = *std::move(zeros);
  }
  return results;
}

// Copies row `r` of the Jacobian (the gradient `g` for one source) into
// that source's result.
void CopyRow(const Tensor& g, int64_t r, const JacobianShape& js,
             Tensor& result) {
  if (g.num_bytes() == 0) return;  // an empty source: nothing to copy
  const size_t elem = DTypeSize(g.dtype());
  char* dst = static_cast<char*>(result.raw_mutable_data());
  const char* src = static_cast<const char*>(g.raw_data());
  if (!js.batch) {
    std::memcpy(dst + r * g.num_elements() * elem, src, g.num_bytes());
    return;
  }
  // g is [batch] + source.shape[1:]; row b goes to result[b, r, ...].
  const int64_t m = js.batch_size == 0 ? 0 : g.num_elements() / js.batch_size;
  for (int64_t b = 0; b < js.batch_size; ++b) {
    std::memcpy(dst + (b * js.rows + r) * m * elem, src + b * m * elem,
                m * elem);
  }
}

// Every row's reverse pass, with recording stopped, on one plan.
absl::Status ComputeRows(OpExecutor& ctx, Tape& tape, const Tensor& target,
                         absl::Span<const Tensor> sources,
                         const JacobianShape& js, std::vector<Tensor>& results,
                         std::vector<bool>& connected) {
  TapeSet::ScopedStop stop(ctx.tapes());
  const GradientPlan plan(tape, {target}, sources);
  for (int64_t r = 0; r < js.rows; ++r) {
    ASSIGN_OR_RETURN(Tensor seed,
                     Tensor::Zeros(target.dtype(), target.shape()));
    for (int64_t b = 0; b < js.batch_size; ++b) {
      SetOne(seed, b * js.rows + r);
    }
    ASSIGN_OR_RETURN(std::vector<Tensor> grads,
                     RunGradient(ctx, tape, plan, {target}, sources, {seed},
                                 Unconnected::kNone));
    for (size_t s = 0; s < sources.size(); ++s) {
      const Tensor& g = grads[s];
      if (!g.valid()) continue;
      connected[s] = true;
      CopyRow(g, r, js, results[s]);
    }
    for (const Tensor& g : grads) {
      if (g.valid()) ctx.Forget(g.id());
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> Compute(OpExecutor& ctx, Tape& tape,
                                            const Tensor& target,
                                            absl::Span<const Tensor> sources,
                                            Unconnected unconnected,
                                            bool batch) {
  JacobianShape js{batch ? "batch Jacobian" : "Jacobian", batch};
  RETURN_IF_ERROR(CheckArguments(target, sources, js));
  RETURN_IF_ERROR(CheckTapeUnused(tape, "jacobian"));
  ASSIGN_OR_RETURN(std::vector<Tensor> results,
                   AllocateResults(target, sources, js));
  std::vector<bool> connected(sources.size(), js.rows == 0);
  const bool persistent = tape.persistent();
  tape.set_persistent(true);
  absl::Status status =
      ComputeRows(ctx, tape, target, sources, js, results, connected);
  tape.set_persistent(persistent);
  if (!persistent) tape.MarkUsed();
  RETURN_IF_ERROR(status);
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

absl::StatusOr<Shape> JacobianResultShape(const Shape& target,
                                          const Shape& source, bool batch) {
  Shape shape;
  if (!batch) {
    shape = target;
    shape.insert(shape.end(), source.begin(), source.end());
    return shape;
  }
  if (target.empty() || source.empty() || source[0] != target[0]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a batch Jacobian of a target of shape ", ShapeString(target),
        " for a source of shape ", ShapeString(source),
        ": both need the same first (batch) dimension"));
  }
  shape.push_back(target[0]);
  shape.insert(shape.end(), target.begin() + 1, target.end());
  shape.insert(shape.end(), source.begin() + 1, source.end());
  return shape;
}

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
