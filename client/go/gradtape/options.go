package gradtape

// Option configures Connect.
type Option func(*connectConfig)

type connectConfig struct {
	apiKey string
}

// WithAPIKey sends `authorization: Bearer <key>` on every call of the
// session (CreateSession, the Stream, CloseSession), for a server started
// with --api_keys_file. Send keys over TLS except on loopback.
func WithAPIKey(key string) Option {
	return func(c *connectConfig) { c.apiKey = key }
}
