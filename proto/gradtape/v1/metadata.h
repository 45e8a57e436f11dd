// The gRPC metadata names of gradtape v1 (headers and trailers), in one
// place for the server and the C++ client; tape_service.proto states what
// each carries. Include as "gradtape/v1/metadata.h" (the gradtape_proto
// target exports proto/). No includes: names only.
#ifndef GRADTAPE_V1_METADATA_H_
#define GRADTAPE_V1_METADATA_H_

namespace gradtape::v1 {

// Headers of every call but CreateSession and ListOps (CreateSession may
// carry the session id, for routing).
inline constexpr char kSessionIdHeader[] = "gradtape-session-id";
inline constexpr char kSessionTokenHeader[] = "gradtape-session-token";
// API keys: "Bearer <key>" on every call but ListOps (server/api_keys.h).
inline constexpr char kAuthorizationHeader[] = "authorization";

// Trailer of a Run or Stream call stopped by its deadline or cancellation:
// the last applied seq (decimal).
inline constexpr char kLastAppliedSeqTrailer[] = "gradtape-last-applied-seq";
// Trailer of every non-OK status the server itself sends ("1"): a Stream or
// Run that ends UNAVAILABLE / INTERNAL / UNKNOWN without it failed in
// transport.
inline constexpr char kServerStatusTrailer[] = "gradtape-server-status";
// Set by the session-affinity proxy (deploy/k8s*/nginx), never by the
// server: "replica-unreachable" on its UNAVAILABLE for a session whose
// replica it cannot reach.
inline constexpr char kProxyVerdictTrailer[] = "gradtape-proxy-verdict";
inline constexpr char kReplicaUnreachableVerdict[] = "replica-unreachable";

}  // namespace gradtape::v1

#endif  // GRADTAPE_V1_METADATA_H_
