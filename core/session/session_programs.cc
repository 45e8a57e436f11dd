// Session commands for captured steps (core/autodiff/program.h): define,
// call, delete and list programs. Same rules as core/session/session.cc:
// every command is atomic, failures poison the ids it would have filled,
// messages name the command, "command <seq>", the program and the offending
// step, id or shape.
#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/session/session.h"

namespace gradtape {

absl::Status Session::DefineProgram(int64_t seq, int64_t program_id,
                                    ProgramDefinition definition) {
  return Run(seq, "DefineProgram", {}, [&](const Command& cmd) -> absl::Status {
    const std::string where = absl::StrCat("program ", program_id);
    if (program_id == 0) {
      return cmd.Error(absl::StatusCode::kInvalidArgument,
                       "program id 0 is reserved; program ids are nonzero");
    }
    if (programs_.contains(program_id)) {
      return cmd.Error(absl::StatusCode::kAlreadyExists, where,
                       " is already defined; delete it first or choose a new "
                       "id");
    }
    if (programs_.size() >= kMaxPrograms) {
      return cmd.Error(absl::StatusCode::kResourceExhausted, "the session has ",
                       programs_.size(), " programs, the limit; delete some");
    }
    Program& program = definition.program;
    program.constants.clear();
    program.constants.reserve(definition.captured_ids.size());
    for (int64_t id : definition.captured_ids) {
      ASSIGN_OR_RETURN(Tensor t, Resolve(cmd, id));
      program.constants.push_back(std::move(t));
    }
    RETURN_IF_ERROR(
        cmd.Annotate(ValidateProgram(exec_.registry(), &program), where));
    auto stored = std::make_unique<StoredProgram>();
    stored->bytes = program.StructureBytes();
    if (const MemoryAccount* refuser =
            account_->TryChargeOrRefuser(stored->bytes)) {
      return cmd.Annotate(
          MemoryRefusal(*refuser, absl::StrCat(where, "'s steps"),
                        stored->bytes, "release tensors or delete programs"),
          where);
    }
    stored->program = std::move(program);
    stored->planned = std::make_unique<PlannedProgram>(
        stored->program, account_, plan_programs_, fuse_programs_);
    programs_.emplace(program_id, std::move(stored));
    return absl::OkStatus();
  });
}

absl::Status Session::CallProgram(int64_t seq, int64_t program_id,
                                  absl::Span<const int64_t> inputs,
                                  absl::Span<const int64_t> outputs) {
  return Run(
      seq, "CallProgram", outputs, [&](const Command& cmd) -> absl::Status {
        const std::string where = absl::StrCat("program ", program_id);
        auto it = programs_.find(program_id);
        if (it == programs_.end()) {
          return cmd.Error(absl::StatusCode::kNotFound, "unknown ", where,
                           " (never defined, or deleted)");
        }
        StoredProgram& stored = *it->second;
        const Program& program = stored.program;
        if (inputs.size() != program.params.size()) {
          return cmd.Error(absl::StatusCode::kInvalidArgument, where, " takes ",
                           program.params.size(), " inputs, got ",
                           inputs.size());
        }
        if (outputs.size() != program.outputs.size()) {
          return cmd.Error(absl::StatusCode::kInvalidArgument, where, " has ",
                           program.outputs.size(), " outputs, got ",
                           outputs.size(), " output ids");
        }
        Tensors in;
        RETURN_IF_ERROR(ResolveAll(cmd, inputs, &in));
        for (size_t i = 0; i < in.size(); ++i) {
          const ProgramParam& param = program.params[i];
          if (in[i].dtype() != param.dtype || in[i].shape() != param.shape) {
            return cmd.Error(absl::StatusCode::kInvalidArgument, where,
                             " input ", i, " (id ", inputs[i], ") is ",
                             in[i].DebugString(), "; the program takes ",
                             DTypeName(param.dtype), ShapeString(param.shape),
                             " (a new shape or dtype needs a new program)");
          }
        }
        RETURN_IF_ERROR(CheckFreeOutputs(cmd, outputs));
        ASSIGN_OR_RETURN(Tensors results,
                         cmd.Annotate(stored.planned->Run(exec_, in), where));
        // One id, one handle: an output that is an input, or the same value
        // twice, gets its own copy of the id.
        absl::flat_hash_set<int64_t> held;
        for (const Tensor& t : in) held.insert(t.id());
        for (size_t k = 0; k < results.size(); ++k) {
          Tensor& r = results[k];
          if (!r.valid()) {
            StoreNone(
                outputs[k],
                absl::StrCat("is a None gradient: output ", k, " of ", where,
                             " is the gradient of a source not "
                             "connected to its targets"));
            continue;
          }
          if (!held.insert(r.id()).second) r = exec_.Adopt(r);
          Store(outputs[k], std::move(r));
        }
        ++stored.calls;
        return absl::OkStatus();
      });
}

absl::Status Session::DeleteProgram(int64_t seq, int64_t program_id) {
  return Run(seq, "DeleteProgram", {}, [&](const Command& cmd) -> absl::Status {
    auto it = programs_.find(program_id);
    if (it == programs_.end()) {
      return cmd.Error(absl::StatusCode::kNotFound, "unknown program ",
                       program_id, " (never defined, or deleted)");
    }
    account_->Add(-it->second->bytes);
    programs_.erase(it);
    return absl::OkStatus();
  });
}

std::vector<ProgramInfo> Session::ListPrograms(int64_t seq) {
  return *Run(
      seq, "ListPrograms", {},
      [&](const Command&) -> absl::StatusOr<std::vector<ProgramInfo>> {
        std::vector<ProgramInfo> list;
        list.reserve(programs_.size());
        for (const auto& [id, stored] : programs_) {
          const Program& p = stored->program;
          const PlannedProgram& planned = *stored->planned;
          list.push_back({id, static_cast<int>(p.params.size()),
                          static_cast<int>(p.steps.size()),
                          static_cast<int>(p.outputs.size()),
                          stored->bytes + planned.plan_bytes(), stored->calls,
                          planned.plan_steps(), planned.not_planned()});
        }
        std::sort(list.begin(), list.end(),
                  [](const ProgramInfo& a, const ProgramInfo& b) {
                    return a.id < b.id;
                  });
        return list;
      });
}

}  // namespace gradtape
