#include "cohort/base/error.h"

#include <cstring>

namespace cohort {

SystemError::SystemError(const std::string& what, int err)
    : Error(what + ": " + std::strerror(err)), code_(err) {}

}  // namespace cohort
