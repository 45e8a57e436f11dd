package gradtape

// Tensors larger than one chunk (WithChunkBytes, 64 MiB by default), the
// same scheme as the C++ and Python clients. A put of more bytes is one
// PutTensorBegin (the server charges the whole tensor then) and
// PutTensorChunk commands in order, each sent as a batch of its own without
// waiting; their errors come back at the next Sync. A fetch always asks for
// at most one chunk (FetchTensor.MaxBytes), so a small tensor still takes
// one round trip; when the first chunk's TotalBytes says there is more, the
// rest is fetched fetchWindow chunks at a time, each in a batch of its own.

import (
	"fmt"

	pb "gradtape/client/go/gen/gradtapev1"
)

const fetchWindow = 4

// send writes the buffered commands as one batch without waiting for its
// reply (Sync reads it).
func (s *Session) send() error {
	s.batchID++
	batch := &pb.CommandBatch{BatchId: s.batchID, Commands: s.pending}
	s.pending = nil
	if err := s.stream.Send(batch); err != nil {
		return fmt.Errorf("gradtape stream send: %w", err)
	}
	return nil
}

// putInChunks buffers PutTensorBegin for id and sends each chunk of v in a
// batch of its own. A send error surfaces at the next Sync (the stream is
// broken then).
func (s *Session) putInChunks(id int64, v *pb.TensorValue) {
	s.enqueue(&pb.Command{Kind: &pb.Command_PutBegin{PutBegin: &pb.PutTensorBegin{
		Id: id, Dtype: v.Dtype, Shape: v.Shape}}})
	for offset := int64(0); offset < int64(len(v.Data)); offset += s.chunkBytes {
		if len(s.pending) > 0 && s.send() != nil {
			return
		}
		end := min(offset+s.chunkBytes, int64(len(v.Data)))
		s.enqueue(&pb.Command{Kind: &pb.Command_PutChunk{PutChunk: &pb.PutTensorChunk{
			Id: id, Offset: offset, Data: v.Data[offset:end]}}})
	}
	if s.send() != nil {
		return
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
	for next := chunk; next < total; {
		var seqs, offsets []int64
		for ; next < total && len(seqs) < fetchWindow; next += chunk {
			seqs = append(seqs, s.enqueue(fetchCommand(int64(t), next, chunk)))
			offsets = append(offsets, next)
			if err := s.send(); err != nil {
				return nil, err
			}
		}
		err := s.Sync()
		for i, seq := range seqs {
			part := s.results[seq].GetChunk()
			delete(s.results, seq)
			if err != nil {
				continue
			}
			size := min(chunk, total-offsets[i])
			if part == nil || part.Offset != offsets[i] || part.TotalBytes != total || int64(len(part.Data)) != size {
				err = fmt.Errorf("fetch of tensor %d: the result of command %d is not the chunk at offset %d of %d bytes",
					t, seq, offsets[i], total)
				continue
			}
			copy(out.Data[offsets[i]:], part.Data)
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
