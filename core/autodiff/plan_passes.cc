#include "core/autodiff/plan_passes.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <variant>

#include "core/registry/fused_loop.h"
#include "core/registry/strided_matmul.h"

namespace gradtape {
namespace {

// A step's list attr, or null.
const std::vector<int64_t>* IntsAttr(const ProgramStep& step,
                                     const char* name) {
  const AttrValue* v = step.attrs.Find(name);
  return v == nullptr ? nullptr : std::get_if<std::vector<int64_t>>(v);
}
std::optional<int64_t> IntAttr(const ProgramStep& step, const char* name) {
  const AttrValue* v = step.attrs.Find(name);
  const int64_t* i = v == nullptr ? nullptr : std::get_if<int64_t>(v);
  return i == nullptr ? std::nullopt : std::optional<int64_t>(*i);
}

// At most this many ops in one loop (each keeps a block of scratch).
constexpr int kMaxLoopOps = 32;

// The dtype of a plan value, if it is known.
std::optional<DType> DTypeOf(const Program& p,
                             const std::vector<std::vector<StepOutput>>& outs,
                             const ProgramRef& ref) {
  switch (ref.kind) {
    case ProgramRef::kParam:
      return p.params[ref.index].dtype;
    case ProgramRef::kConstant:
      return p.constants[ref.index].dtype();
    case ProgramRef::kStep:
      if (ref.index < 0 ||
          ref.output >= static_cast<int>(outs[ref.index].size())) {
        return std::nullopt;
      }
      return outs[ref.index][ref.output].dtype;
    default:
      return std::nullopt;
  }
}

bool IsCast(const ProgramStep& step) { return step.op == "Cast"; }

// A step a loop can run: its code and the loop's dtype (float32 or
// float64: a comparison's inputs', every other op's output).
struct LoopOp {
  FusedLoop::Code code;
  DType dtype;
};

// Step s as a loop op, if it is one: an elementwise float op, a comparison
// of floats, or a Cast of a bool to a float (it joins a loop only after its
// comparison, CollectLoop).
std::optional<LoopOp> LoopCode(const Program& p,
                               const std::vector<std::vector<StepOutput>>& outs,
                               int s) {
  const ProgramStep& step = p.steps[s];
  if (step.kind != ProgramStep::kOp || outs[s].size() != 1) return std::nullopt;
  std::optional<FusedLoop::Code> code = FusedLoop::CodeOf(step.op);
  if (!code || step.inputs.size() != (FusedLoop::IsUnary(*code) ? 1u : 2u)) {
    return std::nullopt;
  }
  auto is_float = [](std::optional<DType> d) {
    return d == DType::kFloat32 || d == DType::kFloat64;
  };
  const std::optional<DType> a = DTypeOf(p, outs, step.inputs[0]);
  if (FusedLoop::IsComparison(*code)) {
    if (!is_float(a) || DTypeOf(p, outs, step.inputs[1]) != a ||
        outs[s][0].dtype != DType::kBool) {
      return std::nullopt;
    }
    return LoopOp{*code, *a};
  }
  // A softmax's loop runs whole rows per block.
  const Shape& shape = outs[s][0].shape;
  if (FusedLoop::IsRowWise(*code) &&
      (shape.empty() || shape.back() > FusedLoop::kMaxRowLength)) {
    return std::nullopt;
  }
  // kCopy: a Cast of a bool, or a BroadcastTo.
  if (!is_float(outs[s][0].dtype) ||
      (*code == FusedLoop::kCopy &&
       a != (IsCast(step) ? DType::kBool : outs[s][0].dtype))) {
    return std::nullopt;
  }
  return LoopOp{*code, outs[s][0].dtype};
}

// How many steps a loop's members may be apart: steps between them that
// read none of them run before the loop.
constexpr int kMaxSkipped = 8;

// `members` (ascending step indices; elementwise, one dtype and shape) as
// one kFused step; `outside[s]`: member s's value is read after the last
// member or is a program output. False if none is (nothing to write).
bool MakeLoop(const Program& p, const std::vector<int>& members,
              const std::vector<bool>& outside, const Shape& shape,
              ProgramStep* fused) {
  auto loop = std::make_shared<FusedLoop>();
  loop->shape = shape;
  std::vector<ProgramRef>& inputs = fused->inputs;
  auto member = [&](const ProgramRef& ref) -> int {
    if (ref.kind != ProgramRef::kStep) return -1;
    auto it = std::find(members.begin(), members.end(), ref.index);
    return it == members.end() ? -1 : static_cast<int>(it - members.begin());
  };
  auto input = [&](const ProgramRef& ref) -> int {
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].kind == ref.kind && inputs[i].index == ref.index &&
          inputs[i].output == ref.output) {
        return static_cast<int>(i);
      }
    }
    return -1;
  };
  for (int s : members) {
    for (const ProgramRef& ref : p.steps[s].inputs) {
      if (member(ref) < 0 && input(ref) < 0) inputs.push_back(ref);
    }
  }
  loop->num_inputs = static_cast<int>(inputs.size());
  auto operand = [&](const ProgramRef& ref) {
    const int m = member(ref);
    return m >= 0 ? loop->num_inputs + m : input(ref);
  };
  for (size_t r = 0; r < members.size(); ++r) {
    const ProgramStep& step = p.steps[members[r]];
    const FusedLoop::Code code = *FusedLoop::CodeOf(step.op);
    const int a = operand(step.inputs[0]);
    loop->ops.push_back(
        {code, a, FusedLoop::IsUnary(code) ? a : operand(step.inputs[1])});
    if (outside[members[r]]) loop->outputs.push_back(static_cast<int>(r));
  }
  fused->kind = ProgramStep::kFused;
  fused->loop = std::move(loop);
  return !fused->loop->outputs.empty();
}

// Drops the skipped steps after the last member (they stay where they are).
void TrimLoop(std::vector<int>* members, std::vector<int>* skipped) {
  while (!skipped->empty() &&
         (members->empty() || skipped->back() > members->back())) {
    skipped->pop_back();
  }
}

// From elementwise step s: the steps of its loop (its own dtype and shape)
// in `members`, and those between them that read none of them (they run
// before the loop) in `skipped`.
void CollectLoop(const Program& plan,
                 const std::vector<std::vector<StepOutput>>& outs, int s,
                 std::vector<int>* members, std::vector<int>* skipped) {
  const int n = static_cast<int>(plan.steps.size());
  const LoopOp first = *LoopCode(plan, outs, s);
  *members = {s};
  skipped->clear();
  auto is_member = [&](const ProgramRef& r) {
    return r.kind == ProgramRef::kStep &&
           std::find(members->begin(), members->end(), r.index) !=
               members->end();
  };
  auto reads_member = [&](int k) {
    return std::any_of(plan.steps[k].inputs.begin(), plan.steps[k].inputs.end(),
                       is_member);
  };
  for (int k = s + 1; k < n && members->size() < kMaxLoopOps; ++k) {
    const std::optional<LoopOp> op = LoopCode(plan, outs, k);
    if (op && op->dtype == first.dtype &&
        outs[k][0].shape == outs[s][0].shape &&
        (!IsCast(plan.steps[k]) || is_member(plan.steps[k].inputs[0]))) {
      members->push_back(k);
    } else if (reads_member(k) || skipped->size() >= kMaxSkipped) {
      break;
    } else {
      skipped->push_back(k);
    }
  }
  TrimLoop(members, skipped);
}

// Ends the loop before its first comparison read after it (or by a
// program output): a comparison's 0/1 never leaves its loop.
void TrimComparisons(const Program& plan, const std::vector<int>& last_reader,
                     std::vector<int>* members, std::vector<int>* skipped) {
  for (size_t r = 0; r < members->size(); ++r) {
    const int m = (*members)[r];
    if (FusedLoop::IsComparison(*FusedLoop::CodeOf(plan.steps[m].op)) &&
        last_reader[m] > members->back()) {
      members->resize(r);
      TrimLoop(members, skipped);
      r = static_cast<size_t>(-1);  // the end moved: check from the start
    }
  }
}

// Replaces elementwise steps of one dtype and output shape
// (FusedLoop::CodeOf), two or more at most kMaxSkipped steps apart, with
// one fused loop, which writes out only the values read after it. The loop
// runs where its last member did; the steps between its members read none
// of them and run before it: every value the loop reads is made before it,
// every value it writes is read after.
void FuseElementwise(Program& plan,
                     std::vector<std::vector<StepOutput>>& outs) {
  const int n = static_cast<int>(plan.steps.size());
  // For each step, the last step that reads its output 0 (n: an output).
  std::vector<int> last_reader(n, -1);
  for (int s = 0; s < n; ++s) {
    for (const ProgramRef& ref : plan.steps[s].inputs) {
      if (ref.kind == ProgramRef::kStep) last_reader[ref.index] = s;
    }
  }
  for (const ProgramRef& ref : plan.outputs) {
    if (ref.kind == ProgramRef::kStep) last_reader[ref.index] = n;
  }
  std::vector<ProgramStep> steps;
  std::vector<std::vector<StepOutput>> new_outs;
  // Old step s, output k -> its reference in the new steps.
  std::vector<std::vector<ProgramRef>> moved(n);
  auto remap = [&](std::vector<ProgramRef>& refs) {
    for (ProgramRef& ref : refs) {
      if (ref.kind == ProgramRef::kStep) ref = moved[ref.index][ref.output];
    }
  };
  auto copy = [&](int m) {
    ProgramStep step = std::move(plan.steps[m]);
    remap(step.inputs);
    const int index = static_cast<int>(steps.size());
    for (size_t k = 0; k < outs[m].size(); ++k) {
      moved[m].push_back(ProgramRef::Step(index, static_cast<int>(k)));
    }
    steps.push_back(std::move(step));
    new_outs.push_back(outs[m]);  // a copy: LoopCode reads outs later
  };
  std::vector<bool> done(n, false), outside(n, false);
  std::vector<int> members, skipped;
  for (int s = 0; s < n; ++s) {
    if (done[s]) continue;
    ProgramStep fused;
    members.clear();
    const std::optional<LoopOp> op = LoopCode(plan, outs, s);
    if (op && !IsCast(plan.steps[s])) {  // a Cast follows its comparison
      CollectLoop(plan, outs, s, &members, &skipped);
      TrimComparisons(plan, last_reader, &members, &skipped);
    }
    for (int m : members) outside[m] = last_reader[m] > members.back();
    if (members.size() < 2 ||
        !MakeLoop(plan, members, outside, outs[s][0].shape, &fused)) {
      copy(s);
      continue;
    }
    for (int k : skipped) copy(k), done[k] = true;
    remap(fused.inputs);
    const int at = static_cast<int>(steps.size());
    int k = 0;
    std::optional<StepOutput> written;  // every one has the loop's
    for (int m : members) {
      if (outside[m] && !written) written = outs[m][0];
      // Read only inside the loop: a reference validation would refuse.
      moved[m] = {outside[m] ? ProgramRef::Step(at, k++)
                             : ProgramRef::Step(-1)};
      done[m] = true;
    }
    new_outs.push_back(std::vector<StepOutput>(k, *written));
    steps.push_back(std::move(fused));
  }
  remap(plan.outputs);
  plan.steps = std::move(steps);
  outs = std::move(new_outs);
}

// The shape of a plan value.
Shape ShapeOfRef(const Program& plan,
                 const std::vector<std::vector<StepOutput>>& outs,
                 const ProgramRef& ref) {
  switch (ref.kind) {
    case ProgramRef::kConstant:
      return plan.constants[ref.index].shape();
    case ProgramRef::kParam:
      return plan.params[ref.index].shape;
    default:
      return outs[ref.index][ref.output].shape;
  }
}

// How often each step output is read, by steps and as a program output.
std::vector<std::vector<int>> CountReads(
    const Program& plan, const std::vector<std::vector<StepOutput>>& outs) {
  std::vector<std::vector<int>> count;
  for (const auto& o : outs) count.emplace_back(o.size(), 0);
  auto read = [&](const ProgramRef& ref) {
    if (ref.kind == ProgramRef::kStep) ++count[ref.index][ref.output];
  };
  for (const ProgramStep& step : plan.steps) {
    for (const ProgramRef& ref : step.inputs) read(ref);
  }
  for (const ProgramRef& ref : plan.outputs) read(ref);
  return count;
}

// -- Reshapes before elementwise steps -------------------------------------

// A Reshape that keeps the last dim, of a float AddV2 / Sub / Mul / RealDiv
// (x op b) that only it reads, where x has the op's shape, is not made by
// an elementwise step, and b is one value or a row of the last dim: the
// Reshape moves before the op, which then has the shape of the steps after
// it and can join their loop (a bias added after a MatMul, then dropout and
// a residual on [b, t, d]). The same pairs of values meet in the op: the
// same bits.
void HoistReshapes(Program& plan, std::vector<std::vector<StepOutput>>& outs) {
  const std::vector<std::vector<int>> count = CountReads(plan, outs);
  for (int r = 0; r < static_cast<int>(plan.steps.size()); ++r) {
    ProgramStep& reshape = plan.steps[r];
    if (reshape.kind != ProgramStep::kOp || reshape.op != "Reshape" ||
        reshape.inputs.size() != 1 ||
        reshape.inputs[0].kind != ProgramRef::kStep) {
      continue;
    }
    const int x = reshape.inputs[0].index;
    ProgramStep& op = plan.steps[x];
    const std::optional<LoopOp> code = LoopCode(plan, outs, x);
    if (!code || FusedLoop::IsUnary(code->code) ||
        FusedLoop::IsComparison(code->code) || count[x][0] != 1) {
      continue;
    }
    // Only when the op would start a loop: from an elementwise step it
    // would leave that step's loop instead.
    const ProgramRef& a = op.inputs[0];
    if (a.kind == ProgramRef::kStep && LoopCode(plan, outs, a.index)) {
      continue;
    }
    const Shape& from = outs[x][0].shape;
    const Shape& to = outs[r][0].shape;
    const Shape b = ShapeOfRef(plan, outs, op.inputs[1]);
    if (from.empty() || to.empty() || from.back() != to.back() ||
        ShapeOfRef(plan, outs, op.inputs[0]) != from ||
        !(b.empty() || (b.size() == 1 && (b[0] == 1 || b[0] == to.back())))) {
      continue;
    }
    // x: Reshape(a); r: op(x, b), with r's shape.
    std::swap(op.op, reshape.op);
    std::swap(op.attrs, reshape.attrs);
    const ProgramRef b_ref = op.inputs[1];
    op.inputs.resize(1);
    reshape.inputs = {ProgramRef::Step(x), b_ref};
    outs[x][0].shape = to;
  }
}

// -- Recomputing a loop's results where another loop reads them ----------

// Each step output's first and last reader (last: plan.steps.size() for a
// program output; -1 for none), and whether a pass has stopped writing it
// (`dead`: erased when the pass ends, EraseDeadOutputs, so that indices
// stay put while it runs and each pass stays linear in the plan's size).
struct Readers {
  std::vector<std::vector<int>> first, last;
  std::vector<std::vector<bool>> dead;
};
Readers FindReaders(const Program& plan,
                    const std::vector<std::vector<StepOutput>>& outs) {
  const int n = static_cast<int>(plan.steps.size());
  Readers r;
  for (int s = 0; s < n; ++s) {
    r.first.emplace_back(outs[s].size(), -1);
    r.last.emplace_back(outs[s].size(), -1);
    r.dead.emplace_back(outs[s].size(), false);
  }
  auto read = [&](const ProgramRef& ref, int s) {
    if (ref.kind != ProgramRef::kStep) return;
    int& first = r.first[ref.index][ref.output];
    if (first < 0) first = s;
    r.last[ref.index][ref.output] = s;
  };
  for (int s = 0; s < n; ++s) {
    for (const ProgramRef& ref : plan.steps[s].inputs) read(ref, s);
  }
  for (const ProgramRef& ref : plan.outputs) read(ref, n);
  return r;
}

bool SameRef(const ProgramRef& a, const ProgramRef& b) {
  return a.kind == b.kind && a.index == b.index && a.output == b.output;
}

// The index of `ref` in a step's `inputs`, appended if it is not there.
int InputOf(std::vector<ProgramRef>& inputs, const ProgramRef& ref) {
  for (size_t x = 0; x < inputs.size(); ++x) {
    if (SameRef(inputs[x], ref)) return static_cast<int>(x);
  }
  inputs.push_back(ref);
  return static_cast<int>(inputs.size()) - 1;
}

// At most this many ops of a producer loop are recomputed in a reader.
constexpr int kMaxRecomputed = 8;

// Loop step j recomputing results of loop step i (i < j) that only j
// reads: which ops of i it runs (`ops`, ascending), and the values it
// reads for them (`leaves`: i's inputs or other results of i, each still
// alive at j, and constants and params).
class Recompute {
 public:
  Recompute(const Program& plan, const Readers& readers, int i, int j)
      : plan_(plan),
        readers_(readers),
        i_(i),
        j_(j),
        producer_(*plan.steps[i].loop) {}

  // The results of i that j reads and only j; then drops those whose ops
  // need a value no longer alive at j. False if none is left, or if the
  // recomputation would read more new full-size tensors than it saves.
  bool Plan(const std::vector<std::vector<StepOutput>>& outs) {
    const std::vector<ProgramRef>& reads = plan_.steps[j_].inputs;
    for (size_t k = 0; k < producer_.outputs.size(); ++k) {
      const ProgramRef ref = ProgramRef::Step(i_, static_cast<int>(k));
      if (!readers_.dead[i_][k] && readers_.first[i_][k] == j_ &&
          readers_.last[i_][k] == j_ &&
          std::any_of(reads.begin(), reads.end(),
                      [&](const ProgramRef& r) { return SameRef(r, ref); })) {
        results_.push_back(static_cast<int>(k));
      }
    }
    while (!results_.empty()) {
      ops_.clear(), leaves_.clear(), leaf_of_.clear();
      auto fails = std::find_if(results_.begin(), results_.end(), [&](int k) {
        return !Need(producer_.outputs[k]);
      });
      if (fails == results_.end()) break;
      results_.erase(fails);  // read as before; a leaf for the others
    }
    const int64_t size = NumElements(*producer_.shape);
    int new_reads = 0;
    for (const ProgramRef& leaf : leaves_) {
      const bool read = std::any_of(reads.begin(), reads.end(),
                                    [&](auto& r) { return SameRef(r, leaf); });
      if (!read && NumElements(ShapeOfRef(plan_, outs, leaf)) == size)
        ++new_reads;
    }
    std::sort(ops_.begin(), ops_.end());
    const int written = static_cast<int>(
        std::count(readers_.dead[i_].begin(), readers_.dead[i_].end(), false));
    return !results_.empty() && static_cast<int>(results_.size()) < written &&
           static_cast<int>(ops_.size()) <= kMaxRecomputed &&
           ops_.size() + plan_.steps[j_].loop->ops.size() <= kMaxLoopOps &&
           new_reads <= static_cast<int>(results_.size());
  }

  const std::vector<int>& results() const { return results_; }
  const std::vector<int>& ops() const { return ops_; }
  const std::vector<ProgramRef>& leaves() const { return leaves_; }
  // Op m of i read as a value j has (a leaf), if it is one.
  const ProgramRef* LeafOp(int m) const {
    auto it = leaf_of_.find(m);
    return it == leaf_of_.end() ? nullptr : &it->second;
  }

 private:
  bool Alive(const ProgramRef& ref) const {
    return ref.kind == ProgramRef::kConstant ||
           ref.kind == ProgramRef::kParam ||
           (ref.kind == ProgramRef::kStep &&
            readers_.last[ref.index][ref.output] >= j_);
  }
  void AddLeaf(const ProgramRef& ref) {
    if (std::none_of(leaves_.begin(), leaves_.end(),
                     [&](auto& l) { return SameRef(l, ref); })) {
      leaves_.push_back(ref);
    }
  }
  // Whether op m of i can run in j: its operands are leaves or such ops.
  bool Need(int m) {
    if (std::find(ops_.begin(), ops_.end(), m) != ops_.end() ||
        leaf_of_.count(m) > 0) {
      return true;
    }
    const std::vector<int>& written = producer_.outputs;
    auto w = std::find(written.begin(), written.end(), m);
    const int k = static_cast<int>(w - written.begin());
    if (w != written.end() && !readers_.dead[i_][k] &&
        std::find(results_.begin(), results_.end(), k) == results_.end() &&
        Alive(ProgramRef::Step(i_, k))) {
      leaf_of_[m] = ProgramRef::Step(i_, k);
      AddLeaf(leaf_of_[m]);
      return true;
    }
    const FusedLoop::Op& op = producer_.ops[m];
    for (int x : {op.a, op.b}) {
      if (x >= producer_.num_inputs) {
        if (!Need(x - producer_.num_inputs)) return false;
      } else if (Alive(plan_.steps[i_].inputs[x])) {
        AddLeaf(plan_.steps[i_].inputs[x]);
      } else {
        return false;
      }
    }
    ops_.push_back(m);
    return true;
  }

  const Program& plan_;
  const Readers& readers_;
  const int i_, j_;
  const FusedLoop& producer_;
  std::vector<int> results_, ops_;
  std::vector<ProgramRef> leaves_;
  std::map<int, ProgramRef> leaf_of_;
};

// Loop j with the ops of `r` in front of its own: its inputs lose i's
// recomputed results and gain r's leaves.
void RewriteReader(Program& plan, const Recompute& r, int i, int j) {
  const FusedLoop& old = *plan.steps[j].loop;
  const FusedLoop& producer = *plan.steps[i].loop;
  std::vector<ProgramRef> inputs;
  auto recomputed = [&](const ProgramRef& ref) -> int {  // op of i, or -1
    if (ref.kind != ProgramRef::kStep || ref.index != i) return -1;
    const std::vector<int>& ks = r.results();
    return std::find(ks.begin(), ks.end(), ref.output) == ks.end()
               ? -1
               : producer.outputs[ref.output];
  };
  auto input = [&](const ProgramRef& ref) { return InputOf(inputs, ref); };
  for (const ProgramRef& ref : plan.steps[j].inputs) {
    if (recomputed(ref) < 0) input(ref);
  }
  for (const ProgramRef& ref : r.leaves()) input(ref);
  const int ni = static_cast<int>(inputs.size());
  const int nr = static_cast<int>(r.ops().size());
  auto loop = std::make_shared<FusedLoop>();
  loop->num_inputs = ni;
  loop->shape = old.shape;
  auto producer_operand = [&](int x) {
    if (x < producer.num_inputs) return input(plan.steps[i].inputs[x]);
    const int m = x - producer.num_inputs;
    if (const ProgramRef* leaf = r.LeafOp(m)) return input(*leaf);
    const std::vector<int>& ops = r.ops();
    return ni +
           static_cast<int>(std::find(ops.begin(), ops.end(), m) - ops.begin());
  };
  for (int m : r.ops()) {
    const FusedLoop::Op& op = producer.ops[m];
    loop->ops.push_back(
        {op.code, producer_operand(op.a), producer_operand(op.b)});
  }
  auto own_operand = [&](int x) {
    if (x >= old.num_inputs) return x - old.num_inputs + ni + nr;
    const ProgramRef& ref = plan.steps[j].inputs[x];
    const int m = recomputed(ref);
    return m < 0 ? input(ref) : producer_operand(m + producer.num_inputs);
  };
  for (const FusedLoop::Op& op : old.ops) {
    loop->ops.push_back({op.code, own_operand(op.a), own_operand(op.b)});
  }
  for (int o : old.outputs) loop->outputs.push_back(o + nr);
  for (FusedLoop::RowSum sum : old.row_sums) {
    sum.op += nr;
    loop->row_sums.push_back(sum);
  }
  for (FusedLoop::ColumnSum sum : old.column_sums) {
    sum.op += nr;
    loop->column_sums.push_back(std::move(sum));
  }
  plan.steps[j].inputs = std::move(inputs);
  plan.steps[j].loop = std::move(loop);
}

// Erases the outputs `dead` marks from their loops (never a row sum) and
// renumbers the references to the others; dead outputs are read by none.
void EraseDeadOutputs(Program& plan, std::vector<std::vector<StepOutput>>& outs,
                      const std::vector<std::vector<bool>>& dead) {
  const int n = static_cast<int>(plan.steps.size());
  std::vector<std::vector<int>> index(n);  // old output -> new, if changed
  for (int s = 0; s < n; ++s) {
    if (std::find(dead[s].begin(), dead[s].end(), true) == dead[s].end()) {
      continue;
    }
    auto loop = std::make_shared<FusedLoop>(*plan.steps[s].loop);
    loop->outputs.clear();
    std::vector<StepOutput> kept;
    for (size_t k = 0; k < outs[s].size(); ++k) {
      index[s].push_back(dead[s][k] ? -1 : static_cast<int>(kept.size()));
      if (dead[s][k]) continue;
      kept.push_back(outs[s][k]);
      if (k < plan.steps[s].loop->outputs.size()) {
        loop->outputs.push_back(plan.steps[s].loop->outputs[k]);
      }
    }
    plan.steps[s].loop = std::move(loop);
    outs[s] = std::move(kept);
  }
  auto renumber = [&](ProgramRef& ref) {
    if (ref.kind == ProgramRef::kStep && !index[ref.index].empty()) {
      ref.output = index[ref.index][ref.output];
    }
  };
  for (ProgramStep& step : plan.steps) {
    for (ProgramRef& ref : step.inputs) renumber(ref);
  }
  for (ProgramRef& ref : plan.outputs) renumber(ref);
}

// Where a loop reads results of an earlier loop that nothing else reads,
// and those results are cheap to recompute from values it may read (the
// GELU's x * c and erf(x * c) + 1 in its backward loop, from x), the
// reader recomputes them and the earlier loop no longer writes them: fewer
// tensors written, kept from the forward pass to the backward and read
// back. The same ops on the same values: the same bits.
void RecomputeInLoops(Program& plan,
                      std::vector<std::vector<StepOutput>>& outs) {
  Readers readers = FindReaders(plan, outs);
  for (int j = 0; j < static_cast<int>(plan.steps.size()); ++j) {
    if (plan.steps[j].kind != ProgramStep::kFused) continue;
    for (size_t x = 0; x < plan.steps[j].inputs.size(); ++x) {
      const ProgramRef ref = plan.steps[j].inputs[x];
      if (ref.kind != ProgramRef::kStep ||
          plan.steps[ref.index].kind != ProgramStep::kFused ||
          !plan.steps[j].loop->shape ||
          plan.steps[ref.index].loop->shape != plan.steps[j].loop->shape) {
        continue;
      }
      Recompute r(plan, readers, ref.index, j);
      if (!r.Plan(outs)) continue;
      RewriteReader(plan, r, ref.index, j);
      // j now reads the leaves (each alive at j: last readers stay) and
      // not the results, which nothing reads any more.
      for (const ProgramRef& leaf : r.leaves()) {
        if (leaf.kind != ProgramRef::kStep) continue;
        int& first = readers.first[leaf.index][leaf.output];
        first = std::min(first, j);
      }
      for (int k : r.results()) readers.dead[ref.index][k] = true;
      x = static_cast<size_t>(-1);  // j's inputs changed: from the start
    }
  }
  EraseDeadOutputs(plan, outs, readers.dead);
}

// -- Sums over rows at the end of loops ------------------------------------

// Step `step` as a row sum of a loop of rank `rank`: a Sum or Mean over the
// last axis alone; nothing otherwise.
std::optional<FusedLoop::RowSum> RowSumOf(const ProgramStep& step, int rank) {
  if (step.kind != ProgramStep::kOp || step.inputs.size() != 1 ||
      (step.op != "Sum" && step.op != "Mean")) {
    return std::nullopt;
  }
  const AttrValue* axis = step.attrs.Find("axis");
  const AttrValue* keep = step.attrs.Find("keep_dims");
  const auto* axes = axis ? std::get_if<std::vector<int64_t>>(axis) : nullptr;
  const bool* keep_dims = keep ? std::get_if<bool>(keep) : nullptr;
  if (axes == nullptr || keep_dims == nullptr || axes->size() != 1 ||
      ((*axes)[0] != -1 && (*axes)[0] != rank - 1)) {
    return std::nullopt;
  }
  return FusedLoop::RowSum{-1, step.op == "Mean", *keep_dims};
}

// Removes the steps `removed` marks (none of them read) and renumbers the
// references to the others.
void RemoveSteps(Program& plan, std::vector<std::vector<StepOutput>>& outs,
                 const std::vector<bool>& removed) {
  const int n = static_cast<int>(plan.steps.size());
  std::vector<int> index(n);
  std::vector<ProgramStep> steps;
  std::vector<std::vector<StepOutput>> kept;
  for (int s = 0; s < n; ++s) {
    index[s] = static_cast<int>(steps.size());
    if (removed[s]) continue;
    steps.push_back(std::move(plan.steps[s]));
    kept.push_back(std::move(outs[s]));
  }
  auto renumber = [&](ProgramRef& ref) {
    if (ref.kind == ProgramRef::kStep) ref.index = index[ref.index];
  };
  for (ProgramStep& step : steps) {
    for (ProgramRef& ref : step.inputs) renumber(ref);
  }
  for (ProgramRef& ref : plan.outputs) renumber(ref);
  plan.steps = std::move(steps);
  outs = std::move(kept);
}

// Reads of the steps `replaced` marks read their replacements instead, and
// those steps go; so do the outputs `readers` marks dead.
void RedirectAndRemove(Program& plan,
                       std::vector<std::vector<StepOutput>>& outs,
                       const Readers& readers,
                       const std::vector<std::optional<ProgramRef>>& replaced) {
  const int n = static_cast<int>(plan.steps.size());
  std::vector<bool> removed(n, false);
  for (int j = 0; j < n; ++j) {
    if (replaced[j]) removed[j] = true, plan.steps[j].inputs.clear();
  }
  auto redirect = [&](ProgramRef& ref) {
    if (ref.kind == ProgramRef::kStep && replaced[ref.index]) {
      ref = *replaced[ref.index];
    }
  };
  for (ProgramStep& step : plan.steps) {
    for (ProgramRef& ref : step.inputs) redirect(ref);
  }
  for (ProgramRef& ref : plan.outputs) redirect(ref);
  EraseDeadOutputs(plan, outs, readers.dead);
  RemoveSteps(plan, outs, removed);
}

// A Sum or Mean over the last axis of a loop's result becomes a row sum of
// the loop (FusedLoop::row_sums): no reduction step reads the result back,
// and if nothing else reads it, it is not written at all (a layer norm's
// mean of squares, the row sums of its and the softmax's gradients). The
// loop sums each row with the reduction kernel's function: the same bits.
void AbsorbRowSums(Program& plan, std::vector<std::vector<StepOutput>>& outs) {
  const int n = static_cast<int>(plan.steps.size());
  Readers readers = FindReaders(plan, outs);
  std::vector<std::optional<ProgramRef>> replaced(n);
  for (int j = 0; j < n; ++j) {
    const ProgramStep& step = plan.steps[j];
    if (step.inputs.size() != 1) continue;
    const ProgramRef in = step.inputs[0];
    if (in.kind != ProgramRef::kStep ||
        plan.steps[in.index].kind != ProgramStep::kFused) {
      continue;
    }
    const int i = in.index, k = in.output;
    const FusedLoop& loop = *plan.steps[i].loop;
    if (k >= static_cast<int>(loop.outputs.size()) || !loop.shape ||
        !FusedLoop::RowSumsFit(*loop.shape) || outs[j].size() != 1 ||
        outs[j][0].dtype != outs[i][k].dtype) {
      continue;
    }
    std::optional<FusedLoop::RowSum> sum =
        RowSumOf(step, static_cast<int>(loop.shape->size()));
    if (!sum) continue;
    sum->op = loop.outputs[k];
    auto absorbed = std::make_shared<FusedLoop>(loop);
    absorbed->row_sums.push_back(*sum);
    plan.steps[i].loop = std::move(absorbed);
    // Read by the reduction alone: no longer written.
    readers.dead[i][k] = readers.first[i][k] == j && readers.last[i][k] == j;
    readers.dead[i].push_back(false);
    outs[i].push_back(outs[j][0]);
    replaced[j] = ProgramRef::Step(i, static_cast<int>(outs[i].size()) - 1);
  }
  RedirectAndRemove(plan, outs, readers, replaced);
}

// Step `step` as a column sum of a loop of shape `shape` through `in` (the
// loop's result, or a Reshape of it that keeps its last dim): a Sum over
// every axis of `in` but the last.
bool IsColumnSum(const ProgramStep& step, const Shape& in, const Shape& shape) {
  if (step.kind != ProgramStep::kOp || step.op != "Sum" ||
      step.inputs.size() != 1 || in.size() < 2 || in.back() != shape.back() ||
      NumElements(in) != NumElements(shape)) {
    return false;
  }
  const std::vector<int64_t>* axes = IntsAttr(step, "axis");
  const int rank = static_cast<int>(in.size());
  if (axes == nullptr || static_cast<int>(axes->size()) != rank - 1) {
    return false;
  }
  std::vector<bool> seen(rank, false);
  for (int64_t a : *axes) {
    const int64_t d = a < 0 ? a + rank : a;
    if (d < 0 || d >= rank - 1 || seen[d]) return false;
    seen[d] = true;
  }
  return true;
}

// A Sum over every axis but the last of a loop's result (or of a Reshape
// of it that keeps the last dim) becomes a column sum of the loop
// (FusedLoop::column_sums): the bias and gain gradients of the layers whose
// backward ends in a loop. The loop sums the columns in the Sum kernel's
// blocks and order: the same bits. A result the Sum alone read is no longer
// written.
void AbsorbColumnSums(Program& plan,
                      std::vector<std::vector<StepOutput>>& outs) {
  const int n = static_cast<int>(plan.steps.size());
  Readers readers = FindReaders(plan, outs);
  std::vector<std::optional<ProgramRef>> replaced(n);
  for (int j = 0; j < n; ++j) {
    const ProgramStep& step = plan.steps[j];
    if (step.inputs.size() != 1 || step.inputs[0].kind != ProgramRef::kStep ||
        outs[j].size() != 1) {
      continue;
    }
    ProgramRef in = step.inputs[0];
    const Shape in_shape = outs[in.index][in.output].shape;
    const ProgramStep& producer = plan.steps[in.index];
    if (producer.kind == ProgramStep::kOp && producer.op == "Reshape" &&
        producer.inputs[0].kind == ProgramRef::kStep) {
      in = producer.inputs[0];  // the loop's result, reshaped
    }
    const int i = in.index, k = in.output;
    if (plan.steps[i].kind != ProgramStep::kFused) continue;
    const FusedLoop& loop = *plan.steps[i].loop;
    if (k >= static_cast<int>(loop.outputs.size()) || !loop.shape ||
        !FusedLoop::ColumnSumsFit(*loop.shape) ||
        outs[j][0].dtype != outs[i][k].dtype ||
        !IsColumnSum(step, in_shape, *loop.shape)) {
      continue;
    }
    auto absorbed = std::make_shared<FusedLoop>(loop);
    absorbed->column_sums.push_back({loop.outputs[k], outs[j][0].shape});
    plan.steps[i].loop = std::move(absorbed);
    // Read by the Sum alone: no longer written.
    readers.dead[i][k] = SameRef(in, step.inputs[0]) &&
                         readers.first[i][k] == j && readers.last[i][k] == j;
    readers.dead[i].push_back(false);
    outs[i].push_back(outs[j][0]);
    replaced[j] = ProgramRef::Step(i, static_cast<int>(outs[i].size()) - 1);
  }
  RedirectAndRemove(plan, outs, readers, replaced);
}

// Loop j as ops of loop i (i < j, the same shape): j reads i's results, its
// row sums (as broadcast rows: kRowSum / kRowMean ops, which give every
// element its row's sum) and values made before i. Null if it reads
// anything else or the ops would be too many. `inputs`: the merged loop's.
std::shared_ptr<FusedLoop> MergedLoop(const Program& plan, int i, int j,
                                      std::vector<ProgramRef>* inputs) {
  const FusedLoop& a = *plan.steps[i].loop;
  const FusedLoop& b = *plan.steps[j].loop;
  const int row_sums_from = static_cast<int>(a.outputs.size());
  *inputs = plan.steps[i].inputs;
  auto merged = std::make_shared<FusedLoop>(a);
  auto input = [&](const ProgramRef& ref) { return InputOf(*inputs, ref); };
  // b's input x as a merged operand: >= 0, a merged input; -(op + 2), op
  // of the merged loop (one of a's, or a row sum spread).
  std::vector<int> operand;
  std::vector<int> spread;  // per row sum of a read by b: its op, or -1
  spread.assign(a.row_sums.size(), -1);
  for (const ProgramRef& ref : plan.steps[j].inputs) {
    if (ref.kind == ProgramRef::kStep && ref.index == i) {
      if (ref.output < row_sums_from) {
        operand.push_back(-(a.outputs[ref.output] + 2));  // a's op
      } else if (ref.output - row_sums_from <
                 static_cast<int>(a.row_sums.size())) {
        const int k = ref.output - row_sums_from;
        if (!a.row_sums[k].keep_dims) return nullptr;
        if (spread[k] < 0) {
          spread[k] = static_cast<int>(merged->ops.size());
          merged->ops.push_back(
              {a.row_sums[k].mean ? FusedLoop::kRowMean : FusedLoop::kRowSum, 0,
               0});  // operands set below
        }
        operand.push_back(-(spread[k] + 2));
      } else {
        return nullptr;  // a column sum
      }
    } else if (ref.kind == ProgramRef::kStep && ref.index >= i) {
      return nullptr;  // made after i
    } else {
      operand.push_back(input(ref));
    }
  }
  for (size_t k = 0; k < spread.size(); ++k) {
    if (spread[k] < 0) continue;
    const int x = a.num_inputs + a.row_sums[k].op;
    merged->ops[spread[k]].a = merged->ops[spread[k]].b = x;
  }
  const int ni = static_cast<int>(inputs->size());
  const int shift = ni - a.num_inputs;  // a's ops move up by new inputs
  for (FusedLoop::Op& op : merged->ops) {
    if (op.a >= a.num_inputs) op.a += shift;
    if (op.b >= a.num_inputs) op.b += shift;
  }
  const int b_first = static_cast<int>(merged->ops.size());
  auto map = [&](int x) {
    if (x >= b.num_inputs) return ni + b_first + (x - b.num_inputs);
    const int o = operand[x];
    return o >= 0 ? o : ni + (-o - 2);
  };
  for (const FusedLoop::Op& op : b.ops) {
    merged->ops.push_back({op.code, map(op.a), map(op.b)});
  }
  if (merged->ops.size() > static_cast<size_t>(kMaxLoopOps)) return nullptr;
  merged->num_inputs = ni;
  return merged;
}

// The results of loop i with loop j merged into it, in FusedLoop order:
// i's outputs, j's, i's row sums (those in `kept`), j's, i's column sums,
// j's. `moved_i` / `moved_j`: where each old result of i / j went (i's
// dropped row sums: nowhere).
void MergedResults(const Program& plan, int i, int j,
                   const std::vector<bool>& kept, FusedLoop* merged,
                   std::vector<std::vector<StepOutput>>& outs,
                   std::vector<ProgramRef>* moved_i,
                   std::vector<ProgramRef>* moved_j) {
  const FusedLoop& a = *plan.steps[i].loop;
  const FusedLoop& b = *plan.steps[j].loop;
  const int b_first = static_cast<int>(merged->ops.size() - b.ops.size());
  const int na = static_cast<int>(a.outputs.size());
  const int nb = static_cast<int>(b.outputs.size());
  const int ra = static_cast<int>(a.row_sums.size());
  const int rb = static_cast<int>(b.row_sums.size());
  std::vector<StepOutput> results;
  moved_i->assign(outs[i].size(), ProgramRef::Step(-1));
  moved_j->assign(outs[j].size(), ProgramRef::Step(-1));
  auto take = [&](int step, int k, std::vector<ProgramRef>* moved) {
    (*moved)[k] = ProgramRef::Step(i, static_cast<int>(results.size()));
    results.push_back(outs[step][k]);
  };
  merged->outputs = a.outputs;
  merged->row_sums.clear();
  merged->column_sums = a.column_sums;
  for (int k = 0; k < na; ++k) take(i, k, moved_i);
  for (int k = 0; k < nb; ++k) {
    merged->outputs.push_back(b.outputs[k] + b_first);
    take(j, k, moved_j);
  }
  for (int k = 0; k < ra; ++k) {
    if (!kept[k]) continue;
    merged->row_sums.push_back(a.row_sums[k]);
    take(i, na + k, moved_i);
  }
  for (int k = 0; k < rb; ++k) {
    FusedLoop::RowSum sum = b.row_sums[k];
    sum.op += b_first;
    merged->row_sums.push_back(sum);
    take(j, nb + k, moved_j);
  }
  for (size_t k = 0; k < a.column_sums.size(); ++k) {
    take(i, na + ra + static_cast<int>(k), moved_i);
  }
  for (size_t k = 0; k < b.column_sums.size(); ++k) {
    FusedLoop::ColumnSum sum = b.column_sums[k];
    sum.op += b_first;
    merged->column_sums.push_back(sum);
    take(j, nb + rb + static_cast<int>(k), moved_j);
  }
  outs[i] = std::move(results);
}

// A loop that reads row sums of an earlier loop of its shape, and nothing
// else made after that loop, joins it: the row sums are spread over their
// rows inside the merged loop (kRowSum, kRowMean), so the values between
// the two (the softmax gradient's dy * y and its row sums) are neither
// written nor read back. The merged loop runs where the earlier one did. A
// loop joins or is joined once. The same ops on the same values, each row
// summed as before: the same bits.
void MergeRowSumReaders(Program& plan,
                        std::vector<std::vector<StepOutput>>& outs) {
  const int n = static_cast<int>(plan.steps.size());
  const Readers readers = FindReaders(plan, outs);
  std::vector<bool> involved(n, false), removed(n, false);
  std::vector<std::vector<ProgramRef>> moved(n);
  std::vector<std::vector<bool>> dead(n);
  for (int j = 0; j < n; ++j) {
    if (plan.steps[j].kind != ProgramStep::kFused || involved[j]) continue;
    int i = -1;
    for (const ProgramRef& ref : plan.steps[j].inputs) {
      if (ref.kind != ProgramRef::kStep ||
          plan.steps[ref.index].kind != ProgramStep::kFused) {
        continue;
      }
      const FusedLoop& a = *plan.steps[ref.index].loop;
      const int k = ref.output - static_cast<int>(a.outputs.size());
      if (k >= 0 && k < static_cast<int>(a.row_sums.size())) i = ref.index;
    }
    if (i < 0 || involved[i] || !plan.steps[j].loop->shape ||
        plan.steps[i].loop->shape != plan.steps[j].loop->shape ||
        outs[i][0].dtype != outs[j][0].dtype) {
      continue;
    }
    std::vector<ProgramRef> inputs;
    std::shared_ptr<FusedLoop> merged = MergedLoop(plan, i, j, &inputs);
    if (merged == nullptr) continue;
    const FusedLoop& a = *plan.steps[i].loop;
    const int na = static_cast<int>(a.outputs.size());
    auto only_j = [&](int k) {
      return readers.first[i][k] == j && readers.last[i][k] == j;
    };
    std::vector<bool> kept;
    for (size_t k = 0; k < a.row_sums.size(); ++k) {
      kept.push_back(!only_j(na + static_cast<int>(k)));
    }
    MergedResults(plan, i, j, kept, merged.get(), outs, &moved[i], &moved[j]);
    dead[i].assign(outs[i].size(), false);
    for (int k = 0; k < na; ++k) dead[i][k] = only_j(k);
    plan.steps[i].inputs = std::move(inputs);
    plan.steps[i].loop = std::move(merged);
    plan.steps[j].inputs.clear();
    removed[j] = involved[i] = involved[j] = true;
  }
  auto remap = [&](ProgramRef& ref) {
    if (ref.kind == ProgramRef::kStep && !moved[ref.index].empty()) {
      ref = moved[ref.index][ref.output];
    }
  };
  for (ProgramStep& step : plan.steps) {
    for (ProgramRef& ref : step.inputs) remap(ref);
  }
  for (ProgramRef& ref : plan.outputs) remap(ref);
  for (int s = 0; s < n; ++s) dead[s].resize(outs[s].size(), false);
  EraseDeadOutputs(plan, outs, dead);
  RemoveSteps(plan, outs, removed);
}

// -- Layouts folded into matrix products -----------------------------------

// A value as a strided view of another (its base): element (i_0, ...) of
// the value is element offset + sum(i_d * strides[d]) of the base.
struct Strided {
  ProgramRef base;
  int64_t offset = 0;
  Shape shape, strides;
};

Shape RowMajor(const Shape& shape) {
  Shape strides(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) {
    strides[d] = strides[d + 1] * shape[d + 1];
  }
  return strides;
}

// Whether the view's elements are consecutive in row-major order (a dim of
// one element may have any stride).
bool IsRowMajor(const Strided& v) {
  const Shape want = RowMajor(v.shape);
  for (size_t d = 0; d < v.shape.size(); ++d) {
    if (v.shape[d] != 1 && v.strides[d] != want[d]) return false;
  }
  return true;
}

// The valid permutation of a rank-`rank` Transpose step, or null.
const std::vector<int64_t>* PermOf(const ProgramStep& step, size_t rank) {
  const std::vector<int64_t>* perm = IntsAttr(step, "perm");
  if (perm == nullptr || perm->size() != rank) return nullptr;
  std::vector<bool> seen(rank, false);
  for (int64_t p : *perm) {
    if (p < 0 || p >= static_cast<int64_t>(rank) || seen[p]) return nullptr;
    seen[p] = true;
  }
  return perm;
}

// The axis of a Pack or Unpack step over values of rank `rank` (Pack's
// output has rank + 1), or nothing.
std::optional<int> AxisOf(const ProgramStep& step, int rank) {
  std::optional<int64_t> axis = IntAttr(step, "axis");
  if (!axis) return std::nullopt;
  const int64_t a = *axis < 0 ? *axis + rank : *axis;
  if (a < 0 || a >= rank) return std::nullopt;
  return static_cast<int>(a);
}

// At most this many layout steps are walked from a product.
constexpr int kMaxLayoutSteps = 8;

bool IsLayoutStep(const ProgramStep& step) {
  return step.kind == ProgramStep::kOp && step.inputs.size() == 1 &&
         (step.op == "Reshape" || step.op == "Transpose" ||
          step.op == "Unpack");
}

// The view of output `r` of layout step `step` (of shape `shape`) when its
// input has view `v`: nothing if it is not a view of v's base (a Reshape
// of a view that is not row-major).
std::optional<Strided> LayoutOf(const ProgramStep& step, const ProgramRef& r,
                                const Shape& shape, const Strided& v) {
  Strided next{v.base, v.offset, shape, {}};
  if (step.op == "Reshape") {
    if (!IsRowMajor(v) || NumElements(shape) != NumElements(v.shape)) {
      return std::nullopt;
    }
    next.strides = RowMajor(shape);
  } else if (step.op == "Transpose") {
    const std::vector<int64_t>* perm = PermOf(step, v.shape.size());
    if (perm == nullptr || shape.size() != perm->size()) return std::nullopt;
    for (size_t d = 0; d < perm->size(); ++d) {
      if (shape[d] != v.shape[(*perm)[d]]) return std::nullopt;
      next.strides.push_back(v.strides[(*perm)[d]]);
    }
  } else {
    const std::optional<int> axis =
        AxisOf(step, static_cast<int>(v.shape.size()));
    if (!axis || shape.size() + 1 != v.shape.size()) return std::nullopt;
    next.offset += r.output * v.strides[*axis];
    next.strides = v.strides;
    next.strides.erase(next.strides.begin() + *axis);
    Shape rest = v.shape;
    rest.erase(rest.begin() + *axis);
    if (rest != shape) return std::nullopt;
  }
  return next;
}

// `ref` as a view of the earliest value it is a layout of, through
// Reshapes of row-major views, Transposes and Unpacks; its own view when it
// is none.
Strided ViewOf(const Program& plan,
               const std::vector<std::vector<StepOutput>>& outs,
               const ProgramRef& ref) {
  std::vector<ProgramRef> chain = {ref};  // from ref back to the base
  while (chain.size() <= kMaxLayoutSteps &&
         chain.back().kind == ProgramRef::kStep &&
         IsLayoutStep(plan.steps[chain.back().index])) {
    chain.push_back(plan.steps[chain.back().index].inputs[0]);
  }
  const Shape base_shape = ShapeOfRef(plan, outs, chain.back());
  Strided v{chain.back(), 0, base_shape, RowMajor(base_shape)};
  for (int i = static_cast<int>(chain.size()) - 2; i >= 0; --i) {
    const ProgramRef& r = chain[i];
    const Shape& shape = outs[r.index][r.output].shape;
    std::optional<Strided> next = LayoutOf(plan.steps[r.index], r, shape, v);
    v = next ? *std::move(next) : Strided{r, 0, shape, RowMajor(shape)};
  }
  return v;
}

// A BatchMatMul step whose layouts can fold: float, real, no broadcast
// batch dims.
struct Product {
  int step;
  bool adj_x, adj_y;
  Shape batch;
  int64_t m, n, k;
};
std::optional<Product> ProductOf(
    const Program& plan, const std::vector<std::vector<StepOutput>>& outs,
    int s) {
  const ProgramStep& step = plan.steps[s];
  if (step.kind != ProgramStep::kOp ||
      (step.op != "BatchMatMulV2" && step.op != "BatchMatMul") ||
      step.inputs.size() != 2 || outs[s].size() != 1) {
    return std::nullopt;
  }
  const DType dtype = outs[s][0].dtype;
  if ((dtype != DType::kFloat32 && dtype != DType::kFloat64) ||
      DTypeOf(plan, outs, step.inputs[0]) != dtype ||
      DTypeOf(plan, outs, step.inputs[1]) != dtype) {
    return std::nullopt;
  }
  const AttrValue* ax = step.attrs.Find("adj_x");
  const AttrValue* ay = step.attrs.Find("adj_y");
  const bool* adj_x = ax ? std::get_if<bool>(ax) : nullptr;
  const bool* adj_y = ay ? std::get_if<bool>(ay) : nullptr;
  const Shape& z = outs[s][0].shape;
  const Shape x = ShapeOfRef(plan, outs, step.inputs[0]);
  const Shape y = ShapeOfRef(plan, outs, step.inputs[1]);
  const size_t rank = z.size();
  if (adj_x == nullptr || adj_y == nullptr || rank < 2 || x.size() != rank ||
      y.size() != rank || !std::equal(z.begin(), z.end() - 2, x.begin()) ||
      !std::equal(z.begin(), z.end() - 2, y.begin())) {
    return std::nullopt;
  }
  return Product{s,
                 *adj_x,
                 *adj_y,
                 Shape(z.begin(), z.end() - 2),
                 z[rank - 2],
                 z[rank - 1],
                 *adj_x ? x[rank - 2] : x[rank - 1]};
}

// The view `v` of a product's operand or result as stored matrices over
// `batch` (their rows `ld` apart, each row contiguous), if it is one.
std::optional<StridedMatMul::View> MatrixView(const Strided& v,
                                              const Shape& batch) {
  const size_t rank = v.shape.size();
  if (rank != batch.size() + 2 ||
      !std::equal(batch.begin(), batch.end(), v.shape.begin())) {
    return std::nullopt;
  }
  const int64_t rows = v.shape[rank - 2], cols = v.shape[rank - 1];
  const int64_t ld =
      rows == 1 ? std::max<int64_t>(cols, 1) : v.strides[rank - 2];
  if ((cols != 1 && v.strides[rank - 1] != 1) ||
      ld < std::max<int64_t>(cols, 1)) {
    return std::nullopt;
  }
  return StridedMatMul::View{
      v.offset, Shape(v.strides.begin(), v.strides.begin() + batch.size()), ld};
}

// The layout steps that carry step `from`'s value on: each a Transpose or a
// Reshape that alone reads the value before it, and reads it once.
std::vector<int> WrittenChain(const Program& plan, const Readers& readers,
                              const std::vector<std::vector<int>>& count,
                              int from) {
  std::vector<int> chain;
  for (int at = from; chain.size() < kMaxLayoutSteps;) {
    if (count[at].size() != 1 || count[at][0] != 1) break;
    const int r = readers.first[at][0];
    if (r < 0 || r >= static_cast<int>(plan.steps.size())) break;
    const ProgramStep& step = plan.steps[r];
    if (!IsLayoutStep(step) || step.op == "Unpack") break;
    chain.push_back(r);
    at = r;
  }
  return chain;
}

// The view of step `from`'s value in the value `chain` ends with (row-major;
// from's own when the chain is empty), or nothing if a Reshape in the
// chain would read a view that is not row-major.
std::optional<Strided> WrittenView(
    const Program& plan, const std::vector<std::vector<StepOutput>>& outs,
    int from, const std::vector<int>& chain) {
  const int last = chain.empty() ? from : chain.back();
  const Shape& shape = outs[last][0].shape;
  Strided v{ProgramRef::Step(last), 0, shape, RowMajor(shape)};
  for (int i = static_cast<int>(chain.size()) - 1; i >= 0; --i) {
    const ProgramStep& step = plan.steps[chain[i]];
    const Shape& in = i > 0 ? outs[chain[i - 1]][0].shape : outs[from][0].shape;
    Strided prev{v.base, v.offset, in, Shape(in.size(), 0)};
    if (step.op == "Reshape") {
      if (!IsRowMajor(v) || NumElements(in) != NumElements(v.shape)) {
        return std::nullopt;
      }
      prev.strides = RowMajor(in);
    } else {
      const std::vector<int64_t>* perm = PermOf(step, in.size());
      if (perm == nullptr || v.shape.size() != in.size()) return std::nullopt;
      for (size_t d = 0; d < perm->size(); ++d) {
        if (v.shape[d] != in[(*perm)[d]]) return std::nullopt;
        prev.strides[(*perm)[d]] = v.strides[d];
      }
    }
    v = std::move(prev);
  }
  return v;
}

// Step r as a Pack of products that only it reads (once each), in its input
// order; empty if it is none.
std::vector<Product> PackedProducts(
    const Program& plan, const std::vector<std::vector<StepOutput>>& outs,
    const Readers& readers, const std::vector<std::vector<int>>& count, int r) {
  const ProgramStep& pack = plan.steps[r];
  if (pack.kind != ProgramStep::kOp || pack.op != "Pack" ||
      outs[r].size() != 1 ||
      !AxisOf(pack, static_cast<int>(outs[r][0].shape.size()))) {
    return {};
  }
  std::vector<Product> products;
  for (const ProgramRef& in : pack.inputs) {
    std::optional<Product> p = in.kind == ProgramRef::kStep && in.output == 0
                                   ? ProductOf(plan, outs, in.index)
                                   : std::nullopt;
    if (!p || count[in.index][0] != 1 || readers.first[in.index][0] != r) {
      return {};
    }
    products.push_back(*p);
  }
  return products;
}

// One kMatMul step for `products` (BatchMatMul steps) whose results have
// views `results` in the step's output of shape `shape`: each operand read
// through the layout steps it comes from (ViewOf) when its matrices are
// stored as a product reads them. Null if a result's view is not, or if
// nothing would fold (`folded`: the results' layouts already do).
std::shared_ptr<StridedMatMul> FoldProducts(
    const Program& plan, const std::vector<std::vector<StepOutput>>& outs,
    const std::vector<Product>& products, const std::vector<Strided>& results,
    const Shape& shape, bool folded, std::vector<ProgramRef>* inputs) {
  auto mm = std::make_shared<StridedMatMul>();
  mm->shape = shape;
  auto input = [&](const ProgramRef& ref) { return InputOf(*inputs, ref); };
  for (size_t i = 0; i < products.size(); ++i) {
    const Product& p = products[i];
    StridedMatMul::Product mp{0,       0,       {},  {},  {}, p.adj_x,
                              p.adj_y, p.batch, p.m, p.n, p.k};
    std::optional<StridedMatMul::View> vz = MatrixView(results[i], p.batch);
    if (!vz) return nullptr;
    mp.vz = *vz;
    for (int j = 0; j < 2; ++j) {
      const ProgramRef& ref = plan.steps[p.step].inputs[j];
      Strided v = ViewOf(plan, outs, ref);
      std::optional<StridedMatMul::View> view = MatrixView(v, p.batch);
      if (!view || SameRef(v.base, ref)) {
        const Shape own = ShapeOfRef(plan, outs, ref);
        v = Strided{ref, 0, own, RowMajor(own)};
        view = MatrixView(v, p.batch);
        if (!view) return nullptr;
      } else {
        folded = true;
      }
      (j == 0 ? mp.a : mp.b) = input(v.base);
      (j == 0 ? mp.va : mp.vb) = *view;
    }
    mm->products.push_back(std::move(mp));
  }
  mm->num_inputs = static_cast<int>(inputs->size());
  return folded ? mm : nullptr;
}

// Folds the layout steps around BatchMatMuls into strided products
// (core/registry/strided_matmul.h): an operand that is a Reshape, Transpose
// or Unpack of another value is read where that value holds it, and a
// result that only Transposes and Reshapes carry on (or a Pack of several
// products with them) is written where the last of them would put it. The
// attention's q, k and v are read from the fused projection, its output
// is written in the layout the next MatMul reads, and the gradients of q, k
// and v are written into one [batch * t, 3 * d] tensor; no step copies
// them. Layout steps left unread go. Each matrix is the same Gemm call as
// before but for the distances between rows: the same bits.
void FoldLayouts(Program& plan, std::vector<std::vector<StepOutput>>& outs) {
  const int n = static_cast<int>(plan.steps.size());
  const Readers readers = FindReaders(plan, outs);
  const std::vector<std::vector<int>> count = CountReads(plan, outs);
  std::vector<bool> removed(n, false), done(n, false);
  for (int s = 0; s < n; ++s) {
    std::optional<Product> first =
        done[s] ? std::nullopt : ProductOf(plan, outs, s);
    if (!first) continue;
    // s alone, or with the other products of the Pack that alone reads it.
    const int r = count[s][0] == 1 ? readers.first[s][0] : -1;
    std::vector<Product> products =
        r >= 0 && r < n ? PackedProducts(plan, outs, readers, count, r)
                        : std::vector<Product>{};
    const int from = products.empty() ? s : r;
    if (products.empty()) products = {*first};
    std::vector<int> chain = WrittenChain(plan, readers, count, from);
    std::optional<Strided> written;
    while (!(written = WrittenView(plan, outs, from, chain))) chain.pop_back();
    std::vector<Strided> results;
    const std::optional<int> axis =
        from == s
            ? std::nullopt
            : AxisOf(plan.steps[from], static_cast<int>(written->shape.size()));
    for (size_t i = 0; i < products.size(); ++i) {
      Strided v = *written;
      if (axis) {  // the Pack's input i
        v.offset += static_cast<int64_t>(i) * v.strides[*axis];
        v.shape.erase(v.shape.begin() + *axis);
        v.strides.erase(v.strides.begin() + *axis);
      }
      results.push_back(std::move(v));
    }
    const int at = chain.empty() ? from : chain.back();
    std::vector<ProgramRef> inputs;
    std::shared_ptr<StridedMatMul> mm = FoldProducts(
        plan, outs, products, results, outs[at][0].shape, at != s, &inputs);
    if (mm == nullptr) continue;
    for (const Product& p : products) removed[p.step] = done[p.step] = true;
    removed[from] = true;
    for (int c : chain) removed[c] = true;
    removed[at] = false;
    ProgramStep step;
    step.kind = ProgramStep::kMatMul;
    step.inputs = std::move(inputs);
    step.matmul = std::move(mm);
    plan.steps[at] = std::move(step);
  }
  for (int s = 0; s < n; ++s) {
    if (removed[s]) plan.steps[s].inputs.clear();
  }
  // Layout steps nothing reads any more, last first (a chain goes whole).
  std::vector<std::vector<int>> left = CountReads(plan, outs);
  for (int s = n - 1; s >= 0; --s) {
    if (removed[s] || !IsLayoutStep(plan.steps[s]) ||
        std::any_of(left[s].begin(), left[s].end(),
                    [](int c) { return c > 0; })) {
      continue;
    }
    removed[s] = true;
    const ProgramRef& in = plan.steps[s].inputs[0];
    if (in.kind == ProgramRef::kStep) --left[in.index][in.output];
    plan.steps[s].inputs.clear();
  }
  RemoveSteps(plan, outs, removed);
}

}  // namespace

void OptimizePlan(const OpRegistry& registry, Program& plan,
                  StepOutputs& outs) {
  if (registry.fused_loop_kernel() != nullptr) {
    HoistReshapes(plan, outs);
    FuseElementwise(plan, outs);
    AbsorbRowSums(plan, outs);
    AbsorbColumnSums(plan, outs);
    RecomputeInLoops(plan, outs);
    MergeRowSumReaders(plan, outs);
  }
  if (registry.strided_matmul_kernel() != nullptr) FoldLayouts(plan, outs);
}

}  // namespace gradtape
