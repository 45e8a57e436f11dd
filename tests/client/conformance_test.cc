// Every op sample of the registry (tests/core/ops/op_samples.h) through the
// C++ client against a real server, compared with the same sample run in
// core directly: the client carries every dtype (its DType table is the
// proto's), every attr type and every arity, and hands back what the server
// computed. The C++ client predicts no shapes and no None gradients (its
// Gradient returns the server's handles), so this is the whole of what it
// could get wrong; the Python clients' predictions are held to the server
// by tests/python/test_client_conformance.py.
#include <cstring>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/autodiff/op_executor.h"
#include "core/base/status_macros.h"
#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "core/tensor/variable.h"
#include "gtest/gtest.h"
#include "tests/client/loopback_session_test.h"
#include "tests/core/ops/op_samples.h"

namespace gradtape::client {
namespace {

using ::gradtape::testing::AllOpSamples;
using ::gradtape::testing::OpSample;

HostTensor ToHost(const ::gradtape::Tensor& t) {
  HostTensor h;
  h.dtype = static_cast<DType>(t.dtype());
  h.shape.assign(t.shape().begin(), t.shape().end());
  h.bytes.assign(static_cast<const char*>(t.raw_data()), t.num_bytes());
  return h;
}

AttrValue ToClientAttr(const ::gradtape::AttrValue& v) {
  return std::visit(
      [](const auto& x) -> AttrValue {
        using V = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<V, ::gradtape::DType>) {
          return static_cast<DType>(x);
        } else {
          return x;
        }
      },
      v);
}

// A sample's inputs on the server: values put, variable handles made by
// VarHandleOp and assigned the variable's value.
std::vector<Tensor> PutInputs(Session& session, const OpSample& s) {
  std::vector<Tensor> inputs;
  for (const ::gradtape::Tensor& t : s.inputs) {
    if (t.dtype() != ::gradtape::DType::kResource) {
      inputs.push_back(session.Put(ToHost(t)));
      continue;
    }
    const ::gradtape::Tensor& value = t.resource<::gradtape::Variable>()->value;
    std::vector<int64_t> shape(value.shape().begin(), value.shape().end());
    Tensor handle = session.Execute(
        "VarHandleOp", {},
        {{"dtype", static_cast<DType>(value.dtype())}, {"shape", shape}})[0];
    session.Execute("AssignVariableOp", {handle, session.Put(ToHost(value))},
                    {}, 0);
    inputs.push_back(handle);
  }
  return inputs;
}

// The sample's outputs run in core (the same kernels, no server).
absl::StatusOr<std::vector<::gradtape::Tensor>> RunInCore(const OpSample& s) {
  OpExecutor ctx(DefaultRegistry());
  std::vector<::gradtape::Tensor> inputs;
  for (const ::gradtape::Tensor& t : s.inputs) inputs.push_back(ctx.Adopt(t));
  Tensors out;
  RETURN_IF_ERROR(ctx.Execute(s.op, inputs, s.attrs, &out));
  return std::vector<::gradtape::Tensor>(out.begin(), out.end());
}

// Stateful random ops draw from the session's generator: their values
// differ between two runs, their dtypes and shapes do not.
bool Deterministic(const std::string& op) {
  return op.rfind("Random", 0) != 0 && op.rfind("Truncated", 0) != 0 &&
         op != "Multinomial";
}

class ClientConformanceTest : public LoopbackSessionTest {};

TEST_F(ClientConformanceTest, EverySampleRunsAsInCore) {
  int outputs = 0;
  for (const OpSample& s : AllOpSamples()) {
    SCOPED_TRACE(absl::StrCat(s.op, " (", s.label, ")"));
    absl::StatusOr<std::vector<::gradtape::Tensor>> want = RunInCore(s);
    ASSERT_TRUE(want.ok()) << want.status();
    Attrs attrs;
    for (const auto& [name, value] : s.attrs) {
      attrs.emplace_back(name, ToClientAttr(value));
    }
    std::vector<Tensor> got = session_->Execute(
        s.op, PutInputs(*session_, s), attrs, static_cast<int>(want->size()));
    for (size_t i = 0; i < want->size(); ++i) {
      absl::StatusOr<HostTensor> value = session_->Fetch(got[i]);
      ASSERT_TRUE(value.ok()) << "output " << i << ": " << value.status();
      const HostTensor expected = ToHost((*want)[i]);
      EXPECT_EQ(value->dtype, expected.dtype) << "output " << i;
      // The client's DType table knows the dtype (name, element size).
      EXPECT_TRUE(value->Validate().ok()) << value->Validate();
      EXPECT_NE(DTypeName(value->dtype), "invalid") << "output " << i;
      EXPECT_EQ(value->shape, expected.shape) << "output " << i;
      if (expected.dtype != DType::kResource && Deterministic(s.op)) {
        EXPECT_EQ(value->bytes, expected.bytes) << "output " << i;
      }
      ++outputs;
    }
  }
  EXPECT_GT(outputs, 600);
}

}  // namespace
}  // namespace gradtape::client
