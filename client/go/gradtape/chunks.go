package gradtape

// Tensors larger than one chunk (WithChunkBytes, 64 MiB by default), the
// same scheme as the C++ and Python clients. A put of more bytes is one
// PutTensorBegin (the server charges the whole tensor then) and
// PutTensorChunk commands in order, each chunk in a batch of its own; a
// command error among them comes back at the next Sync (Put returns none). A
// fetch always asks for at most one chunk (FetchTensor.MaxBytes), so a small
// tensor still takes one round trip; when the first chunk's TotalBytes says
// there is more, the rest follows one chunk per round trip. One batch at a
// time: the Go client keeps only its batch in flight for resuming
// (resume.go), so chunks are not pipelined as in the C++ and Python clients.

import (
	"fmt"

	pb "gradtape/client/go/gen/gradtapev1"
)

// syncChunk sends the buffered commands (one chunk) and waits for their
// reply; a command error is kept for the next Sync.
func (s *Session) syncChunk() {
	if err := s.Sync(); err != nil && s.chunkErr == nil {
		s.chunkErr = err
	}
}

// putInChunks buffers PutTensorBegin for id and sends each chunk of v in a
// batch of its own.
func (s *Session) putInChunks(id int64, v *pb.TensorValue) {
	s.enqueue(&pb.Command{Kind: &pb.Command_PutBegin{PutBegin: &pb.PutTensorBegin{
		Id: id, Dtype: v.Dtype, Shape: v.Shape}}})
	for offset := int64(0); offset < int64(len(v.Data)); offset += s.chunkBytes {
		end := min(offset+s.chunkBytes, int64(len(v.Data)))
		s.enqueue(&pb.Command{Kind: &pb.Command_PutChunk{PutChunk: &pb.PutTensorChunk{
			Id: id, Offset: offset, Data: v.Data[offset:end]}}})
		s.syncChunk()
	}
}

func fetchCommand(id, offset, maxBytes int64) *pb.Command {
	return &pb.Command{Kind: &pb.Command_Fetch{Fetch: &pb.FetchTensor{
		Id: id, Offset: offset, MaxBytes: maxBytes}}}
}

// FetchValue is a wait point: t's value (any dtype), in chunks when it is
// larger than one.
func (s *Session) FetchValue(t Tensor) (*pb.TensorValue, error) {
	chunk := s.chunkBytes
	r, err := s.call(fetchCommand(int64(t), 0, chunk))
	if err != nil {
		return nil, err
	}
	if v := r.GetTensor(); v != nil {
		return v, nil
	}
	head := r.GetChunk()
	if head == nil {
		return nil, fmt.Errorf("fetch of tensor %d: the result of command %d holds no tensor", t, r.Seq)
	}
	total := head.TotalBytes
	if head.Offset != 0 || int64(len(head.Data)) != min(chunk, total) {
		return nil, fmt.Errorf("fetch of tensor %d: the result of command %d is not its first chunk", t, r.Seq)
	}
	out := &pb.TensorValue{Dtype: head.Dtype, Shape: head.Shape, Data: head.Data}
	if total == int64(len(head.Data)) {
		return out, nil
	}
	out.Data = make([]byte, total)
	copy(out.Data, head.Data)
	for next := chunk; next < total; next += chunk {
		r, err := s.call(fetchCommand(int64(t), next, chunk))
		if err != nil {
			return nil, err
		}
		part := r.GetChunk()
		size := min(chunk, total-next)
		if part == nil || part.Offset != next || part.TotalBytes != total || int64(len(part.Data)) != size {
			return nil, fmt.Errorf("fetch of tensor %d: the result of command %d is not the chunk at offset %d of %d bytes",
				t, r.Seq, next, total)
		}
		copy(out.Data[next:], part.Data)
	}
	return out, nil
}
