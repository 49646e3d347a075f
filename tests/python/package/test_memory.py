"""Memory: a 1 GiB tensor held by the producer, the daemon and three consumer processes costs
about 1 GiB of shared memory, not 4; 10,000 get/release cycles leak no lease and no memory; a
consumer killed with SIGKILL while holding leases has them reclaimed.
Figures are printed (pytest -s shows them); the asserts check the outcome, not the speed."""

import os
import signal

import numpy as np

from conftest import wait_for

GIB = 1 << 30


def shm_used_bytes():
    """The machine's shared memory in use (memfd segments and tmpfs alike): Shmem of meminfo."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Shmem:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no Shmem in /proc/meminfo")


def smaps(pid="self"):
    out = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                out[parts[0].rstrip(":")] = int(parts[1]) * 1024
    return out


def test_one_gib_held_by_five_processes_costs_one_gib(client, daemon, peers):
    before = shm_used_bytes()
    w = client.create("mem/1g", (GIB // 4,), "float32")  # the producer fills broker memory
    np.asarray(w)[:] = 1.0
    w.seal()
    after_producer = shm_used_bytes()
    consumers = [peers(torch=False) for _ in range(3)]
    for c in consumers:
        c.ask("get", name="mem/1g", key="v", framework="numpy")
        assert c.ask("touch", key="v")["sum"] == GIB // 4  # every page read in every process
    after_consumers = shm_used_bytes()
    assert client.stat("mem/1g")["leases"] == 4  # the producer's and three consumers'

    grew = after_consumers - before
    print(f"\nshared memory used: before {before / GIB:.3f} GiB, producer filled "
          f"{(after_producer - before) / GIB:.3f} GiB, with 3 consumers also holding it "
          f"{grew / GIB:.3f} GiB (4 private copies would be 4 GiB)")
    pss = {"producer": smaps()["Pss_Shmem"], "daemon": smaps(daemon.proc.pid)["Pss_Shmem"]}
    for i, c in enumerate(consumers):
        pss[f"consumer{i}"] = c.ask("smaps")["Pss_Shmem"] * 1024
    print("Pss_Shmem per process (GiB): " +
          ", ".join(f"{k} {v / GIB:.3f}" for k, v in pss.items()) +
          f"; total {sum(pss.values()) / GIB:.3f}")
    assert GIB <= grew < GIB + GIB // 4
    assert after_consumers - after_producer < GIB // 64  # consumers add page tables only
    assert sum(pss.values()) < GIB + GIB // 4

    for c in consumers:
        c.ask("release", key="v")
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
    print(f"descriptors {answer['descriptors']}, mappings {answer['mappings']}")
    assert answer["descriptors"][4] == answer["descriptors"][0]
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
        # So are its mappings. (A sanitizer's allocator maps new regions of its own as the
        # heap's addresses move: TSan's added one over these cycles.)
        assert answer["mappings"][4] == answer["mappings"][0]


def test_sigkilled_consumer_leases_are_reclaimed(client, peers):
    client.put("kill/a", np.arange(100, dtype=np.float64))
    victim = peers()
    held = victim.ask("hold_many", name="kill/a", count=3)["leases"]
    assert client.stat("kill/a")["leases"] == held == 1  # 12 local references, one lease
    os.kill(victim.proc.pid, signal.SIGKILL)
    assert victim.wait() == -signal.SIGKILL
    wait_for(lambda: client.stat("kill/a")["leases"] == 0, "the killed consumer's leases")
    assert client.stats()["leases"] == 0
