// The gradtape C++ client in one include: sessions, tensor handles, tapes
// (session.h), host values (host_tensor.h), op helpers (ops.h) and
// variables, optimizers and checkpoints (training.h).
#ifndef GRADTAPE_CLIENT_CLIENT_H_
#define GRADTAPE_CLIENT_CLIENT_H_

#include "gradtape/client/autodiff.h"     // IWYU pragma: export
#include "gradtape/client/host_tensor.h"  // IWYU pragma: export
#include "gradtape/client/ops.h"          // IWYU pragma: export
#include "gradtape/client/program.h"      // IWYU pragma: export
#include "gradtape/client/session.h"      // IWYU pragma: export
#include "gradtape/client/training.h"     // IWYU pragma: export

#endif  // GRADTAPE_CLIENT_CLIENT_H_
