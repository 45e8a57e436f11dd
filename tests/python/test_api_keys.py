"""API keys and tenants with the real gradtape-server: the Python client's
api_key, per-tenant session quotas, and SIGHUP reloads (a removed key stops
working for an open session, a malformed file keeps the keys in force and is
logged with its file:line, never with a key)."""

import hashlib
import signal

import grpc
import numpy as np
import pytest

import gradtape
from server_process import ServerProcess

KEY_A = "py-tenant-a-key-8d0f3e2b1c"
KEY_A2 = "py-tenant-a-new-key-47aa91"
KEY_B = "py-tenant-b-key-c3e5f7a9b1"
ALL_KEYS = [KEY_A, KEY_A2, KEY_B]
RELOAD_WAIT_S = 10


@pytest.fixture
def keys_file(tmp_path):
    path = tmp_path / "api_keys"
    digest = hashlib.sha256(KEY_B.encode()).hexdigest()
    path.write_text(
        "# tenants of test_api_keys.py\n"
        f"{KEY_A} a max_sessions=2\n"
        f"sha256:{digest} b\n"
    )
    return path


@pytest.fixture
def server(keys_file):
    s = ServerProcess(f"--api_keys_file={keys_file}")
    try:
        yield s
    finally:
        s.stop()
    for line in s.lines:
        for key in ALL_KEYS:
            assert key not in line, line


def connect(server, key):
    return gradtape.connect(server.address, api_key=key, timeout=10)


def test_connect_needs_a_valid_key(server):
    for key in (None, KEY_A + "x"):
        with pytest.raises(gradtape.GradtapeError) as e:
            connect(server, key)
        assert e.value.code == grpc.StatusCode.UNAUTHENTICATED
        assert KEY_A not in str(e.value)
    for key in (KEY_A, KEY_B):  # a plain key and a sha256: line
        with connect(server, key) as s:
            np.testing.assert_array_equal(s.constant([1.0, 2.0]).numpy(), [1.0, 2.0])


def test_tenant_max_sessions(server):
    first = connect(server, KEY_A)
    second = connect(server, KEY_A)
    try:
        with pytest.raises(gradtape.GradtapeError) as e:
            connect(server, KEY_A)
        assert e.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "tenant 'a'" in str(e.value) and "maximum of 2 sessions" in str(e.value)
        with connect(server, KEY_B):  # another tenant's quota
            pass
    finally:
        first.close()
        second.close()
    with connect(server, KEY_A):
        pass


def test_sighup_reloads_the_keys(server, keys_file):
    old = connect(server, KEY_A)
    np.testing.assert_array_equal(old.constant([3.0]).numpy(), [3.0])

    keys_file.write_text(f"{KEY_A2} a max_sessions=2\n{KEY_B} b\n")
    server.proc.send_signal(signal.SIGHUP)
    server.wait_for_line("API keys reloaded", RELOAD_WAIT_S)
    with pytest.raises(gradtape.GradtapeError) as e:
        connect(server, KEY_A)
    assert e.value.code == grpc.StatusCode.UNAUTHENTICATED
    # The open session's stream re-checks its key at the next batch.
    with pytest.raises(gradtape.GradtapeError) as e:
        old.constant([4.0]).numpy()
    assert e.value.code == grpc.StatusCode.UNAUTHENTICATED
    try:
        old.close()
    except gradtape.GradtapeError:
        pass  # its CloseSession carries the removed key too
    with connect(server, KEY_A2) as s:
        np.testing.assert_array_equal(s.constant([5.0]).numpy(), [5.0])

    # A malformed file: logged with file:line, the keys in force stay.
    keys_file.write_text(f"{KEY_A2} a max_sessions=2\n{KEY_B} b colour=red\n")
    server.proc.send_signal(signal.SIGHUP)
    line = server.wait_for_line("reload failed", RELOAD_WAIT_S)
    assert f"{keys_file}:2: unknown field 'colour'" in line
    with connect(server, KEY_A2) as s:
        np.testing.assert_array_equal(s.constant([6.0]).numpy(), [6.0])
