#include "cohort/base/cpu_features.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#define COHORT_X86 1
#else
#define COHORT_X86 0
#endif

namespace cohort {

bool cpu_has_avx2() {
#if COHORT_X86
  static const bool ok = __builtin_cpu_supports("avx2");
  return ok;
#else
  return false;
#endif
}

bool cpu_has_fma() {
#if COHORT_X86
  static const bool ok = __builtin_cpu_supports("fma");
  return ok;
#else
  return false;
#endif
}

bool cpu_has_f16c() {
#if COHORT_X86
  static const bool ok = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;  // leaf 1, ECX bit 29
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  }();
  return ok;
#else
  return false;
#endif
}

}  // namespace cohort
