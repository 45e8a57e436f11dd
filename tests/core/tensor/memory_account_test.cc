// MemoryAccount with a parent (a tenant's account over its sessions): a
// charge must fit both limits, refusals name the account that refused, and
// refunds reach the parent.
#include <memory>

#include "absl/strings/match.h"
#include "core/ops/ops.h"
#include "core/session/session.h"
#include "core/tensor/tensor.h"
#include "gtest/gtest.h"

namespace gradtape {
namespace {

TEST(MemoryAccountTest, ChargeMustFitParentAndChild) {
  auto tenant = std::make_shared<MemoryAccount>(nullptr, "tenant 'acme'");
  tenant->set_limit(1000);
  MemoryAccount a(tenant), b(tenant);
  a.set_limit(800);
  EXPECT_TRUE(a.TryCharge(600));
  EXPECT_EQ(tenant->bytes(), 600);
  // Fits b's own (unlimited) budget, not the tenant's: nothing is charged.
  EXPECT_EQ(b.TryChargeOrRefuser(500), tenant.get());
  EXPECT_EQ(b.bytes(), 0);
  EXPECT_EQ(tenant->bytes(), 600);
  // Over a's own limit: a refuses, the tenant is not touched.
  EXPECT_EQ(a.TryChargeOrRefuser(300), &a);
  EXPECT_EQ(tenant->bytes(), 600);
  EXPECT_EQ(b.remaining(), 400);
  EXPECT_EQ(a.remaining(), 200);
  EXPECT_TRUE(b.TryCharge(400));
  EXPECT_EQ(a.remaining(), 0);
  // Refunds reach the parent; a raised limit applies to the next charge.
  a.Add(-600);
  EXPECT_EQ(tenant->bytes(), 400);
  tenant->set_limit(2000);
  EXPECT_TRUE(b.TryCharge(1500));
  EXPECT_EQ(tenant->bytes(), 1900);
}

TEST(MemoryAccountTest, TwoSessionsShareTheTenantLimit) {
  auto tenant = std::make_shared<MemoryAccount>(nullptr, "tenant 'acme'");
  tenant->set_limit(ChargedBytes(8 << 10) * 3 / 2);  // one 8 KiB tensor
  SessionOptions options;
  options.parent_account = tenant;
  Session first(DefaultRegistry(), options);
  Session second(DefaultRegistry(), options);
  ASSERT_TRUE(
      first.PutTensor(1, 1, DType::kFloat64, {1024}, std::string(8 << 10, 0))
          .ok());
  absl::Status refused =
      second.PutTensor(1, 1, DType::kFloat64, {1024}, std::string(8 << 10, 0));
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(),
                                "tenant 'acme' memory limit exceeded"))
      << refused;
  // Freed in the first session, the tenant's bytes are available again.
  ASSERT_TRUE(first.ReleaseTensors(2, {1}).ok());
  EXPECT_TRUE(
      second.PutTensor(3, 1, DType::kFloat64, {1024}, std::string(8 << 10, 0))
          .ok());
}

}  // namespace
}  // namespace gradtape
