// Structure-aware mutation of protobuf messages for the libFuzzer targets
// (Debian 12 has no libprotobuf-mutator): edits one field anywhere in a
// message through reflection, favouring int64 fields (shapes, ids, attr
// ints, list lengths, chunk offsets, ack_seq) and the sizes that overflow
// or exhaust memory; strings become registered op and attr names, Einsum
// equations and other attr values, or libFuzzer's byte mutations of them.
#ifndef GRADTAPE_TESTS_FUZZ_PROTO_MUTATOR_H_
#define GRADTAPE_TESTS_FUZZ_PROTO_MUTATOR_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace gradtape::fuzz {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

inline constexpr int64_t kInteresting[] = {0,
                                           1,
                                           -1,
                                           2,
                                           3,
                                           4,
                                           7,
                                           8,
                                           100,
                                           255,
                                           256,
                                           65536,
                                           160000,
                                           600000,
                                           1000000,
                                           int64_t{1} << 31,
                                           (int64_t{1} << 31) - 1,
                                           int64_t{1} << 32,
                                           int64_t{1} << 40,
                                           int64_t{1} << 61,
                                           int64_t{1} << 62,
                                           (int64_t{1} << 62) + 1,
                                           INT64_MAX,
                                           INT64_MIN,
                                           -2};

struct FieldRef {
  Message* message;
  const FieldDescriptor* field;
};

// Every scalar, string or repeated scalar field (set or not) of `m` and of
// the messages set below it.
inline void Collect(Message* m, std::vector<FieldRef>* out) {
  const Reflection* r = m->GetReflection();
  const google::protobuf::Descriptor* d = m->GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
      // Unset ones too: an empty shape gets a dim, an attr another kind.
      out->push_back({m, f});
      continue;
    }
    if (f->is_repeated() ? r->FieldSize(*m, f) == 0 : !r->HasField(*m, f)) {
      continue;
    }
    if (f->is_repeated()) {
      for (int i = 0; i < r->FieldSize(*m, f); ++i) {
        Collect(r->MutableRepeatedMessage(m, f, i), out);
      }
    } else {
      Collect(r->MutableMessage(m, f), out);
    }
  }
}

inline int64_t Interesting(std::minstd_rand& rng) {
  const size_t n = sizeof(kInteresting) / sizeof(kInteresting[0]);
  if (rng() % 4 == 0) return static_cast<int64_t>(rng() % 12);  // ids
  return kInteresting[rng() % n];
}

// Bytes of `s` mutated by libFuzzer (at most twice as long); ASCII only if
// `ascii` (a proto3 string must stay valid UTF-8 to parse).
inline std::string MutateBytes(std::string s, bool ascii,
                               std::minstd_rand& rng) {
  if (s.empty()) s.push_back(static_cast<char>(rng()));
  const size_t used = s.size();
  s.resize(used * 2 + 16);
  s.resize(
      LLVMFuzzerMutate(reinterpret_cast<uint8_t*>(s.data()), used, s.size()));
  if (ascii) {
    for (char& c : s) c = static_cast<char>(c & 0x7f);
  }
  return s;
}

// Values of string attrs and names: Einsum equations (valid, malformed,
// with labels repeated in the output), paddings, data formats, pad modes,
// checkpoint and variable names.
inline constexpr const char* kStrings[] = {"",
                                           "ck1",
                                           "w",
                                           "b",
                                           "..",
                                           "a",
                                           "x/y",
                                           "\u00e9",
                                           "shared_name",
                                           "T",
                                           "ij,jk->ik",
                                           "...ij,...jk->...ik",
                                           "ii->i",
                                           "ij->i",
                                           "i,j->ij",
                                           "ab->aa",
                                           "ij->ji",
                                           "ij,jk",
                                           "->",
                                           "...->...",
                                           "i,i->",
                                           "ij,jk->ik->",
                                           "...ij,...jk->ik",
                                           "iii->",
                                           "SAME",
                                           "VALID",
                                           "EXPLICIT",
                                           "NHWC",
                                           "NCHW",
                                           "NDHWC",
                                           "NCDHW",
                                           "REFLECT",
                                           "SYMMETRIC"};

// Sets string field `f` of `m`: an op name for ExecuteOp.op and
// GradientStep.op, an attr name some registered op declares for an attr
// map's key, libFuzzer's byte mutations for bytes (tensor data, chunks)
// and, half the time, for other strings (Einsum equations), else one of
// kStrings.
inline void MutateString(Message* m, const FieldDescriptor* f,
                         std::minstd_rand& rng) {
  const Reflection* r = m->GetReflection();
  const auto& ops = gradtape::DefaultRegistry().ops();
  if (f->name() == "op" && !ops.empty()) {
    r->SetString(m, f, ops[rng() % ops.size()]->name);
  } else if (f->type() == FieldDescriptor::TYPE_BYTES) {
    r->SetString(m, f, MutateBytes(r->GetString(*m, f), false, rng));
  } else if (m->GetDescriptor()->map_key() == f && !ops.empty() &&
             rng() % 4 != 0) {
    const auto& attrs = ops[rng() % ops.size()]->attrs;
    if (!attrs.empty()) r->SetString(m, f, attrs[rng() % attrs.size()].name);
  } else if (rng() % 2 == 0) {
    r->SetString(m, f, MutateBytes(r->GetString(*m, f), true, rng));
  } else {
    r->SetString(m, f, kStrings[rng() % std::size(kStrings)]);
  }
}

inline void MutateField(const FieldRef& ref, std::minstd_rand& rng) {
  Message* m = ref.message;
  const FieldDescriptor* f = ref.field;
  const Reflection* r = m->GetReflection();
  const int size = f->is_repeated() ? r->FieldSize(*m, f) : 0;
  const int index = size > 0 ? static_cast<int>(rng() % size) : 0;
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT64: {
      const int64_t v = Interesting(rng);
      if (!f->is_repeated()) {
        r->SetInt64(m, f, v);
      } else if (size == 0 || rng() % 3 == 0) {
        r->AddInt64(m, f, v);
      } else if (rng() % 5 == 0) {
        r->RemoveLast(m, f);
      } else {
        r->SetRepeatedInt64(m, f, index, v);
      }
      break;
    }
    case FieldDescriptor::CPPTYPE_INT32: {
      const int32_t v = static_cast<int32_t>(Interesting(rng));
      if (!f->is_repeated()) r->SetInt32(m, f, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_DOUBLE:
      if (!f->is_repeated()) {
        const double values[] = {0.0,    -0.0, 1e308,   -1e308,
                                 1e-310, NAN,  INFINITY};
        r->SetDouble(m, f, values[rng() % 7]);
      }
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      if (!f->is_repeated()) r->SetBool(m, f, !r->GetBool(*m, f));
      break;
    case FieldDescriptor::CPPTYPE_ENUM:
      if (!f->is_repeated()) {
        r->SetEnumValue(m, f, static_cast<int>(rng() % 10) - (rng() % 7 == 0));
      }
      break;
    case FieldDescriptor::CPPTYPE_STRING:
      if (!f->is_repeated() && !f->is_map()) MutateString(m, f, rng);
      break;
    default:
      break;
  }
}

// Mutates one field of `m` (half the time an int64 one). False if `m` has no
// field to mutate.
inline bool MutateOneField(Message* m, std::minstd_rand& rng) {
  std::vector<FieldRef> fields;
  Collect(m, &fields);
  if (fields.empty()) return false;
  std::vector<FieldRef> ints;
  for (const FieldRef& ref : fields) {
    if (ref.field->cpp_type() == FieldDescriptor::CPPTYPE_INT64) {
      ints.push_back(ref);
    }
  }
  const std::vector<FieldRef>& pool =
      !ints.empty() && rng() % 2 == 0 ? ints : fields;
  MutateField(pool[rng() % pool.size()], rng);
  return true;
}

// Writes `m` to data (at most max_size bytes); 0 if it does not fit.
inline size_t Serialize(const Message& m, uint8_t* data, size_t max_size) {
  std::string out;
  if (!m.SerializeToString(&out) || out.size() > max_size) return 0;
  std::memcpy(data, out.data(), out.size());
  return out.size();
}

}  // namespace gradtape::fuzz

#endif  // GRADTAPE_TESTS_FUZZ_PROTO_MUTATOR_H_
