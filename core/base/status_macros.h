// RETURN_IF_ERROR / ASSIGN_OR_RETURN for absl::Status and absl::StatusOr
// (the Abseil release on Debian 12 has neither).
//
//   RETURN_IF_ERROR(CheckShape(x));
//   ASSIGN_OR_RETURN(Tensor y, Tensor::Empty(dtype, shape));
#ifndef GRADTAPE_CORE_BASE_STATUS_MACROS_H_
#define GRADTAPE_CORE_BASE_STATUS_MACROS_H_

#include "absl/base/optimization.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define RETURN_IF_ERROR(expr)                         \
  do {                                                \
    if (::absl::Status gradtape_status_ = (expr);     \
        ABSL_PREDICT_FALSE(!gradtape_status_.ok())) { \
      return gradtape_status_;                        \
    }                                                 \
  } while (false)

#define GRADTAPE_STATUS_CONCAT_INNER_(a, b) a##b
#define GRADTAPE_STATUS_CONCAT_(a, b) GRADTAPE_STATUS_CONCAT_INNER_(a, b)

// `lhs` may declare a variable (`Tensor t`) or name an existing one.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(           \
      GRADTAPE_STATUS_CONCAT_(gradtape_statusor_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                           \
  if (ABSL_PREDICT_FALSE(!statusor.ok())) {         \
    return std::move(statusor).status();            \
  }                                                 \
  lhs = *std::move(statusor)

#endif  // GRADTAPE_CORE_BASE_STATUS_MACROS_H_
