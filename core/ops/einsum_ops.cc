// Einsum (see core/ops/einsum.h): the equation parser, the forward and the
// op, whose backward is TensorFlow's _EinsumGrad in Einsum, Sum, Reshape
// and BroadcastTo (so it has second order).
//
// The forward brings each operand to a canonical layout with one strided
// pass (Gather: a repeated label walks the diagonal, a label in neither the
// output nor the other operand is summed, the rest is transposed and
// broadcast), then contracts two operands with one Gemm per batch element:
// a [batch, free_a, contracted] times b [batch, contracted, free_b], and
// lays the product out in the output's label order with a last Gather.
#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/autodiff/grad_context.h"
#include "core/base/status_macros.h"
#include "core/ops/einsum.h"
#include "core/ops/gemm.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"

namespace gradtape {
namespace {

constexpr int kEllipsis = -1;

template <typename... Args>
absl::Status EinsumError(absl::string_view equation, const Args&... pieces) {
  return absl::InvalidArgumentError(
      absl::StrCat("Einsum: ", pieces..., " (equation \"", equation, "\")"));
}

// The subscripts of one operand or of the output: letters, and kEllipsis
// for "..." (at most one).
absl::StatusOr<std::vector<int>> ParseSubscripts(absl::string_view s,
                                                 absl::string_view equation,
                                                 absl::string_view what) {
  std::vector<int> out;
  bool ellipsis = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (std::isalpha(c)) {
      out.push_back(c);
    } else if (s.substr(i, 3) == "...") {
      if (ellipsis) {
        return EinsumError(equation, what, " \"", s, "\" has two ellipses");
      }
      ellipsis = true;
      out.push_back(kEllipsis);
      i += 2;
    } else {
      return EinsumError(equation, what, " \"", s, "\" has '", s.substr(i, 1),
                         "': subscripts are letters and \"...\"");
    }
  }
  return out;
}

int NamedCount(const std::vector<int>& subscripts) {
  return static_cast<int>(std::count_if(subscripts.begin(), subscripts.end(),
                                        [](int l) { return l != kEllipsis; }));
}

// Expands the ellipsis of `subscripts` into `ellipsis_rank` labels, right
// aligned in a broadcast ellipsis of rank `total`.
std::vector<int> ExpandEllipsis(const std::vector<int>& subscripts,
                                int ellipsis_rank, int total) {
  std::vector<int> labels;
  for (int l : subscripts) {
    if (l != kEllipsis) {
      labels.push_back(l);
      continue;
    }
    for (int k = total - ellipsis_rank; k < total; ++k) {
      labels.push_back(EinsumEquation::kEllipsisLabel + k);
    }
  }
  return labels;
}

// Records the dims of operand i in eq.sizes: a named label's dims must be
// equal, an ellipsis label's broadcast.
absl::Status RecordSizes(absl::string_view equation, int i, const Shape& shape,
                         EinsumEquation& eq) {
  const std::vector<int>& labels = eq.inputs[i];
  for (size_t axis = 0; axis < labels.size(); ++axis) {
    const int l = labels[axis];
    const int64_t dim = shape[axis];
    int64_t& size = eq.sizes[l];
    if (l < EinsumEquation::kEllipsisLabel) {
      if (size >= 0 && size != dim) {
        return EinsumError(equation, "label '", std::string(1, char(l)),
                           "' is ", size, " and ", dim, " (operand ", i,
                           " has shape ", ShapeString(shape), ")");
      }
      size = dim;
    } else if (size < 0 || size == 1) {
      size = dim;
    } else if (dim != 1 && dim != size) {
      return EinsumError(equation, "the ellipsis dims of operand ", i, " ",
                         ShapeString(shape), " do not broadcast with ", size);
    }
  }
  return absl::OkStatus();
}

// The output labels: every one must be in an operand; one may repeat
// (inflate, see core/ops/einsum.h).
absl::Status ParseOutput(absl::string_view equation, absl::string_view rhs,
                         int ellipsis_total, EinsumEquation& eq) {
  ASSIGN_OR_RETURN(std::vector<int> sub,
                   ParseSubscripts(rhs, equation, "the output"));
  if (ellipsis_total > 0 && NamedCount(sub) == static_cast<int>(sub.size())) {
    return EinsumError(equation, "the operands have ", ellipsis_total,
                       " broadcast dims but the output has no \"...\"");
  }
  eq.output = ExpandEllipsis(sub, ellipsis_total, ellipsis_total);
  for (int l : eq.output) {
    if (l < EinsumEquation::kEllipsisLabel && eq.sizes[l] < 0) {
      return EinsumError(equation, "output label '", std::string(1, char(l)),
                         "' is in no operand");
    }
    eq.output_shape.push_back(eq.sizes[l]);
  }
  return absl::OkStatus();
}

// Row-major strides of `shape`, summed per label (a repeated label walks
// the diagonal); 0 along a dim of 1 (broadcast).
std::vector<int64_t> LabelStrides(const Shape& shape,
                                  const std::vector<int>& labels,
                                  size_t num_labels) {
  std::vector<int64_t> strides(num_labels, 0);
  const Shape row = RowMajorStrides(shape);
  for (size_t axis = 0; axis < labels.size(); ++axis) {
    if (shape[axis] != 1) strides[labels[axis]] += row[axis];
  }
  return strides;
}

// out (row-major over the labels `keep`) = the sum over the labels `sum` of
// `in`, whose axes carry `labels`. out is zero-filled.
template <typename T>
void Gather(const Tensor& in, const std::vector<int>& labels,
            const std::vector<int>& keep, const std::vector<int>& sum,
            const std::vector<int64_t>& sizes, Tensor& out) {
  const std::vector<int64_t> strides =
      LabelStrides(in.shape(), labels, sizes.size());
  Shape walk, sa, sb;
  int64_t summed = 1;
  for (int l : keep) walk.push_back(sizes[l]);
  for (int l : sum) {
    walk.push_back(sizes[l]);
    summed *= sizes[l];
  }
  for (int l : keep) sa.push_back(strides[l]);
  for (int l : sum) sa.push_back(strides[l]);
  sb.assign(sa.size(), 0);
  const T* pin = in.data<T>();
  T* pout = out.mutable_data<T>();
  ForEachStrided(walk, sa, sb, [&](int64_t o, int64_t a, int64_t) {
    pout[o / summed] += pin[a];
  });
}

bool Contains(const std::vector<int>& v, int l) {
  return std::find(v.begin(), v.end(), l) != v.end();
}

// The distinct labels of `labels` for which keep(label) is true, in order.
template <typename Pred>
std::vector<int> Select(const std::vector<int>& labels, Pred keep) {
  std::vector<int> out;
  for (int l : labels) {
    if (keep(l) && !Contains(out, l)) out.push_back(l);
  }
  return out;
}

Shape SizesOf(const std::vector<int>& labels, const EinsumEquation& eq) {
  Shape shape;
  for (int l : labels) shape.push_back(eq.sizes[l]);
  return shape;
}

std::vector<int> Concat(std::initializer_list<std::vector<int>> parts) {
  std::vector<int> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// The output: `in` (axes labelled `labels`) summed over `sum` and laid out
// in the output's label order. A label repeated in the output (TensorFlow's
// inflate, "i->ii": the gradient of a diagonal) puts the values on that
// diagonal and zeros elsewhere.
template <typename T>
absl::StatusOr<Tensor> Place(const KernelContext& ctx, const EinsumEquation& eq,
                             const Tensor& in, const std::vector<int>& labels,
                             const std::vector<int>& sum) {
  ASSIGN_OR_RETURN(Tensor out, Allocate(ctx, in.dtype(), eq.output_shape));
  const std::vector<int> distinct = Select(eq.output, [](int) { return true; });
  if (distinct.size() == eq.output.size()) {
    Gather<T>(in, labels, eq.output, sum, eq.sizes, out);
    return out;
  }
  ASSIGN_OR_RETURN(Tensor compact,
                   Allocate(ctx, in.dtype(), SizesOf(distinct, eq)));
  Gather<T>(in, labels, distinct, sum, eq.sizes, compact);
  const std::vector<int64_t> strides =
      LabelStrides(eq.output_shape, eq.output, eq.sizes.size());
  Shape walk = SizesOf(distinct, eq), sa, sb(distinct.size(), 0);
  for (int l : distinct) sa.push_back(strides[l]);
  const T* pc = compact.data<T>();
  T* pout = out.mutable_data<T>();
  ForEachStrided(walk, sa, sb,
                 [&](int64_t o, int64_t a, int64_t) { pout[a] = pc[o]; });
  return out;
}

// One operand: the output labels kept, every other label summed.
template <typename T>
absl::StatusOr<Tensor> UnaryEinsum(const KernelContext& ctx,
                                   const EinsumEquation& eq, const Tensor& x) {
  const std::vector<int> sum =
      Select(eq.inputs[0], [&](int l) { return !Contains(eq.output, l); });
  return Place<T>(ctx, eq, x, eq.inputs[0], sum);
}

// Two operands: see the file comment.
template <typename T>
absl::StatusOr<Tensor> BinaryEinsum(const KernelContext& ctx,
                                    const EinsumEquation& eq, const Tensor& a,
                                    const Tensor& b) {
  const std::vector<int>&la = eq.inputs[0], &lb = eq.inputs[1], &lo = eq.output;
  auto in_a = [&](int l) { return Contains(la, l); };
  auto in_b = [&](int l) { return Contains(lb, l); };
  auto in_o = [&](int l) { return Contains(lo, l); };
  const std::vector<int> batch =
      Select(lo, [&](int l) { return in_a(l) && in_b(l); });
  const std::vector<int> free_a = Select(lo, [&](int l) { return !in_b(l); });
  const std::vector<int> free_b = Select(lo, [&](int l) { return !in_a(l); });
  const std::vector<int> contracted =
      Select(la, [&](int l) { return in_b(l) && !in_o(l); });
  const std::vector<int> sum_a =
      Select(la, [&](int l) { return !in_b(l) && !in_o(l); });
  const std::vector<int> sum_b =
      Select(lb, [&](int l) { return !in_a(l) && !in_o(l); });
  const std::vector<int> ka = Concat({batch, free_a, contracted});
  const std::vector<int> kb = Concat({batch, contracted, free_b});
  const std::vector<int> kc = Concat({batch, free_a, free_b});
  ASSIGN_OR_RETURN(Tensor ga, Allocate(ctx, a.dtype(), SizesOf(ka, eq)));
  ASSIGN_OR_RETURN(Tensor gb, Allocate(ctx, a.dtype(), SizesOf(kb, eq)));
  ASSIGN_OR_RETURN(Tensor gc, Allocate(ctx, a.dtype(), SizesOf(kc, eq)));
  Gather<T>(a, la, ka, sum_a, eq.sizes, ga);
  Gather<T>(b, lb, kb, sum_b, eq.sizes, gb);
  const int64_t nb = NumElements(SizesOf(batch, eq));
  const int64_t m = NumElements(SizesOf(free_a, eq));
  const int64_t n = NumElements(SizesOf(free_b, eq));
  const int64_t k = NumElements(SizesOf(contracted, eq));
  for (int64_t i = 0; i < nb; ++i) {
    RETURN_IF_ERROR(ctx.Annotate(Gemm<T>(
        false, false, m, n, k, ga.data<T>() + i * m * k, k,
        gb.data<T>() + i * k * n, n, gc.mutable_data<T>() + i * m * n, n)));
  }
  return Place<T>(ctx, eq, gc, kc, {});
}

}  // namespace

absl::StatusOr<EinsumEquation> ParseEinsumEquation(
    absl::string_view equation, absl::Span<const Shape> shapes) {
  const size_t arrow = equation.find("->");
  if (arrow == absl::string_view::npos ||
      equation.find("->", arrow + 2) != absl::string_view::npos) {
    return EinsumError(equation,
                       "the equation needs exactly one \"->\" before its "
                       "output subscripts (\"ij,jk->ik\", not \"ij,jk\")");
  }
  const std::vector<absl::string_view> lhs =
      absl::StrSplit(equation.substr(0, arrow), ',');
  if (shapes.size() != 1 && shapes.size() != 2) {
    return EinsumError(equation, "takes 1 or 2 inputs, got ", shapes.size());
  }
  if (lhs.size() != shapes.size()) {
    return EinsumError(equation, lhs.size(), " operand subscripts for ",
                       shapes.size(), " inputs");
  }
  std::vector<std::vector<int>> subs;
  std::vector<int> ellipsis_rank;
  int total = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    ASSIGN_OR_RETURN(
        subs.emplace_back(),
        ParseSubscripts(lhs[i], equation, absl::StrCat("operand ", i)));
    const int named = NamedCount(subs[i]);
    const bool has_ellipsis = static_cast<int>(subs[i].size()) > named;
    const int rank = static_cast<int>(shapes[i].size());
    if (rank < named || (!has_ellipsis && rank != named)) {
      return EinsumError(equation, "operand ", i, " \"", lhs[i], "\" has ",
                         named, " labels", has_ellipsis ? " and \"...\"" : "",
                         " for shape ", ShapeString(shapes[i]));
    }
    ellipsis_rank.push_back(rank - named);
    total = std::max(total, rank - named);
  }
  EinsumEquation eq;
  eq.sizes.assign(EinsumEquation::kEllipsisLabel + total, -1);
  for (size_t i = 0; i < shapes.size(); ++i) {
    eq.inputs.push_back(ExpandEllipsis(subs[i], ellipsis_rank[i], total));
    RETURN_IF_ERROR(RecordSizes(equation, static_cast<int>(i), shapes[i], eq));
  }
  RETURN_IF_ERROR(ParseOutput(equation, equation.substr(arrow + 2), total, eq));
  return eq;
}

absl::StatusOr<Tensor> EinsumForward(const KernelContext& ctx,
                                     absl::Span<const Tensor> inputs) {
  const std::string& equation = ctx.attrs().Get<std::string>("equation");
  std::vector<Shape> shapes;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const DType dtype = inputs[i].dtype();
    if (!(IsFloating(dtype) || IsComplex(dtype)) ||
        dtype != inputs[0].dtype()) {
      return ctx.InvalidArgument(
          "inputs must all have one float or complex dtype, input ", i, " is ",
          inputs[i].DebugString());
    }
    shapes.push_back(inputs[i].shape());
  }
  ASSIGN_OR_RETURN(EinsumEquation eq, ParseEinsumEquation(equation, shapes));
  bool empty = false;
  for (const Tensor& t : inputs) empty = empty || t.num_elements() == 0;
  if (empty) return Allocate(ctx, inputs[0].dtype(), eq.output_shape);
  absl::StatusOr<Tensor> out;
  DispatchInexact(inputs[0].dtype(), [&](auto zero) {
    using T = decltype(zero);
    out = inputs.size() == 1 ? UnaryEinsum<T>(ctx, eq, inputs[0])
                             : BinaryEinsum<T>(ctx, eq, inputs[0], inputs[1]);
  });
  return out;
}

namespace {

absl::Status EinsumKernel(KernelContext& ctx) {
  std::vector<Tensor> inputs;
  for (int i = 0; i < ctx.num_inputs(); ++i) inputs.push_back(ctx.input(i));
  ASSIGN_OR_RETURN(Tensor out, EinsumForward(ctx, inputs));
  ctx.set_output(0, std::move(out));
  return absl::OkStatus();
}

// The subscripts of an equation: the operands' and the output's, as text.
struct EinsumSubscripts {
  std::vector<std::string> inputs;
  std::string output;
};

EinsumSubscripts SplitEquation(const std::string& equation) {
  const size_t arrow = equation.find("->");
  EinsumSubscripts s;
  s.inputs = absl::StrSplit(equation.substr(0, arrow), ',');
  s.output = equation.substr(arrow + 2);
  return s;
}

// The letters of `subs` that are in none of `others` (TensorFlow's reduced
// label set), in order, each once.
std::string ReducedLabels(const std::string& subs,
                          std::initializer_list<absl::string_view> others) {
  std::string out;
  for (char c : subs) {
    if (c == '.' || absl::StrContains(out, std::string(1, c))) continue;
    bool elsewhere = false;
    for (absl::string_view o : others)
      elsewhere = elsewhere || o.find(c) != o.npos;
    if (!elsewhere) out.push_back(c);
  }
  return out;
}

// TensorFlow's _GetGradReduced: the gradient for an operand `subs` of
// `shape` from `grad` (subscripts `grad_subs`: subs without the labels
// `reduced`): grad broadcast along the reduced labels' dims, prepended,
// then Einsum(reduced + grad_subs -> subs).
Tensor GradReduced(GradContext& g, Tensor grad, const std::string& grad_subs,
                   const std::string& subs, const Shape& shape,
                   const std::string& reduced) {
  if (reduced.empty()) {
    if (grad_subs == subs) return grad;
    return g.Op("Einsum", {grad},
                {{"equation", grad_subs + "->" + subs}, {"N", int64_t{1}}});
  }
  // The dims of the reduced labels, from their first axis in subs (no
  // reduced label is in the ellipsis, which comes first or later).
  Shape ones(reduced.size(), 1), full;
  const size_t dots = subs.find("...");
  const int ellipsis_rank =
      static_cast<int>(shape.size()) -
      static_cast<int>(subs.size() - (dots == subs.npos ? 0 : 3));
  for (char c : reduced) {
    const size_t at = subs.find(c);
    const int axis = static_cast<int>(at) -
                     (dots != subs.npos && at > dots ? 3 - ellipsis_rank : 0);
    full.push_back(shape[axis]);
  }
  const Shape& gshape = grad.shape();
  ones.insert(ones.end(), gshape.begin(), gshape.end());
  full.insert(full.end(), gshape.begin(), gshape.end());
  Tensor wide =
      g.Op("BroadcastTo", {g.Reshape(grad, ones)},
           {{"shape", std::vector<int64_t>(full.begin(), full.end())}});
  return g.Op(
      "Einsum", {wide},
      {{"equation", reduced + grad_subs + "->" + subs}, {"N", int64_t{1}}});
}

// The gradient computed for an operand with an ellipsis has the broadcast
// ellipsis dims; sums it back to the operand's (TensorFlow's reduction
// after broadcast_gradient_args).
Tensor SumEllipsis(GradContext& g, Tensor grad, const std::string& subs,
                   const Shape& shape) {
  const size_t dots = subs.find("...");
  const Shape& gshape = grad.shape();
  if (dots == subs.npos || gshape == shape) return grad;
  const int named = static_cast<int>(subs.size()) - 3;
  const int total = static_cast<int>(gshape.size()) - named;
  const int own = static_cast<int>(shape.size()) - named;
  const int start = static_cast<int>(dots);  // no label repeats before it
  std::vector<int64_t> axes;
  for (int k = 0; k < total; ++k) {
    const int own_k = k - (total - own);
    if (own_k < 0 || shape[start + own_k] != gshape[start + k]) {
      axes.push_back(start + k);
    }
  }
  Tensor summed = g.Op("Sum", {grad}, {{"axis", axes}, {"keep_dims", true}});
  return g.Reshape(summed, shape);
}

// TensorFlow's _EinsumGrad: for one operand, Einsum(dy: output -> input)
// (through GradReduced for summed labels); for two, the gradient of x is
// Einsum(dy, conj(y): output, y -> x without its reduced labels), then
// GradReduced and the ellipsis sums; the same for y.
void EinsumBackward(GradContext& g) {
  const EinsumSubscripts s =
      SplitEquation(g.attrs().Get<std::string>("equation"));
  Tensor dy = g.Grad(0);
  if (g.num_inputs() == 1) {
    const std::string reduced = ReducedLabels(s.inputs[0], {s.output});
    g.SetGrad(
        0, GradReduced(g, dy, s.output, s.inputs[0], g.InputShape(0), reduced));
    return;
  }
  for (int i = 0; i < 2; ++i) {
    if (!g.NeedsGrad(i)) continue;
    const std::string& subs = s.inputs[i];
    const std::string& other = s.inputs[1 - i];
    const std::string reduced = ReducedLabels(subs, {s.output, other});
    std::string left;
    for (char c : subs) {
      if (reduced.find(c) == reduced.npos) left.push_back(c);
    }
    // An operand without "..." against broadcast dims: keep them in the
    // product ("..." first), then sum them.
    const bool lift = s.output.find("...") != std::string::npos &&
                      subs.find("...") == std::string::npos;
    Tensor grad = g.Op("Einsum", {dy, g.Conj(g.Input(1 - i))},
                       {{"equation", s.output + "," + other + "->" +
                                         (lift ? "..." : "") + left},
                        {"N", int64_t{2}}});
    if (!g.ok()) return;
    if (lift) {
      const int e = static_cast<int>(g.OutputShape(0).size()) -
                    static_cast<int>(s.output.size() - 3);
      std::vector<int64_t> axes;
      for (int k = 0; k < e; ++k) axes.push_back(k);
      if (!axes.empty()) grad = g.Op("Sum", {grad}, {{"axis", axes}});
    }
    grad = GradReduced(g, grad, left, subs, g.InputShape(i), reduced);
    if (!g.ok()) return;
    g.SetGrad(i, SumEllipsis(g, grad, subs, g.InputShape(i)));
  }
}

}  // namespace

void RegisterEinsumOps(OpRegistry& r) {
  r.Add(Op("Einsum")
            .Inputs({"inputs"})
            .ListInput(0, "N", 1)
            .Outputs({"output"})
            .Attr("equation", AttrType::kString)
            .Attr("N", AttrType::kInt)
            .Forward(EinsumKernel)
            // TensorFlow's _EinsumGrad: Einsum of dy with the other operand
            // (see EinsumBackward)
            .Backward(EinsumBackward)
            .SavesInputs({0})
            .Summary("Einsum of 1 or 2 float or complex operands per equation "
                     "(\"ij,jk->ik\", \"...ij,...jk->...ik\", \"ii->i\", "
                     "\"ij->i\", \"i,j->ij\"; explicit \"->\")"));
}

}  // namespace gradtape
