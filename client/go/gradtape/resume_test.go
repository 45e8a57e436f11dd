package gradtape

// Resume (resume.go) through a TCP proxy on 127.0.0.1 that can cut every
// connection or refuse new ones.

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
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
