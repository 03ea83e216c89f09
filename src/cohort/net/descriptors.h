// The process's budget of open descriptors, which every listener, connection and shared-memory
// doorbell draws on.
#pragma once

#include <cstddef>
#include <string>

namespace cohort::net {

// Raises this process's soft limit on open descriptors towards `needed` (at most to the hard
// limit), says so, and warns when even the hard limit is not enough. `who` starts the log lines
// ("store server on ...", "communicator setup (rank 3)").
void ensure_descriptors(size_t needed, const std::string& who);

}  // namespace cohort::net
