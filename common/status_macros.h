#ifndef LOCALSGD_COMMON_STATUS_MACROS_H_
#define LOCALSGD_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"

// Returns the absl::Status of `expr` from the enclosing function when it is not OK.
#define LOCALSGD_RETURN_IF_ERROR(expr)                   \
  do {                                                   \
    const absl::Status localsgd_status_ = (expr);        \
    if (!localsgd_status_.ok()) return localsgd_status_; \
  } while (false)

#define LOCALSGD_CONCAT_INNER_(a, b) a##b
#define LOCALSGD_CONCAT_(a, b) LOCALSGD_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::StatusOr<T>); returns its status when not OK, else moves the
// value into `lhs` (which may be a declaration: `auto x`).
#define LOCALSGD_ASSIGN_OR_RETURN(lhs, expr) \
  LOCALSGD_ASSIGN_OR_RETURN_IMPL_(LOCALSGD_CONCAT_(localsgd_statusor_, __LINE__), lhs, expr)

#define LOCALSGD_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                    \
  if (!statusor.ok()) return statusor.status();              \
  lhs = std::move(statusor).value()

#endif  // LOCALSGD_COMMON_STATUS_MACROS_H_
