// The op registry: one OpDef per op, each built by one builder expression
// that holds everything about the op (arity, attrs, forward kernel, backward
// function and the elision info: which inputs and outputs the backward reads).
//
//   registry.Add(Op("Exp")
//       .Inputs({"x"}).Outputs({"y"})
//       .Forward(ExpKernel)
//       // dx = dy * y
//       .Backward([](GradContext& g) { g.SetGrad(0, g.Mul(g.Grad(0),
//                                                          g.Output(0))); })
//       .SavesOutputs({0}));
//
// The tape keeps exactly the declared tensors; GradContext refuses to hand a
// backward one it did not declare, so the declaration cannot drift from the
// code. The op families (core/ops/) fill a registry through explicit calls;
// DefaultRegistry() (core/ops/ops.h) holds them all.
#ifndef GRADTAPE_CORE_REGISTRY_OP_REGISTRY_H_
#define GRADTAPE_CORE_REGISTRY_OP_REGISTRY_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/registry/fused_loop.h"
#include "core/registry/strided_matmul.h"
#include "core/tensor/attrs.h"
#include "core/tensor/tensor.h"

namespace gradtape {

class GradContext;
class JvpContext;
struct OpDef;

using Tensors = absl::InlinedVector<Tensor, 2>;

// What a forward kernel sees. Inputs have been checked for arity, attrs for
// names and types (defaults filled in); dtypes and shapes are the kernel's to
// check, with the error helpers below so messages all name the op.
class KernelContext {
 public:
  KernelContext(const OpDef& op, absl::Span<const Tensor> inputs,
                const AttrMap& attrs, Tensors* outputs);

  const OpDef& op() const { return op_; }
  const Tensor& input(int i) const { return inputs_[i]; }
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  const AttrMap& attrs() const { return attrs_; }
  void set_output(int i, Tensor t) { (*outputs_)[i] = std::move(t); }

  // INVALID_ARGUMENT "<op>: <pieces...>".
  template <typename... Args>
  absl::Status InvalidArgument(const Args&... pieces) const {
    return absl::InvalidArgumentError(absl::StrCat(OpName(), ": ", pieces...));
  }
  // OK, or `status` with "<op>: " before its message (a kernel helper's
  // failure, e.g. a cancelled Gemm, named after the op).
  absl::Status Annotate(const absl::Status& status) const;
  // Checks input i has a floating dtype / the dtype of input j / rank r.
  absl::Status RequireFloat(int i) const;
  absl::Status RequireNumeric(int i) const;
  absl::Status RequireSameDType(int i, int j) const;
  absl::Status RequireRank(int i, int rank) const;
  absl::Status RequireIndexDType(int i) const;  // int32 or int64

 private:
  absl::string_view OpName() const;
  std::string InputName(int i) const;

  const OpDef& op_;
  absl::Span<const Tensor> inputs_;
  const AttrMap& attrs_;
  Tensors* outputs_;
};

using ForwardFn = std::function<absl::Status(KernelContext&)>;
// Builds the input gradients from output gradients with registered ops.
using BackwardFn = std::function<void(GradContext&)>;
// Forward mode: builds the output tangents from the input tangents (and the
// op's inputs and outputs) with registered ops (core/autodiff/forward_mode.h).
using JvpFn = std::function<void(JvpContext&)>;

// How an output's dtype follows from the op's input dtypes and attrs,
// declared at the op's registration (Op::OutputDType) and served by ListOps,
// so a client knows every output's dtype without asking for it.
// tests/core/ops/output_dtype_test.cc checks each rule against what the
// kernel produces for every op sample.
struct DTypeRule {
  enum class Kind {
    kSameAsInput,     // the dtype of input `input`
    kFromAttr,        // the value of the type attr `attr`
    kFixed,           // `dtype`
    kRealOfInput,     // input `input`'s real dtype (complex64 -> float32,
                      // complex128 -> float64, real dtypes as they are)
    kComplexOfInput,  // input `input`'s complex dtype (float32 ->
                      // complex64, float64 -> complex128)
  };
  Kind kind = Kind::kSameAsInput;
  int input = 0;                  // kSameAsInput, kRealOfInput, kComplexOfInput
  std::string attr;               // kFromAttr
  DType dtype = DType::kInvalid;  // kFixed

  static DTypeRule SameAsInput(int i) { return {Kind::kSameAsInput, i}; }
  static DTypeRule FromAttr(std::string name) {
    return {Kind::kFromAttr, 0, std::move(name)};
  }
  static DTypeRule Fixed(DType d) { return {Kind::kFixed, 0, "", d}; }
  static DTypeRule RealOfInput(int i) { return {Kind::kRealOfInput, i}; }
  static DTypeRule ComplexOfInput(int i) { return {Kind::kComplexOfInput, i}; }

  // The dtype for an op run with inputs of `input_dtypes` and `attrs`
  // (defaults filled in); kInvalid when the rule does not apply (no such
  // input or attr, the complex dtype of a non-floating dtype) or leaves the
  // dtype open (a type attr left at kInvalid: ReadVariableOp without its
  // dtype gives the variable's).
  DType Apply(absl::Span<const DType> input_dtypes, const AttrMap& attrs) const;
  // "same as input 0", "attr DstT", "bool", "real of input 0", ...
  std::string DebugString() const;
};

struct AttrSpec {
  std::string name;
  AttrType type;
  std::optional<AttrValue> default_value;  // nullopt: required
};

// List arguments (TensorFlow's `values: N * T`, `output: num * T`).
//
// A registration declares at most one list input, `.ListInput(i, "N")`:
// declared input i stands for attr N's value of inputs, named
// <name>_0 .. <name>_{N-1}; and, for an op with one declared output,
// `.ListOutput("num")`: that output stands for attr num's value of outputs,
// named <name>_0 ... Every other declaration of the op (SavesInputs,
// SavesOutputs, NonDifferentiableInputs, ResourceInputs, AnyKindInputs,
// OutputDType's input) refers to DECLARED positions; a declared list
// position expands to every element of the list (OutputDType's
// SameAsInput(i) of the list input means its first element).
//
// At execution the op is instantiated for its attrs (OpDef::Instantiate)
// into a flat OpDef with exactly those expanded per-index vectors, so the
// tape, the gradient engine, GradContext (flat indices: g.Grad(k) is output
// k of the list), forward mode and the elision checks see a fixed-arity op.
// An instance is owned by the tape entries that record it (a shared_ptr),
// so there is no cache to grow. A list length is bounded by
// kMaxListLength and must match the inputs actually given, which is checked
// before anything is expanded.
struct ListArg {
  int index = -1;    // declared input position; -1: none (ListInput only)
  std::string attr;  // the int attr holding the length; empty: no list
  int min_length = 0;
  bool present() const { return !attr.empty(); }
};

struct OpDef {
  std::string name;
  std::vector<std::string> input_names;
  std::vector<std::string> output_names;
  std::vector<AttrSpec> attrs;
  // One per output (default: input 0's dtype).
  std::vector<DTypeRule> output_dtypes;
  ForwardFn forward;
  BackwardFn backward;  // empty: not differentiable, or BackwardUnsupported
  // Non-empty: the op is recorded, but its backward is deliberately missing
  // (a gradient through it fails with UNIMPLEMENTED quoting this reason;
  // `backward` is empty).
  std::string backward_unsupported;
  // Forward-mode rule; empty: forward mode uses the double-VJP fallback.
  JvpFn jvp;
  // Elision info: indices of the inputs / outputs the backward reads.
  std::vector<int> saved_inputs;
  std::vector<int> saved_outputs;
  // Per index: true if the tape keeps that tensor (derived from the above).
  std::vector<bool> input_saved;
  std::vector<bool> output_saved;
  // Inputs that never get a gradient (labels, indices).
  std::vector<bool> input_differentiable;
  // Per input: whether it is a variable handle (kResource), a value, or
  // either (Identity). The executor refuses the other kind, and a dtype
  // attr never takes kResource, so no kernel sees a handle it would treat
  // as 8 bytes of data.
  enum class InputKind { kValue, kHandle, kAny };
  std::vector<InputKind> input_kinds;
  std::string summary;  // one line, shown by ListOps
  int index = -1;       // position in the registry
  // The list arguments (see ListArg); absent in an instance.
  ListArg list_input;
  ListArg list_output;
  static constexpr int64_t kMaxListLength = 65536;

  // Declared arity for a registered op with lists, flat for an instance
  // (and for every op without lists).
  int num_inputs() const { return static_cast<int>(input_names.size()); }
  int num_outputs() const { return static_cast<int>(output_names.size()); }
  // Recorded on tapes: it has a backward, or declares it unsupported.
  bool differentiable() const {
    return static_cast<bool>(backward) || !backward_unsupported.empty();
  }
  // Has a backward (false for BackwardUnsupported: a gradient through it
  // fails, see GradContext::RunBackward).
  bool backward_supported() const { return static_cast<bool>(backward); }
  const AttrSpec* FindAttr(absl::string_view attr_name) const;

  // Checks `given` against the declared attrs and returns it with defaults
  // filled in. INVALID_ARGUMENT names the op and the attr.
  absl::Status ResolveAttrs(AttrMap* given) const;
  // Checks that exactly the declared inputs are variable handles.
  // INVALID_ARGUMENT names the op, the input and its dtype.
  absl::Status CheckInputKinds(absl::Span<const Tensor> inputs) const;

  bool has_lists() const {
    return list_input.present() || list_output.present();
  }
  // The flat number of inputs and outputs for `attrs` (defaults filled in
  // here): the declared ones for an op without lists. INVALID_ARGUMENT
  // naming the op and the attr for a list length out of
  // [min_length, kMaxListLength] or not an int.
  struct Arity {
    int inputs = 0;
    int outputs = 0;
  };
  absl::StatusOr<Arity> FlatArity(const AttrMap& attrs) const;
  // The flat OpDef of this op for resolved `attrs`, given `num_inputs`
  // inputs (INVALID_ARGUMENT naming the op when that is not the flat count:
  // checked before expanding). For an op without lists, a non-owning
  // pointer to this OpDef.
  absl::StatusOr<std::shared_ptr<const OpDef>> Instantiate(
      const AttrMap& attrs, int num_inputs) const;
};

// One builder expression per op.
class Op {
 public:
  explicit Op(std::string name);

  Op& Inputs(std::vector<std::string> names);
  Op& Outputs(std::vector<std::string> names);
  Op& Attr(std::string name, AttrType type);  // required attr
  Op& Attr(std::string name, AttrValue default_value);
  // Every output's dtype (the default: SameAsInput(0); an op without inputs
  // must declare it).
  Op& OutputDType(DTypeRule rule);
  // One rule per output, in order, for ops whose outputs differ in dtype
  // (TopKV2's indices, MaxPoolWithArgmax's argmax).
  Op& OutputDTypes(std::vector<DTypeRule> rules);
  Op& Forward(ForwardFn fn);
  Op& Backward(BackwardFn fn);
  Op& SavesInputs(std::vector<int> indices);
  Op& SavesOutputs(std::vector<int> indices);
  Op& NonDifferentiableInputs(std::vector<int> indices);
  // The inputs that are variable handles (VarHandleOp's output).
  Op& ResourceInputs(std::vector<int> indices);
  // The inputs that may be a handle or a value (ops that only pass a tensor
  // on, such as Identity).
  Op& AnyKindInputs(std::vector<int> indices);
  // Declares that the op has no gradient (every op says one or the other).
  // Its outputs carry no gradient: the op is not recorded, so a gradient
  // through it is None (or zeros). For comparisons, shapes, indices, ...
  Op& NotDifferentiable();
  // Declares that the op is differentiable in maths but gradtape has no
  // backward for it (typically a helper op that a backward runs, whose own
  // gradient is not written): the op IS recorded when an input is watched,
  // and a gradient through it fails with UNIMPLEMENTED naming the op and
  // `reason` (plus the op's "message" attr when it has one), instead of a
  // silently wrong None. Saves nothing.
  Op& BackwardUnsupported(std::string reason);
  // The forward-mode rule (optional; see core/autodiff/forward_mode.h).
  Op& Jvp(JvpFn fn);
  Op& Summary(std::string text);
  // Declared input `index` is a list of attr `length_attr`'s value of
  // inputs (an int attr of the op, at least `min_length`; see ListArg).
  Op& ListInput(int index, std::string length_attr, int min_length = 1);
  // The op's one declared output is a list of attr `length_attr`'s value of
  // outputs (at least `min_length`).
  Op& ListOutput(std::string length_attr, int min_length = 0);

 private:
  friend class OpRegistry;
  OpDef def_;
  bool declared_not_differentiable_ = false;
  bool declared_backward_ = false;
  std::optional<DTypeRule> output_dtype_;
  std::optional<std::vector<DTypeRule>> output_dtypes_;
  std::vector<int> non_differentiable_inputs_;
  std::vector<int> resource_inputs_;
  std::vector<int> any_kind_inputs_;
};

class OpRegistry {
 public:
  OpRegistry() = default;
  OpRegistry(const OpRegistry&) = delete;
  OpRegistry& operator=(const OpRegistry&) = delete;

  // Aborts with a message on a malformed registration (a programming error:
  // duplicate name, saved index out of range, neither Backward nor
  // NotDifferentiable, ...).
  void Add(Op op);
  const OpDef* Find(absl::string_view name) const;
  // In registration order.
  const std::vector<std::unique_ptr<OpDef>>& ops() const { return ops_; }

  // The kernel of fused elementwise loops (core/registry/fused_loop.h), set
  // with the ops; null: plans fuse nothing.
  FusedLoopKernel fused_loop_kernel() const { return fused_loop_kernel_; }
  void set_fused_loop_kernel(FusedLoopKernel kernel) {
    fused_loop_kernel_ = kernel;
  }
  // The kernel of strided matrix products (core/registry/strided_matmul.h),
  // set with the ops; null: plans fold no layouts into products.
  StridedMatMulKernel strided_matmul_kernel() const {
    return strided_matmul_kernel_;
  }
  void set_strided_matmul_kernel(StridedMatMulKernel kernel) {
    strided_matmul_kernel_ = kernel;
  }

 private:
  std::vector<std::unique_ptr<OpDef>> ops_;
  FusedLoopKernel fused_loop_kernel_ = nullptr;
  StridedMatMulKernel strided_matmul_kernel_ = nullptr;
  absl::flat_hash_map<std::string, const OpDef*> by_name_;
};

}  // namespace gradtape

#endif  // GRADTAPE_CORE_REGISTRY_OP_REGISTRY_H_
