#include "core/ops/dnnl_api.h"

#include <dlfcn.h>

#include <cstdlib>

namespace gradtape {
namespace {

// Before main (see dnnl_api.h).
const bool kPassiveOmp =
    setenv("OMP_WAIT_POLICY", "PASSIVE", /*overwrite=*/0) == 0;

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

DnnlApi LoadApi() {
  DnnlApi api;
  (void)kPassiveOmp;
  if (kSanitized) return api;
  void* lib = dlopen(GRADTAPE_DNNL_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return api;
  bool ok = true;
#define GRADTAPE_DNNL_LOAD(name)                                             \
  api.name =                                                                 \
      reinterpret_cast<decltype(&::dnnl_##name)>(dlsym(lib, "dnnl_" #name)); \
  ok = ok && api.name != nullptr;
  GRADTAPE_DNNL_FUNCTIONS(GRADTAPE_DNNL_LOAD)
#undef GRADTAPE_DNNL_LOAD
  // oneDNN's OpenMP runtime, loaded with it.
  void* gomp = dlopen(GRADTAPE_OMP_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  if (gomp != nullptr) {
    api.omp_set_num_threads =
        reinterpret_cast<void (*)(int)>(dlsym(gomp, "omp_set_num_threads"));
  }
  api.ok = ok && api.omp_set_num_threads != nullptr;
  return api;
}

}  // namespace

const DnnlApi& Dnnl() {
  static const DnnlApi api = LoadApi();
  return api;
}

void SetDnnlThreads(int threads) {
  // OpenMP's thread count is a setting of the calling thread; one record
  // per thread of what it was set to, shared by every caller here.
  thread_local int set = 0;
  if (set != threads) {
    Dnnl().omp_set_num_threads(threads);
    set = threads;
  }
}

}  // namespace gradtape
