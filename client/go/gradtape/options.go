package gradtape

import (
	"crypto/tls"
	"math"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
)

// Option configures Connect: transport security, HTTP/2 keepalive and the
// API key. Without options Connect uses plaintext (fine on loopback).
type Option func(*connectConfig)

type connectConfig struct {
	creds      credentials.TransportCredentials
	keepalive  *keepalive.ClientParameters
	extra      []grpc.DialOption
	apiKey     string
	chunkBytes int64
	resume     resumeConfig // resume.go
}

// DefaultChunkBytes is the chunk size of tensors larger than one message
// (WithChunkBytes).
const DefaultChunkBytes = 64 << 20

// WithChunkBytes sets the chunk size: a Put or Fetch of more bytes moves in
// chunks of n bytes, each in a batch of its own (chunks.go). A chunk must
// fit the server's message limit (--max_message_mb, 256 MiB by default).
// Values below 1 keep the default.
func WithChunkBytes(n int64) Option {
	return func(c *connectConfig) {
		if n >= 1 {
			c.chunkBytes = n
		}
	}
}

// WithTLS makes the channel use TLS with cfg: RootCAs checks the server's
// certificate, ServerName overrides the name it must hold, and Certificates
// holds the client's certificate for a server started with
// --tls_client_ca_file (mTLS).
func WithTLS(cfg *tls.Config) Option {
	return WithTransportCredentials(credentials.NewTLS(cfg))
}

// WithTransportCredentials sets the channel's transport credentials
// (replacing plaintext or an earlier WithTLS).
func WithTransportCredentials(c credentials.TransportCredentials) Option {
	return func(cc *connectConfig) { cc.creds = c }
}

// WithKeepalive makes the client ping the server (p.Time between pings,
// p.Timeout for the answer, p.PermitWithoutStream to ping with no call open).
// gradtape-server refuses pings more often than every
// --keepalive_min_ping_interval_seconds (10 s by default) with GOAWAY
// too_many_pings.
func WithKeepalive(p keepalive.ClientParameters) Option {
	return func(cc *connectConfig) { cc.keepalive = &p }
}

// WithDialOptions appends raw grpc.DialOptions (after the ones above).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(cc *connectConfig) { cc.extra = append(cc.extra, opts...) }
}

// WithAPIKey sends `authorization: Bearer <key>` on every call of the
// session (CreateSession, the Stream, CloseSession), for a server started
// with --api_keys_file. Send keys over TLS except on loopback.
func WithAPIKey(key string) Option {
	return func(c *connectConfig) { c.apiKey = key }
}

func newConnectConfig(opts []Option) connectConfig {
	cc := connectConfig{creds: insecure.NewCredentials(), resume: defaultResume(), chunkBytes: DefaultChunkBytes}
	for _, o := range opts {
		o(&cc)
	}
	return cc
}

func (cc connectConfig) dialOptions() []grpc.DialOption {
	out := []grpc.DialOption{grpc.WithTransportCredentials(cc.creds),
		// Replies carry tensors (a whole one, or a chunk of up to chunkBytes):
		// lift grpc-go's 4 MiB default on received messages.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32))}
	if cc.keepalive != nil {
		out = append(out, grpc.WithKeepaliveParams(*cc.keepalive))
	}
	return append(out, cc.extra...)
}
