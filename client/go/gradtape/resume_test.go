package gradtape

// Resume (resume.go) through a TCP proxy on 127.0.0.1 that can cut every
// connection or refuse new ones.

import (
	"context"
	"errors"
	"io"
	"math"
	"math/rand"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "gradtape/client/go/gen/gradtapev1"
)

type cutProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func startCutProxy(t *testing.T, upstream string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln}
	t.Cleanup(func() { ln.Close(); p.cutAll() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { io.Copy(u, c); u.Close(); c.Close() }()
			go func() { io.Copy(c, u); u.Close(); c.Close() }()
		}
	}()
	return p
}

func (p *cutProxy) cutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func connectVia(t *testing.T, addr string, opts ...Option) *Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	s, err := Connect(ctx, addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestTransportFailuresAreTheUntrailedTransportCodes(t *testing.T) {
	trailed := metadata.Pairs(ServerStatusTrailer, "1")
	for _, c := range []struct {
		code    codes.Code
		trailer metadata.MD
		want    bool
	}{
		{codes.Unavailable, nil, true},
		{codes.Internal, nil, true},
		{codes.Unknown, nil, true},
		{codes.Unavailable, trailed, false},
		{codes.Internal, trailed, false},
		{codes.NotFound, nil, false},
		{codes.Canceled, nil, false},
		{codes.DeadlineExceeded, nil, false},
	} {
		if got := IsTransportFailure(status.Error(c.code, "x"), c.trailer); got != c.want {
			t.Errorf("IsTransportFailure(%v, %v) = %v, want %v", c.code, c.trailer, got, c.want)
		}
	}
}

func TestCutConnectionIsResumed(t *testing.T) {
	proxy := startCutProxy(t, startServer(t))
	s := connectVia(t, proxy.ln.Addr().String(), WithReconnect(10*time.Second, 10*time.Millisecond, 200*time.Millisecond))
	x := s.Put([]int64{2}, []float64{1.5, 2})
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	proxy.cutAll()
	v, _, err := s.Fetch(s.Op("AddV2", x, x))
	if err != nil {
		t.Fatal(err)
	}
	assertClose(t, "x + x", v, []float64{3, 4})
	if c := s.ResumeCounters(); c.TransportFailures != 1 || c.Resumes != 1 {
		t.Errorf("counters = %+v, want one transport failure and one resume", c)
	}
}

func TestUnreachableServerIsOneSessionLostError(t *testing.T) {
	proxy := startCutProxy(t, startServer(t))
	s := connectVia(t, proxy.ln.Addr().String(), WithReconnect(time.Second, 10*time.Millisecond, 100*time.Millisecond))
	x := s.Put([]int64{1}, []float64{1})
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	proxy.ln.Close()
	proxy.cutAll()
	start := time.Now()
	_, _, err := s.Fetch(x)
	var lost *SessionLostError
	if !errors.As(err, &lost) || status.Code(err) != codes.Unavailable ||
		!strings.Contains(err.Error(), "session "+s.ID) || !strings.Contains(err.Error(), "unreachable for") {
		t.Fatalf("Fetch after the server left = %v, want a SessionLostError UNAVAILABLE naming the session", err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Errorf("waited %v, want about the 1 s reconnect timeout", waited)
	}
	if again := s.Sync(); again != err {
		t.Errorf("a later Sync = %v, want the same error", again)
	}
}

// deadReplicaProxy stands in for the proxy in front of a replica that died
// (deploy/k8s/nginx/proxy.conf): CreateSession succeeds (the replica was
// alive then), a Stream ends with a bare Unavailable once it read a batch
// (the reset of a stream open when the replica died), and every KeepAlive
// gets the proxy's Unavailable, with the verdict trailer if verdict.
type deadReplicaProxy struct {
	pb.UnimplementedTapeServiceServer
	verdict bool
	probes  atomic.Int64
}

func (p *deadReplicaProxy) CreateSession(_ context.Context, r *pb.CreateSessionRequest) (*pb.CreateSessionResponse, error) {
	return &pb.CreateSessionResponse{SessionId: r.SessionId, Token: "token", KeepAliveSeconds: 60}, nil
}

func (p *deadReplicaProxy) Stream(stream pb.TapeService_StreamServer) error {
	if _, err := stream.Recv(); err != nil {
		return err
	}
	return status.Error(codes.Unavailable, "upstream reset")
}

func (p *deadReplicaProxy) KeepAlive(ctx context.Context, _ *pb.KeepAliveRequest) (*pb.KeepAliveResponse, error) {
	p.probes.Add(1)
	if p.verdict {
		grpc.SetTrailer(ctx, metadata.Pairs(ProxyVerdictTrailer, ReplicaUnreachableVerdict))
	}
	return nil, status.Error(codes.Unavailable,
		"gradtape-proxy: the replica of session s is unreachable; create new sessions under a new id")
}

// loseBehindDeadReplica syncs a batch through proxy (served on 127.0.0.1)
// with the given reconnect timeout; returns how long the loss took, and the
// loss.
func loseBehindDeadReplica(t *testing.T, proxy *deadReplicaProxy, timeout time.Duration) (time.Duration, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer()
	pb.RegisterTapeServiceServer(server, proxy)
	go server.Serve(ln)
	t.Cleanup(server.Stop)
	s := connectVia(t, ln.Addr().String(), WithReconnect(timeout, 10*time.Millisecond, 2*time.Second))
	s.Put([]int64{1}, []float64{1})
	start := time.Now()
	err = s.Sync()
	waited := time.Since(start)
	if again := s.Sync(); again != err {
		t.Errorf("a later Sync = %v, want the same error", again)
	}
	return waited, err
}

func TestProxyVerdictEndsTheSessionAfterItsGrace(t *testing.T) {
	proxy := &deadReplicaProxy{verdict: true}
	waited, err := loseBehindDeadReplica(t, proxy, 60*time.Second)
	var lost *SessionLostError
	if !errors.As(err, &lost) || status.Code(err) != codes.Unavailable ||
		!strings.Contains(err.Error(), "unreachable for 2.") ||
		!strings.Contains(err.Error(), "gradtape-proxy: the replica of session") {
		t.Fatalf("Sync behind a dead replica = %v, want a SessionLostError UNAVAILABLE "+
			"unreachable for 2.x s quoting the proxy", err)
	}
	if waited < ReplicaUnreachableGrace || waited > 4*time.Second {
		t.Errorf("waited %v, want the %v grace (not the 60 s reconnect timeout)", waited, ReplicaUnreachableGrace)
	}
	if n := proxy.probes.Load(); n < 2 {
		t.Errorf("%d probes, want at least 2", n)
	}
}

func TestUnavailableWithoutTheVerdictKeepsTheBudget(t *testing.T) {
	waited, err := loseBehindDeadReplica(t, &deadReplicaProxy{}, 4*time.Second)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "unreachable for 4.") {
		t.Fatalf("Sync = %v, want UNAVAILABLE unreachable for 4.x s", err)
	}
	if waited < 3900*time.Millisecond || waited > 7*time.Second {
		t.Errorf("waited %v, want the 4 s reconnect timeout", waited)
	}
}

func TestReplicaVerdictsAreFinalOnlyWhenConsecutiveForTheGrace(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var v replicaVerdicts
	if got := v.capSleep(time.Hour, t0); got != time.Hour {
		t.Errorf("capSleep with no verdict = %v, want the sleep", got)
	}
	steps := []struct {
		verdict bool
		at      time.Duration
		final   bool
	}{
		{true, 0, false},
		{true, 1999 * time.Millisecond, false},
		{false, 3 * time.Second, false}, // starts the count again
		{true, 4 * time.Second, false},
		{true, 5 * time.Second, false},
		{true, 4*time.Second + ReplicaUnreachableGrace, true},
	}
	for i, st := range steps {
		if got := v.record(st.verdict, t0.Add(st.at)); got != st.final {
			t.Errorf("step %d: record(%v, +%v) = %v, want %v", i, st.verdict, st.at, got, st.final)
		}
		if i == 3 {
			if got := v.capSleep(time.Hour, t0.Add(5*time.Second)); got != time.Second {
				t.Errorf("capSleep 1 s before the grace's end = %v, want 1s", got)
			}
		}
	}
	var once replicaVerdicts
	if once.record(true, t0.Add(time.Hour)) {
		t.Error("one verdict alone is final")
	}
	if !IsReplicaUnreachable(metadata.Pairs(ProxyVerdictTrailer, ReplicaUnreachableVerdict)) ||
		IsReplicaUnreachable(metadata.Pairs(ProxyVerdictTrailer, "other")) || IsReplicaUnreachable(nil) {
		t.Error("IsReplicaUnreachable does not match the verdict exactly")
	}
}

// randomCutProxy forwards to upstream and closes each of the first cuts
// connections (both sockets) once a seeded random number of bytes went
// through it, alternating directions.
func randomCutProxy(t *testing.T, upstream string, cuts int, seed int64) (addr string, done func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(seed))
	var mu sync.Mutex
	made := 0
	planned := 0
	var open []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			open = append(open, c, u)
			limit := [2]int64{-1, -1}
			if planned < cuts {
				limit[planned%2] = 64 + rng.Int63n([2]int64{4 << 10, 1 << 10}[planned%2])
				planned++
			}
			mu.Unlock()
			pump := func(dst, src net.Conn, limit int64) {
				defer func() { dst.Close(); src.Close() }()
				if limit < 0 {
					io.Copy(dst, src)
					return
				}
				if n, _ := io.CopyN(dst, src, limit); n == limit {
					mu.Lock()
					made++
					mu.Unlock()
				}
			}
			go pump(u, c, limit[0])
			go pump(c, u, limit[1])
		}
	}()
	return ln.Addr().String(), func() int { mu.Lock(); defer mu.Unlock(); return made }
}

// accumulate adds 0.5 * step to a variable each step and reads it back:
// a step applied twice (or lost) changes every later value.
func accumulate(t *testing.T, s *Session, steps int) []float64 {
	t.Helper()
	f64 := &pb.AttrValue{Value: &pb.AttrValue_Type{Type: pb.DType_DTYPE_FLOAT64}}
	v := s.Execute("VarHandleOp", nil, 1, map[string]*pb.AttrValue{
		"dtype": f64, "shape": Ints(), "shared_name": {Value: &pb.AttrValue_S{S: "acc"}}})[0]
	s.Execute("AssignVariableOp", []Tensor{v, s.Put(nil, []float64{0})}, 0, nil)
	var out []float64
	for step := 1; step <= steps; step++ {
		s.Execute("AssignAddVariableOp", []Tensor{v, s.Put(nil, []float64{0.5 * float64(step)})}, 0, nil)
		read := s.Execute("ReadVariableOp", []Tensor{v}, 1, map[string]*pb.AttrValue{"dtype": f64})[0]
		got, _, err := s.Fetch(read)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		out = append(out, got[0])
	}
	return out
}

func TestRandomCutsLeaveResultsIdentical(t *testing.T) {
	server := startServer(t)
	const steps = 400
	reference := accumulate(t, connect(t, server), steps)
	addr, cutsMade := randomCutProxy(t, server, 20, 14)
	s := connectVia(t, addr, WithReconnect(20*time.Second, 10*time.Millisecond, 200*time.Millisecond))
	got := accumulate(t, s, steps)
	c := s.ResumeCounters()
	t.Logf("%d cuts, counters %+v", cutsMade(), c)
	if cutsMade() < 20 || c.Resumes < int64(cutsMade())/2 {
		t.Errorf("%d cuts and %d resumes, want 20 cuts, most resumed", cutsMade(), c.Resumes)
	}
	for i := range reference {
		if math.Float64bits(got[i]) != math.Float64bits(reference[i]) {
			t.Fatalf("step %d: %v with cuts, %v without", i+1, got[i], reference[i])
		}
	}
}

// Issue 25: a duplicate without a result is answered with a mark (Duplicate,
// no kind). It leaves nothing to store; a fetch answered by one is read
// again (call sends it with a new seq); a kept result is stored as usual.
func TestDuplicateMarksLeaveNothingToStore(t *testing.T) {
	s := &Session{}
	batch := &pb.CommandBatch{Commands: []*pb.Command{
		{Seq: 1, Kind: &pb.Command_Put{Put: &pb.PutTensor{Id: 1}}},
		{Seq: 2, Kind: &pb.Command_Fetch{Fetch: &pb.FetchTensor{Id: 1}}},
	}}
	if !s.staleRead(batch, &pb.CommandResult{Seq: 1, Duplicate: true}) {
		t.Error("a put's mark: want nothing to store")
	}
	if s.resume.stale[1] {
		t.Error("a put's mark: not a read to send again")
	}
	if !s.staleRead(batch, &pb.CommandResult{Seq: 2, Duplicate: true}) || !s.resume.stale[2] {
		t.Error("a fetch's mark: want it read again")
	}
	kept := &pb.CommandResult{Seq: 2, Duplicate: true,
		Kind: &pb.CommandResult_Tensor{Tensor: &pb.TensorValue{Dtype: pb.DType_DTYPE_FLOAT64}}}
	if s.staleRead(batch, kept) {
		t.Error("a kept result: want it stored")
	}
	if got := s.resume.counters.DuplicateResults; got != 3 {
		t.Errorf("DuplicateResults = %d, want 3", got)
	}
}
