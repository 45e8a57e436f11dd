// Helpers shared by the op family tests (tests/core/*_ops_test.cc).
#ifndef GRADTAPE_TESTS_CORE_OP_TEST_UTIL_H_
#define GRADTAPE_TESTS_CORE_OP_TEST_UTIL_H_

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "core/autodiff/op_executor.h"
#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "gtest/gtest.h"

namespace gradtape::testing {

// The elements of `t` as doubles (complex: real parts).
inline std::vector<double> Values(const Tensor& t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    v.push_back(t.ElementAsDouble(i));
  }
  return v;
}

// A fixture running ops on a OpExecutor over the default registry.
class OpTest : public ::testing::Test {
 protected:
  absl::StatusOr<Tensors> Run(absl::string_view op, std::vector<Tensor> in,
                              AttrMap attrs = {}) {
    Tensors out;
    absl::Status s = ctx_.Execute(op, in, std::move(attrs), &out);
    if (!s.ok()) return s;
    return out;
  }
  // The first output of `op`.
  absl::StatusOr<Tensor> Run1(absl::string_view op, std::vector<Tensor> in,
                              AttrMap attrs = {}) {
    absl::StatusOr<Tensors> out = Run(op, std::move(in), std::move(attrs));
    if (!out.ok()) return out.status();
    return (*out)[0];
  }

  // The first output of `op`, which must succeed (a failure is reported and
  // an invalid Tensor returned).
  Tensor MustRun(absl::string_view op, std::vector<Tensor> in,
                 AttrMap attrs = {}) {
    absl::StatusOr<Tensor> r = Run1(op, std::move(in), std::move(attrs));
    EXPECT_TRUE(r.ok()) << op << ": " << r.status();
    return r.ok() ? *r : Tensor();
  }

  // Expects INVALID_ARGUMENT whose message names the op ("Op: ...") and each of
  // `mentions`, with nothing recorded on a tape watching every trainable
  // input.
  void ExpectInvalid(absl::string_view op, std::vector<Tensor> in,
                     AttrMap attrs, std::vector<std::string> mentions) {
    ASSERT_TRUE(ctx_.tapes().Push(kTape, false, false).ok());
    Tape* tape = *ctx_.tapes().Find(kTape);
    for (Tensor& t : in) {
      t = ctx_.Adopt(t);
      if (IsTrainable(t.dtype())) tape->Watch(t);
    }
    absl::StatusOr<Tensors> r = Run(op, in, std::move(attrs));
    ASSERT_FALSE(r.ok()) << op;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument)
        << r.status();
    EXPECT_TRUE(absl::StrContains(r.status().message(), absl::StrCat(op, ":")))
        << r.status();
    for (const std::string& m : mentions) {
      EXPECT_TRUE(absl::StrContains(r.status().message(), m))
          << r.status() << " should mention " << m;
    }
    EXPECT_TRUE(tape->num_entries() == 0);
    ASSERT_TRUE(ctx_.tapes().Pop(kTape).ok());
    ASSERT_TRUE(ctx_.tapes().Delete(kTape).ok());
  }

  static constexpr int64_t kTape = 7;
  OpExecutor ctx_{DefaultRegistry()};
};

}  // namespace gradtape::testing

#endif  // GRADTAPE_TESTS_CORE_OP_TEST_UTIL_H_
