"""A client that dies for good: the real gradtape-server binary with a 2 s
lease; a child process puts ~200 MiB into a session (1 MiB tensors, as a
training client's would be) and is killed (SIGKILL: no CloseSession). After
the lease the server has reaped the session: its live-bytes gauge
(gradtape_live_tensor_bytes) is 0 and its RSS (/proc/PID/status VmRSS) is
back within RSS_MARGIN_MIB of the baseline taken before the client came
(the server calls malloc_trim after freeing sessions: server/
session_manager.h; without it glibc keeps the freed tensors in its arenas
and RSS stays ~200 MiB up)."""

import re
import subprocess
import sys
import textwrap
import time
import urllib.request

import pytest

from server_process import ServerProcess

pytestmark = pytest.mark.no_client  # its client is raw stubs in a subprocess

LEASE_S = 2
TENSOR_MIB = 1
TENSORS = 200
RSS_MARGIN_MIB = 40  # above the baseline, once the session is gone
WAIT_S = 30  # bound on each wait below

# The dying client: raw stubs of the installed Python client's package.
CLIENT = textwrap.dedent(
    """
    import sys
    import grpc
    from gradtape.v1 import tape_service_pb2 as pb, tape_service_pb2_grpc as rpc

    address, lease, mib, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    stub = rpc.TapeServiceStub(grpc.insecure_channel(address))
    created = stub.CreateSession(pb.CreateSessionRequest(keep_alive_seconds=lease), timeout=10)
    meta = (("gradtape-session-id", created.session_id),
            ("gradtape-session-token", created.token))
    data = bytes(mib << 20)
    seq = 0
    for first in range(0, count, 8):
        batch = pb.CommandBatch()
        for i in range(first, min(first + 8, count)):
            seq += 1
            cmd = batch.commands.add(seq=seq)
            cmd.put.id = i + 1
            cmd.put.value.dtype = pb.DTYPE_FLOAT32
            cmd.put.value.shape.append((mib << 20) // 4)
            cmd.put.value.data = data
        reply = stub.Run(batch, metadata=meta, timeout=60)
        assert not reply.results, reply.results[0]
    print("ready", flush=True)
    sys.stdin.read()  # until killed
    """
)


class Server(ServerProcess):
    """gradtape-server with metrics and a short lease, logging at INFO."""

    def __init__(self):
        super().__init__(
            "--metrics_address=127.0.0.1:0",
            f"--keep_alive_seconds={LEASE_S}",
            env={"GRPC_VERBOSITY": "INFO"},
        )
        assert self.metrics_port is not None, "no 'metrics on port' line"

    def trims(self):
        """The reaper's log lines "closed N idle session(s); malloc_trim took
        X ms" so far."""
        return [line.strip() for line in self.output().splitlines() if "malloc_trim took" in line]

    def rss_mib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS")

    def gauge(self, name):
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as r:
            text = r.read().decode()
        m = re.search(rf"^{name}(?:{{[^}}]*}})?\s+(\S+)$", text, re.M)
        assert m, f"{name} not in /metrics"
        return float(m.group(1))


def wait_until(predicate, what):
    end = time.monotonic() + WAIT_S
    while not predicate():
        if time.monotonic() > end:
            pytest.fail(f"{what} within {WAIT_S} s")
        time.sleep(0.1)


def run_dying_client(server, count):
    """Starts the client, waits until its tensors are in, kills it."""
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT, server.address, str(LEASE_S), str(TENSOR_MIB), str(count)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = client.stdout.readline()
        assert line.strip() == "ready", f"the client failed ({client.wait()})"
    finally:
        client.kill()  # SIGKILL: it never closes its session
        client.wait()


def test_a_dead_clients_session_is_reaped_and_its_memory_returned():
    server = Server()
    try:
        # Warm-up: the same path once, small, so that gRPC's and the pool's
        # own allocations are in the baseline.
        run_dying_client(server, 8)
        # The reaper logs once it reaped and trimmed (GRPC_VERBOSITY=INFO).
        wait_until(lambda: len(server.trims()) == 1,
                   "the warm-up session is reaped and memory trimmed")
        baseline = server.rss_mib()

        run_dying_client(server, TENSORS)
        loaded = server.rss_mib()
        live = server.gauge("gradtape_live_tensor_bytes")
        print(f"\nbaseline RSS {baseline:.0f} MiB; with the dead client's "
              f"session {loaded:.0f} MiB, live bytes {live / 2**20:.0f} MiB")
        assert live >= TENSORS * TENSOR_MIB * 2**20
        assert loaded > baseline + TENSORS * TENSOR_MIB * 0.9

        start = time.monotonic()
        wait_until(lambda: len(server.trims()) == 2,
                   "the dead client's session is reaped and memory trimmed")
        reaped = time.monotonic() - start
        assert server.gauge("gradtape_sessions_open") == 0
        assert server.gauge("gradtape_live_tensor_bytes") == 0
        wait_until(lambda: server.rss_mib() <= baseline + RSS_MARGIN_MIB,
                   f"RSS back within {RSS_MARGIN_MIB} MiB of the baseline "
                   f"{baseline:.0f} MiB (now {server.rss_mib():.0f} MiB)")
        after = server.rss_mib()
        print(f"reaped {reaped:.1f} s after the kill (lease {LEASE_S} s); "
              f"RSS {after:.0f} MiB ({after - baseline:+.0f} MiB); "
              f"{server.trims()[-1]}")
    finally:
        server.stop()
