// Helpers shared by the libFuzzer targets in tests/fuzz.
#ifndef GRADTAPE_TESTS_FUZZ_FUZZ_UTIL_H_
#define GRADTAPE_TESTS_FUZZ_FUZZ_UTIL_H_

#include <cstdio>
#include <cstdlib>

namespace gradtape::fuzz {

// Aborts (a finding) when a property the code promises does not hold.
inline void Require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz property violated: %s\n", what);
    std::abort();
  }
}

}  // namespace gradtape::fuzz

#endif  // GRADTAPE_TESTS_FUZZ_FUZZ_UTIL_H_
