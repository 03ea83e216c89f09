// The job-file parser (train/config.h) on any text: a job, or a ConfigError that names the
// file and a line; never a crash, a hang or another exception. A job it accepts writes itself
// back as YAML that parses to the same job.
#include <cstdint>
#include <string>

#include "cohort/base/error.h"
#include "cohort/train/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cohort;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const train::JobConfig c = train::parse_job_config(text, "fuzz.yaml");
    const train::JobConfig back = train::parse_job_config(train::to_yaml(c), "resolved.yaml");
    if (!(back == c)) __builtin_trap();
  } catch (const ConfigError& e) {
    if (std::string(e.what()).rfind("fuzz.yaml", 0) != 0) __builtin_trap();  // names the file
  }
  return 0;
}
