"""Transport settings of a gradtape channel: TLS / mTLS credentials and HTTP/2
keepalive channel options (docs/OPERATING.md "Transport security (TLS and mTLS)")."""

from __future__ import annotations

from typing import List, Optional, Tuple, Union

Pem = Union[str, bytes, bytearray, None]

import grpc


def _pem(name: str, value: object) -> Optional[bytes]:
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode()
    if not isinstance(value, (bytes, bytearray)):
        raise TypeError(f"{name} must be PEM bytes (or str), got {type(value).__name__}")
    return bytes(value)


def make_credentials(
    credentials: Optional[grpc.ChannelCredentials],
    root_certificates: Pem = None,
    private_key: Pem = None,
    certificate_chain: Pem = None,
) -> Optional[grpc.ChannelCredentials]:
    """The channel's credentials: None (plaintext), the caller's, or TLS from
    PEM. The PEM arguments and `credentials` are exclusive."""
    roots = _pem("root_certificates", root_certificates)
    key = _pem("private_key", private_key)
    chain = _pem("certificate_chain", certificate_chain)
    if credentials is not None and not isinstance(credentials, grpc.ChannelCredentials):
        raise TypeError(
            f"credentials must be a grpc.ChannelCredentials, got {type(credentials).__name__}"
        )
    if credentials is not None and (roots, key, chain) != (None, None, None):
        raise ValueError(
            "credentials and root_certificates / private_key / certificate_chain are "
            "exclusive: pass one or the other"
        )
    if (key is None) != (chain is None):
        only = "private_key" if chain is None else "certificate_chain"
        raise ValueError(f"private_key and certificate_chain go together (mTLS): only {only} is set")
    if credentials is not None:
        return credentials
    if (roots, key, chain) == (None, None, None):
        return None
    return grpc.ssl_channel_credentials(
        root_certificates=roots, private_key=key, certificate_chain=chain
    )


def channel_options(
    *,
    server_name_override: Optional[str] = None,
    keepalive_time: Optional[float] = None,
    keepalive_timeout: float = 20.0,
    keepalive_permit_without_calls: bool = False,
) -> List[Tuple[str, object]]:
    """gRPC channel options for the TLS name override and keepalive (times in
    seconds; keepalive_time None or 0: no pings)."""
    options: List[Tuple[str, object]] = []
    if server_name_override:
        options.append(("grpc.ssl_target_name_override", server_name_override))
    if keepalive_time:
        if keepalive_time < 0 or keepalive_timeout <= 0:
            raise ValueError(
                f"keepalive_time must be >= 0 and keepalive_timeout > 0, got "
                f"{keepalive_time} and {keepalive_timeout}"
            )
        options += [
            ("grpc.keepalive_time_ms", int(keepalive_time * 1000)),
            ("grpc.keepalive_timeout_ms", int(keepalive_timeout * 1000)),
            ("grpc.keepalive_permit_without_calls", int(bool(keepalive_permit_without_calls))),
            # Keep pinging a session stream that is open but quiet.
            ("grpc.http2.max_pings_without_data", 0),
        ]
    return options
