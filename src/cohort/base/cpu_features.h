// What the CPU this process runs on can execute, each checked once. The kernels that have an
// AVX2 copy (comm/reduce.cc, compress/formats.cc) pick it at run time with these rather than
// through ifunc, which sanitizer builds and static archives handle badly.
#pragma once

namespace cohort {

bool cpu_has_avx2();
bool cpu_has_fma();
// F16C (half <-> float conversion), read from CPUID: clang 14's __builtin_cpu_supports does not
// know "f16c".
bool cpu_has_f16c();

}  // namespace cohort
