// Tensors larger than one message: chunked puts and fetches.
//
// How it works. PutTensorBegin makes the tensor's buffer at once, through
// Tensor::Empty: the size rule and the memory charge (session and tenant)
// come before a single data byte is stored, and the buffer's pages are
// mapped lazily, so a refused or abandoned put costs nothing but its
// charge while it lives. The id's slot is then kPending, holding that
// buffer and the bytes received. Each PutTensorChunk copies its bytes at
// the offset the slot expects; the one that completes the data turns the
// slot into a live tensor. Everything that ends a slot (ReleaseTensors, the
// session's destructor) drops a pending buffer with its charge like any
// tensor's. A chunked fetch is a read: it resolves the tensor and returns
// the slice the server copies into its reply.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/session/session.h"

namespace gradtape {

std::string Session::PendingString(int64_t id, const Slot& slot) {
  return absl::StrCat("tensor ", id, " is being put: ", slot.received, " of ",
                      slot.tensor.num_bytes(), " bytes received");
}

absl::Status Session::PutTensorBegin(int64_t seq, int64_t id, DType dtype,
                                     absl::Span<const int64_t> shape) {
  const int64_t ids[] = {id};
  return Run(seq, "PutTensorBegin", ids,
             [&](const Command& cmd) -> absl::Status {
               RETURN_IF_ERROR(CheckFreeOutputs(cmd, ids));
               auto where = [&] { return absl::StrCat("id ", id); };
               if (dtype == DType::kInvalid) {
                 return cmd.Error(absl::StatusCode::kInvalidArgument, "id ", id,
                                  ": dtype is not set");
               }
               if (dtype == DType::kResource) {
                 return cmd.Error(absl::StatusCode::kInvalidArgument, "id ", id,
                                  ": resource tensors are made by ops "
                                  "(VarHandleOp), not sent");
               }
               // Checked and charged in full here; no data is stored yet.
               ASSIGN_OR_RETURN(
                   Tensor t, cmd.Annotate(Tensor::Empty(dtype, shape), where));
               if (t.num_bytes() == 0) {
                 Store(id, exec_.Adopt(std::move(t)));
                 return absl::OkStatus();
               }
               SlotFor(id) = Slot{Slot::kPending, std::move(t), nullptr, 0, 0};
               return absl::OkStatus();
             });
}

absl::Status Session::PutTensorChunk(int64_t seq, int64_t id, int64_t offset,
                                     absl::string_view bytes) {
  return Run(
      seq, "PutTensorChunk", {}, [&](const Command& cmd) -> absl::Status {
        auto it = slots_.find(id);
        if (it == slots_.end()) {
          return cmd.Error(absl::StatusCode::kNotFound,
                           "no put is pending at id ", id,
                           " (PutTensorBegin starts one)");
        }
        Slot& slot = it->second;
        if (slot.kind != Slot::kPending) {
          return cmd.Error(absl::StatusCode::kFailedPrecondition,
                           "no put is pending at id ", id, " (it holds ",
                           slot.kind == Slot::kTensor
                               ? slot.tensor.DebugString()
                               : std::string("no tensor"),
                           "; PutTensorBegin starts a put at a free id)");
        }
        const int64_t total = static_cast<int64_t>(slot.tensor.num_bytes());
        const int64_t size = static_cast<int64_t>(bytes.size());
        if (offset != slot.received) {
          return cmd.Error(absl::StatusCode::kInvalidArgument,
                           "chunk at offset ", offset, ", but ",
                           PendingString(id, slot),
                           ": the next chunk starts at offset ", slot.received,
                           "; nothing was stored");
        }
        if (size > total - offset) {
          return cmd.Error(absl::StatusCode::kInvalidArgument, "chunk of ",
                           size, " bytes at offset ", offset,
                           " ends past the end of ", slot.tensor.DebugString(),
                           " at id ", id, " (", total,
                           " bytes); nothing was stored");
        }
        char* data =
            static_cast<char*>(slot.tensor.raw_mutable_data()) + offset;
        if (slot.tensor.dtype() == DType::kBool) {  // Any nonzero byte is true.
          for (int64_t i = 0; i < size; ++i) data[i] = bytes[i] != 0 ? 1 : 0;
        } else if (size > 0) {
          std::memcpy(data, bytes.data(), static_cast<size_t>(size));
        }
        slot.received += size;
        if (slot.received == total) {
          slot = Slot{Slot::kTensor, exec_.Adopt(std::move(slot.tensor)),
                      nullptr, 0, 0};
        }
        return absl::OkStatus();
      });
}

absl::StatusOr<Session::TensorSlice> Session::FetchTensorChunk(
    int64_t seq, int64_t id, int64_t offset, int64_t max_bytes) {
  return Run(
      seq, "FetchTensor", {},
      [&](const Command& cmd) -> absl::StatusOr<TensorSlice> {
        if (offset < 0 || max_bytes < 1) {
          return cmd.Error(absl::StatusCode::kInvalidArgument, "tensor id ", id,
                           ": offset ", offset, " and max_bytes ", max_bytes,
                           " must be >= 0 and >= 1 for a chunk");
        }
        ASSIGN_OR_RETURN(Tensor t, Resolve(cmd, id));
        const int64_t total = static_cast<int64_t>(t.num_bytes());
        if (offset > total) {
          return cmd.Error(absl::StatusCode::kOutOfRange, "offset ", offset,
                           " is past the end of tensor id ", id, " (",
                           t.DebugString(), ", ", total, " bytes)");
        }
        TensorSlice slice;
        slice.offset = offset;
        slice.length = std::min(max_bytes, total - offset);
        slice.tensor = std::move(t);
        return slice;
      });
}

}  // namespace gradtape
