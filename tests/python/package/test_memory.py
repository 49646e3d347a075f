"""Memory: a 1 GiB tensor held by the producer, the daemon and three consumer processes costs
1 GiB of memory once, not once per process; 10,000 get/release cycles leak no lease and no
memory; a consumer killed with SIGKILL while holding leases has them reclaimed.

Every figure is one the test owns, never a machine-wide one (the Shmem of /proc/meminfo moves
with whatever else the machine runs): the segment's own blocks (st_blocks of its memfd), what
each of the test's processes maps of that segment (its mappings' Rss and Pss in
/proc/PID/smaps), and the daemon's accounting (stats() of a daemon of the test's own).
Figures are printed (pytest -s shows them); the asserts check the outcome, not the speed."""

import os
import signal

import numpy as np

from conftest import wait_for

GIB = 1 << 30
KIB = 1 << 10


def mapping_of(pid, address):
    """The mapping of process `pid` that holds `address`: {start, end, offset, inode, path}."""
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if start <= address < end:
                path = fields[5].strip() if len(fields) > 5 else ""
                return {"start": start, "end": end, "offset": int(fields[2], 16),
                        "inode": int(fields[4]), "path": path.removesuffix(" (deleted)")}
    raise AssertionError(f"no mapping of process {pid} holds {address:#x}")


def segment_in_smaps(pid, inode):
    """What process `pid` maps of the memfd `inode`: the number of its mappings of it and their
    Rss and Pss in bytes (smaps prints each in whole KiB, rounded down)."""
    out = {"mappings": 0, "Rss": 0, "Pss": 0}
    ours = False
    with open(f"/proc/{pid}/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and not fields[0].endswith(":"):  # a mapping's first line
                ours = (len(fields) > 5 and fields[5].startswith("/memfd:")
                        and int(fields[4]) == inode)
                out["mappings"] += ours
            elif ours and fields[0] in ("Rss:", "Pss:"):
                assert fields[2] == "kB", line
                out[fields[0][:-1]] += int(fields[1]) * KIB
    return out


def segment_file(pid, inode):
    """os.stat of the memfd `inode` through a descriptor process `pid` holds of it."""
    fds = f"/proc/{pid}/fd"
    for fd in os.listdir(fds):
        try:
            if not os.readlink(f"{fds}/{fd}").startswith("/memfd:"):
                continue
            st = os.stat(f"{fds}/{fd}")
        except FileNotFoundError:  # closed meanwhile
            continue
        if st.st_ino == inode:
            return st
    raise AssertionError(f"process {pid} holds no descriptor of memfd inode {inode}")


def test_one_gib_held_by_five_processes_costs_one_gib(client, daemon, peers):
    start = client.stats()  # a daemon of this test's own: it holds nothing yet
    assert (start["used_bytes"], start["leases"]) == (0, 0)
    w = client.create("mem/1g", (GIB // 4,), "float32")  # the producer fills broker memory
    filled = np.asarray(w)
    filled[:] = 1.0
    w.seal()
    # The segment: the memfd under the producer's pointer, and its own blocks.
    pointer = filled.__array_interface__["data"][0]
    mine = mapping_of(os.getpid(), pointer)
    assert mine["path"].startswith("/memfd:tb-"), mine
    inode, offset = mine["inode"], mine["offset"] + pointer - mine["start"]
    segment = segment_file(daemon.proc.pid, inode)
    # A tensor this large has a segment of its own, of its size (a whole number of pages), and
    # every page of it is in memory (the daemon reserves them all when it creates a segment):
    # the physical memory the tensor costs, 1 GiB.
    assert (segment.st_size, offset) == (GIB, 0)
    assert segment.st_blocks * 512 == GIB
    after_producer = client.stats()
    assert after_producer["used_bytes"] == GIB  # the daemon's accounting: the tensor's bytes

    consumers = [peers(torch=False) for _ in range(3)]
    for c in consumers:
        c.ask("get", name="mem/1g", key="v", framework="numpy")
        assert c.ask("touch", key="v")["sum"] == GIB // 4  # every page read in every process
        # Its view is the producer's pages: the same file at the same offset, not a copy.
        where = c.ask("locate", key="v")
        assert (where["file"], where["inode"], where["offset"]) == (mine["path"], inode, offset)
    assert client.stat("mem/1g")["leases"] == 4  # the producer's and three consumers'

    # The consumers added no memory: the segment has the blocks it had, the daemon counts the
    # same bytes.
    assert segment_file(daemon.proc.pid, inode).st_blocks == segment.st_blocks
    assert client.stats()["used_bytes"] == after_producer["used_bytes"]

    # Four processes have all of it resident (Rss), yet their proportional shares (Pss: each
    # page divided among the processes that map it) add up to one copy: the same pages.
    pids = {"producer": os.getpid(), "daemon": daemon.proc.pid,
            **{f"consumer{i}": c.proc.pid for i, c in enumerate(consumers)}}
    usage = {who: segment_in_smaps(pid, inode) for who, pid in pids.items()}
    rss = sum(u["Rss"] for u in usage.values())
    pss = sum(u["Pss"] for u in usage.values())
    mappings = sum(u["mappings"] for u in usage.values())
    print(f"\nsegment {mine['path']}: {segment.st_size / GIB:.3f} GiB, "
          f"{segment.st_blocks * 512 / GIB:.3f} GiB in blocks; mapped by the five processes: " +
          ", ".join(f"{who} Rss {u['Rss'] / GIB:.3f} Pss {u['Pss'] / GIB:.3f}"
                    for who, u in usage.items()) +
          f"; in all Rss {rss / GIB:.3f} GiB, Pss {pss / GIB:.3f} GiB ({GIB - pss} bytes less "
          f"than 1 GiB, over {mappings} mappings; 4 private copies would be 4 GiB)")
    for who in ["producer", "consumer0", "consumer1", "consumer2"]:
        assert usage[who]["Rss"] == GIB, (who, usage[who])
    # Nobody else maps the segment (its descriptors went only to these processes), so the Pss
    # of its pages adds up to the size of those mapped, all of them (the producer's mapping has
    # every page): GIB, less what smaps rounds off (it prints each mapping's Pss rounded down
    # to a KiB, so less than 1 KiB per mapping).
    assert GIB - mappings * KIB < pss <= GIB, (pss, mappings)

    for c in consumers:
        c.ask("release", key="v")
    del filled
    w.release()
    client.delete("mem/1g")
    assert client.stats()["used_bytes"] == 0


def test_ten_thousand_get_release_cycles_leak_nothing(client, peers):
    client.put("leak/a", np.arange(1024, dtype=np.float32))
    # ASan holds freed memory in quarantine for a while; measure reuse as a plain build would.
    consumer = peers(sanitizer_options="quarantine_size_mb=0:thread_local_quarantine_size_kb=0")
    answer = consumer.ask("cycles", name="leak/a", warmup=3000, n=10000)
    rss, heap = answer["rss_anon_kib"], answer["heap_in_use_bytes"]
    print(f"\nconsumer after 3,000 warm-up cycles and after each 2,500 of 10,000 more "
          f"(get + np.asarray + torch.from_dlpack + release): RssAnon {rss} KiB; heap in use "
          f"({answer['heap_counter']}) {heap} bytes")
    print(f"descriptors {answer['descriptors']}, mappings {answer['mappings']} (of memfds "
          f"{answer['memfd_mappings']}), threads {answer['threads']}")
    assert answer["descriptors"][4] == answer["descriptors"][0]
    assert answer["memfd_mappings"][4] == answer["memfd_mappings"][0]
    assert answer["leases_after"] == 0
    assert client.stat("leak/a")["leases"] == 0
    assert client.stats()["leases"] == 0
    # Flat: each cycle makes three lease contexts of some 400 bytes each; leaking even one of
    # them (or any 100 bytes) a cycle would add about 1 MiB across the 10,000.
    assert heap[4] - heap[0] < 1 << 20
    if answer["heap_counter"] == "glibc":
        # Without a sanitizer RSS is the program's own: it must stay flat too. (Under a
        # sanitizer it also counts the runtime's bookkeeping, which grows with every new
        # address it sees: TSan's by about 1.5 MiB over these cycles.)
        assert rss[4] - rss[0] < 1536
        # So are its mappings, but for those of threads gRPC starts by the clock (its timer
        # threads: a stack and its guard, a malloc arena and its reserve, 4 each), which a run
        # of Gets that ask nothing of the daemon may see come. (A sanitizer's allocator maps new
        # regions of its own as the heap's addresses move: TSan's added one over these cycles.)
        new_threads = max(0, answer["threads"][4] - answer["threads"][0])
        assert answer["mappings"][4] - answer["mappings"][0] <= 4 * new_threads


def test_sigkilled_consumer_leases_are_reclaimed(client, peers):
    client.put("kill/a", np.arange(100, dtype=np.float64))
    victim = peers()
    held = victim.ask("hold_many", name="kill/a", count=3)["leases"]
    assert client.stat("kill/a")["leases"] == held == 1  # 12 local references, one lease
    os.kill(victim.proc.pid, signal.SIGKILL)
    assert victim.wait() == -signal.SIGKILL
    wait_for(lambda: client.stat("kill/a")["leases"] == 0, "the killed consumer's leases")
    assert client.stats()["leases"] == 0
