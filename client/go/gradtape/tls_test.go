package gradtape

// The Go client's WithTLS / WithKeepalive options against gradtape-server
// started with TLS and mTLS flags; certificates are made at test time by
// tests/make_test_certs.sh (the openssl CLI).

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/keepalive"
)

type testCerts struct{ dir string }

func makeCerts(t *testing.T) testCerts {
	t.Helper()
	dir := t.TempDir()
	script := filepath.Join("..", "..", "..", "tests", "make_test_certs.sh")
	if out, err := exec.Command("bash", script, dir).CombinedOutput(); err != nil {
		t.Fatalf("make_test_certs.sh: %v\n%s", err, out)
	}
	return testCerts{dir}
}

func (c testCerts) path(name string) string { return filepath.Join(c.dir, name) }

// config trusts CA `ca` ("ca", "ca2") and presents client certificate
// `client` ("client", "client2"; empty: none).
func (c testCerts) config(t *testing.T, ca, client string) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(c.path(ca + ".pem"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		t.Fatalf("no certificate in %s.pem", ca)
	}
	cfg := &tls.Config{RootCAs: roots}
	if client != "" {
		pair, err := tls.LoadX509KeyPair(c.path(client+".pem"), c.path(client+".key"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}

// addOver connects with opts and computes [1 2] + [3 4].
func addOver(address string, opts ...Option) ([]float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	s, err := Connect(ctx, address, opts...)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	a := s.Put([]int64{2}, []float64{1, 2})
	b := s.Put([]int64{2}, []float64{3, 4})
	v, _, err := s.Fetch(s.Op("AddV2", a, b))
	return v, err
}

func TestTlsAndMtls(t *testing.T) {
	certs := makeCerts(t)
	tlsFlags := []string{"--tls_cert_file=" + certs.path("server.pem"), "--tls_key_file=" + certs.path("server.key")}
	tlsAddr := startServer(t, tlsFlags...)
	mtlsAddr := startServer(t, append(tlsFlags, "--tls_client_ca_file="+certs.path("ca.pem"))...)

	v, err := addOver(tlsAddr, WithTLS(certs.config(t, "ca", "")),
		WithKeepalive(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}))
	if err != nil {
		t.Fatalf("TLS session: %v", err)
	}
	assertClose(t, "TLS sum", v, []float64{4, 6})
	if _, err := addOver(tlsAddr); err == nil {
		t.Error("a plaintext client reached the TLS port")
	}
	if _, err := addOver(tlsAddr, WithTLS(certs.config(t, "ca2", ""))); err == nil {
		t.Error("a client trusting another CA connected")
	}

	v, err = addOver(mtlsAddr, WithTLS(certs.config(t, "ca", "client")))
	if err != nil {
		t.Fatalf("mTLS session: %v", err)
	}
	assertClose(t, "mTLS sum", v, []float64{4, 6})
	if _, err := addOver(mtlsAddr, WithTLS(certs.config(t, "ca", ""))); err == nil {
		t.Error("mTLS: a client without a certificate connected")
	}
	if _, err := addOver(mtlsAddr, WithTLS(certs.config(t, "ca", "client2"))); err == nil {
		t.Error("mTLS: a client certificate from another CA was accepted")
	}
}
