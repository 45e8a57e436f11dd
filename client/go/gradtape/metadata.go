package gradtape

// The names gradtape puts in gRPC metadata, defined once for Go. The proto
// (tape_service.proto) documents each; C++ defines them in
// proto/gradtape/v1/metadata.h, Python in gradtape/_metadata.py.
const (
	// SessionIDHeader and SessionTokenHeader are on every call of a session
	// (CreateSession may carry the id alone: a proposed id, for proxies
	// that route on it).
	SessionIDHeader    = "gradtape-session-id"
	SessionTokenHeader = "gradtape-session-token"
	// AuthorizationHeader carries "Bearer <api key>" (--api_keys_file).
	AuthorizationHeader = "authorization"
	// ServerStatusTrailer is the trailing metadata on every non-OK status
	// the gradtape server itself sends.
	ServerStatusTrailer = "gradtape-server-status"
	// The proxy's verdict on a session's replica
	// (deploy/k8s/nginx/proxy.conf; docs/RELIABILITY.md "A replica lost behind the
	// proxy"): a status the proxy answers because it
	// cannot reach the replica the session id routes to carries
	// ProxyVerdictTrailer: ReplicaUnreachableVerdict. It is still a
	// transport failure.
	ProxyVerdictTrailer       = "gradtape-proxy-verdict"
	ReplicaUnreachableVerdict = "replica-unreachable"
)
