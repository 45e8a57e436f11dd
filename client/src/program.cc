// Captured steps: client::Function (gradtape/client/program.h). The first
// call records the commands `body` sends (SessionCore::BeginRecording) and
// turns them into a DefineProgram; later calls send one CallProgram.
#include "gradtape/client/program.h"

#include <atomic>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "client/src/session_core.h"
#include "core/base/status_macros.h"
#include "gradtape/v1/tape_service.pb.h"

namespace gradtape::client {
namespace {

// Program ids are per session; one counter per process is simpler and
// never repeats within a session.
std::atomic<int64_t> next_program_id{0};

// A first call that made a variable: recorded again on the next call.
constexpr absl::string_view kCreatesVariables = "creates a variable";

// Turns recorded commands into the definition of program `program_id`:
// ids of `args` become params, ids a recorded command made become step
// outputs, any other id a captured tensor. FAILED_PRECONDITION (with the
// reason) when the commands cannot be a program.
class Definition {
 public:
  Definition(int64_t program_id, absl::Span<const TensorSpec> signature,
             absl::Span<const int64_t> arg_ids) {
    def_ = cmd_.mutable_define_program();
    def_->set_program_id(program_id);
    for (size_t i = 0; i < signature.size(); ++i) {
      v1::ProgramParam* param = def_->add_params();
      param->set_dtype(static_cast<v1::DType>(signature[i].dtype));
      for (int64_t d : signature[i].shape) param->add_shape(d);
      v1::ProgramRef ref;
      ref.set_param(static_cast<int>(i));
      refs_.emplace(arg_ids[i], ref);  // an id given twice: its first param
    }
  }

  absl::Status Add(const v1::Command& cmd) {
    const int step = def_->steps_size();
    switch (cmd.kind_case()) {
      case v1::Command::kExecute: {
        const v1::ExecuteOp& e = cmd.execute();
        if (e.op() == "VarHandleOp") {
          return absl::FailedPreconditionError(kCreatesVariables);
        }
        v1::ProgramOp* op = def_->add_steps()->mutable_op();
        op->set_op(e.op());
        for (int64_t id : e.input_ids()) *op->add_inputs() = Ref(id);
        *op->mutable_attrs() = e.attrs();
        Outputs(step, e.output_ids());
        return absl::OkStatus();
      }
      case v1::Command::kPushTape: {
        const auto [it, inserted] = tapes_.try_emplace(
            cmd.push_tape().tape_id(), static_cast<int>(tapes_.size()));
        v1::ProgramPushTape* push = def_->add_steps()->mutable_push_tape();
        push->set_tape(it->second);
        push->set_persistent(cmd.push_tape().persistent());
        push->set_watch_accessed_variables(
            cmd.push_tape().watch_accessed_variables());
        return absl::OkStatus();
      }
      case v1::Command::kPopTape: {
        ASSIGN_OR_RETURN(int tape, Tape(cmd.pop_tape().tape_id(), "pops"));
        def_->add_steps()->mutable_pop_tape()->set_tape(tape);
        return absl::OkStatus();
      }
      case v1::Command::kWatch: {
        ASSIGN_OR_RETURN(int tape, Tape(cmd.watch().tape_id(), "watches on"));
        v1::ProgramWatch* watch = def_->add_steps()->mutable_watch();
        watch->set_tape(tape);
        for (int64_t id : cmd.watch().ids()) *watch->add_values() = Ref(id);
        return absl::OkStatus();
      }
      case v1::Command::kGradient: {
        const v1::Gradient& g = cmd.gradient();
        if (g.return_values()) {
          return absl::FailedPreconditionError(
              "it reads gradient values (GradientValues)");
        }
        ASSIGN_OR_RETURN(int tape, Tape(g.tape_id(), "differentiates"));
        v1::ProgramGradient* out = def_->add_steps()->mutable_gradient();
        out->set_tape(tape);
        for (int64_t id : g.target_ids()) *out->add_targets() = Ref(id);
        for (int64_t id : g.source_ids()) *out->add_sources() = Ref(id);
        for (int64_t id : g.output_gradient_ids()) {
          *out->add_output_gradients() = id == 0 ? v1::ProgramRef() : Ref(id);
        }
        out->set_unconnected(g.unconnected());
        Outputs(step, g.result_ids());
        return absl::OkStatus();
      }
      case v1::Command::kStopRecording:
        def_->add_steps()->mutable_stop_recording();
        return absl::OkStatus();
      case v1::Command::kStartRecording:
        def_->add_steps()->mutable_start_recording();
        return absl::OkStatus();
      case v1::Command::kPut:
      case v1::Command::kPutBegin:
      case v1::Command::kPutChunk:
        // A tensor put by the body is captured by value (its id).
      case v1::Command::kDeleteTape:
      case v1::Command::kRelease:
        return absl::OkStatus();  // the server ends the program's tapes
      default: {
        const google::protobuf::FieldDescriptor* field =
            v1::Command::descriptor()->FindFieldByNumber(cmd.kind_case());
        return absl::FailedPreconditionError(absl::StrCat(
            "it sends ", field != nullptr ? field->name() : "a command",
            ", which a program cannot hold (reads of values, Jacobians, "
            "forward mode, custom gradients, checkpoints)"));
      }
    }
  }

  v1::Command Finish(absl::Span<const int64_t> output_ids) {
    for (int64_t id : output_ids) *def_->add_outputs() = Ref(id);
    return std::move(cmd_);
  }

 private:
  v1::ProgramRef Ref(int64_t id) {
    auto it = refs_.find(id);
    if (it != refs_.end()) return it->second;
    v1::ProgramRef ref;
    ref.set_captured_id(id);
    return ref;
  }
  template <typename Ids>
  void Outputs(int step, const Ids& ids) {
    int k = 0;
    for (int64_t id : ids) {
      v1::ProgramRef ref;
      ref.mutable_step()->set_step(step);
      ref.mutable_step()->set_output(k++);
      refs_[id] = ref;
    }
  }
  absl::StatusOr<int> Tape(int64_t tape_id, absl::string_view what) {
    auto it = tapes_.find(tape_id);
    if (it == tapes_.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "it ", what, " tape ", tape_id, ", which it did not push"));
    }
    return it->second;
  }

  v1::Command cmd_;
  v1::DefineProgram* def_;
  absl::flat_hash_map<int64_t, v1::ProgramRef> refs_;
  absl::flat_hash_map<int64_t, int> tapes_;
};

}  // namespace

Function::Function(Session& session, std::vector<TensorSpec> signature,
                   Body body)
    : session_(session),
      signature_(std::move(signature)),
      body_(std::move(body)) {}

Function::~Function() {
  if (program_id_ == 0 || session_.core()->closed()) return;
  v1::Command del;
  del.mutable_delete_program()->set_program_id(program_id_);
  session_.core()->Enqueue(del);
}

absl::StatusOr<std::vector<Tensor>> Function::operator()(
    absl::Span<const Tensor> args) {
  internal::SessionCore& core = *session_.core();
  if (args.size() != signature_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Function takes ", signature_.size(), " arguments, got ", args.size()));
  }
  std::vector<int64_t> arg_ids(args.size());
  std::string problem;
  for (size_t i = 0; i < args.size(); ++i) {
    arg_ids[i] = core.IdFor(args[i], "argument", i, &problem);
  }
  if (!problem.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("Function: ", problem));
  }
  if (program_id_ != 0) {
    std::vector<Tensor> outputs;
    v1::Command call;
    v1::CallProgram* c = call.mutable_call_program();
    c->set_program_id(program_id_);
    for (int64_t id : arg_ids) c->add_input_ids(id);
    for (int k = 0; k < num_outputs_; ++k) {
      outputs.push_back(core.MakeTensor(core.NewTensorId()));
      c->add_output_ids(outputs.back().id());
    }
    core.Enqueue(call, "CallProgram");
    return outputs;
  }
  ++traces_;
  if (!capture_status_.ok()) return body_(args);  // not capturable: eager

  internal::SessionCore::Recording recording;
  core.BeginRecording(&recording);
  std::vector<Tensor> outputs = body_(args);
  core.EndRecording();
  std::vector<int64_t> output_ids;
  for (const Tensor& t : outputs) {
    output_ids.push_back(core.IdFor(t, "output", output_ids.size(), &problem));
  }
  const int64_t id = next_program_id.fetch_add(1) + 1;
  Definition def(id, signature_, arg_ids);
  absl::Status status = problem.empty()
                            ? absl::OkStatus()
                            : absl::FailedPreconditionError(problem);
  for (const v1::Command& cmd : recording.commands) {
    if (!status.ok()) break;
    status = def.Add(cmd);
  }
  if (status.ok()) {
    core.Enqueue(def.Finish(output_ids), "DefineProgram");
    program_id_ = id;
    num_outputs_ = static_cast<int>(outputs.size());
  } else if (status.message() != kCreatesVariables) {
    capture_status_ = absl::FailedPreconditionError(
        absl::StrCat("Function runs eagerly: ", status.message()));
  }
  // The ids the recorded commands named are now held by the program.
  for (int64_t held : recording.held_releases) core.Release(held);
  return outputs;
}

}  // namespace gradtape::client
