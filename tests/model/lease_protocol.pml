/* The protocol of reads without a round trip (issue 34; docs/architecture.md, "Reads without a
 * round trip: the protocol"), for Spin to check every interleaving of:
 *   - the daemon, which alone writes a name's directory record (under a seqlock), replaces the
 *     name's version REPLACES times and then deletes it, and frees a version's memory once it is
 *     no longer current, no lease it granted names it, and no live process's lease table names
 *     it (a scan of the tables, slot by slot, while the processes run; a table whose count of
 *     takes has not moved since a scan found it empty is skipped: issue 44);
 *   - CLIENTS processes, each taking a lease (SLOTS of them) and releasing it: by the fast path
 *     (read the record under its seqlock, write the version into a slot of its own table, count
 *     the take in the table's header, read the record's sequence again: unchanged, the lease
 *     holds; changed, clear the slot and start over) or by the daemon (a lease it grants over the channel, one step of the daemon's);
 *   - a killer that may kill client 0 at any instant: from then on it runs no more, and the
 *     daemon drops its table and its granted leases (the kernel closed its sockets).
 * Spin's memory is sequentially consistent: the code makes the orderings this relies on
 * sequentially consistent too (a client's slot store and count before its second sequence load;
 * the daemon's sequence stores before its load of the count, and that before its slot loads).
 *
 * What is checked (assertions, and no invalid end state):
 *   - never a use after free: a client reading a version through a lease finds it not freed,
 *     and the daemon never frees a version a live client is reading (ghost `reading`);
 *   - nothing is left: once every client is done or dead, every version that was replaced or
 *     deleted is freed, and no lease is counted.
 *
 * Bounds: 2 clients, 1 slot each, REPLACES replaces then a delete. The check in CI runs
 * -DREPLACES=1 (about 23 million states, 30 s); the default, 2, was searched in full once when
 * the count of takes came in (issue 44: 170 million states, 334 s, no error).
 *
 * `-DSKIP_REVALIDATION` (a client trusts its first read), `-DSCAN_BEFORE_UNPUBLISH` (the
 * daemon scans the tables before it moves the record) and `-DCOUNT_AFTER_RECHECK` (a client
 * counts its take only once its lease holds) are the mistakes the protocol exists to rule out:
 * tests/model/check_lease_protocol.sh checks that Spin finds each of them.
 */

#define CLIENTS 2
#define SLOTS 1
#ifndef REPLACES
#define REPLACES 2
#endif
#define VERSIONS (REPLACES + 2) /* versions 1 .. REPLACES + 1; 0 is none */

byte record_seq = 0;     /* odd while the daemon writes the record */
byte record_version = 1; /* the name's current version; 0: deleted */

byte table[CLIENTS * SLOTS];   /* each client's lease table: written by that client only */
byte takes[CLIENTS];           /* each table's count of takes, in its header */
byte empty_at[CLIENTS] = 1;    /* the daemon's: a count at which it scanned the table empty, + 1 */
byte granted[CLIENTS * SLOTS]; /* leases the daemon granted over the channel, per client slot */
byte granted_count[VERSIONS];  /* the daemon's count of granted leases, per version */

bool retired[VERSIONS]; /* no longer current */
bool freed[VERSIONS];   /* memory given back: another tensor may take it */
bool dead[CLIENTS];
bool done[CLIENTS];
byte reading[CLIENTS * SLOTS]; /* ghost: the version a client reads through a slot (0: none) */

inline NotRead(v) {
  assert(reading[0] != v && reading[1] != v)
}

/* The daemon's reclaim pass: one scan of each live process's table, slot by slot (a table whose
 * count of takes, read first, has not moved since a scan found it empty is skipped), then every
 * retired version that no lease it granted and no scanned slot names is freed. */
inline Reclaim() {
  held = 0;
  c = 0;
  do
  :: c < CLIENTS ->
    if
    :: dead[c] -> skip /* its table went with it */
    :: else ->
      count = takes[c]; /* before the slots */
      if
      :: empty_at[c] == count + 1 -> skip /* empty since: not scanned */
      :: else ->
        any = false;
        i = c * SLOTS;
        do
        :: i < (c + 1) * SLOTS ->
          t = table[i];
          if
          :: t != 0 -> any = true; held = held | (1 << t)
          :: else -> skip
          fi;
          i++
        :: else -> break
        od;
        if
        :: !any -> empty_at[c] = count + 1
        :: else -> skip
        fi;
        any = false; t = 0 /* scratch: cleared, so that it makes no states of its own */
      fi;
      count = 0
    fi;
    c++
  :: else -> break
  od;
  c = 0; i = 0;
  v = 1;
  do
  :: v < VERSIONS ->
    if
    :: retired[v] && !freed[v] && granted_count[v] == 0 && (held & (1 << v)) == 0 ->
      NotRead(v); freed[v] = true
    :: else -> skip
    fi;
    v++
  :: else -> break
  od;
  held = 0
}

/* The daemon moves the record to `next` (0: deletes the name) and retires the version before. */
inline Publish(next) {
  old = record_version;
#ifdef SCAN_BEFORE_UNPUBLISH
  retired[old] = true;
  Reclaim();
#endif
  record_seq++;
  record_version = next;
  record_seq++;
  retired[old] = true;
}

active proctype Daemon() {
  byte next = 2, old, v, i, c, count, t, held;
  bool any;
  do
  :: next <= REPLACES + 1 -> Publish(next); next++; Reclaim()
  :: else -> break
  od;
  Publish(0);
  Reclaim();
  /* The reclaimer's pass once every client is done or dead. */
  (done[0] || dead[0]) && (done[1] || dead[1]);
  Reclaim();
  /* Nothing is left. */
  v = 1;
  do
  :: v < VERSIONS -> assert(freed[v] && granted_count[v] == 0); v++
  :: else -> break
  od
}

/* A lease by the daemon (the slow path: a first mapping, a wait, a version gone): one step of
 * the daemon, which grants the current version. */
inline GrantedGet(k) {
  atomic {
    if
    :: record_version != 0 ->
      granted[me * SLOTS + k] = record_version;
      granted_count[record_version]++;
      reading[me * SLOTS + k] = record_version
    :: else -> skip /* NOT_FOUND */
    fi
  }
}

/* A lease with no round trip. */
inline FastGet(k) {
  do
  :: first = record_seq;
    if
    :: first % 2 == 1 -> skip /* being written: read again */
    :: else ->
      seen = record_version;
      if
      :: record_seq != first -> skip /* torn: read again */
      :: else ->
        if
        :: seen == 0 -> break /* deleted: NOT_FOUND */
        :: else ->
          table[me * SLOTS + k] = seen;
#ifndef COUNT_AFTER_RECHECK
          takes[me]++;
#endif
#ifdef SKIP_REVALIDATION
          reading[me * SLOTS + k] = seen;
          break
#else
          if
          :: record_seq == first ->
#ifdef COUNT_AFTER_RECHECK
            takes[me]++;
#endif
            reading[me * SLOTS + k] = seen; break
          :: else -> table[me * SLOTS + k] = 0 /* moved on: let go, read again */
          fi;
          first = 0;
          seen = 0
#endif
        fi
      fi
    fi
  od
}

inline Release(k) {
  if
  :: reading[me * SLOTS + k] != 0 -> assert(!freed[reading[me * SLOTS + k]])
  :: else -> skip
  fi;
  reading[me * SLOTS + k] = 0;
  if
  :: granted[me * SLOTS + k] != 0 ->
    atomic {
      granted_count[granted[me * SLOTS + k]]--;
      granted[me * SLOTS + k] = 0
    }
  :: else -> table[me * SLOTS + k] = 0
  fi
}

proctype Client(byte me) {
  byte first, seen, k;
  {
    k = 0;
    do
    :: k < SLOTS ->
      if
      :: FastGet(k)
      :: GrantedGet(k)
      fi;
      if
      :: reading[me * SLOTS + k] != 0 -> assert(!freed[reading[me * SLOTS + k]])
      :: else -> skip
      fi;
      k++
    :: else -> break
    od;
    k = 0;
    do
    :: k < SLOTS -> Release(k); k++
    :: else -> break
    od;
    done[me] = true
  } unless { dead[me] }
}

/* Kills client 0 at any instant before it is done: it reads nothing more, and the daemon drops
 * what it held (one step of the daemon's). */
active proctype Killer() {
  byte k;
  if
  :: atomic {
      !done[0] ->
      dead[0] = true;
      k = 0;
      do
      :: k < SLOTS ->
        reading[k] = 0;
        if
        :: granted[k] != 0 -> granted_count[granted[k]]--; granted[k] = 0
        :: else -> skip
        fi;
        k++
      :: else -> break
      od
    }
  :: skip
  fi
}

init {
  atomic {
    run Client(0);
    run Client(1)
  }
}
