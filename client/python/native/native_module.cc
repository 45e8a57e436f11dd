// gradtape._native: the Python client's transport over the C++ client's
// SessionCore (client/src/session_core.h). NativeCore
// (client/python/gradtape/_native_core.py) subclasses `Core` and adds the
// few methods that parse protobuf messages in Python.
//
// How it works. An op from Python is one call of Core.execute: it reads the
// op name, the input ids and the encoded attrs (gradtape/_backend.py) while
// holding the GIL, reserves a block of consecutive output ids, and builds
// the ExecuteOp in place in the command buffer's arena
// (SessionCore::EnqueueNoFlush). Nothing Python is touched under a
// SessionCore lock, so a finalizer (release, delete_tape) never waits on a
// thread that needs the GIL.
//
// The GIL. Every call that may block (a flush once the buffer is full or
// max_unacked_bytes is reached, fetch, call, sync, keep_alive, close,
// connecting) releases the GIL first and takes it back after SessionCore
// returned, never while holding one of its locks. SessionCore's reader and
// supervisor threads never call into Python.
//
// Errors. A failed absl::Status becomes the exception that
// `make_error(code, message, payloads, session_id, address)` returns (a
// Python function given to the constructor): GradtapeError with the
// command's seq and op (SessionCore's payloads), or SessionLostError with
// the reason of a lost session.
#include <Python.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <atomic>
#include <complex>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/src/resume.h"
#include "client/src/session_core.h"
#include "gradtape/client/session.h"

namespace nb = nanobind;

namespace gradtape::python {
namespace {

using client::ClientCounters;
using client::DType;
using client::HostTensor;
using client::SessionOptions;
using client::internal::SessionCore;

// The attr kinds of gradtape/_backend.py (ATTR_BOOL, ...).
enum AttrKind { kBool = 0, kInt, kFloat, kString, kType, kInts };

// One encoded attr, read from Python before the session lock is taken. The
// string views point into the caller's str objects, alive for the call.
struct ParsedAttr {
  absl::string_view name;
  int kind = 0;
  int64_t i = 0;
  double f = 0;
  absl::string_view s;
  absl::InlinedVector<int64_t, 4> ints;
};

[[noreturn]] void RaiseType(const std::string& message) {
  PyErr_SetString(PyExc_TypeError, message.c_str());
  throw nb::python_error();
}

absl::string_view Utf8(PyObject* s, const char* what) {
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(s, &size);
  if (data == nullptr) {
    PyErr_Clear();
    RaiseType(absl::StrCat(what, " must be a str, got ", Py_TYPE(s)->tp_name));
  }
  return absl::string_view(data, static_cast<size_t>(size));
}

int64_t Int(PyObject* o, const char* what) {
  const long long v = PyLong_AsLongLong(o);
  if (v == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    RaiseType(absl::StrCat(what, " must be an int, got ", Py_TYPE(o)->tp_name));
  }
  return v;
}

// `seq` (a list or tuple, or any sequence) as int64s appended to `out`.
template <typename Vec>
void Ints(PyObject* seq, const char* what, Vec* out) {
  PyObject* fast = PySequence_Fast(seq, what);
  if (fast == nullptr) throw nb::python_error();
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  PyObject** items = PySequence_Fast_ITEMS(fast);
  out->reserve(out->size() + static_cast<size_t>(n));
  try {
    for (Py_ssize_t k = 0; k < n; ++k) out->push_back(Int(items[k], what));
  } catch (...) {
    Py_DECREF(fast);
    throw;
  }
  Py_DECREF(fast);
}

void ParseAttrs(PyObject* attrs, absl::InlinedVector<ParsedAttr, 4>* out) {
  if (attrs == Py_None) return;
  if (!PyList_Check(attrs)) {
    RaiseType(absl::StrCat("attrs must be a list of (name, kind, value), got ",
                           Py_TYPE(attrs)->tp_name));
  }
  const Py_ssize_t n = PyList_GET_SIZE(attrs);
  for (Py_ssize_t k = 0; k < n; ++k) {
    PyObject* t = PyList_GET_ITEM(attrs, k);
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 3) {
      RaiseType("an encoded attr must be a tuple (name, kind, value)");
    }
    ParsedAttr& a = out->emplace_back();
    a.name = Utf8(PyTuple_GET_ITEM(t, 0), "an attr's name");
    a.kind = static_cast<int>(Int(PyTuple_GET_ITEM(t, 1), "an attr's kind"));
    PyObject* v = PyTuple_GET_ITEM(t, 2);
    switch (a.kind) {
      case kBool:
        a.i = PyObject_IsTrue(v);
        if (a.i < 0) throw nb::python_error();
        break;
      case kInt:
      case kType:
        a.i = Int(v, "an int attr");
        break;
      case kFloat:
        a.f = PyFloat_AsDouble(v);
        if (a.f == -1.0 && PyErr_Occurred()) throw nb::python_error();
        break;
      case kString:
        a.s = Utf8(v, "a string attr");
        break;
      case kInts:
        Ints(v, "an int-list attr", &a.ints);
        break;
      default:
        PyErr_Format(PyExc_ValueError, "unknown attr kind %d", a.kind);
        throw nb::python_error();
    }
  }
}

void FillAttr(const ParsedAttr& a, v1::AttrValue* out) {
  switch (a.kind) {
    case kBool:
      out->set_b(a.i != 0);
      break;
    case kInt:
      out->set_i(a.i);
      break;
    case kFloat:
      out->set_f(a.f);
      break;
    case kString:
      out->set_s(a.s.data(), a.s.size());
      break;
    case kType:
      out->set_type(static_cast<v1::DType>(a.i));
      break;
    case kInts:
      out->mutable_ints()->mutable_values()->Add(a.ints.begin(), a.ints.end());
      break;
  }
}

// numpy's view of a gradtape dtype (resource handles: int64 ids).
nb::dlpack::dtype NumpyDType(int dtype, bool* ok) {
  *ok = true;
  switch (dtype) {
    case v1::DTYPE_FLOAT32:
      return nb::dtype<float>();
    case v1::DTYPE_FLOAT64:
      return nb::dtype<double>();
    case v1::DTYPE_INT32:
      return nb::dtype<int32_t>();
    case v1::DTYPE_INT64:
    case v1::DTYPE_RESOURCE:
      return nb::dtype<int64_t>();
    case v1::DTYPE_BOOL:
      return nb::dtype<bool>();
    case v1::DTYPE_COMPLEX64:
      return nb::dtype<std::complex<float>>();
    case v1::DTYPE_COMPLEX128:
      return nb::dtype<std::complex<double>>();
    default:
      *ok = false;
      return nb::dtype<uint8_t>();
  }
}

// A Py_buffer released on scope exit.
class Buffer {
 public:
  Buffer(PyObject* obj) {
    if (PyObject_GetBuffer(obj, &view_, PyBUF_C_CONTIGUOUS) != 0) {
      throw nb::python_error();
    }
  }
  ~Buffer() { PyBuffer_Release(&view_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  const char* data() const { return static_cast<const char*>(view_.buf); }
  int64_t size() const { return static_cast<int64_t>(view_.len); }

 private:
  Py_buffer view_;
};

absl::Duration Seconds(double s) {
  return s > 0 ? absl::Seconds(s) : absl::ZeroDuration();
}

class Core {
 public:
  Core(const std::string& address, nb::dict options, nb::object make_error)
      : make_error_(std::move(make_error)), address_(address) {
    SessionOptions o = Options(options);
    core_ = std::make_shared<SessionCore>(std::move(o));
    absl::Status status;
    {
      nb::gil_scoped_release release;
      status = core_->Open(address);
    }
    if (!status.ok()) {
      {
        nb::gil_scoped_release release;
        core_.reset();
      }
      Raise(status);
    }
  }

  ~Core() {
    // Ends the stream and joins the session's threads if close() was not
    // called (they never need the GIL).
    nb::gil_scoped_release release;
    core_.reset();
  }

  int64_t NewId() { return core_->NewTensorId(); }
  int64_t NewTapeId() { return core_->NewTapeId(); }

  int64_t Execute(nb::handle op_obj, nb::handle inputs_obj, int num_outputs,
                  nb::handle attrs_obj) {
    const absl::string_view op = Utf8(op_obj.ptr(), "op");
    absl::InlinedVector<int64_t, 4> inputs;
    Ints(inputs_obj.ptr(), "input ids", &inputs);
    absl::InlinedVector<ParsedAttr, 4> attrs;
    ParseAttrs(attrs_obj.ptr(), &attrs);
    if (num_outputs < 0) RaiseType("num_outputs must be >= 0");
    const int64_t first =
        num_outputs > 0 ? core_->NewTensorIds(num_outputs) : 0;
    SessionCore::Enqueued queued =
        core_->EnqueueNoFlush([&](v1::Command& command) {
          v1::ExecuteOp* execute = command.mutable_execute();
          execute->set_op(op.data(), op.size());
          execute->mutable_input_ids()->Add(inputs.begin(), inputs.end());
          auto* outputs = execute->mutable_output_ids();
          outputs->Reserve(num_outputs);
          for (int k = 0; k < num_outputs; ++k)
            outputs->AddAlreadyReserved(first + k);
          if (!attrs.empty()) {
            auto* map = execute->mutable_attrs();
            for (const ParsedAttr& a : attrs) {
              FillAttr(a, &(*map)[std::string(a.name)]);
            }
          }
        });
    After(queued);
    return first;
  }

  void Put(int64_t id, int dtype, nb::handle shape_obj, nb::handle array) {
    absl::InlinedVector<int64_t, 4> shape;
    Ints(shape_obj.ptr(), "shape", &shape);
    Buffer buffer(array.ptr());
    const int64_t chunk = core_->chunk_bytes();
    if (buffer.size() > chunk) return PutInChunks(id, dtype, shape, buffer);
    // Small values keep the GIL (releasing it costs more than the copy).
    std::string bytes;
    if (buffer.size() < (int64_t{1} << 20)) {
      bytes.assign(buffer.data(), static_cast<size_t>(buffer.size()));
    } else {
      nb::gil_scoped_release release;
      bytes.assign(buffer.data(), static_cast<size_t>(buffer.size()));
    }
    After(core_->EnqueueNoFlush([&](v1::Command& command) {
      v1::PutTensor* put = command.mutable_put();
      put->set_id(id);
      v1::TensorValue* value = put->mutable_value();
      value->set_dtype(static_cast<v1::DType>(dtype));
      value->mutable_shape()->Add(shape.begin(), shape.end());
      value->set_data(std::move(bytes));
    }));
  }

  nb::object Fetch(int64_t id) {
    absl::StatusOr<HostTensor> value;
    {
      nb::gil_scoped_release release;
      value = core_->FetchInChunks(id);
    }
    if (!value.ok()) Raise(value.status());
    bool ok;
    const nb::dlpack::dtype dtype =
        NumpyDType(static_cast<int>(value->dtype), &ok);
    if (!ok) {
      PyErr_Format(PyExc_TypeError, "fetch of tensor id %lld: unknown dtype %d",
                   static_cast<long long>(id), static_cast<int>(value->dtype));
      throw nb::python_error();
    }
    absl::InlinedVector<size_t, 4> shape(value->shape.begin(),
                                         value->shape.end());
    // The fetched bytes become the array's memory (no copy): the capsule
    // owns them.
    auto* bytes = new std::string(std::move(value->bytes));
    nb::capsule owner(
        bytes, [](void* p) noexcept { delete static_cast<std::string*>(p); });
    nb::ndarray<nb::numpy> array(bytes->data(), shape.size(), shape.data(),
                                 owner, nullptr, dtype);
    return array.cast();
  }

  void Release(int64_t id) { core_->Release(id); }

  void DeleteTape(int64_t tape_id, bool pop_first) {
    // Finalizer-safe: buffered, never flushed here.
    if (pop_first) {
      core_->EnqueueNoFlush([&](v1::Command& command) {
        command.mutable_pop_tape()->set_tape_id(tape_id);
      });
    }
    core_->EnqueueNoFlush([&](v1::Command& command) {
      command.mutable_delete_tape()->set_tape_id(tape_id);
    });
  }

  int64_t EnqueueBytes(nb::bytes command) {
    const char* data = command.c_str();
    const int size = static_cast<int>(command.size());
    bool parsed = true;
    SessionCore::Enqueued queued = core_->EnqueueNoFlush(
        [&](v1::Command& c) { parsed = c.ParseFromArray(data, size); });
    if (!parsed) {
      PyErr_SetString(PyExc_ValueError, "enqueue: not a gradtape.v1.Command");
      throw nb::python_error();
    }
    After(queued);
    return queued.seq;
  }

  nb::bytes CallBytes(nb::bytes data) {
    v1::Command command;
    if (!command.ParseFromArray(data.c_str(), static_cast<int>(data.size()))) {
      PyErr_SetString(PyExc_ValueError, "call: not a gradtape.v1.Command");
      throw nb::python_error();
    }
    absl::StatusOr<v1::CommandResult> result;
    std::string out;
    {
      nb::gil_scoped_release release;
      result = core_->Call(std::move(command));
      if (result.ok()) out = result->SerializeAsString();
    }
    if (!result.ok()) Raise(result.status());
    return nb::bytes(out.data(), out.size());
  }

  void Flush() {
    {
      nb::gil_scoped_release release;
      core_->Flush();
    }
    RaiseIfLost();
  }

  void Sync(nb::handle timeout) {
    absl::Status status;
    if (timeout.is_none()) {
      nb::gil_scoped_release release;
      status = core_->Sync();
    } else {
      const double seconds = nb::cast<double>(timeout);
      nb::gil_scoped_release release;
      status = core_->SyncUntil(absl::Now() + Seconds(seconds));
    }
    if (!status.ok()) Raise(status);
  }

  nb::bytes ListOps() {
    absl::StatusOr<v1::ListOpsResponse> response;
    std::string out;
    {
      nb::gil_scoped_release release;
      response = core_->ListOps();
      if (response.ok()) out = response->SerializeAsString();
    }
    if (!response.ok()) Raise(response.status());
    return nb::bytes(out.data(), out.size());
  }

  void KeepAlive() {
    absl::Status status;
    {
      nb::gil_scoped_release release;
      status = core_->KeepAlive();
    }
    if (!status.ok()) Raise(status);
  }

  void Close() {
    absl::Status status;
    {
      nb::gil_scoped_release release;
      status = core_->Close();
    }
    // A loss already raised by a call is not raised again.
    if (!status.ok() &&
        !(IsLost(status) && lost_reported_.load(std::memory_order_relaxed))) {
      Raise(status);
    }
  }

  const std::string& session_id() const { return core_->id(); }
  const std::string& token() const { return core_->token(); }
  const std::string& address() const { return address_; }
  int64_t keep_alive_seconds() const { return core_->keep_alive_seconds(); }
  int64_t chunk_bytes() const { return core_->chunk_bytes(); }
  bool closed() const { return core_->closed(); }
  int64_t last_seq() const { return core_->last_seq(); }
  int64_t commands_sent() const { return core_->counters().commands_sent; }
  int64_t batches_sent() const { return core_->counters().batches_sent; }

  nb::dict Counters() const {
    const ClientCounters c = core_->counters();
    nb::dict d;
    d["transport_failures"] = c.transport_failures;
    d["reconnect_attempts"] = c.reconnect_attempts;
    d["reconnects"] = c.resumes;
    d["batches_resent"] = c.batches_resent;
    d["commands_resent"] = c.commands_resent;
    d["resent_already_applied"] = c.resent_already_applied;
    d["duplicate_results"] = c.duplicate_results;
    d["refetches"] = c.refetches;
    d["commands_sent"] = c.commands_sent;
    d["batches_sent"] = c.batches_sent;
    d["batches_answered"] = c.batches_answered;
    return d;
  }

 private:
  static SessionOptions Options(nb::dict d) {
    SessionOptions o;
    auto get = [&](const char* key) -> nb::handle {
      PyObject* v = PyDict_GetItemString(d.ptr(), key);
      return (v == nullptr || v == Py_None) ? nb::handle() : nb::handle(v);
    };
    if (auto v = get("batch_size")) o.batch_size = nb::cast<int>(v);
    if (auto v = get("max_batch_bytes"))
      o.max_batch_bytes = nb::cast<int64_t>(v);
    if (auto v = get("chunk_bytes")) o.chunk_bytes = nb::cast<int64_t>(v);
    if (auto v = get("max_unacked_bytes"))
      o.max_unacked_bytes = nb::cast<int64_t>(v);
    if (auto v = get("session_id")) o.session_id = nb::cast<std::string>(v);
    if (auto v = get("keep_alive_seconds"))
      o.keep_alive_seconds = nb::cast<int64_t>(v);
    if (auto v = get("timeout")) o.rpc_timeout = Seconds(nb::cast<double>(v));
    if (auto v = get("reconnect_timeout")) {
      o.reconnect_timeout = Seconds(nb::cast<double>(v));
    }
    if (auto v = get("api_key")) o.api_key = nb::cast<std::string>(v);
    // The pure client's backoff (gradtape/_resume.py): 50 ms doubling to 1 s.
    o.initial_backoff = absl::Milliseconds(50);
    o.max_backoff = absl::Seconds(1);
    if (get("tls")) {
      client::TlsOptions tls;
      if (auto v = get("root_certificates"))
        tls.root_certificates = nb::cast<std::string>(v);
      if (auto v = get("private_key"))
        tls.private_key = nb::cast<std::string>(v);
      if (auto v = get("certificate_chain"))
        tls.certificate_chain = nb::cast<std::string>(v);
      if (auto v = get("server_name_override")) {
        tls.server_name_override = nb::cast<std::string>(v);
      }
      o.tls = std::move(tls);
    }
    if (auto v = get("keepalive_time")) {
      o.keepalive.time = Seconds(nb::cast<double>(v));
      if (auto t = get("keepalive_timeout"))
        o.keepalive.timeout = Seconds(nb::cast<double>(t));
      if (auto p = get("keepalive_permit_without_calls")) {
        o.keepalive.permit_without_calls = nb::cast<bool>(p);
      }
    }
    return o;
  }

  static bool IsLost(const absl::Status& s) {
    return s.GetPayload(client::internal::kLostReasonPayload).has_value();
  }

  // After an enqueue: flush a full buffer (without the GIL), report a loss.
  void After(const SessionCore::Enqueued& queued) {
    if (queued.lost) RaiseIfLost();
    if (queued.flush_due) Flush();
  }

  void RaiseIfLost() {
    absl::Status lost = core_->lost();
    if (!lost.ok()) Raise(lost);
  }

  [[noreturn]] void Raise(const absl::Status& status) {
    if (IsLost(status)) lost_reported_.store(true, std::memory_order_relaxed);
    nb::dict payloads;
    status.ForEachPayload([&](absl::string_view key, const absl::Cord& value) {
      const std::string v(value);
      payloads[nb::str(key.data(), key.size())] = nb::str(v.data(), v.size());
    });
    const std::string message(status.message());
    nb::object error =
        make_error_(static_cast<int>(status.code()),
                    nb::str(message.data(), message.size()), payloads,
                    core_ ? nb::str(core_->id().c_str()) : nb::str(""),
                    nb::str(address_.c_str()));
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())),
                    error.ptr());
    throw nb::python_error();
  }

  // The C++ client's chunked put (client/src/chunks.cc) on the array's own
  // buffer, without the GIL: each chunk is copied once.
  void PutInChunks(int64_t id, int dtype,
                   const absl::InlinedVector<int64_t, 4>& shape,
                   const Buffer& buffer) {
    {
      nb::gil_scoped_release release;
      core_->PutInChunks(
          id, static_cast<DType>(dtype), absl::MakeConstSpan(shape),
          absl::string_view(buffer.data(), static_cast<size_t>(buffer.size())));
    }
    RaiseIfLost();
  }

  nb::object make_error_;
  std::string address_;
  std::shared_ptr<SessionCore> core_;
  std::atomic<bool> lost_reported_{false};
};

}  // namespace
}  // namespace gradtape::python

NB_MODULE(_native, m) {
  using gradtape::python::Core;
  m.doc() =
      "gradtape's compiled transport (internal): see gradtape/_native_core.py";
  nb::class_<Core>(m, "Core")
      .def(nb::init<const std::string&, nb::dict, nb::object>(),
           nb::arg("address"), nb::arg("options"), nb::arg("make_error"))
      .def("new_id", &Core::NewId)
      .def("new_tape_id", &Core::NewTapeId)
      .def("execute", &Core::Execute, nb::arg("op"), nb::arg("input_ids"),
           nb::arg("num_outputs"), nb::arg("attrs").none())
      .def("_put", &Core::Put)
      .def("fetch", &Core::Fetch, nb::arg("tensor_id"))
      .def("release", &Core::Release, nb::arg("tensor_id"))
      .def("delete_tape", &Core::DeleteTape, nb::arg("tape_id"),
           nb::arg("pop_first") = false)
      .def("_enqueue", &Core::EnqueueBytes)
      .def("_call", &Core::CallBytes)
      .def("flush", &Core::Flush)
      .def("sync", &Core::Sync, nb::arg("timeout").none() = nb::none())
      .def("_list_ops", &Core::ListOps)
      .def("keep_alive", &Core::KeepAlive)
      .def("close", &Core::Close)
      .def("last_seq", &Core::last_seq)
      .def("_counters", &Core::Counters)
      .def_prop_ro("session_id", &Core::session_id)
      .def_prop_ro("_token", &Core::token)
      .def_prop_ro("address", &Core::address)
      .def_prop_ro("keep_alive_seconds", &Core::keep_alive_seconds)
      .def_prop_ro("chunk_bytes", &Core::chunk_bytes)
      .def_prop_ro("closed", &Core::closed)
      .def_prop_ro("commands_sent", &Core::commands_sent)
      .def_prop_ro("batches_sent", &Core::batches_sent);
}
