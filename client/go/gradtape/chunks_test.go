package gradtape

// Tensors larger than one chunk (chunks.go) against a gradtape-server whose
// messages are at most 1 MiB: a 3 MiB tensor can only travel in chunks.

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"

	pb "gradtape/client/go/gen/gradtapev1"
)

func TestChunkedPutAndFetchRoundTrip(t *testing.T) {
	addr := startServer(t, "--max_message_mb=1", "--session_memory_limit_mb=16")
	const chunk = 200000 // bytes; not a divisor of the sizes below
	s, err := Connect(context.Background(), addr, WithChunkBytes(chunk))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// 3 MiB + 8 bytes (16 chunks, the last short), exactly one chunk, one
	// element more.
	for _, n := range []int{3<<17 + 1, chunk / 8, chunk/8 + 1} {
		values := make([]float64, n)
		for i := range values {
			values[i] = float64(i%100003) - 0.25
		}
		x := s.Put([]int64{int64(n)}, values)
		got, shape, err := s.Fetch(x)
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		if len(shape) != 1 || shape[0] != int64(n) || len(got) != n {
			t.Fatalf("n=%d: shape %v, %d values", n, shape, len(got))
		}
		for i := range got {
			if got[i] != values[i] {
				t.Fatalf("n=%d: value %d is %v, want %v", n, i, got[i], values[i])
			}
		}
	}
	// An op reads a chunked tensor like any other.
	big := make([]float64, 3<<17)
	for i := range big {
		big[i] = 1
	}
	sum, _, err := s.Fetch(s.Execute("Sum", []Tensor{s.Put([]int64{int64(len(big))}, big)}, 1,
		map[string]*pb.AttrValue{"axis": Ints(0)})[0])
	if err != nil || len(sum) != 1 || sum[0] != float64(len(big)) {
		t.Fatalf("Sum: %v %v", sum, err)
	}
}

func TestChunkedPutOverTheMemoryLimitFailsAtBegin(t *testing.T) {
	addr := startServer(t, "--max_message_mb=1", "--session_memory_limit_mb=4")
	s, err := Connect(context.Background(), addr, WithChunkBytes(1<<19))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	x := s.Put([]int64{1 << 20}, make([]float64, 1<<20)) // 8 MiB > 4 MiB
	err = s.Sync()
	ce, ok := err.(*CommandError)
	if !ok || ce.Code != codes.ResourceExhausted {
		t.Fatalf("Sync after an 8 MiB put: %v, want RESOURCE_EXHAUSTED", err)
	}
	if _, _, err := s.Fetch(x); err == nil {
		t.Fatal("the refused put's id can be read")
	}
	small, _, err := s.Fetch(s.Put([]int64{2}, []float64{1, 2}))
	if err != nil || len(small) != 2 {
		t.Fatalf("the session does not work after the refusal: %v %v", small, err)
	}
}
