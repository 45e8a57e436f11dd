// oneDNN's C API (dnnl.h), opened at run time: the functions the
// convolutions (dnnl_conv.cc) and float32 matrix products (gemm.cc) call,
// and the calling thread's OpenMP team size for them.
//
// oneDNN and its OpenMP runtime (libgomp) are opened with dlopen on first
// use, not linked: libgomp reads its environment once, when it is loaded,
// and its default wait policy has a team's threads spin after every
// parallel region (a second spinning thread on a busy 2-core machine made a
// 10 ms convolution take 0.5 s: the spinner and the thread it waits for
// share the cores with other work). So before main, while the process has
// one thread, OMP_WAIT_POLICY=PASSIVE is set (unless the environment
// already says otherwise): waiting threads sleep. The same pattern as
// OpenBLAS in gemm.cc.
//
// Sanitizer builds leave oneDNN unopened (ok is false): its code is not
// instrumented, and LeakSanitizer's exit-time tracer crashed on the OpenMP
// threads it leaves (signal 11 in six tests).
#ifndef GRADTAPE_CORE_OPS_DNNL_API_H_
#define GRADTAPE_CORE_OPS_DNNL_API_H_

#include "dnnl.h"  // declarations only: the library is opened at run time

namespace gradtape {

#define GRADTAPE_DNNL_FUNCTIONS(X)                  \
  X(dilated_convolution_backward_data_desc_init)    \
  X(dilated_convolution_backward_weights_desc_init) \
  X(dilated_convolution_forward_desc_init)          \
  X(engine_create)                                  \
  X(memory_create)                                  \
  X(memory_desc_equal)                              \
  X(memory_desc_get_size)                           \
  X(memory_desc_init_by_tag)                        \
  X(memory_destroy)                                 \
  X(primitive_attr_create)                          \
  X(primitive_attr_destroy)                         \
  X(primitive_attr_set_scratchpad_mode)             \
  X(primitive_create)                               \
  X(primitive_desc_create)                          \
  X(primitive_desc_destroy)                         \
  X(primitive_desc_query_md)                        \
  X(primitive_destroy)                              \
  X(primitive_execute)                              \
  X(reorder_primitive_desc_create)                  \
  X(sgemm)                                          \
  X(stream_create)                                  \
  X(stream_destroy)                                 \
  X(stream_wait)

// The functions, from the opened library; ok is false if it or one of them
// is missing, or in a sanitizer build (then callers use their other path).
struct DnnlApi {
#define GRADTAPE_DNNL_MEMBER(name) decltype(&::dnnl_##name) name = nullptr;
  GRADTAPE_DNNL_FUNCTIONS(GRADTAPE_DNNL_MEMBER)
#undef GRADTAPE_DNNL_MEMBER
  void (*omp_set_num_threads)(int) = nullptr;
  bool ok = false;
};

// Opens the libraries on the first call; thread-safe.
const DnnlApi& Dnnl();

// The OpenMP team size of the calling thread's next oneDNN calls (its
// threads plus itself; 1: oneDNN runs on the calling thread, starting no
// team). Cheap when unchanged; Dnnl().ok must be true.
void SetDnnlThreads(int threads);

}  // namespace gradtape

#endif  // GRADTAPE_CORE_OPS_DNNL_API_H_
