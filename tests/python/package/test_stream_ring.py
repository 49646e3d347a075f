"""Stream rings from Python (Client.stream_writer / Client.stream_reader) against a real daemon:
a reader in another process follows frames through torch without a torn one; loans are
writable and frames read-only, for NumPy and torch; iteration ends when the writer closes, and
frames outlive the reader and its client; errors name what is wrong; another uid, a reader
itself, can neither write the ring nor touch another reader's seat; one that may not read the
ring can take no seat; a reader scribbling over its own seat, or a writer over its ring, harms
no other process; and nothing of an attacker outlives it."""

import contextlib
import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

import tensorbroker
from conftest import AS_UID_65534, HANG_GUARD, wait_for

ROOT_ONLY = pytest.mark.skipif(os.getuid() != 0, reason="switching to uid 65534 needs root")
WORDS = 4096  # 32 KiB frames of int64, every word the frame's sequence number

# Follows the stream through torch until the writer closes it; reports what it saw as JSON.
FOLLOWER = r"""
import json, sys
import torch, tensorbroker
client = tensorbroker.connect(sys.argv[1])
reader = client.stream_reader(sys.argv[2], timeout=60)
print("reading", flush=True)
seen, torn, skipped, last, unordered = 0, 0, 0, 0, 0
for frame in reader:
    t = torch.from_dlpack(frame)
    seq = frame.version
    if not bool((t == seq).all()):
        torn += 1
    if seq <= last:
        unordered += 1
    last, seen, skipped = seq, seen + 1, skipped + reader.skipped
    del t
    frame.release()
print(json.dumps({"seen": seen, "skipped": skipped, "last": last, "torn": torn,
                  "unordered": unordered}), flush=True)
"""


@contextlib.contextmanager
def reachable_by_other_users(daemon):
    """The daemon's socket directory searchable meanwhile: the socket itself is 0660, group 0,
    so a child of uid 65534 in group 0 (AS_UID_65534) may connect."""
    os.chmod(daemon.dir, 0o755)
    try:
        yield
    finally:
        os.chmod(daemon.dir, 0o700)


def publish(writer, seq):
    frame = writer.loan()
    np.asarray(frame)[:] = seq
    frame.release()
    assert writer.publish() == seq


def report_of(daemon, script, *args):
    """Runs `script` (an AS_UID_65534 one) with the daemon's socket and `args` while the socket
    is reachable, expects it to exit 0, and returns the JSON report it printed."""
    with reachable_by_other_users(daemon):
        done = subprocess.run([sys.executable, "-c", script, daemon.socket, *args],
                              capture_output=True, text=True, timeout=HANG_GUARD)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_reader_in_another_process_follows_every_frame_it_takes_untorn(daemon, client):
    writer = client.stream_writer("ring/follow", WORDS, "int64")
    follower = subprocess.Popen([sys.executable, "-c", FOLLOWER, daemon.socket, "ring/follow"],
                                stdout=subprocess.PIPE, text=True)
    try:
        assert follower.stdout.readline() == "reading\n"
        assert writer.readers == 1
        for seq in range(1, 501):
            publish(writer, seq)
        writer.close()
        report = json.loads(follower.stdout.readline())
        assert follower.wait(timeout=HANG_GUARD) == 0
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    assert report["seen"] + report["skipped"] == 500, report
    assert (report["last"], report["torn"], report["unordered"]) == (500, 0, 0), report
    with pytest.raises(tensorbroker.NotFound):  # close() deleted the name
        client.stat("ring/follow")


def test_a_loan_is_writable_and_a_frame_read_only(daemon, client):
    other = tensorbroker.connect(daemon.socket)
    with client.stream_writer("ring/rw", (2, 3), np.float32, slots=4) as writer, \
            other.stream_reader("ring/rw") as reader:
        assert (writer.name, writer.readers) == ("ring/rw", 1)
        assert reader.next(timeout=0) is None  # nothing published yet
        loan = writer.loan()
        assert (loan.shape, loan.dtype, loan.readonly) == ((2, 3), "float32", False)
        np.asarray(loan)[:] = np.arange(6, dtype=np.float32).reshape(2, 3)
        torch.from_dlpack(loan)[0, 0] = 7.0  # the same bytes through torch
        del loan
        assert writer.publish() == 1
        frame = reader.next(timeout=5)
        assert (frame.version, reader.last_sequence, reader.skipped) == (1, 1, 0)
        assert frame.readonly is True
        view = np.asarray(frame)
        assert view.tolist() == [[7.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
        assert view.flags.writeable is False
        with pytest.raises(ValueError):
            view[0, 0] = 1.0
        for seq in (2, 3, 4):
            publish(writer, seq)
        newest = reader.next(timeout=5)
        assert (newest.version, reader.skipped) == (4, 2)
        assert np.asarray(newest).tolist() == [[4.0] * 3] * 2
        assert view.tolist() == [[7.0, 1.0, 2.0], [3.0, 4.0, 5.0]]  # frame 1 is held: intact
    other.close()


def test_iteration_ends_with_the_stream_and_frames_outlive_reader_and_client(daemon, client):
    other = tensorbroker.connect(daemon.socket)
    writer = client.stream_writer("ring/end", 8, "uint8")
    reader = other.stream_reader("ring/end")
    publish(writer, 1)
    writer.close()
    frames = list(reader)  # the frame published before close(), then the end
    assert [f.version for f in frames] == [1]
    with pytest.raises(tensorbroker.StreamEnded):
        reader.next(timeout=1)
    reader.close()
    other.close()
    assert np.asarray(frames[0]).tolist() == [1] * 8


def test_close_from_another_thread_ends_a_waiting_iteration(daemon, client):
    other = tensorbroker.connect(daemon.socket)
    writer = client.stream_writer("ring/stop", 8, "uint8")
    reader = other.stream_reader("ring/stop")
    seen = []
    follower = threading.Thread(target=lambda: seen.extend(f.version for f in reader))
    follower.start()
    publish(writer, 1)
    wait_for(lambda: seen == [1], "the follower to take frame 1")
    reader.close()  # the follower waits in next(): its iteration stops
    follower.join(timeout=HANG_GUARD)
    assert not follower.is_alive() and seen == [1]
    with pytest.raises(tensorbroker.FailedPrecondition, match="closed"):
        reader.next(timeout=0)
    wait_for(lambda: writer.readers == 0, "the writer to forget the closed reader")
    writer.close()
    other.close()


def test_errors_name_what_is_wrong(daemon, client):
    with pytest.raises(tensorbroker.InvalidArgument, match="slots: 1 is out of range"):
        client.stream_writer("ring/bad", 8, "uint8", slots=1)
    with pytest.raises(tensorbroker.InvalidArgument, match="frames_per_reader: 17"):
        client.stream_writer("ring/bad", 8, "uint8", frames_per_reader=17)
    with client.stream_writer("ring/taken", 8, "uint8"):
        with pytest.raises(tensorbroker.AlreadyExists, match="ring/taken"):
            client.stream_writer("ring/taken", 8, "uint8")
    client.put("ring/plain", np.zeros(8192, np.uint8))
    with pytest.raises(tensorbroker.FailedPrecondition, match="not a tensorbroker stream ring"):
        client.stream_reader("ring/plain", timeout=1)
    client.delete("ring/plain")
    with client.stream_writer("ring/full", 8, "uint8", max_readers=1):
        first = client.stream_reader("ring/full")
        with pytest.raises(tensorbroker.Timeout, match="did not accept this reader"):
            client.stream_reader("ring/full", timeout=0.2)
        first.close()


# Runs as uid 65534 (group 0, which may open the socket): a reader of the stream like any other,
# then it attacks the ring and the other reader's seat. Reports on stdout as JSON.
ATTACKER = AS_UID_65534 + r"""

socket, name, victim_seat = sys.argv[1:4]
client = tensorbroker.connect(socket)
reader = client.stream_reader(name, timeout=30)
frame = reader.next(timeout=30)
report = {"uid": os.getuid(), "frame": int(np.asarray(frame)[0])}
# The page under the frame cannot be made writable: the descriptor is read-only.
libc = ctypes.CDLL(None, use_errno=True)
page = np.asarray(frame).ctypes.data & ~4095
rc = libc.mprotect(ctypes.c_void_p(page), 4096, 3)  # PROT_READ | PROT_WRITE
report["mprotect"] = [rc, errno.errorcode.get(ctypes.get_errno(), "")]
report["seats_listed"] = [t["name"] for t in client.list(name + "/.readers/")]
report["get_seat"] = outcome(lambda: client.get(victim_seat, timeout=0) and None)
report["delete_seat"] = outcome(lambda: client.delete(victim_seat))
report["replace_seat"] = outcome(
    lambda: client.put(victim_seat, np.zeros(256, np.uint8), replace=True) and None)
report["delete_ring"] = outcome(lambda: client.delete(name))
print(json.dumps(report), flush=True)
"""


@ROOT_ONLY
def test_another_uid_reads_but_cannot_write_the_ring_or_touch_a_seat(daemon, client):
    victim = tensorbroker.connect(daemon.socket)
    writer = client.stream_writer("ring/shared", WORDS, "int64", readers="*")
    reader = victim.stream_reader("ring/shared")
    [seat] = [t["name"] for t in client.list("ring/shared/.readers/")]
    publish(writer, 1)
    held = reader.next(timeout=5)
    report = report_of(daemon, ATTACKER, "ring/shared", seat)
    assert (report["uid"], report["frame"]) == (65534, 1)
    assert report["mprotect"] == [-1, "EACCES"], report
    assert [s for s in report["seats_listed"] if s == seat] == [], report  # only its own
    assert report["get_seat"][0] == "NotFound", report
    assert report["delete_seat"][0] == "NotFound", report
    assert report["replace_seat"][0] == "PermissionDenied", report
    assert report["delete_ring"][0] == "PermissionDenied", report
    # The victim's frame is intact, its seat still counts, and the stream goes on.
    assert np.asarray(held).tolist() == [1] * WORDS
    wait_for(lambda: writer.readers == 1, "the attacker's seat to go with its process")
    publish(writer, 2)
    newest = reader.next(timeout=5)
    assert newest.version == 2 and np.asarray(newest).tolist() == [2] * WORDS
    reader.close()
    writer.close()
    victim.close()


# Runs as uid 65534: a ring anyone may read, a frame every 20 ms until its stdin closes.
RING_WRITER = AS_UID_65534 + r"""
import select
socket, name = sys.argv[1:3]
client = tensorbroker.connect(socket)
writer = client.stream_writer(name, 64, "uint8", readers="*")
print("writing", flush=True)
seq = 0
while not select.select([sys.stdin], [], [], 0.02)[0]:
    frame = writer.loan()
    np.asarray(frame)[:] = (seq + 1) % 256
    frame.release()
    seq = writer.publish()
writer.close()
"""


@ROOT_ONLY
def test_a_process_that_maps_a_ring_already_joins_it_again_and_again_with_fast_reads(daemon,
                                                                                     client):
    # Issue 44: a Get answered from the directory once left the ring's owner 0, so a reader of
    # another uid's ring, in a process that mapped the ring already, asked for a seat readable
    # by uid 0 alone: the writer (uid 65534) never saw it, and the reader timed out.
    with reachable_by_other_users(daemon):
        writer = subprocess.Popen([sys.executable, "-c", RING_WRITER, daemon.socket, "ring/owned"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert writer.stdout.readline() == "writing\n"
            ring = client.get("ring/owned", timeout=10)  # the process maps the ring now
            again = client.get("ring/owned")  # from the directory: no round trip
            assert client.stat("ring/owned")["owner_uid"] == 65534
            first = client.stream_reader("ring/owned", timeout=20)
            second = client.stream_reader("ring/owned", timeout=20)
            for reader in (first, second):
                frame = reader.next(timeout=20)
                assert frame is not None and frame.version >= 1
                assert np.asarray(frame).tolist() == [np.asarray(frame)[0]] * 64
                frame.release()
            seats = [t["name"] for t in client.list("ring/owned/.readers/")]
            assert len(seats) == 2
            for seat in seats:
                assert client.stat(seat)["readers"] == ["uid:65534"]
            first.close()
            second.close()
            ring.release()
            again.release()
        finally:
            writer.stdin.close()
            assert writer.wait(timeout=HANG_GUARD) == 0


# For the scripts below: forges a sealed seat under a ring's seat prefix, with the seat's magic
# and the given admission token.
FORGE_SEAT = r"""
import struct

def forge(seat_name, admission):
    seat = client.create(seat_name, 256, "uint8", mutable=True, readers="uid:0")
    np.asarray(seat)[:16] = np.frombuffer(struct.pack("<QQ", 0x3230544145534254, admission),
                                          np.uint8)
    seat.seal()
"""


# Runs as uid 65534, which may not read the ring: it tries to take seats under the ring's seat
# prefix (magic right, admission token guessed) to take the stream's only reader place, by
# Create and by Put. The daemon keeps that prefix for processes that may read the ring.
SQUATTER = AS_UID_65534 + FORGE_SEAT + r"""
socket, name = sys.argv[1:3]
client = tensorbroker.connect(socket)
report = {"get_ring": outcome(lambda: client.get(name, timeout=0) and None)}
report["create"] = [outcome(lambda: forge(name + "/.readers/" + str(n), 12345))
                    for n in range(50)]
report["put"] = outcome(lambda: client.put(name + "/.readers/p", np.zeros(256, np.uint8)) and None)
report["nested"] = outcome(lambda: forge(name + "/.readers/x/.readers/y", 12345))
print(json.dumps(report), flush=True)
"""


@ROOT_ONLY
def test_a_process_that_may_not_read_the_ring_cannot_take_or_squat_a_seat(daemon, client):
    writer = client.stream_writer("ring/private", 8, "uint8", max_readers=1, readers="uid:0")
    report = report_of(daemon, SQUATTER, "ring/private")
    assert report["get_ring"][0] == "NotFound", report
    refusal = ("name 'ring/private/.readers/0' is a reader seat of the stream 'ring/private': "
               "only a process that may read 'ring/private' may take one")
    assert report["create"][0] == ["PermissionDenied", refusal], report
    assert {r[0] for r in report["create"]} == {"PermissionDenied"}, report
    assert report["put"][0] == "PermissionDenied", report
    assert report["nested"][0] == "PermissionDenied", report
    # Nothing was published under the prefix, and the one reader place is free.
    assert client.list("ring/private/.readers/") == []
    other = tensorbroker.connect(daemon.socket)
    reader = other.stream_reader("ring/private", timeout=10)
    assert writer.readers == 1
    publish(writer, 1)
    assert np.asarray(reader.next(timeout=5)).tolist() == [1] * 8
    reader.close()
    writer.close()
    other.close()


# Runs as uid 65534, a reader the writer admits (the ring is readable by anyone): it tries to
# forge lasting seats with the ring's admission token, then joins as a reader and scribbles over
# its own seat (random words, and claims of the newest frames) while the victim reads.
SCRIBBLER = AS_UID_65534 + FORGE_SEAT + r"""
import random, time
socket, name = sys.argv[1:3]
client = tensorbroker.connect(socket)
ring = client.get(name, timeout=30)
admission = struct.unpack_from("<Q", bytes(np.asarray(ring)[:128]), 112)[0]
report = {"forge": outcome(lambda: forge(name + "/.readers/forged", admission)),
          "put": outcome(lambda: client.put(name + "/.readers/p", np.zeros(256, np.uint8)))}
reader = client.stream_reader(name, timeout=30)
[mine] = [t["name"] for t in client.list(name + "/.readers/")]
seat = client.get(mine, timeout=5)
seat_address = np.asarray(seat).ctypes.data
ring_address = np.asarray(ring).ctypes.data
print("scribbling", flush=True)
rng = random.Random(30)
end = time.monotonic() + 3
while time.monotonic() < end:
    if rng.random() < 0.5:
        ctypes.memmove(seat_address, bytes(rng.getrandbits(8) for _ in range(256)), 256)
    else:
        head = ctypes.c_uint64.from_address(ring_address + 128).value >> 16
        claims = struct.pack("<16Q", *[max(head - k, 0) for k in range(16)])
        ctypes.memmove(seat_address + 16, claims, len(claims))
    time.sleep(0.001)
print(json.dumps(report), flush=True)
"""


@ROOT_ONLY
def test_a_reader_scribbling_over_its_seat_harms_no_one_and_leaves_nothing(daemon, client):
    writer = client.stream_writer("ring/scribbled", WORDS, "int64", readers="*", slots=8)
    victim_client = tensorbroker.connect(daemon.socket)
    victim = victim_client.stream_reader("ring/scribbled")
    [victim_seat] = [t["name"] for t in client.list("ring/scribbled/.readers/")]
    publish(writer, 1)
    with reachable_by_other_users(daemon):
        attacker = subprocess.Popen([sys.executable, "-c", SCRIBBLER, daemon.socket,
                                     "ring/scribbled"], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        try:
            assert attacker.stdout.readline() == "scribbling\n", attacker.stderr.read()
            # The writer goes on, and every frame the victim gets is whole.
            seen = 0
            for seq in range(2, 302):
                publish(writer, seq)
                frame = victim.next(timeout=5)
                assert frame is not None
                assert frame.version == seq
                assert np.asarray(frame).tolist() == [seq] * WORDS
                frame.release()
                seen += 1
            report = json.loads(attacker.stdout.readline())
            assert attacker.wait(timeout=HANG_GUARD) == 0, attacker.stderr.read()
        finally:
            attacker.kill()
            attacker.wait()
    assert seen == 300
    # A lasting seat is refused even with the right token: seats are ephemeral.
    assert report["forge"][0] == "InvalidArgument", report
    assert "must be ephemeral" in report["forge"][1], report
    assert report["put"][0] == "InvalidArgument", report
    # Nothing of the attacker outlives it: its seat went with its process.
    wait_for(lambda: writer.readers == 1, "the attacker's seat to go with its process")
    assert [t["name"] for t in client.list("ring/scribbled/.readers/")] == [victim_seat]
    publish(writer, 302)
    assert np.asarray(victim.next(timeout=5)).tolist() == [302] * WORDS
    victim.close()
    writer.close()
    victim_client.close()


# Runs as uid 65534, the writer of a ring root reads, played by hand (as a hostile writer would:
# its own library's writer would trip over the garbage first): a well-formed ring of 4 slots,
# root's seat accepted and frame 1 published; then, once told "go" on stdin, it scribbles
# random words over the control block (head, gen, state, accepted, slot_seq), waking readers;
# mostly keeping root's seat counted, and often with a plausible head (a slot in range holding
# the head's sequence), so that the reader claims and reads frames of garbage too.
HOSTILE_WRITER = AS_UID_65534 + r"""
import random, struct, time
socket, name = sys.argv[1:3]
client = tensorbroker.connect(socket)
libc = ctypes.CDLL(None, use_errno=True)
SLOTS, SLOT = 4, 4096
ring = client.create(name, 4096 + SLOTS * SLOT, "uint8", mutable=True, readers="*")
base = np.asarray(ring).ctypes.data
geometry = struct.pack("<QIIIIQQBBHI8qQ", 0x32304E4952425454, SLOTS, 1, 1, 1, SLOT, 8, 1, 8, 1,
                       0, 8, 0, 0, 0, 0, 0, 0, 0, 7)
ctypes.memmove(base, geometry, len(geometry))
ring.seal()
gen = ctypes.c_uint32.from_address(base + 136)

def wake():
    gen.value += 1
    libc.syscall(202, ctypes.c_void_p(base + 136), 1, 0x7FFFFFFF, None, None, 0)  # FUTEX_WAKE

print("ready", flush=True)
seats = []
while not seats:
    seats = client.list(name + "/.readers/")
    time.sleep(0.01)
ctypes.c_uint64.from_address(base + 192).value = seats[0]["version"]  # accepted[0]
ctypes.memset(base + 4096, 1, 8)                                     # frame 1 in slot 0
ctypes.c_uint64.from_address(base + 768).value = 1                   # slot_seq[0]
ctypes.c_uint64.from_address(base + 128).value = 1 << 16             # head: frame 1, slot 0
wake()
sys.stdin.readline()
rng = random.Random(31)
end = time.monotonic() + 3
while time.monotonic() < end:
    ctypes.memmove(base + 128, bytes(rng.getrandbits(8) for _ in range(4096 - 128)), 4096 - 128)
    if rng.random() < 0.7:  # keep root's seat counted, so its reader goes on to the head
        ctypes.c_uint64.from_address(base + 192).value = seats[0]["version"]
        if rng.random() < 0.5:  # a head whose slot is in range, of a sequence never seen
            slot = rng.randrange(SLOTS)
            seq = rng.randrange(2, 1 << 40)
            ctypes.c_uint64.from_address(base + 768 + 8 * slot).value = seq
            ctypes.c_uint64.from_address(base + 128).value = seq << 16 | slot
            ctypes.c_uint32.from_address(base + 140).value = 0  # open
    wake()
    time.sleep(0.002)
print("done", flush=True)
"""


@ROOT_ONLY
def test_a_writer_scribbling_over_its_ring_cannot_crash_or_hang_a_reader(daemon, client):
    with reachable_by_other_users(daemon):
        attacker = subprocess.Popen([sys.executable, "-c", HOSTILE_WRITER, daemon.socket,
                                     "ring/hostile"], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert attacker.stdout.readline() == "ready\n", attacker.stderr.read()
            reader = client.stream_reader("ring/hostile", timeout=10)
            first = reader.next(timeout=5)
            assert np.asarray(first).tolist() == [1] * 8
            first.release()
            outcomes = {}
            stop = threading.Event()

            def read():
                while not stop.is_set():
                    try:
                        frame = reader.next(timeout=0.05)
                        kind = "none" if frame is None else "frame"
                        if frame is not None:
                            assert np.asarray(frame).shape == (8,)
                            frame.release()
                    except tensorbroker.Error as e:
                        kind = type(e).__name__
                        assert "ring/hostile" in str(e), str(e)
                    outcomes[kind] = outcomes.get(kind, 0) + 1

            thread = threading.Thread(target=read)
            thread.start()
            attacker.stdin.write("go\n")
            attacker.stdin.flush()
            assert attacker.stdout.readline() == "done\n", attacker.stderr.read()
            stop.set()
            thread.join(HANG_GUARD)
            assert not thread.is_alive(), "a hostile ring hung its reader"
        finally:
            attacker.kill()
            attacker.wait()
    print("hostile writer: what next() returned:", outcomes)
    # Every next() returned: a frame, nothing, or an error naming the stream (Error: ABORTED,
    # the writer no longer counts this reader).
    assert sum(outcomes.values()) > 0, outcomes
    assert set(outcomes) <= {"frame", "none", "FailedPrecondition", "Error", "StreamEnded",
                             "ResourceExhausted"}, outcomes
    reader.close()
    # The daemon serves on.
    client.put("ring/after", np.arange(4, dtype=np.int64))
    assert np.asarray(client.get("ring/after")).tolist() == [0, 1, 2, 3]
