package gradtape

// The Go client against a real gradtape-server on loopback: an MLP's
// forward pass and gradients must equal the values the C++ suite computed
// (tests/client/golden_mlp_test.cc checks the core against a hand-written
// backward and writes <build>/golden/mlp_golden.json; run ctest first).
//
//   GRADTAPE_SERVER_BIN   the server binary (default ../../../build/server/gradtape-server)
//   GRADTAPE_GOLDEN_JSON  the golden file (default ../../../build/golden/mlp_golden.json)

import (
	"bufio"
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	pb "gradtape/client/go/gen/gradtapev1"
)

type goldenTensor struct {
	Shape  []int64   `json:"shape"`
	Values []float64 `json:"values"`
}

type golden struct {
	GeneratedBy string                  `json:"generated_by"`
	X           goldenTensor            `json:"x"`
	Labels      goldenTensor            `json:"labels"`
	W1          goldenTensor            `json:"w1"`
	B1          goldenTensor            `json:"b1"`
	W2          goldenTensor            `json:"w2"`
	B2          goldenTensor            `json:"b2"`
	Loss        float64                 `json:"loss"`
	Gradients   map[string]goldenTensor `json:"gradients"`
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

// startServer runs gradtape-server on 127.0.0.1:0 (with any extra flags)
// and returns its address; the server is stopped when the test ends.
func startServer(t *testing.T, flags ...string) string {
	t.Helper()
	bin := envOr("GRADTAPE_SERVER_BIN", filepath.Join("..", "..", "..", "build", "server", "gradtape-server"))
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("gradtape-server not found at %s (build it or set GRADTAPE_SERVER_BIN): %v", bin, err)
	}
	cmd := exec.Command(bin, append([]string{"--address=127.0.0.1:0"}, flags...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	lines := make(chan string)
	go func() {
		scanner := bufio.NewScanner(out)
		for scanner.Scan() {
			lines <- scanner.Text()
		}
		close(lines)
	}()
	const prefix = "gradtape-server listening on "
	timeout := time.After(15 * time.Second)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatal("gradtape-server exited before listening")
			}
			if strings.HasPrefix(line, prefix) {
				addr := strings.TrimSpace(strings.TrimPrefix(line, prefix))
				go func() { // keep the pipe drained
					for range lines {
					}
				}()
				if !strings.HasPrefix(addr, "127.0.0.1:") {
					t.Fatalf("server listens on %s, want loopback", addr)
				}
				return addr
			}
		case <-timeout:
			t.Fatal("no 'listening' line from gradtape-server within 15 s")
		}
	}
}

func loadGolden(t *testing.T) golden {
	t.Helper()
	path := envOr("GRADTAPE_GOLDEN_JSON", filepath.Join("..", "..", "..", "build", "golden", "mlp_golden.json"))
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden file %s missing: it is written by the C++ test "+
			"client.GoldenMlpTest.* (run ctest first, or set GRADTAPE_GOLDEN_JSON): %v", path, err)
	}
	var g golden
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return g
}

func connect(t *testing.T, addr string) *Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	s, err := Connect(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func assertClose(t *testing.T, what string, got, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Abs(got[i]-want[i]) > 1e-12*math.Max(1, math.Abs(want[i])) {
			t.Errorf("%s[%d] = %.17g, want %.17g", what, i, got[i], want[i])
		}
	}
}

func TestMlpForwardAndGradientsMatchTheCppSuite(t *testing.T) {
	g := loadGolden(t)
	s := connect(t, startServer(t))

	labels := make([]int32, len(g.Labels.Values))
	for i, v := range g.Labels.Values {
		labels[i] = int32(v)
	}
	x := s.Put(g.X.Shape, g.X.Values)
	y := s.PutInt32(g.Labels.Shape, labels)
	w1, b1 := s.Put(g.W1.Shape, g.W1.Values), s.Put(g.B1.Shape, g.B1.Values)
	w2, b2 := s.Put(g.W2.Shape, g.W2.Values), s.Put(g.B2.Shape, g.B2.Values)

	tape := s.PushTape(w1, b1, w2, b2)
	hidden := s.Op("Tanh", s.Op("BiasAdd", s.Op("MatMul", x, w1), b1))
	logits := s.Op("BiasAdd", s.Op("MatMul", hidden, w2), b2)
	xent := s.Execute("SparseSoftmaxCrossEntropyWithLogits", []Tensor{logits, y}, 2, nil)
	loss := s.Op("Mean", xent[0])
	s.PopTape(tape)

	grads, err := s.GradientValues(tape, loss, w1, b1, w2, b2)
	if err != nil {
		t.Fatal(err)
	}
	lossValue, shape, err := s.Fetch(loss)
	if err != nil {
		t.Fatal(err)
	}
	if len(shape) != 0 {
		t.Errorf("loss shape %v, want a scalar", shape)
	}
	assertClose(t, "loss", lossValue, []float64{g.Loss})
	for i, name := range []string{"w1", "b1", "w2", "b2"} {
		want, ok := g.Gradients[name]
		if !ok {
			t.Fatalf("golden file has no gradient for %s", name)
		}
		assertClose(t, "d loss/d "+name, grads[i], want.Values)
	}
	t.Logf("loss %.6f and 4 gradients match %s", lossValue[0], g.GeneratedBy)
}

func TestBadOpIsACommandErrorAndTheSessionGoesOn(t *testing.T) {
	s := connect(t, startServer(t))
	a := s.Put([]int64{2, 3}, []float64{1, 1, 1, 1, 1, 1})
	s.Op("MatMul", a, a)
	err := s.Sync()
	ce, ok := err.(*CommandError)
	if !ok {
		t.Fatalf("Sync() = %v, want a *CommandError", err)
	}
	if ce.Code != codes.InvalidArgument || !strings.Contains(ce.Message, "MatMul") ||
		!strings.Contains(ce.Message, "command 2") {
		t.Errorf("error = %v, want INVALID_ARGUMENT naming MatMul (command 2)", ce)
	}
	p := s.Execute("MatMul", []Tensor{a, a}, 1, map[string]*pb.AttrValue{"transpose_b": Bool(true)})[0]
	v, _, err := s.Fetch(p)
	if err != nil {
		t.Fatal(err)
	}
	assertClose(t, "a @ a^T", v, []float64{3, 3, 3, 3})
}
