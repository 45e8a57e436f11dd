// Writes the seed corpus of the fuzzers (tests/fuzz/corpus/<fuzzer>/):
//   make_corpus OUT_DIR
// batch_fuzzer: valid CommandBatch messages covering every command kind and
// an execute of every registered op; checkpoint_fuzzer: valid checkpoint
// files; convert_fuzzer: valid TensorValue and AttrValue messages. Every
// batch releases the ids and tapes it made, so seeds compose when the
// fuzzer's session keeps state across inputs.
//
// Regenerate after a protocol or op change (scripts/fuzz.sh --corpus).
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "core/session/checkpoint.h"
#include "core/tensor/tensor.h"
#include "gradtape/v1/tape_service.pb.h"
#include "server/convert.h"

namespace v1 = gradtape::v1;

namespace {

std::string out_dir;

void Write(const std::string& fuzzer, const std::string& name,
           const std::string& bytes) {
  const std::string dir = out_dir + "/" + fuzzer;
  ::mkdir(out_dir.c_str(), 0755);
  ::mkdir(dir.c_str(), 0755);
  std::ofstream f(dir + "/" + name, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) {
    std::fprintf(stderr, "cannot write %s/%s\n", dir.c_str(), name.c_str());
    std::exit(1);
  }
}

template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()),
                     v.size() * sizeof(T));
}

// Attr values through the server's own conversion (server/convert.h).
v1::AttrValue Attr(gradtape::AttrValue value) {
  v1::AttrValue a;
  gradtape::server::ToProto(value, &a);
  return a;
}
v1::AttrValue IntsAttr(std::vector<int64_t> values) {
  return Attr(std::move(values));
}
v1::AttrValue TypeAttr(v1::DType t) {
  return Attr(static_cast<gradtape::DType>(static_cast<int>(t)));
}
v1::AttrValue IntAttr(int64_t i) { return Attr(i); }
v1::AttrValue BoolAttr(bool b) { return Attr(b); }
v1::AttrValue StringAttr(const std::string& s) { return Attr(s); }
v1::AttrValue FloatAttr(double f) { return Attr(f); }

// Builds one batch; records the ids and tapes it uses so Finish() can
// release them.
class Batch {
 public:
  v1::Command* Next() {
    v1::Command* c = batch_.add_commands();
    c->set_seq(++seq_);
    return c;
  }
  void Put(int64_t id, v1::DType dtype, std::vector<int64_t> shape,
           std::string data) {
    v1::PutTensor* p = Next()->mutable_put();
    p->set_id(id);
    p->mutable_value()->set_dtype(dtype);
    for (int64_t d : shape) p->mutable_value()->add_shape(d);
    p->mutable_value()->set_data(std::move(data));
    Use(id);
  }
  void PutF32(int64_t id, std::vector<int64_t> shape, std::vector<float> v) {
    Put(id, v1::DTYPE_FLOAT32, std::move(shape), Bytes<float>(v));
  }
  v1::ExecuteOp* Exec(
      const std::string& op, std::vector<int64_t> inputs,
      std::vector<int64_t> outputs,
      std::vector<std::pair<std::string, v1::AttrValue>> attrs = {}) {
    v1::ExecuteOp* e = Next()->mutable_execute();
    Fill(e, op, inputs, outputs, attrs);
    return e;
  }
  void Fill(v1::ExecuteOp* e, const std::string& op,
            const std::vector<int64_t>& inputs,
            const std::vector<int64_t>& outputs,
            const std::vector<std::pair<std::string, v1::AttrValue>>& attrs) {
    e->set_op(op);
    for (int64_t id : inputs) e->add_input_ids(id);
    for (int64_t id : outputs) {
      e->add_output_ids(id);
      Use(id);
    }
    for (const auto& [k, v] : attrs) (*e->mutable_attrs())[k] = v;
  }
  void Fetch(int64_t id) { Next()->mutable_fetch()->set_id(id); }
  // Chunked transfer: PutTensorBegin, PutTensorChunk, FetchTensor with
  // offset and max_bytes.
  void PutBegin(int64_t id, v1::DType dtype, std::vector<int64_t> shape) {
    v1::PutTensorBegin* p = Next()->mutable_put_begin();
    p->set_id(id);
    p->set_dtype(dtype);
    for (int64_t d : shape) p->add_shape(d);
    Use(id);
  }
  void PutChunk(int64_t id, int64_t offset, std::string data) {
    v1::PutTensorChunk* p = Next()->mutable_put_chunk();
    p->set_id(id);
    p->set_offset(offset);
    p->set_data(std::move(data));
  }
  void FetchChunk(int64_t id, int64_t offset, int64_t max_bytes) {
    v1::FetchTensor* f = Next()->mutable_fetch();
    f->set_id(id);
    f->set_offset(offset);
    f->set_max_bytes(max_bytes);
  }
  void PushTape(int64_t tape, bool persistent, bool watch_vars = true) {
    v1::PushTape* p = Next()->mutable_push_tape();
    p->set_tape_id(tape);
    p->set_persistent(persistent);
    p->set_watch_accessed_variables(watch_vars);
    tapes_.push_back(tape);
  }
  void Watch(int64_t tape, std::vector<int64_t> ids) {
    v1::Watch* w = Next()->mutable_watch();
    w->set_tape_id(tape);
    for (int64_t id : ids) w->add_ids(id);
  }
  void Gradient(int64_t tape, std::vector<int64_t> targets,
                std::vector<int64_t> sources, std::vector<int64_t> results,
                bool zero = false, std::vector<int64_t> output_grads = {}) {
    v1::Gradient* g = Next()->mutable_gradient();
    g->set_tape_id(tape);
    for (int64_t id : targets) g->add_target_ids(id);
    for (int64_t id : sources) g->add_source_ids(id);
    for (int64_t id : output_grads) g->add_output_gradient_ids(id);
    for (int64_t id : results) {
      g->add_result_ids(id);
      Use(id);
    }
    g->set_unconnected(zero ? v1::UNCONNECTED_ZERO : v1::UNCONNECTED_NONE);
    g->set_return_values(true);
  }
  void Stats() { Next()->mutable_stats(); }
  // Marks `id` for release by Finish() (result ids of other commands).
  void Use(int64_t id) {
    for (int64_t x : ids_)
      if (x == id) return;
    ids_.push_back(id);
  }
  // Pops and deletes the tapes, releases every id used, serializes.
  std::string Finish() {
    for (auto it = tapes_.rbegin(); it != tapes_.rend(); ++it) {
      Next()->mutable_pop_tape()->set_tape_id(*it);
      Next()->mutable_delete_tape()->set_tape_id(*it);
    }
    if (!ids_.empty()) {
      v1::ReleaseTensors* r = Next()->mutable_release();
      for (int64_t id : ids_) r->add_ids(id);
    }
    batch_.set_batch_id(1);
    std::string out;
    batch_.SerializeToString(&out);
    return out;
  }

 private:
  v1::CommandBatch batch_;
  int64_t seq_ = 0;
  std::vector<int64_t> ids_;
  std::vector<int64_t> tapes_;
};

void BatchSeeds() {
  const std::string fz = "batch_fuzzer";
  {  // put, execute (math), fetch, stats, release
    Batch b;
    b.PutF32(1, {2, 2}, {1, 2, 3, 4});
    b.PutF32(2, {2, 2}, {0.5, -1, 2, 0});
    b.Exec("MatMul", {1, 2}, {3});
    b.Exec("MatMul", {1, 2}, {4}, {{"transpose_a", BoolAttr(true)}});
    b.Exec("AddV2", {3, 4}, {5});
    b.Exec("Mul", {5, 1}, {6});
    b.Exec("Tanh", {6}, {7});
    b.Exec("Sum", {7}, {8}, {{"axis", IntsAttr({1})}});
    b.Fetch(8);
    b.Stats();
    Write(fz, "math_fetch", b.Finish());
  }
  {  // chunked put and fetch, a pending id read, a chunk out of order
    Batch b;
    const std::vector<float> v = {1, 2, 3, 4, 5, 6};
    const std::string bytes = Bytes<float>(v);
    b.PutBegin(1, v1::DTYPE_FLOAT32, {2, 3});
    b.PutChunk(1, 0, bytes.substr(0, 8));
    b.Exec("Neg", {1}, {2});
    b.PutChunk(1, 16, bytes.substr(16));
    b.PutChunk(1, 8, bytes.substr(8));
    b.FetchChunk(1, 0, 10);
    b.FetchChunk(1, 10, 10);
    b.FetchChunk(1, 20, 10);
    b.PutBegin(3, v1::DTYPE_BOOL, {3});
    b.PutChunk(3, 0, std::string("\x00\x02\x01", 3));
    b.Fetch(3);
    b.PutBegin(4, v1::DTYPE_FLOAT64, {1 << 20});  // released pending
    Write(fz, "chunked_transfer", b.Finish());
  }
  {  // array ops: Reshape, GatherV2, Cast, BroadcastTo
    Batch b;
    b.PutF32(1, {2, 3}, {1, 2, 3, 4, 5, 6});
    b.Put(2, v1::DTYPE_INT32, {2}, Bytes<int32_t>({1, 0}));
    b.Put(3, v1::DTYPE_INT64, {3}, Bytes<int64_t>({2, 0, 1}));
    b.Exec("Reshape", {1}, {4}, {{"shape", IntsAttr({3, 2})}});
    b.Exec("Reshape", {1}, {5}, {{"shape", IntsAttr({-1})}});
    b.Exec("GatherV2", {4, 2}, {6});
    b.Exec("GatherV2", {1, 3}, {7}, {{"axis", IntAttr(1)}});
    b.Exec("Cast", {1}, {8}, {{"DstT", TypeAttr(v1::DTYPE_FLOAT64)}});
    b.Exec("Cast", {8}, {9}, {{"DstT", TypeAttr(v1::DTYPE_INT32)}});
    b.PutF32(10, {3, 1}, {1, 2, 3});
    b.Exec("BroadcastTo", {10}, {11}, {{"shape", IntsAttr({2, 3, 4})}});
    b.Fetch(6);
    b.Fetch(7);
    b.Fetch(9);
    b.Fetch(11);
    Write(fz, "array_ops", b.Finish());
  }
  {  // tapes: push, watch, gradient, jacobian, pop, delete
    Batch b;
    b.PushTape(1, /*persistent=*/true);
    b.PutF32(1, {2, 2}, {1, 2, 3, 4});
    b.PutF32(2, {2, 1}, {0.5, -1});
    b.Watch(1, {1, 2});
    b.Exec("MatMul", {1, 2}, {3});
    b.Exec("Tanh", {3}, {4});
    b.Exec("Sum", {4}, {5});
    b.Gradient(1, {5}, {1, 2}, {6, 7});
    {
      v1::Jacobian* j = b.Next()->mutable_jacobian();
      j->set_tape_id(1);
      j->set_target_id(4);
      j->add_source_ids(1);
      j->add_result_ids(8);
      j->set_return_values(true);
      b.Use(8);
    }
    {
      v1::Jacobian* j = b.Next()->mutable_jacobian();
      j->set_tape_id(1);
      j->set_target_id(3);
      j->add_source_ids(1);
      j->add_result_ids(9);
      j->set_batch(true);
      j->set_unconnected(v1::UNCONNECTED_ZERO);
      b.Use(9);
    }
    b.Gradient(1, {4}, {2}, {10}, false, {3});
    b.Fetch(6);
    b.Stats();
    Write(fz, "tape_gradient_jacobian", b.Finish());
  }
  {  // nested tapes (second order), stop / start recording
    Batch b;
    b.PushTape(1, true);
    b.PushTape(2, true);
    b.PutF32(1, {3}, {0.1f, 0.2f, 0.3f});
    b.Watch(1, {1});
    b.Watch(2, {1});
    b.Exec("Tanh", {1}, {2});
    b.Next()->mutable_stop_recording();
    b.Exec("Square", {1}, {3});
    b.Next()->mutable_start_recording();
    b.Exec("Sum", {2}, {4});
    b.Gradient(2, {4}, {1}, {5});
    b.Exec("Sum", {5}, {6});
    b.Gradient(1, {6}, {1}, {7});
    b.Gradient(1, {3}, {1}, {8}, /*zero=*/true);
    {
      v1::WatchedVariables* w = b.Next()->mutable_watched_variables();
      w->set_tape_id(1);
    }
    b.Fetch(7);
    Write(fz, "nested_tapes_recording", b.Finish());
  }
  {  // non-persistent tape used twice
    Batch b;
    b.PushTape(3, false);
    b.PutF32(1, {2}, {1, 2});
    b.Watch(3, {1});
    b.Exec("Exp", {1}, {2});
    b.Gradient(3, {2}, {1}, {3});
    b.Gradient(3, {2}, {1}, {4});
    Write(fz, "non_persistent_tape", b.Finish());
  }
  {  // variables, training op, checkpoints
    Batch b;
    b.Exec("VarHandleOp", {}, {1},
           {{"dtype", TypeAttr(v1::DTYPE_FLOAT32)},
            {"shape", IntsAttr({2, 2})},
            {"shared_name", StringAttr("w")}});
    b.Exec("VarHandleOp", {}, {2},
           {{"dtype", TypeAttr(v1::DTYPE_FLOAT64)},
            {"shape", IntsAttr({3})},
            {"shared_name", StringAttr("b")}});
    b.PutF32(3, {2, 2}, {1, 2, 3, 4});
    b.Put(4, v1::DTYPE_FLOAT64, {3}, Bytes<double>({1, 2, 3}));
    b.Exec("AssignVariableOp", {1, 3}, {});
    b.Exec("AssignVariableOp", {2, 4}, {});
    b.PushTape(1, true, /*watch_vars=*/true);
    b.Exec("ReadVariableOp", {1}, {5},
           {{"dtype", TypeAttr(v1::DTYPE_FLOAT32)}});
    b.Exec("Sum", {5}, {6});
    {
      v1::WatchedVariables* w = b.Next()->mutable_watched_variables();
      w->set_tape_id(1);
    }
    b.Gradient(1, {6}, {1}, {7});
    b.Put(8, v1::DTYPE_FLOAT32, {}, Bytes<float>({0.1f}));
    b.Exec("ResourceApplyGradientDescent", {1, 8, 7}, {});
    {
      v1::SaveCheckpoint* s = b.Next()->mutable_save_checkpoint();
      s->set_name("ck1");
    }
    {
      v1::SaveCheckpoint* s = b.Next()->mutable_save_checkpoint();
      s->set_name("ck2");
      s->add_variable_ids(1);
    }
    b.Exec("AssignVariableOp", {1, 3}, {});
    {
      v1::RestoreCheckpoint* r = b.Next()->mutable_restore_checkpoint();
      r->set_name("ck1");
    }
    {
      v1::RestoreCheckpoint* r = b.Next()->mutable_restore_checkpoint();
      r->set_name("ck2");
      r->add_variable_ids(1);
    }
    b.Exec("ReadVariableOp", {1}, {9},
           {{"dtype", TypeAttr(v1::DTYPE_FLOAT32)}});
    b.Fetch(9);
    b.Stats();
    Write(fz, "variables_checkpoints", b.Finish());
  }
  {  // forward accumulators
    Batch b;
    b.Next()->mutable_push_accumulator()->set_accumulator_id(1);
    b.PutF32(1, {3}, {0.5f, 1, 2});
    b.PutF32(2, {3}, {1, 0, 0});
    {
      v1::AccumulatorWatch* w = b.Next()->mutable_accumulator_watch();
      w->set_accumulator_id(1);
      w->add_ids(1);
      w->add_tangent_ids(2);
    }
    b.Exec("Tanh", {1}, {3});
    b.Exec("Mul", {3, 1}, {4});
    {
      v1::FetchJvp* f = b.Next()->mutable_fetch_jvp();
      f->set_accumulator_id(1);
      f->set_id(4);
      f->set_result_id(5);
      f->set_return_value(true);
    }
    {
      v1::FetchJvp* f = b.Next()->mutable_fetch_jvp();
      f->set_accumulator_id(1);
      f->set_id(2);
      f->set_result_id(6);
      f->set_unconnected(v1::UNCONNECTED_ZERO);
      f->set_return_value(true);
    }
    b.Next()->mutable_pop_accumulator()->set_accumulator_id(1);
    b.Next()->mutable_delete_accumulator()->set_accumulator_id(1);
    b.Use(5);
    b.Use(6);
    Write(fz, "accumulators", b.Finish());
  }
  {  // execute_with_gradient: Square with a custom gradient dy * x + dy * x
    Batch b;
    b.PushTape(1, true);
    b.PutF32(1, {2}, {3, 4});
    b.Watch(1, {1});
    v1::ExecuteWithGradient* e = b.Next()->mutable_execute_with_gradient();
    b.Fill(e->mutable_op(), "Square", {1}, {2}, {});
    {
      v1::GradientStep* s = e->add_steps();
      s->set_op("Mul");
      s->add_inputs()->set_upstream(0);
      s->add_inputs()->set_input(0);
    }
    {
      v1::GradientStep* s = e->add_steps();
      s->set_op("AddV2");
      v1::GradientRef::StepOutput* a = s->add_inputs()->mutable_step();
      a->set_step(0);
      a->set_output(0);
      v1::GradientRef::StepOutput* c = s->add_inputs()->mutable_step();
      c->set_step(0);
      c->set_output(0);
    }
    {
      v1::GradientRef::StepOutput* g =
          e->add_input_gradients()->mutable_ref()->mutable_step();
      g->set_step(1);
      g->set_output(0);
    }
    b.Exec("Sum", {2}, {3});
    b.Gradient(1, {3}, {1}, {4});
    // A custom gradient that captures a session tensor and the output.
    b.PutF32(5, {2}, {10, 20});
    v1::ExecuteWithGradient* e2 = b.Next()->mutable_execute_with_gradient();
    b.Fill(e2->mutable_op(), "Tanh", {1}, {6}, {});
    {
      v1::GradientStep* s = e2->add_steps();
      s->set_op("Mul");
      s->add_inputs()->set_output(0);
      s->add_inputs()->set_tensor_id(5);
    }
    {
      v1::GradientRef::StepOutput* g =
          e2->add_input_gradients()->mutable_ref()->mutable_step();
      g->set_step(0);
      g->set_output(0);
    }
    b.Gradient(1, {6}, {1}, {7});
    b.Fetch(4);
    b.Fetch(7);
    Write(fz, "execute_with_gradient", b.Finish());
  }
  {  // failures and poisoned ids: an unknown op, then a use of its output
    Batch b;
    b.PutF32(1, {2}, {1, 2});
    b.Exec("NoSuchOp", {1}, {2});
    b.Exec("Tanh", {2}, {3});
    b.Fetch(3);
    b.Fetch(99);
    b.Exec("MatMul", {1, 1}, {4});
    b.Stats();
    Write(fz, "poisoned_chain", b.Finish());
  }
  {  // exactly-once, raw seqs (batch_id 3 mod 4: the harness keeps them):
     // a fetch repeated with its seq (a duplicate with its kept result), a
     // put resent (no result), a seq below 1, and an ack_seq
    Batch b;
    b.PutF32(1, {2}, {1, 2});
    b.Fetch(1);
    v1::CommandBatch raw;
    if (!raw.ParseFromString(b.Finish())) std::exit(1);
    raw.set_batch_id(3);
    raw.set_ack_seq(1);
    const v1::Command put = raw.commands(0), fetch = raw.commands(1);
    *raw.add_commands() = fetch;            // duplicate, result kept
    *raw.add_commands() = put;              // duplicate, no result
    v1::Command* bad = raw.add_commands();  // seq below 1
    *bad = fetch;
    bad->set_seq(0);
    Write(fz, "exactly_once_raw_seqs", raw.SerializeAsString());
  }
  // Every registered op once, with float32 [2,2] inputs (float64 too for a
  // few) and default attrs: reaches every kernel's argument checks.
  for (const auto& op : gradtape::DefaultRegistry().ops()) {
    for (v1::DType dtype : {v1::DTYPE_FLOAT32, v1::DTYPE_FLOAT64}) {
      if (dtype == v1::DTYPE_FLOAT64 && op->index % 4 != 0) continue;
      Batch b;
      std::vector<int64_t> inputs, outputs;
      for (int i = 0; i < op->num_inputs(); ++i) {
        const int64_t id = 1 + i;
        if (dtype == v1::DTYPE_FLOAT32) {
          b.PutF32(id, {2, 2}, {0.5f, 1.5f, -0.25f, 2});
        } else {
          b.Put(id, dtype, {2, 2}, Bytes<double>({0.5, 1.5, -0.25, 2}));
        }
        inputs.push_back(id);
      }
      for (int i = 0; i < op->num_outputs(); ++i) outputs.push_back(100 + i);
      b.PushTape(1, true);
      b.Watch(1, inputs);
      b.Exec(op->name, inputs, outputs);
      if (!outputs.empty() && !inputs.empty()) {
        std::vector<int64_t> results;
        for (size_t i = 0; i < inputs.size(); ++i) results.push_back(200 + i);
        b.Gradient(1, {outputs[0]}, inputs, results, /*zero=*/true);
      }
      for (int64_t id : outputs) b.Fetch(id);
      Write(fz, "op_" + op->name + (dtype == v1::DTYPE_FLOAT64 ? "_f64" : ""),
            b.Finish());
    }
  }
}

void CheckpointSeeds() {
  using gradtape::CheckpointEntry;
  using gradtape::DType;
  using gradtape::Tensor;
  auto t = [](DType dtype, std::vector<int64_t> shape, std::string bytes) {
    return *Tensor::FromBytes(dtype, shape, bytes);
  };
  const std::string fz = "checkpoint_fuzzer";
  Write(fz, "empty", gradtape::EncodeCheckpoint({}));
  Write(fz, "one_f32",
        gradtape::EncodeCheckpoint(
            {{"w", t(DType::kFloat32, {2, 2}, Bytes<float>({1, 2, 3, 4}))}}));
  std::vector<CheckpointEntry> all = {
      {"f64", t(DType::kFloat64, {3}, Bytes<double>({1, 2, 3}))},
      {"i32", t(DType::kInt32, {2, 1}, Bytes<int32_t>({7, -7}))},
      {"i64", t(DType::kInt64, {}, Bytes<int64_t>({1}))},
      {"bool", t(DType::kBool, {2}, std::string("\x01\x00", 2))},
      {"c64", t(DType::kComplex64, {1}, Bytes<float>({1, -1}))},
      {"c128", t(DType::kComplex128, {1}, Bytes<double>({2, -2}))},
      {"empty.0x3", t(DType::kFloat32, {0, 3}, "")},
      {"layer_1.kernel-a",
       t(DType::kFloat32, {1, 1, 1, 2}, Bytes<float>({5, 6}))},
  };
  Write(fz, "every_dtype", gradtape::EncodeCheckpoint(all));
}

void ConvertSeeds() {
  const std::string fz = "convert_fuzzer";
  auto tensor = [&](const std::string& name, v1::DType dtype,
                    std::vector<int64_t> shape, std::string data) {
    v1::TensorValue v;
    v.set_dtype(dtype);
    for (int64_t d : shape) v.add_shape(d);
    v.set_data(std::move(data));
    Write(fz, "tensor_" + name, v.SerializeAsString());
  };
  tensor("f32", v1::DTYPE_FLOAT32, {2, 2}, Bytes<float>({1, 2, 3, 4}));
  tensor("f64", v1::DTYPE_FLOAT64, {2}, Bytes<double>({1, 2}));
  tensor("i32", v1::DTYPE_INT32, {3}, Bytes<int32_t>({1, 2, 3}));
  tensor("i64", v1::DTYPE_INT64, {}, Bytes<int64_t>({42}));
  tensor("bool", v1::DTYPE_BOOL, {2}, std::string("\x01\x00", 2));
  tensor("c64", v1::DTYPE_COMPLEX64, {1}, Bytes<float>({1, 2}));
  tensor("c128", v1::DTYPE_COMPLEX128, {1}, Bytes<double>({1, 2}));
  tensor("zero_size", v1::DTYPE_FLOAT32, {0, 1000000}, "");
  tensor("resource", v1::DTYPE_RESOURCE, {}, Bytes<int64_t>({1}));
  auto attr = [&](const std::string& name, const v1::AttrValue& a) {
    Write(fz, "attr_" + name, a.SerializeAsString());
  };
  attr("b", BoolAttr(true));
  attr("i", IntAttr(-3));
  attr("f", FloatAttr(0.25));
  attr("s", StringAttr("shared"));
  attr("type", TypeAttr(v1::DTYPE_FLOAT64));
  attr("ints", IntsAttr({2, -1, 3}));
  attr("empty", v1::AttrValue());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  out_dir = argv[1];
  BatchSeeds();
  CheckpointSeeds();
  ConvertSeeds();
  return 0;
}
