// Writes the seed corpus of the fuzzers (tests/fuzz/corpus/<fuzzer>/):
//   make_corpus OUT_DIR
// batch_fuzzer: valid CommandBatch messages covering every command kind,
// chunked puts and fetches at their edges, acknowledgements, list ops,
// Einsum and the random ops, valid and not, and an execute of every
// registered op; checkpoint_fuzzer: valid checkpoint
// files; convert_fuzzer: valid TensorValue and AttrValue messages. Every
// batch releases the ids and tapes it made, so seeds compose when the
// fuzzer's session keeps state across inputs.
//
// Regenerate after a protocol or op change (scripts/fuzz.sh --corpus).
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>
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
  void PutI32(int64_t id, std::vector<int64_t> shape, std::vector<int32_t> v) {
    Put(id, v1::DTYPE_INT32, std::move(shape), Bytes<int32_t>(v));
  }
  void PutI64(int64_t id, std::vector<int64_t> shape, std::vector<int64_t> v) {
    Put(id, v1::DTYPE_INT64, std::move(shape), Bytes<int64_t>(v));
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
  // Pops and deletes the tapes, releases every id used, serializes with
  // `batch_id` (2 mod 4: the fuzzer takes ack_seq relative to the last
  // applied seq; 3 mod 4: it keeps the seqs) and `ack_seq`.
  std::string Finish(int64_t batch_id = 1, int64_t ack_seq = 0) {
    for (auto it = tapes_.rbegin(); it != tapes_.rend(); ++it) {
      Next()->mutable_pop_tape()->set_tape_id(*it);
      Next()->mutable_delete_tape()->set_tape_id(*it);
    }
    if (!ids_.empty()) {
      v1::ReleaseTensors* r = Next()->mutable_release();
      for (int64_t id : ids_) r->add_ids(id);
    }
    batch_.set_batch_id(batch_id);
    batch_.set_ack_seq(ack_seq);
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

// Chunked puts: chunks in order, overlapping, past the end, at a negative
// offset, for unknown, live and released ids; a second Begin and an op
// output at a pending id; Begins of 0 bytes, of more than the session's
// memory, of a size that overflows, of a negative dim and of a handle.
void ChunkedPutSeeds(const std::string& fz) {
  const std::string bytes = Bytes<float>({1, 2, 3, 4});
  Batch b;
  b.PutF32(2, {4}, {5, 6, 7, 8});
  b.PutBegin(1, v1::DTYPE_FLOAT32, {4});
  b.PutChunk(1, 0, bytes.substr(0, 8));
  b.PutChunk(1, 4, bytes.substr(4, 8));       // overlaps the received bytes
  b.PutChunk(1, 8, bytes.substr(8) + bytes);  // runs past the end
  b.PutChunk(1, 24, bytes.substr(0, 4));      // beyond the end
  b.PutChunk(1, -8, bytes.substr(0, 4));      // negative
  b.PutBegin(1, v1::DTYPE_FLOAT32, {4});      // pending: ALREADY_EXISTS
  b.Exec("Neg", {2}, {1});                    // output at a pending id
  b.Exec("AddV2", {1, 2}, {3});               // reads a pending id
  b.PutChunk(1, 8, "");                       // an empty chunk
  b.PutChunk(1, 8, bytes.substr(8));          // completes it
  b.PutChunk(1, 16, bytes.substr(0, 4));      // live: no pending put
  b.PutChunk(77, 0, bytes);                   // unknown id
  b.Exec("AddV2", {1, 2}, {4});
  b.Fetch(4);
  b.PutBegin(5, v1::DTYPE_FLOAT32, {0, 5});  // 0 bytes: live at Begin
  b.Fetch(5);
  b.PutBegin(6, v1::DTYPE_INT32, {3});  // chunks of one byte, unaligned
  for (int i = 0; i < 12; ++i) b.PutChunk(6, i, std::string(1, char(i % 3)));
  b.Fetch(6);
  b.PutBegin(7, v1::DTYPE_FLOAT32, {8});
  b.PutChunk(7, 0, bytes);
  b.Next()->mutable_release()->add_ids(7);  // drops the pending put
  b.PutChunk(7, 16, bytes);
  b.PutBegin(7, v1::DTYPE_FLOAT32, {1});  // the id is free again
  b.PutChunk(7, 0, bytes.substr(0, 4));
  b.PutBegin(8, v1::DTYPE_FLOAT64, {int64_t{1} << 40});  // over the limit
  b.PutBegin(9, v1::DTYPE_FLOAT32,
             {int64_t{1} << 31, int64_t{1} << 31, 4});  // size overflows
  b.PutBegin(10, v1::DTYPE_FLOAT32, {-1, 4});
  b.PutBegin(11, v1::DTYPE_RESOURCE, {1});
  b.PutBegin(12, v1::DTYPE_INVALID, {1});
  b.Next()->mutable_put_begin()->set_dtype(v1::DTYPE_FLOAT32);  // id 0
  b.PutBegin(13, v1::DTYPE_COMPLEX128, {2});  // left pending: released
  b.PutChunk(13, 0, Bytes<double>({1, 2}));
  Write(fz, "chunked_put_edges", b.Finish());
}

// Chunked fetches: unaligned and huge max_bytes, offsets at and past the
// end, negative ones, an offset with max_bytes 0, of a pending id, of an
// empty tensor, of a bool and of a variable handle.
void ChunkedFetchSeeds(const std::string& fz) {
  Batch b;
  b.PutF32(1, {3, 5}, std::vector<float>(15, 0.5f));
  b.FetchChunk(1, 0, 7);
  b.FetchChunk(1, 7, int64_t{1} << 62);
  b.FetchChunk(1, 60, 4);  // at the end: empty
  b.FetchChunk(1, 61, 4);  // past it: OUT_OF_RANGE
  b.FetchChunk(1, -1, 4);
  b.FetchChunk(1, 0, -1);
  b.FetchChunk(1, 4, 0);
  b.FetchChunk(1, INT64_MAX, INT64_MAX);
  b.PutBegin(2, v1::DTYPE_FLOAT32, {4});
  b.FetchChunk(2, 0, 4);
  b.Put(3, v1::DTYPE_FLOAT32, {0}, "");
  b.FetchChunk(3, 0, 4);
  b.Put(4, v1::DTYPE_BOOL, {3}, std::string("\x01\x00\x05", 3));
  b.FetchChunk(4, 1, 1);
  b.Exec("VarHandleOp", {}, {5},
         {{"dtype", TypeAttr(v1::DTYPE_FLOAT32)},
          {"shape", IntsAttr({2})},
          {"shared_name", StringAttr("chunked_fetch")}});
  b.FetchChunk(5, 0, 4);
  b.FetchChunk(99, 0, 4);  // unknown id
  Write(fz, "chunked_fetch_edges", b.Finish());
}

// Acknowledgements (CommandBatch.ack_seq) before results pile up: in
// batches the fuzzer renumbers, as given (0: no change, negative, huge)
// and relative to the last applied seq (batch_id 2 mod 4: everything so
// far, all but the last few, above the last applied seq, saturating), and
// with raw seqs (batch_id 3 mod 4) acknowledging beyond them.
void AckSeeds(const std::string& fz) {
  const auto fetches = [] {
    Batch b;
    b.PutF32(1, {2}, {1, 2});
    b.Fetch(1);
    b.Exec("Neg", {1}, {2});
    b.Fetch(2);
    b.Fetch(99);  // an error: a result too
    b.Stats();
    return b;
  };
  const std::pair<const char*, int64_t> absolute[] = {
      {"ack_zero", 0}, {"ack_negative", -1}, {"ack_huge", INT64_MAX}};
  for (const auto& [name, ack] : absolute) {
    Write(fz, name, fetches().Finish(/*batch_id=*/1, ack));
  }
  const std::pair<const char*, int64_t> relative[] = {
      {"ack_relative_all", 0},
      {"ack_relative_some", -3},
      {"ack_relative_above_last", 5},
      {"ack_relative_huge", INT64_MAX},
      {"ack_relative_min", INT64_MIN}};
  for (const auto& [name, ack] : relative) {
    Write(fz, name, fetches().Finish(/*batch_id=*/2, ack));
  }
  // Raw seqs far above the session's, acknowledged up to the batch's
  // first seq before it runs (clamped to the last applied one), then a
  // command resent at a seq the ack covered.
  v1::CommandBatch raw;
  if (!raw.ParseFromString(fetches().Finish(/*batch_id=*/7))) std::exit(1);
  constexpr int64_t kBase = int64_t{1} << 40;
  for (v1::Command& c : *raw.mutable_commands()) c.set_seq(kBase + c.seq());
  raw.set_ack_seq(kBase + 1);
  *raw.add_commands() = raw.commands(1);  // the fetch again
  Write(fz, "ack_raw_seqs", raw.SerializeAsString());
}

// List ops with list lengths that match their inputs and outputs, with
// gradients through them on a tape.
void ListOpSeeds(const std::string& fz) {
  {
    Batch b;
    b.PushTape(1, true);
    b.PutF32(1, {2, 3}, {1, 2, 3, 4, 5, 6});
    b.PutF32(2, {2, 3}, {-1, -2, -3, -4, -5, -6});
    b.PutF32(3, {1, 3}, {7, 8, 9});
    b.PutI32(4, {}, {0});
    b.PutI64(5, {}, {-1});
    b.Watch(1, {1, 2, 3});
    b.Exec("ConcatV2", {1, 2, 3, 4}, {10}, {{"N", IntAttr(3)}});
    b.Exec("ConcatV2", {1, 2, 5}, {11}, {{"N", IntAttr(2)}});
    b.Exec("Pack", {1, 2}, {12}, {{"N", IntAttr(2)}, {"axis", IntAttr(1)}});
    b.Exec("Unpack", {12}, {13, 14, 15},
           {{"num", IntAttr(3)}, {"axis", IntAttr(-1)}});
    b.PutI32(6, {}, {1});
    b.Exec("Split", {6, 10}, {16, 17, 18}, {{"num_split", IntAttr(3)}});
    b.PutI64(7, {3}, {1, -1, 2});
    b.Exec("SplitV", {10, 7, 4}, {19, 20, 21}, {{"num_split", IntAttr(3)}});
    b.Exec("AddV2", {13, 14}, {22});
    b.Exec("Sum", {11}, {23});
    b.Gradient(1, {22, 23, 20}, {1, 2, 3}, {30, 31, 32}, /*zero=*/true);
    b.Fetch(10);
    b.Fetch(30);
    Write(fz, "list_ops", b.Finish());
  }
  // List lengths that disagree with the inputs or outputs given, below the
  // op's minimum, past kMaxListLength, negative, missing, of the wrong
  // kind; pieces that do not divide or add up.
  Batch b;
  b.PutF32(1, {6}, {1, 2, 3, 4, 5, 6});
  b.PutF32(2, {6}, {6, 5, 4, 3, 2, 1});
  b.PutI32(3, {}, {0});
  b.Exec("ConcatV2", {1, 2, 3}, {10}, {{"N", IntAttr(3)}});
  b.Exec("ConcatV2", {1, 2, 1, 3}, {11}, {{"N", IntAttr(2)}});
  b.Exec("ConcatV2", {1, 3}, {12}, {{"N", IntAttr(1)}});
  b.Exec("ConcatV2", {1, 2, 3}, {13}, {{"N", IntAttr(65537)}});
  b.Exec("ConcatV2", {1, 2, 3}, {14}, {{"N", IntAttr(-1)}});
  b.Exec("ConcatV2", {1, 2, 3}, {15});
  b.Exec("ConcatV2", {1, 2, 3}, {16}, {{"N", FloatAttr(2)}});
  b.Exec("Pack", {1, 2}, {17}, {{"N", IntAttr(3)}});
  b.Exec("Pack", {}, {18}, {{"N", IntAttr(0)}});
  b.Exec("Unpack", {1}, {19, 20}, {{"num", IntAttr(6)}});
  b.Exec("Unpack", {1}, {21, 22}, {{"num", IntAttr(2)}});
  b.Exec("Unpack", {1}, {}, {{"num", IntAttr(65536)}});
  b.Exec("Split", {3, 1}, {23, 24, 25, 26}, {{"num_split", IntAttr(4)}});
  b.Exec("Split", {3, 1}, {27}, {{"num_split", IntAttr(0)}});
  b.PutI32(4, {3}, {1, -1, -1});
  b.Exec("SplitV", {1, 4, 3}, {28, 29, 30}, {{"num_split", IntAttr(3)}});
  b.PutI32(5, {3}, {1, 1, 1});
  b.Exec("SplitV", {1, 5, 3}, {31, 32, 33}, {{"num_split", IntAttr(3)}});
  b.Exec("SplitV", {1, 5, 3}, {34, 35}, {{"num_split", IntAttr(2)}});
  b.Exec("AddV2", {10, 1}, {36});  // reads a poisoned id
  Write(fz, "list_ops_bad_lengths", b.Finish());
}

// Einsum: equations TensorFlow takes, with gradients; then malformed
// ones, labels repeated in the output ("ab->aa", "ij->jii": TensorFlow's
// op inflates, only tf.einsum refuses them), an ellipsis that is not in
// the output, and operand counts that disagree with the equation or N.
void EinsumSeeds(const std::string& fz) {
  const auto eq = [](const char* e, int64_t n) {
    return std::vector<std::pair<std::string, v1::AttrValue>>{
        {"equation", StringAttr(e)}, {"N", IntAttr(n)}};
  };
  {
    Batch b;
    b.PushTape(1, true);
    b.PutF32(1, {2, 3}, {1, 2, 3, 4, 5, 6});
    b.PutF32(2, {3, 2}, {0.5f, -1, 2, 0, 1, 1});
    b.PutF32(3, {2, 2, 3}, {1, 2, 3, 4, 5, 6, 6, 5, 4, 3, 2, 1});
    b.PutF32(4, {2, 2}, {1, 2, 3, 4});
    b.Watch(1, {1, 2, 3, 4});
    b.Exec("Einsum", {1, 2}, {10}, eq("ij,jk->ik", 2));
    b.Exec("Einsum", {3, 2}, {11}, eq("...ij,...jk->...ik", 2));
    b.Exec("Einsum", {4}, {12}, eq("ii->i", 1));
    b.Exec("Einsum", {1}, {13}, eq("ij->i", 1));
    b.Exec("Einsum", {12, 13}, {14}, eq("i,j->ij", 2));
    b.Exec("Einsum", {1}, {15}, eq("ij->ji", 1));
    b.Exec("Einsum", {3, 2}, {16}, eq("bij,jk->bik", 2));
    b.Exec("Einsum", {12, 13}, {17}, eq("i,i->", 2));
    b.Exec("Sum", {11}, {18});
    b.Gradient(1, {10, 14, 15, 16, 17, 18}, {1, 2, 3, 4}, {20, 21, 22, 23},
               /*zero=*/true);
    b.Fetch(14);
    b.Fetch(20);
    Write(fz, "einsum", b.Finish());
  }
  Batch b;
  b.PutF32(1, {2, 3}, {1, 2, 3, 4, 5, 6});
  b.PutF32(2, {3, 2}, {0.5f, -1, 2, 0, 1, 1});
  const std::pair<const char*, std::vector<int64_t>> bad[] = {
      {"ab->aa", {1}},
      {"ij,jk", {1, 2}},
      {"ij->k", {1}},
      {"", {1}},
      {"->", {1}},
      {"ij,jk->ik->", {1, 2}},
      {"...ij,...jk->ik", {1, 2}},
      {"i j->ij", {1}},
      {"ij,jk->ik", {1}},
      {"ij,jk->ik", {1, 1}},
      {"i,j,k->ijk", {1, 2, 1}},
      {"Ab->bA", {1}},
      {"iii->i", {1}},
      {"i->ii", {1}},
      {"...->...", {1}},
      {"..ij->ij", {1}},
      {"\u00e9j->j", {1}},
      {"ij->jii", {1}}};
  int64_t out = 10;
  for (const auto& [e, inputs] : bad) {
    b.Exec("Einsum", inputs, {out++},
           eq(e, static_cast<int64_t>(inputs.size())));
  }
  b.Exec("Einsum", {1, 2}, {out++}, eq("ij,jk->ik", 3));
  b.Exec("Einsum", {1, 2}, {out++}, {{"N", IntAttr(2)}});
  Write(fz, "einsum_bad_equations", b.Finish());
}

// Stateless random ops: V2 (shape, key, counter, alg) and V1 (shape, seed)
// with the dtypes and algorithms TensorFlow has, then refused algorithms,
// keys, counters and seeds of the wrong shape, negative and overflowing
// shapes and one over the session's memory.
void RandomOpSeeds(const std::string& fz) {
  const char* v2_ops[] = {"StatelessRandomUniformV2", "StatelessRandomNormalV2",
                          "StatelessTruncatedNormalV2"};
  const char* v1_ops[] = {"StatelessRandomUniform", "StatelessRandomNormal",
                          "StatelessTruncatedNormal"};
  Batch b;
  b.PutI32(1, {2}, {2, 3});
  b.PutI64(2, {1}, {12345});
  b.PutI64(3, {2}, {7, -1});
  b.PutI32(4, {}, {1});
  b.PutI32(5, {}, {3});
  b.PutI64(6, {2}, {2, 3});
  b.PutI32(7, {2}, {42, -42});
  int64_t out = 20;
  for (const char* op : v2_ops) {
    b.Exec(op, {1, 2, 3, 4}, {out++});
    b.Exec(op, {6, 2, 3, 5}, {out++},
           {{"dtype", TypeAttr(v1::DTYPE_FLOAT64)},
            {"Tshape", TypeAttr(v1::DTYPE_INT64)}});
    b.Fetch(out - 1);
  }
  for (const char* op : v1_ops) {
    b.Exec(op, {1, 7}, {out++});
    b.Exec(op, {6, 3}, {out++}, {{"dtype", TypeAttr(v1::DTYPE_FLOAT64)}});
    b.Fetch(out - 1);
  }
  b.PutI32(8, {}, {2});                                     // ThreeFry: refused
  b.PutI32(9, {}, {99});                                    // no such algorithm
  b.PutI64(10, {2}, {1, 2});                                // key of 2
  b.PutI64(11, {1}, {1});                                   // counter of 1
  b.PutI32(12, {2}, {-1, 3});                               // negative dim
  b.PutI64(13, {2}, {int64_t{1} << 40, int64_t{1} << 40});  // overflow
  b.PutI64(14, {2}, {4096, 4096});  // 128 MiB of float64
  b.PutF32(15, {2}, {2, 3});        // float shape
  b.PutI32(16, {3}, {1, 2, 3});     // seed of 3
  b.Exec(v2_ops[0], {1, 2, 3, 8}, {out++});
  b.Exec(v2_ops[1], {1, 2, 3, 9}, {out++});
  b.Exec(v2_ops[2], {1, 10, 3, 4}, {out++});
  b.Exec(v2_ops[0], {1, 2, 11, 4}, {out++});
  b.Exec(v2_ops[1], {12, 2, 3, 4}, {out++});
  b.Exec(v2_ops[2], {13, 2, 3, 4}, {out++});
  b.Exec(v2_ops[0], {14, 2, 3, 4}, {out++},
         {{"dtype", TypeAttr(v1::DTYPE_FLOAT64)}});
  b.Exec(v2_ops[1], {15, 2, 3, 4}, {out++});
  b.Exec(v2_ops[2], {1, 2, 3, 4}, {out++},
         {{"dtype", TypeAttr(v1::DTYPE_INT32)}});
  b.Exec(v1_ops[0], {1, 16}, {out++});
  b.Exec(v1_ops[1], {13, 7}, {out++});
  b.Exec(v1_ops[2], {1, 7}, {out++}, {{"T", TypeAttr(v1::DTYPE_INT64)}});
  Write(fz, "random_ops", b.Finish());
}

// Captured steps: program references and steps.
v1::ProgramRef PRef(int param) {
  v1::ProgramRef r;
  r.set_param(param);
  return r;
}
v1::ProgramRef CRef(int64_t id) {
  v1::ProgramRef r;
  r.set_captured_id(id);
  return r;
}
v1::ProgramRef SRef(int step, int output = 0) {
  v1::ProgramRef r;
  r.mutable_step()->set_step(step);
  r.mutable_step()->set_output(output);
  return r;
}
void ProgramOp(v1::DefineProgram* d, const std::string& op,
               std::vector<v1::ProgramRef> inputs,
               std::vector<std::pair<std::string, v1::AttrValue>> attrs = {}) {
  v1::ProgramOp* o = d->add_steps()->mutable_op();
  o->set_op(op);
  for (const v1::ProgramRef& r : inputs) *o->add_inputs() = r;
  for (const auto& [k, v] : attrs) (*o->mutable_attrs())[k] = v;
}
void CallProgram(Batch& b, int64_t program, std::vector<int64_t> inputs,
                 std::vector<int64_t> outputs) {
  v1::CallProgram* c = b.Next()->mutable_call_program();
  c->set_program_id(program);
  for (int64_t id : inputs) c->add_input_ids(id);
  for (int64_t id : outputs) {
    c->add_output_ids(id);
    b.Use(id);
  }
}

// Programs: a training step (variable, tape, gradient, SGD) defined, called
// twice, listed and deleted; hostile definitions and calls (a step reading
// itself, a None gradient read, a wrong input shape, an unknown program).
void ProgramSeeds(const std::string& fz) {
  {
    Batch b;
    b.Exec("VarHandleOp", {}, {1},
           {{"dtype", TypeAttr(v1::DTYPE_FLOAT32)},
            {"shape", IntsAttr({2, 2})},
            {"shared_name", StringAttr("pw")}});
    b.PutF32(2, {2, 2}, {0.5f, -1, 0.25f, 2});
    b.Exec("AssignVariableOp", {1, 2}, {});
    b.PutF32(3, {}, {0.1f});
    v1::DefineProgram* d = b.Next()->mutable_define_program();
    d->set_program_id(1);
    v1::ProgramParam* x = d->add_params();
    x->set_dtype(v1::DTYPE_FLOAT32);
    x->add_shape(3);
    x->add_shape(2);
    d->add_steps()->mutable_push_tape()->set_tape(0);
    d->mutable_steps(0)->mutable_push_tape()->set_watch_accessed_variables(
        true);
    ProgramOp(d, "ReadVariableOp", {CRef(1)},
              {{"dtype", TypeAttr(v1::DTYPE_FLOAT32)}});
    ProgramOp(d, "MatMul", {PRef(0), SRef(1)});
    ProgramOp(d, "Tanh", {SRef(2)});
    ProgramOp(d, "Sum", {SRef(3)});
    d->add_steps()->mutable_pop_tape()->set_tape(0);
    v1::ProgramGradient* g = d->add_steps()->mutable_gradient();
    g->set_tape(0);
    *g->add_targets() = SRef(4);
    *g->add_sources() = CRef(1);
    g->add_output_gradients();  // ones
    ProgramOp(d, "ResourceApplyGradientDescent", {CRef(1), CRef(3), SRef(6)});
    *d->add_outputs() = SRef(4);
    *d->add_outputs() = SRef(6);
    b.PutF32(4, {3, 2}, {1, 2, 3, 4, 5, 6});
    CallProgram(b, 1, {4}, {5, 6});
    CallProgram(b, 1, {4}, {7, 8});
    b.Fetch(7);
    b.Next()->mutable_list_programs();
    b.Next()->mutable_delete_program()->set_program_id(1);
    b.Use(1);
    b.Use(2);
    b.Use(3);
    b.Use(4);
    Write(fz, "program_training_step", b.Finish());
  }
  {
    Batch b;
    v1::DefineProgram* d = b.Next()->mutable_define_program();
    d->set_program_id(2);
    v1::ProgramParam* x = d->add_params();
    x->set_dtype(v1::DTYPE_FLOAT64);
    x->add_shape(2);
    v1::ProgramPushTape* push = d->add_steps()->mutable_push_tape();
    push->set_tape(1);
    v1::ProgramWatch* w = d->add_steps()->mutable_watch();
    w->set_tape(1);
    *w->add_values() = PRef(0);
    ProgramOp(d, "Exp", {PRef(0)});
    d->add_steps()->mutable_pop_tape()->set_tape(1);
    v1::ProgramGradient* g = d->add_steps()->mutable_gradient();
    g->set_tape(1);
    *g->add_targets() = SRef(2);
    *g->add_sources() = PRef(0);
    *g->add_sources() = SRef(2);        // not a source of itself: None
    ProgramOp(d, "Neg", {SRef(4, 1)});  // reads the None: fails at the call
    *d->add_outputs() = SRef(4, 0);
    *d->add_outputs() = SRef(5);
    b.Put(1, v1::DTYPE_FLOAT64, {2}, Bytes<double>({0.5, -1}));
    b.Put(2, v1::DTYPE_FLOAT64, {3}, Bytes<double>({0.5, -1, 2}));
    CallProgram(b, 2, {1}, {3, 4});
    CallProgram(b, 2, {2}, {5, 6});  // wrong shape
    CallProgram(b, 9, {1}, {7});     // unknown program
    b.Fetch(3);
    v1::DefineProgram* cycle = b.Next()->mutable_define_program();
    cycle->set_program_id(3);
    ProgramOp(cycle, "Neg", {SRef(0)});
    b.Next()->mutable_delete_program()->set_program_id(2);
    b.Use(1);
    b.Use(2);
    Write(fz, "program_hostile", b.Finish());
  }
}

void BatchSeeds() {
  const std::string fz = "batch_fuzzer";
  ProgramSeeds(fz);
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
  ChunkedPutSeeds(fz);
  ChunkedFetchSeeds(fz);
  AckSeeds(fz);
  ListOpSeeds(fz);
  EinsumSeeds(fz);
  RandomOpSeeds(fz);
  // Every registered op once, with float32 [2,2] inputs (float64 too for a
  // few) and default attrs, a list argument of 2 (its length attr set):
  // reaches every kernel's argument checks.
  for (const auto& op : gradtape::DefaultRegistry().ops()) {
    for (v1::DType dtype : {v1::DTYPE_FLOAT32, v1::DTYPE_FLOAT64}) {
      if (dtype == v1::DTYPE_FLOAT64 && op->index % 4 != 0) continue;
      Batch b;
      std::vector<int64_t> inputs, outputs;
      std::vector<std::pair<std::string, v1::AttrValue>> attrs;
      constexpr int kListLength = 2;
      const int list_extra = op->list_input.present() ? kListLength - 1 : 0;
      if (op->list_input.present()) {
        attrs.emplace_back(op->list_input.attr, IntAttr(kListLength));
      }
      if (op->list_output.present()) {
        attrs.emplace_back(op->list_output.attr, IntAttr(kListLength));
      }
      for (int i = 0; i < op->num_inputs() + list_extra; ++i) {
        const int64_t id = 1 + i;
        if (dtype == v1::DTYPE_FLOAT32) {
          b.PutF32(id, {2, 2}, {0.5f, 1.5f, -0.25f, 2});
        } else {
          b.Put(id, dtype, {2, 2}, Bytes<double>({0.5, 1.5, -0.25, 2}));
        }
        inputs.push_back(id);
      }
      const int list_outputs = op->list_output.present() ? kListLength - 1 : 0;
      for (int i = 0; i < op->num_outputs() + list_outputs; ++i) {
        outputs.push_back(100 + i);
      }
      b.PushTape(1, true);
      b.Watch(1, inputs);
      b.Exec(op->name, inputs, outputs, attrs);
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
