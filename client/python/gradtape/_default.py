"""The default session of the TensorFlow-style API (gradtape.tf).

``gradtape.tf`` functions take no session argument, as TensorFlow's do:
they run on the default session, set by ``gradtape.tf.connect(address)``
or ``gradtape.set_default_session(session)``, or else created on first use
from the environment variable ``GRADTAPE_ADDRESS`` ("host:port").
"""

from __future__ import annotations

import os
import threading
from typing import Optional

from gradtape.session import Session, connect

_lock = threading.Lock()
_default: Optional[Session] = None

ADDRESS_ENV = "GRADTAPE_ADDRESS"


def set_default_session(session: Optional[Session]) -> None:
    """Makes `session` the one gradtape.tf uses (None: forget it; the next
    use connects again from GRADTAPE_ADDRESS)."""
    global _default
    with _lock:
        _default = session


def get_default_session() -> Session:
    """The session gradtape.tf uses; connects from GRADTAPE_ADDRESS on first
    use when none was set. RuntimeError when neither way gives one."""
    global _default
    with _lock:
        if _default is not None and not _default.closed:
            return _default
        address = os.environ.get(ADDRESS_ENV, "")
        if not address:
            raise RuntimeError(
                "gradtape.tf has no session: call gradtape.tf.connect('host:port') "
                "(or gradtape.set_default_session(session)), or set the environment "
                f"variable {ADDRESS_ENV}=host:port"
            )
        _default = connect(address)
        return _default
