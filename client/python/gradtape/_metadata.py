"""The names gradtape puts in gRPC metadata, defined once for Python
(internal). The proto (tape_service.proto) documents each; C++ defines them
in proto/gradtape/v1/metadata.h, Go in client/go/gradtape/metadata.go."""

# Headers of every call of a session (CreateSession may carry the id alone:
# a proposed id, for proxies that route on it).
SESSION_ID_HEADER = "gradtape-session-id"
SESSION_TOKEN_HEADER = "gradtape-session-token"
AUTHORIZATION_HEADER = "authorization"  # "Bearer <api key>" (--api_keys_file)

# Trailers: the last command seq the session applied; "1" on every status
# the server itself sends; the proxy's verdict (deploy/k8s/nginx/proxy.conf)
# on a status it answers because the session's replica is unreachable.
LAST_APPLIED_SEQ_TRAILER = "gradtape-last-applied-seq"
SERVER_STATUS_TRAILER = "gradtape-server-status"
PROXY_VERDICT_TRAILER = "gradtape-proxy-verdict"
REPLICA_UNREACHABLE_VERDICT = "replica-unreachable"

# The C++ client's status payloads (client/src/session_core.h, resume.h),
# which the native implementation turns into GradtapeError's fields; the
# last applied seq travels under its trailer's name.
COMMAND_SEQ_PAYLOAD = "gradtape-command-seq"
COMMAND_OP_PAYLOAD = "gradtape-command-op"
LOST_REASON_PAYLOAD = "gradtape-lost-reason"
LOST_ATTEMPTS_PAYLOAD = "gradtape-lost-attempts"
LOST_SECONDS_PAYLOAD = "gradtape-lost-seconds"
