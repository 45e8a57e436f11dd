// Package gradtape is a minimal Go client for the gradtape service, built on
// stubs generated from proto/gradtape/v1/tape_service.proto (generate.sh).
//
// Commands are buffered (tensor and tape ids are chosen here, so nothing
// waits for the server to name an op's outputs) and sent as one CommandBatch
// on the session's bidi Stream at a wait point: Sync, Fetch,
// GradientValues. Per-command errors come back as *CommandError values
// carrying the gRPC code, the command's sequence number and the server's
// message (which names the op). Not safe for concurrent use.
//
// A stream that fails in transport is resumed (reconnect, resend the batch
// with its seqs; the server applies each seq once), and a session that
// cannot be resumed returns one *SessionLostError from every later call:
// see resume.go for the rules.
package gradtape

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"sort"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	pb "gradtape/client/go/gen/gradtapev1"
)

// CommandError is a failed command reported by the server.
type CommandError struct {
	Code    codes.Code
	Seq     int64
	Message string
}

func (e *CommandError) Error() string {
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Session is one server session with its command stream.
type Session struct {
	ID       string
	conn     *grpc.ClientConn
	client   pb.TapeServiceClient
	ctx      context.Context
	cancel   context.CancelFunc
	stream   pb.TapeService_StreamClient
	pending  []*pb.Command
	seq      int64
	nextID   int64
	nextTape int64
	batchID  int64
	results  map[int64]*pb.CommandResult
	resume   resumeState // resume.go
	// Chunked transfer (chunks.go): the chunk size, and the first command
	// error of a chunk's batch, returned by the next Sync.
	chunkBytes int64
	chunkErr   error
}

// Connect dials address ("host:port"), creates a session with a random
// 128-bit id and opens the command stream. Options (options.go) set TLS,
// keepalive and the API key; the default is plaintext.
func Connect(ctx context.Context, address string, opts ...Option) (*Session, error) {
	cfg := newConnectConfig(opts)
	if cfg.apiKey != "" { // every call's context derives from ctx
		ctx = metadata.AppendToOutgoingContext(ctx, AuthorizationHeader, "Bearer "+cfg.apiKey)
	}
	conn, err := grpc.NewClient(address, cfg.dialOptions()...)
	if err != nil {
		return nil, err
	}
	newID := func() (string, error) {
		var raw [16]byte
		if _, err := rand.Read(raw[:]); err != nil {
			return "", err
		}
		return hex.EncodeToString(raw[:]), nil
	}
	client := pb.NewTapeServiceClient(conn)
	resp, err := createSession(ctx, client, address, cfg.resume, newID)
	if err != nil {
		conn.Close()
		return nil, err
	}
	sctx, scancel := context.WithCancel(metadata.AppendToOutgoingContext(ctx,
		SessionIDHeader, resp.SessionId, SessionTokenHeader, resp.Token))
	stream, err := client.Stream(sctx)
	if err != nil {
		scancel()
		conn.Close()
		return nil, err
	}
	return &Session{ID: resp.SessionId, conn: conn, client: client, ctx: sctx, cancel: scancel,
		stream: stream, results: map[int64]*pb.CommandResult{},
		resume: resumeState{address: address, cfg: cfg.resume}, chunkBytes: cfg.chunkBytes}, nil
}

// Close ends the stream and closes the session on the server.
func (s *Session) Close() error {
	s.stream.CloseSend()
	for { // drain until the server ends the stream
		if _, err := s.stream.Recv(); err != nil {
			break
		}
	}
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	_, err := s.client.CloseSession(ctx, &pb.CloseSessionRequest{})
	s.cancel()
	s.conn.Close()
	return err
}

func (s *Session) enqueue(c *pb.Command) int64 {
	s.seq++
	c.Seq = s.seq
	s.pending = append(s.pending, c)
	return s.seq
}

// Tensor is a tensor id in one session.
type Tensor int64

// Put buffers a float64 tensor.
func (s *Session) Put(shape []int64, values []float64) Tensor {
	data := make([]byte, 8*len(values))
	for i, v := range values {
		binary.LittleEndian.PutUint64(data[8*i:], math.Float64bits(v))
	}
	return s.put(&pb.TensorValue{Dtype: pb.DType_DTYPE_FLOAT64, Shape: shape, Data: data})
}

// PutInt32 buffers an int32 tensor.
func (s *Session) PutInt32(shape []int64, values []int32) Tensor {
	data := make([]byte, 4*len(values))
	for i, v := range values {
		binary.LittleEndian.PutUint32(data[4*i:], uint32(v))
	}
	return s.put(&pb.TensorValue{Dtype: pb.DType_DTYPE_INT32, Shape: shape, Data: data})
}

func (s *Session) put(v *pb.TensorValue) Tensor {
	s.nextID++
	if int64(len(v.Data)) > s.chunkBytes {
		s.putInChunks(s.nextID, v) // chunks.go
		return Tensor(s.nextID)
	}
	s.enqueue(&pb.Command{Kind: &pb.Command_Put{Put: &pb.PutTensor{Id: s.nextID, Value: v}}})
	return Tensor(s.nextID)
}

// Execute buffers an op and returns its numOutputs output ids.
func (s *Session) Execute(op string, inputs []Tensor, numOutputs int, attrs map[string]*pb.AttrValue) []Tensor {
	in := make([]int64, len(inputs))
	for i, t := range inputs {
		in[i] = int64(t)
	}
	out := make([]Tensor, numOutputs)
	ids := make([]int64, numOutputs)
	for i := range out {
		s.nextID++
		out[i], ids[i] = Tensor(s.nextID), s.nextID
	}
	s.enqueue(&pb.Command{Kind: &pb.Command_Execute{Execute: &pb.ExecuteOp{
		Op: op, InputIds: in, OutputIds: ids, Attrs: attrs}}})
	return out
}

// Op buffers a one-output op without attrs.
func (s *Session) Op(op string, inputs ...Tensor) Tensor {
	return s.Execute(op, inputs, 1, nil)[0]
}

// Sync sends the buffered commands as one batch, waits for the replies to
// it and to every batch sent before it, and returns the earliest command
// error in them (nil if none). Results of commands that return something
// are kept for Fetch / GradientValues.
func (s *Session) Sync() error {
	if s.resume.lost != nil {
		return s.resume.lost // a lost session fails every call the same way
	}
	if s.chunkErr != nil {
		// A chunked put's command error, earlier than anything buffered.
		err := s.chunkErr
		s.chunkErr = nil
		if len(s.pending) > 0 {
			_ = s.Sync()
		}
		return err
	}
	if len(s.pending) == 0 {
		return nil
	}
	s.batchID++
	batch := &pb.CommandBatch{BatchId: s.batchID, Commands: s.pending}
	s.pending = nil
	reply, err := s.exchange(batch) // resumes after transport failures
	if err != nil {
		return err
	}
	if reply.BatchId != batch.BatchId {
		return fmt.Errorf("gradtape stream: reply to batch %d, want %d", reply.BatchId, batch.BatchId)
	}
	var errs []*CommandError
	for _, r := range reply.Results {
		if s.staleRead(batch, r) {
			continue // call sends the fetch again
		}
		if e := r.GetError(); e != nil {
			errs = append(errs, &CommandError{Code: codes.Code(e.Code), Seq: r.Seq, Message: e.Message})
		} else {
			s.results[r.Seq] = r
		}
	}
	if len(errs) > 0 {
		sort.Slice(errs, func(i, j int) bool { return errs[i].Seq < errs[j].Seq })
		return errs[0]
	}
	return nil
}

func (s *Session) call(c *pb.Command) (*pb.CommandResult, error) {
	for reread := 0; ; reread++ {
		seq := s.enqueue(c)
		if err := s.Sync(); err != nil {
			return nil, err
		}
		if r, ok := s.results[seq]; ok {
			delete(s.results, seq)
			return r, nil
		}
		if !s.resume.stale[seq] || reread == 3 {
			return nil, fmt.Errorf("no result for command %d", seq)
		}
		delete(s.resume.stale, seq) // no longer kept after a resume: fetch again
		s.resume.counters.Refetches++
	}
}

// Fetch is a wait point: the float64 values and shape of t (in chunks
// when t is larger than one; see FetchValue).
func (s *Session) Fetch(t Tensor) ([]float64, []int64, error) {
	value, err := s.FetchValue(t)
	if err != nil {
		return nil, nil, err
	}
	v, err := Float64s(value)
	return v, value.GetShape(), err
}

// Float64s decodes a float64 TensorValue.
func Float64s(v *pb.TensorValue) ([]float64, error) {
	if v.GetDtype() != pb.DType_DTYPE_FLOAT64 {
		return nil, fmt.Errorf("want a float64 tensor, got %s", v.GetDtype())
	}
	out := make([]float64, len(v.Data)/8)
	for i := range out {
		out[i] = math.Float64frombits(binary.LittleEndian.Uint64(v.Data[8*i:]))
	}
	return out, nil
}

// Tape is a gradient tape id.
type Tape int64

// PushTape starts a (non-persistent) tape watching ids.
func (s *Session) PushTape(watch ...Tensor) Tape {
	s.nextTape++
	id := s.nextTape
	s.enqueue(&pb.Command{Kind: &pb.Command_PushTape{PushTape: &pb.PushTape{TapeId: id}}})
	ids := make([]int64, len(watch))
	for i, t := range watch {
		ids[i] = int64(t)
	}
	s.enqueue(&pb.Command{Kind: &pb.Command_Watch{Watch: &pb.Watch{TapeId: id, Ids: ids}}})
	return Tape(id)
}

// PopTape stops recording into the tape.
func (s *Session) PopTape(t Tape) {
	s.enqueue(&pb.Command{Kind: &pb.Command_PopTape{PopTape: &pb.PopTape{TapeId: int64(t)}}})
}

// GradientValues is a wait point: d(target)/d(source) for each source.
func (s *Session) GradientValues(t Tape, target Tensor, sources ...Tensor) ([][]float64, error) {
	src := make([]int64, len(sources))
	res := make([]int64, len(sources))
	for i, x := range sources {
		src[i] = int64(x)
		s.nextID++
		res[i] = s.nextID
	}
	r, err := s.call(&pb.Command{Kind: &pb.Command_Gradient{Gradient: &pb.Gradient{
		TapeId: int64(t), TargetIds: []int64{int64(target)}, SourceIds: src, ResultIds: res,
		ReturnValues: true}}})
	if err != nil {
		return nil, err
	}
	g := r.GetGradient()
	if len(g.GetValues()) != len(sources) {
		return nil, fmt.Errorf("gradient: %d values for %d sources", len(g.GetValues()), len(sources))
	}
	out := make([][]float64, len(sources))
	for i, v := range g.Values {
		if i < len(g.IsNone) && g.IsNone[i] {
			continue // nil: a None gradient
		}
		if out[i], err = Float64s(v); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Ints is an AttrValue holding a list of ints.
func Ints(v ...int64) *pb.AttrValue {
	return &pb.AttrValue{Value: &pb.AttrValue_Ints{Ints: &pb.IntList{Values: v}}}
}

// Bool is a bool AttrValue.
func Bool(b bool) *pb.AttrValue { return &pb.AttrValue{Value: &pb.AttrValue_B{B: b}} }
