#include "core/autodiff/program_plan.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>
#include <variant>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/tensor/variable.h"

namespace gradtape {
namespace {

// Ops whose backward hands this integer or bool input to ops and never reads
// its values itself, so it may come from the call's params.
bool BackwardReadsOnlyThroughOps(const OpDef& op, const AttrMap& attrs,
                                 int input) {
  if (op.name == "ResourceGather" ||
      op.name == "SparseSoftmaxCrossEntropyWithLogits") {
    return input == 1;
  }
  // With batch dims, GatherV2's backward shifts the indices itself.
  if (op.name == "GatherV2") return input == 1 && attrs.Int("batch_dims") == 0;
  if (op.name == "Select" || op.name == "SelectV2") return input == 0;
  return false;
}

struct StepOutput {
  DType dtype;
  Shape shape;
};

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
      if (!read && NumElements(ShapeOf(leaf, outs)) == size) ++new_reads;
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
  Shape ShapeOf(const ProgramRef& ref,
                const std::vector<std::vector<StepOutput>>& outs) const {
    switch (ref.kind) {
      case ProgramRef::kConstant:
        return plan_.constants[ref.index].shape();
      case ProgramRef::kParam:
        return plan_.params[ref.index].shape;
      default:
        return outs[ref.index][ref.output].shape;
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
  auto input = [&](const ProgramRef& ref) {
    for (size_t x = 0; x < inputs.size(); ++x) {
      if (SameRef(inputs[x], ref)) return static_cast<int>(x);
    }
    inputs.push_back(ref);
    return static_cast<int>(inputs.size()) - 1;
  };
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

// Writes the plan while the program runs as defined (see the header).
class PlanBuilder : public ProgramTracer {
 public:
  PlanBuilder(const Program& p, absl::Span<const Tensor> args);

  void StepRan(int s, absl::Span<const Tensor> inputs,
               absl::Span<const Tensor> outputs) override;
  void Executed(const OpDef& op, const AttrMap& attrs,
                absl::Span<const Tensor> inputs,
                const Tensors& outputs) override;
  void Constant(const Tensor& t) override {
    // A buffer freed and reused is a new constant.
    if (t.num_elements() > 0) noted_.insert_or_assign(t.raw_data(), -1);
  }

  // The plan (validated), or FAILED_PRECONDITION saying why there is none.
  absl::StatusOr<std::unique_ptr<Program>> Finish(const OpRegistry& registry,
                                                  bool fuse);

 private:
  struct Known {
    ProgramRef ref;
    DType dtype;
    Shape shape;
  };
  void Fail(std::string why) {
    if (failure_.empty()) failure_ = std::move(why);
  }
  void OpStepRan(int s, absl::Span<const Tensor> inputs,
                 absl::Span<const Tensor> outputs);
  // The plan's reference to `t`, a value a step reads or a gradient gives.
  bool RefOf(const Tensor& t, ProgramRef* ref);
  // Appends `step`, whose run gave `outputs`.
  void AddStep(ProgramStep step, absl::Span<const Tensor> outputs);

  const Program& p_;
  std::unique_ptr<Program> plan_ = std::make_unique<Program>();
  std::vector<std::vector<StepOutput>> step_outputs_;  // per plan step
  // Per slot of the program: its value in the plan; whether it depends on
  // the call (params, variables' values, gradients); whether a tape could
  // have recorded it (watched, or computed from a variable or a watched
  // value).
  std::vector<ProgramRef> slot_ref_;
  std::vector<bool> dynamic_, tracked_;
  absl::flat_hash_map<int64_t, ProgramRef> by_id_;
  absl::flat_hash_map<const void*, Known> by_buffer_;
  // Buffers of the constants backwards made (NoteConstant): the plan's
  // constant index, -1 until a step reads it.
  absl::flat_hash_map<const void*, int> noted_;
  std::string failure_;
};

PlanBuilder::PlanBuilder(const Program& p, absl::Span<const Tensor> args)
    : p_(p),
      slot_ref_(p.num_slots),
      dynamic_(p.num_slots, true),
      tracked_(p.num_slots, true) {
  plan_->params = p.params;
  plan_->constants = p.constants;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].dtype() == DType::kResource) {
      Fail(absl::StrCat("param ", i, " is a variable handle"));
    }
    if (!by_id_.emplace(args[i].id(), ProgramRef::Param(i)).second) {
      Fail(absl::StrCat("param ", i, " is a tensor passed twice"));
    }
    slot_ref_[i] = ProgramRef::Param(i);
    tracked_[i] = false;
  }
  for (size_t c = 0; c < p.constants.size(); ++c) {
    const Tensor& t = p.constants[c];
    const int slot = static_cast<int>(p.params.size() + c);
    if (!by_id_.emplace(t.id(), ProgramRef::Constant(c)).second) {
      Fail(absl::StrCat("constant ", c, " is also a param or constant"));
    }
    slot_ref_[slot] = ProgramRef::Constant(c);
    dynamic_[slot] = false;
    tracked_[slot] = t.dtype() == DType::kResource;
  }
}

void PlanBuilder::StepRan(int s, absl::Span<const Tensor> inputs,
                          absl::Span<const Tensor> outputs) {
  const ProgramStep& step = p_.steps[s];
  if (step.kind == ProgramStep::kOp) return OpStepRan(s, inputs, outputs);
  if (step.kind == ProgramStep::kWatch) {
    for (const ProgramRef& ref : step.inputs) tracked_[p_.Slot(ref)] = true;
  }
  for (size_t k = 0; k < outputs.size(); ++k) {  // a gradient's results
    const std::string where =
        absl::StrCat("the gradient of step ", s, " for source ", k);
    if (!outputs[k].valid()) return Fail(where + " is None");
    ProgramRef ref;
    if (!RefOf(outputs[k], &ref)) return Fail(where + " is not a value");
    slot_ref_[p_.step_slot[s] + k] = ref;
  }
}

void PlanBuilder::OpStepRan(int s, absl::Span<const Tensor> inputs,
                            absl::Span<const Tensor> outputs) {
  const ProgramStep& step = p_.steps[s];
  const OpDef& op = *p_.step_ops[s];
  bool dynamic = false, tracked = false;
  ProgramStep planned = step;
  for (size_t j = 0; j < step.inputs.size(); ++j) {
    const int slot = p_.Slot(step.inputs[j]);
    const bool handle = inputs[j].dtype() == DType::kResource;
    dynamic = dynamic || dynamic_[slot] || handle;
    tracked = tracked || tracked_[slot];
    planned.inputs[j] = slot_ref_[slot];
  }
  for (size_t j = 0; tracked && op.differentiable() && j < inputs.size(); ++j) {
    if (!IsTrainable(inputs[j].dtype()) && dynamic_[p_.Slot(step.inputs[j])] &&
        !BackwardReadsOnlyThroughOps(op, step.attrs, static_cast<int>(j))) {
      return Fail(absl::StrCat(
          "step ", s, " (", op.name, ") input ", j, " is ",
          inputs[j].DebugString(),
          " computed from the call's inputs; its backward may read it"));
    }
  }
  const int plan_step = static_cast<int>(plan_->steps.size());
  for (size_t k = 0; k < outputs.size(); ++k) {
    const int slot = p_.step_slot[s] + static_cast<int>(k);
    slot_ref_[slot] = ProgramRef::Step(plan_step, static_cast<int>(k));
    dynamic_[slot] = dynamic;
    tracked_[slot] = tracked;
  }
  AddStep(std::move(planned), outputs);
}

void PlanBuilder::Executed(const OpDef& op, const AttrMap& attrs,
                           absl::Span<const Tensor> inputs,
                           const Tensors& outputs) {
  ProgramStep step;
  step.op = op.name;
  step.attrs = attrs;
  for (size_t j = 0; j < inputs.size(); ++j) {
    ProgramRef ref;
    if (!RefOf(inputs[j], &ref)) {
      return Fail(absl::StrCat("a backward's ", op.name, " read ",
                               inputs[j].DebugString(), " (id ", inputs[j].id(),
                               "), neither a value of the program nor a "
                               "constant"));
    }
    step.inputs.push_back(ref);
  }
  AddStep(std::move(step), outputs);
}

bool PlanBuilder::RefOf(const Tensor& t, ProgramRef* ref) {
  if (t.id() != 0) {
    if (auto it = by_id_.find(t.id()); it != by_id_.end()) {
      *ref = it->second;
      return true;
    }
    // A value under a new id (a gradient passed through gets one).
    auto it =
        t.num_elements() > 0 ? by_buffer_.find(t.raw_data()) : by_buffer_.end();
    if (it == by_buffer_.end() || it->second.dtype != t.dtype() ||
        it->second.shape != t.shape()) {
      return false;
    }
    *ref = it->second.ref;
    return true;
  }
  // A constant a backward made (from a dtype, a shape and a value), or an
  // empty tensor; the plan holds it.
  auto noted = t.num_elements() > 0 ? noted_.find(t.raw_data()) : noted_.end();
  if (t.num_elements() > 0 && noted == noted_.end()) return false;
  int index = noted != noted_.end() ? noted->second : -1;
  if (index < 0) {
    index = static_cast<int>(plan_->constants.size());
    plan_->constants.push_back(t);
    if (noted != noted_.end()) noted->second = index;
  }
  *ref = ProgramRef::Constant(index);
  return true;
}

void PlanBuilder::AddStep(ProgramStep step, absl::Span<const Tensor> outputs) {
  const int s = static_cast<int>(plan_->steps.size());
  std::vector<StepOutput> shapes;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const Tensor& t = outputs[k];
    const ProgramRef ref = ProgramRef::Step(s, static_cast<int>(k));
    if (t.id() != 0) by_id_.emplace(t.id(), ref);
    // The latest value in a buffer: the trace holds no values, so a
    // buffer may be freed and reused.
    if (t.num_elements() > 0) {
      by_buffer_.insert_or_assign(t.raw_data(),
                                  Known{ref, t.dtype(), t.shape()});
    }
    shapes.push_back({t.dtype(), t.shape()});
  }
  plan_->steps.push_back(std::move(step));
  step_outputs_.push_back(std::move(shapes));
}

absl::StatusOr<std::unique_ptr<Program>> PlanBuilder::Finish(
    const OpRegistry& registry, bool fuse) {
  if (!failure_.empty()) return absl::FailedPreconditionError(failure_);
  for (const ProgramRef& ref : p_.outputs) {
    plan_->outputs.push_back(slot_ref_[p_.Slot(ref)]);
  }
  if (fuse && registry.fused_loop_kernel() != nullptr) {
    FuseElementwise(*plan_, step_outputs_);
    AbsorbRowSums(*plan_, step_outputs_);
    RecomputeInLoops(*plan_, step_outputs_);
  }
  // The backward adds steps: room for them beyond a definition's limits
  // (the plan's memory is charged all the same).
  ProgramLimits limits;
  limits.max_steps *= 10;
  limits.max_values *= 10;
  if (absl::Status st = ValidateProgram(registry, plan_.get(), limits);
      !st.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the plan is not valid: ", st.message()));
  }
  plan_->expected_shapes.resize(plan_->num_slots);
  for (size_t s = 0; s < step_outputs_.size(); ++s) {
    for (size_t k = 0; k < step_outputs_[s].size(); ++k) {
      plan_->expected_shapes[plan_->step_slot[s] + k] =
          step_outputs_[s][k].shape;
    }
  }
  return std::move(plan_);
}

bool HasGradientStep(const Program& p) {
  return std::any_of(p.steps.begin(), p.steps.end(), [](const auto& step) {
    return step.kind == ProgramStep::kGradient;
  });
}

}  // namespace

PlannedProgram::PlannedProgram(const Program& program,
                               std::shared_ptr<MemoryAccount> account,
                               bool enabled, bool fuse)
    : program_(program), account_(std::move(account)), fuse_(fuse) {
  for (const Tensor& t : program.constants) {
    if (!constant_ids_.insert(t.id()).second) {
      not_planned_ = "two of its constants are one tensor";
    }
  }
  const bool second_order =
      program.num_tapes > 1 ||
      std::any_of(program.steps.begin(), program.steps.end(),
                  [](const ProgramStep& step) {
                    return step.kind == ProgramStep::kPushTape &&
                           step.persistent;
                  });
  if (!enabled) {
    not_planned_ = "plans are off";
  } else if (!HasGradientStep(program)) {
    not_planned_ = "the program takes no gradient";
  } else if (second_order) {
    // A tape could record a backward's ops, and a gradient differentiate
    // them: their integer inputs are not checked as the op steps' are.
    not_planned_ = "it has more than one tape, or a persistent one";
  }
}

PlannedProgram::~PlannedProgram() {
  if (account_ != nullptr) account_->Add(-plan_bytes_);
}

int64_t PlannedProgram::plan_steps() const {
  return plan_ != nullptr ? static_cast<int64_t>(plan_->steps.size()) : 0;
}

absl::StatusOr<Tensors> PlannedProgram::Run(OpExecutor& exec,
                                            absl::Span<const Tensor> args) {
  // Tapes and accumulators outside the program see the ops it runs as
  // defined; so does a tracer.
  const bool watched = exec.tapes().CouldRecord() ||
                       exec.accumulators().CouldAccumulate() ||
                       exec.observer() != nullptr;
  if (watched || (plan_ == nullptr && !not_planned_.empty()) || Aliased(args)) {
    return RunProgram(exec, program_, args);
  }
  if (plan_ == nullptr) return RunAndTrace(exec, args);
  if (!VariablesUnchanged()) {
    Drop("a variable the program holds changed its dtype or shape");
    return RunProgram(exec, program_, args);
  }
  absl::StatusOr<Tensors> planned = RunProgram(exec, *plan_, args);
  if (planned.ok()) return planned;
  // Undone; the program as defined gives the failure the client should see,
  // or shows the plan did not fit this call.
  absl::StatusOr<Tensors> defined = RunProgram(exec, program_, args);
  if (defined.ok()) {
    // Its steps are the plan's, not the program's.
    absl::string_view why = planned.status().message();
    absl::ConsumePrefix(&why, "program ");
    Drop(absl::StrCat("a planned call failed where the program ran: plan ",
                      why));
  }
  return defined;
}

absl::StatusOr<Tensors> PlannedProgram::RunAndTrace(
    OpExecutor& exec, absl::Span<const Tensor> args) {
  PlanBuilder builder(program_, args);
  absl::StatusOr<Tensors> results = RunProgram(exec, program_, args, &builder);
  if (!results.ok()) return results;  // a later call traces again
  absl::StatusOr<std::unique_ptr<Program>> plan =
      builder.Finish(exec.registry(), fuse_);
  if (!plan.ok()) {
    not_planned_ = std::string(plan.status().message());
    return results;
  }
  const int64_t bytes = (*plan)->StructureBytes();
  if (account_ != nullptr && !account_->TryCharge(bytes)) {
    not_planned_ = absl::StrCat("the plan's ", bytes,
                                " bytes would pass the memory limit");
    return results;
  }
  plan_ = *std::move(plan);
  plan_bytes_ = bytes;
  for (const Tensor& t : program_.constants) {
    if (const Variable* var = VariableOf(t)) {
      variables_.push_back({var, var->dtype, var->shape});
    }
  }
  return results;
}

// One tensor as two params, or as a param and a constant: a tape sees one
// value where a plan traced two (their gradients would be summed), so such
// a call runs as defined and traces nothing.
bool PlannedProgram::Aliased(absl::Span<const Tensor> args) const {
  absl::flat_hash_set<int64_t> ids;
  for (const Tensor& t : args) {
    if (constant_ids_.contains(t.id()) || !ids.insert(t.id()).second) {
      return true;
    }
  }
  return false;
}

bool PlannedProgram::VariablesUnchanged() const {
  return std::all_of(variables_.begin(), variables_.end(), [](const auto& v) {
    return v.var->dtype == v.dtype && v.var->shape == v.shape;
  });
}

void PlannedProgram::Drop(std::string why) {
  plan_.reset();
  variables_.clear();
  if (account_ != nullptr) account_->Add(-plan_bytes_);
  plan_bytes_ = 0;
  not_planned_ = std::move(why);
}

}  // namespace gradtape
