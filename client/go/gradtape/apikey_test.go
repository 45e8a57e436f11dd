package gradtape

// WithAPIKey against a real gradtape-server started with --api_keys_file.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestConnectWithAPIKey(t *testing.T) {
	const key = "go-client-key-6c2f0a9e8b7d"
	keys := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keys, []byte(key+" go-tenant max_sessions=4\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := startServer(t, "--api_keys_file="+keys)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	if _, err := Connect(ctx, addr); status.Code(errors.Unwrap(err)) != codes.Unauthenticated {
		t.Fatalf("Connect without a key: got %v, want UNAUTHENTICATED", err)
	}
	if _, err := Connect(ctx, addr, WithAPIKey(key+"x")); status.Code(errors.Unwrap(err)) != codes.Unauthenticated {
		t.Fatalf("Connect with a wrong key: got %v, want UNAUTHENTICATED", err)
	}
	s, err := Connect(ctx, addr, WithAPIKey(key))
	if err != nil {
		t.Fatalf("Connect with the key: %v", err)
	}
	x := s.Put([]int64{2}, []float64{1, 2})
	if _, _, err := s.Fetch(x); err != nil { // the Stream carries the key too
		t.Fatalf("Fetch: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}
