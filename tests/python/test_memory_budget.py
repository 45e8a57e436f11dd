"""The server-wide memory budget against the real binary (issue 25).

Four clients, concurrently, each try to build tensors of 40% of a small
budget through different routes (a put, BroadcastTo, Fill, SegmentProd, a
chunked put, kept fetch results): the ones over the budget are refused with
RESOURCE_EXHAUSTED naming it, every session stays usable, the process's RSS
(sampled while it runs) never exceeds the budget plus its fixed overhead,
and nothing is killed. Then the same with default flags inside a memory
cgroup: two clients asking for 8 GiB at once beside a third client's small
session leave the server alive and the third session working.

Raw protocol only (generated stubs): the kept-results route needs fetches
that are never acknowledged, which no client library sends.
"""

import os
import pathlib
import secrets
import threading
import time

import grpc
import numpy as np
import pytest

from server_process import ServerProcess

pytestmark = pytest.mark.no_client

MiB = 1 << 20
BUDGET_MB = 400
PART = int(BUDGET_MB * MiB * 0.4)  # 40% of the budget, in bytes
TIMEOUT_S = 60
DTYPE_FLOAT32, DTYPE_INT32 = 1, 3
MESSAGE = 16 * MiB  # the largest message the tests send (a put's part, a chunk)


def rss_bytes(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


class RssSampler:
    """Samples a process's RSS every 20 ms until stopped; keeps the peak."""

    def __init__(self, pid):
        self.pid, self.peak, self.samples = pid, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, rss_bytes(self.pid))
                self.samples += 1
            except (FileNotFoundError, ProcessLookupError):
                return
            self._stop.wait(0.02)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=5)


class Raw:
    """One session over the generated stubs, with seqs counted here."""

    def __init__(self, pb, address):
        self.pb = pb
        self.channel = grpc.insecure_channel(
            address,
            options=[
                ("grpc.max_send_message_length", 256 * MiB),
                ("grpc.max_receive_message_length", 256 * MiB),
            ],
        )
        self.stub = pb.pb2_grpc.TapeServiceStub(self.channel)
        session_id = secrets.token_hex(16)
        created = self.stub.CreateSession(
            pb.pb2.CreateSessionRequest(session_id=session_id),
            metadata=[("gradtape-session-id", session_id)],
            timeout=TIMEOUT_S,
        )
        self.metadata = [
            ("gradtape-session-id", created.session_id),
            ("gradtape-session-token", created.token),
        ]
        self.seq = 0
        self.next_id = 1

    def close(self):
        self.channel.close()

    def cmd(self, **kind):
        self.seq += 1
        return self.pb.pb2.Command(seq=self.seq, **kind)

    def run(self, *commands, ack=None):
        """Runs one batch; returns {seq: result} for the results it got."""
        batch = self.pb.pb2.CommandBatch(commands=commands)
        if ack is not None:
            batch.ack_seq = ack
        reply = self.stub.Run(batch, metadata=self.metadata, timeout=TIMEOUT_S)
        return {r.seq: r for r in reply.results}

    def new_id(self):
        self.next_id += 1
        return self.next_id

    def value(self, array):
        array = np.asarray(array)
        dtype = {np.dtype(np.float32): DTYPE_FLOAT32, np.dtype(np.int32): DTYPE_INT32}
        return self.pb.pb2.TensorValue(
            dtype=dtype[array.dtype], shape=list(array.shape), data=array.tobytes()
        )

    def put(self, array):
        i = self.new_id()
        return i, self.cmd(put=self.pb.pb2.PutTensor(id=i, value=self.value(array)))

    def execute(self, op, inputs, **ints):
        out = self.new_id()
        c = self.cmd(
            execute=self.pb.pb2.ExecuteOp(op=op, input_ids=inputs, output_ids=[out])
        )
        for name, values in ints.items():
            c.execute.attrs[name].ints.values.extend(values)
        return out, c

    def fetch(self, i):
        return self.cmd(fetch=self.pb.pb2.FetchTensor(id=i))

    def release(self, *ids):
        return self.cmd(release=self.pb.pb2.ReleaseTensors(ids=list(ids)))


def outcome(results, seq):
    """"ok", or the error's code name (results holds only what came back)."""
    r = results.get(seq)
    if r is None or not r.HasField("error"):
        return "ok"
    return next(c for c in grpc.StatusCode if c.value[0] == r.error.code).name


# The routes to `elements` float32 held by the session: each returns (the
# ids to release, the seq whose outcome says whether all was built, its
# batch's results).
def by_put(s, elements, parts=10):
    """Plain puts of a tenth each, one batch each (as a client sends them:
    a message carries one part, larger tensors go in chunks)."""
    ids = []
    for _ in range(parts):
        i, c = s.put(np.ones(elements // parts, np.float32))
        ids.append(i)
        results = s.run(c)
        if outcome(results, c.seq) != "ok":
            break
    return ids, c.seq, results


def by_broadcast(s, elements):
    one, c1 = s.put(np.float32(1))
    out, c2 = s.execute("BroadcastTo", [one], shape=[elements])
    return [out], c2.seq, s.run(c1, c2, s.release(one))


def by_fill(s, elements):
    dims, c1 = s.put(np.array([elements], np.int32))
    value, c2 = s.put(np.float32(2))
    out, c3 = s.execute("Fill", [dims, value])
    return [out], c3.seq, s.run(c1, c2, c3, s.release(dims, value))


def by_segment_prod(s, elements):
    # One value whose segment id is the last: elements - 1 segments of 1.
    data, c1 = s.put(np.ones(1, np.float32) * 3)
    ids, c2 = s.put(np.array([elements - 1], np.int32))
    out, c3 = s.execute("SegmentProd", [data, ids])
    return [out], c3.seq, s.run(c1, c2, c3, s.release(data, ids))


def by_chunked_put(s, elements, chunk=MESSAGE):
    pb = s.pb.pb2
    i = s.new_id()
    begin = s.cmd(put_begin=pb.PutTensorBegin(id=i, dtype=DTYPE_FLOAT32, shape=[elements]))
    results = s.run(begin)
    if outcome(results, begin.seq) != "ok":
        return [i], begin.seq, results
    data = np.ones(elements, np.float32).tobytes()
    for offset in range(0, len(data), chunk):
        c = s.cmd(put_chunk=pb.PutTensorChunk(id=i, offset=offset, data=data[offset : offset + chunk]))
        results = s.run(c)
        if outcome(results, c.seq) != "ok":
            return [i], c.seq, results
    return [i], begin.seq, results


ROUTES = [by_put, by_broadcast, by_fill, by_segment_prod, by_chunked_put]


def fixed_overhead(idle_rss):
    """What the budget does not count: the process measured idle (code,
    threads, gRPC), gRPC's receive buffers of two messages in flight, and
    64 MiB for the allocator's slack (freed blocks of the last large
    message, until the next one trims them: server/memory_budget.h)."""
    return idle_rss + 2 * MESSAGE + 64 * MiB


def check_usable(s):
    """A small op and a fetch work and give the right values."""
    x, c1 = s.put(np.arange(4, dtype=np.float32))
    y, c2 = s.execute("AddV2", [x, x])
    f = s.fetch(y)
    results = s.run(c1, c2, f, s.release(x, y))
    assert outcome(results, f.seq) == "ok", results
    got = np.frombuffer(results[f.seq].tensor.data, np.float32)
    np.testing.assert_array_equal(got, np.arange(4) * 2)


@pytest.fixture
def raw(pb):
    """raw(address): a new Raw session; every channel is closed at the end
    (grpcio aborts at exit with channels left open by threads)."""
    opened = []

    def connect(address):
        opened.append(Raw(pb, address))
        return opened[-1]

    yield connect
    for s in opened:
        s.close()


@pytest.fixture
def budget_server():
    with ServerProcess(
        f"--memory_budget_mb={BUDGET_MB}",
        "--session_memory_limit_mb=0",  # only the budget limits a session
        f"--result_cache_mb={BUDGET_MB}",
        f"--max_tensor_mb={BUDGET_MB}",
        "--max_message_mb=64",
    ) as server:
        assert any(
            f"memory budget {BUDGET_MB} MiB (--memory_budget_mb)" in line
            for line in server.lines
        ), server.output()
        yield server


def test_four_clients_at_40_percent_each(raw, budget_server):
    server = budget_server
    idle = rss_bytes(server.proc.pid)
    clients = [raw(server.address) for _ in range(4)]
    for s in clients:
        check_usable(s)
    warm = rss_bytes(server.proc.pid)
    rounds = len(ROUTES)
    barrier = threading.Barrier(len(clients), timeout=TIMEOUT_S)
    outcomes = [[None] * rounds for _ in clients]
    messages = []
    errors = []

    def client(k):
        s = clients[k]
        try:
            for r in range(rounds):
                route = ROUTES[(k + r) % len(ROUTES)]
                ids, seq, results = route(s, PART // 4)
                what = outcome(results, seq)
                outcomes[k][r] = (route.__name__, what)
                if what != "ok":
                    messages.append(results[seq].error.message)
                barrier.wait()  # every client holds what it built
                s.run(s.release(*ids))
                barrier.wait()
                check_usable(s)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
            barrier.abort()

    with RssSampler(server.proc.pid) as rss:
        threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=TIMEOUT_S * 3)
        assert not any(t.is_alive() for t in threads), "a client hung"
    assert not errors, errors
    for r in range(rounds):
        built = [outcomes[k][r] for k in range(4)]
        # 40% each: two fit the budget at most. (All four may be refused:
        # ops that allocate more than their output, racing, can each hold
        # part of the budget when the next allocation is refused.)
        assert sum(1 for _, what in built if what == "ok") <= 2, (r, built)
        assert all(what in ("ok", "RESOURCE_EXHAUSTED") for _, what in built), built
    assert any(what == "ok" for row in outcomes for _, what in row), outcomes
    assert messages and all("server memory budget exceeded" in m for m in messages), messages
    assert all(f"budget {BUDGET_MB * MiB} (--memory_budget_mb)" in m for m in messages)
    overhead = fixed_overhead(max(warm, idle))
    print(
        f"\nmemory budget test: budget {BUDGET_MB} MiB, idle RSS {idle / MiB:.0f} MiB, "
        f"warm {warm / MiB:.0f} MiB, peak {rss.peak / MiB:.0f} MiB over {rss.samples} "
        f"samples; per round {[[o for _, o in outcomes[k]] for k in range(4)]}"
    )
    assert rss.samples > 10
    assert rss.peak <= BUDGET_MB * MiB + overhead, (
        f"peak RSS {rss.peak / MiB:.0f} MiB > budget {BUDGET_MB} MiB + overhead "
        f"{overhead / MiB:.0f} MiB (idle {idle / MiB:.0f} MiB)"
    )
    assert server.proc.poll() is None
    for s in clients:
        check_usable(s)


def test_kept_fetch_results_stay_within_the_budget(raw, budget_server):
    """Fetches never acknowledged: their kept copies and the replies count,
    so fetching a 10% tensor over and over from four clients never takes the
    process past the budget; fetches the budget cannot copy are refused."""
    server = budget_server
    clients = [raw(server.address) for _ in range(4)]
    for s in clients:
        check_usable(s)
    warm = rss_bytes(server.proc.pid)
    codes = []
    errors = []
    barrier = threading.Barrier(len(clients), timeout=TIMEOUT_S)

    def client(s):
        try:
            i, c = s.put(np.ones(PART // 16, np.float32))  # 10% of the budget
            assert outcome(s.run(c), c.seq) == "ok"
            barrier.wait()
            for _ in range(8):  # never acknowledged: kept up to their share
                f = s.fetch(i)
                codes.append(outcome(s.run(f), f.seq))
            check_usable(s)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
            barrier.abort()

    with RssSampler(server.proc.pid) as rss:
        threads = [threading.Thread(target=client, args=(s,)) for s in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=TIMEOUT_S * 3)
    assert not errors, errors
    assert set(codes) <= {"ok", "RESOURCE_EXHAUSTED"}, codes
    assert "ok" in codes
    overhead = fixed_overhead(warm)
    print(
        f"\nkept results test: budget {BUDGET_MB} MiB, warm RSS {warm / MiB:.0f} MiB, "
        f"peak {rss.peak / MiB:.0f} MiB; fetches {codes.count('ok')} ok, "
        f"{codes.count('RESOURCE_EXHAUSTED')} refused"
    )
    assert rss.peak <= BUDGET_MB * MiB + overhead, (
        f"peak RSS {rss.peak / MiB:.0f} MiB > budget {BUDGET_MB} MiB + overhead "
        f"{overhead / MiB:.0f} MiB"
    )
    assert server.proc.poll() is None


# -- default flags inside a memory cgroup ------------------------------------

CGROUP_LIMIT = 2 << 30  # 2 GiB: what a small pod allows


def make_memory_cgroup(limit):
    """A new memory cgroup limited to `limit` bytes: its cgroup.procs path
    and a function that removes it; or None with why (not root, no
    writable cgroup mount)."""
    name = f"gradtape-test-{os.getpid()}-{secrets.token_hex(4)}"
    v2 = pathlib.Path("/sys/fs/cgroup")
    if (v2 / "cgroup.controllers").exists():
        base, limit_file = v2, "memory.max"
        if "memory" not in (v2 / "cgroup.subtree_control").read_text():
            return None, "cgroup v2 without the memory controller enabled for children"
    elif pathlib.Path("/sys/fs/cgroup/memory").is_dir():
        base, limit_file = pathlib.Path("/sys/fs/cgroup/memory"), "memory.limit_in_bytes"
    else:
        return None, "no cgroup memory controller mounted"
    group = base / name
    try:
        group.mkdir()
        (group / limit_file).write_text(str(limit))
    except OSError as e:
        try:
            group.rmdir()
        except OSError:
            pass
        return None, f"cannot create a memory cgroup under {base}: {e}"

    def remove():
        for _ in range(50):  # the processes must be gone first
            try:
                group.rmdir()
                return
            except OSError:
                time.sleep(0.1)

    return (group / "cgroup.procs", remove), ""


def test_default_flags_in_a_memory_cgroup(raw):
    made, why = make_memory_cgroup(CGROUP_LIMIT)
    if made is None:
        pytest.skip(f"no memory cgroup can be made here ({why})")
    procs, remove = made
    wrapper = ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh"]
    try:
        with ServerProcess(wrapper=wrapper) as server:
            line = next(l for l in server.lines if "memory budget" in l)
            assert "derived" in line and "cgroup" in line, line
            bystander = raw(server.address)
            check_usable(bystander)
            greedy = [raw(server.address) for _ in range(2)]
            results = [None, None]

            def ask_8_gib(k):
                # SegmentProd whose last segment id is 2^31 - 1: an 8 GiB
                # float32 output, as in the issue.
                s = greedy[k]
                data, c1 = s.put(np.ones(1, np.float32))
                ids, c2 = s.put(np.array([(1 << 31) - 1], np.int32))
                out, c3 = s.execute("SegmentProd", [data, ids])
                results[k] = (c3.seq, s.run(c1, c2, c3))

            threads = [threading.Thread(target=ask_8_gib, args=(k,)) for k in range(2)]
            for t in threads:
                t.start()
            for _ in range(20):  # the third client works meanwhile
                check_usable(bystander)
            for t in threads:
                t.join(timeout=TIMEOUT_S)
            for seq, got in results:
                assert outcome(got, seq) == "RESOURCE_EXHAUSTED", got
                assert "SegmentProd" in got[seq].error.message
            # Each client then takes as much as its session may, at once:
            # the budget, not the cgroup's OOM killer, says no to the rest.
            many = [bystander, *greedy, raw(server.address), raw(server.address)]
            built = []

            def fill_up(s):
                _, seq, got = by_fill(s, int(CGROUP_LIMIT * 0.17) // 4)
                built.append(outcome(got, seq))

            threads = [threading.Thread(target=fill_up, args=(s,)) for s in many]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=TIMEOUT_S)
            print(f"\ncgroup test: {line.strip()}; 8 GiB asks refused; 5 x 17% of the "
                  f"cgroup's limit at once: {built}")
            assert set(built) <= {"ok", "RESOURCE_EXHAUSTED"}, built
            assert "RESOURCE_EXHAUSTED" in built, built  # 5 x 17% > the budget
            assert server.proc.poll() is None, "the server was killed"
            for s in many:
                check_usable(s)
    finally:
        remove()
