"""connect()'s options, checked once for both implementations, and the
transport settings they make: TLS / mTLS credentials and HTTP/2 keepalive
channel options (docs/OPERATING.md "Transport security (TLS and mTLS)")."""

from __future__ import annotations

import dataclasses
from typing import List, Optional, Tuple, Union

import grpc

from gradtape._metadata import AUTHORIZATION_HEADER

Pem = Union[str, bytes, bytearray, None]


@dataclasses.dataclass(frozen=True)
class ConnectOptions:
    """Everything connect() takes besides the address and `native`
    (documented there), checked when made: ValueError / TypeError with
    connect()'s messages. Both StreamCore and NativeCore take one."""

    session_id: Optional[str] = None
    keep_alive_seconds: int = 0
    batch_size: int = 512
    max_batch_bytes: int = 16 << 20
    chunk_bytes: int = 64 << 20
    timeout: float = 10.0
    credentials: Optional[grpc.ChannelCredentials] = None
    root_certificates: Pem = None
    private_key: Pem = None
    certificate_chain: Pem = None
    server_name_override: Optional[str] = None
    keepalive_time: Optional[float] = None
    keepalive_timeout: float = 20.0
    keepalive_permit_without_calls: bool = False
    api_key: Optional[str] = None
    reconnect_timeout: float = 30.0
    # Not a connect() argument: sent, unacknowledged bytes kept for resume.
    max_unacked_bytes: int = 256 << 20
    # Derived, for the cores: the channel's credentials (None: plaintext)
    # and channel options (name override, keepalive).
    tls: Optional[grpc.ChannelCredentials] = dataclasses.field(init=False, default=None)
    channel_options: Tuple[Tuple[str, object], ...] = dataclasses.field(init=False, default=())

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {self.batch_size}")
        if not self.reconnect_timeout >= 0:
            raise ValueError(f"reconnect_timeout must be >= 0 (0: off), got {self.reconnect_timeout}")
        if self.chunk_bytes < 1:
            raise ValueError(f"chunk_bytes must be at least 1, got {self.chunk_bytes}")
        tls = make_credentials(self.credentials, self.root_certificates, self.private_key, self.certificate_chain)
        options = channel_options(
            server_name_override=self.server_name_override,
            keepalive_time=self.keepalive_time,
            keepalive_timeout=self.keepalive_timeout,
            keepalive_permit_without_calls=self.keepalive_permit_without_calls,
        )
        object.__setattr__(self, "tls", tls)
        object.__setattr__(self, "channel_options", tuple(options))

    def key_metadata(self) -> Tuple[Tuple[str, str], ...]:
        """`authorization: Bearer <key>` for a server with --api_keys_file;
        nothing without a key."""
        return ((AUTHORIZATION_HEADER, f"Bearer {self.api_key}"),) if self.api_key else ()


def pem(name: str, value: object) -> Optional[bytes]:
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
    roots = pem("root_certificates", root_certificates)
    key = pem("private_key", private_key)
    chain = pem("certificate_chain", certificate_chain)
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
