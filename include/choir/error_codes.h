// The one table of choir error codes.
//
// Each row: X(Name, number, retryable, summary, likely causes, fix).
// Numbers are stable: never renumber or reuse a row; add new rows instead.
// Ranges: 1xx bad input, 2xx rendezvous store, 3xx connections and transports,
// 4xx collectives, 5xx system and internal, 6xx launcher and tools.
// `docs/errors.md` and `choir doctor explain CODE` are generated from this
// table (a test checks that the committed doc matches it).
//
// Thread-safety: constant data.
#ifndef CHOIR_ERROR_CODES_H_
#define CHOIR_ERROR_CODES_H_

// clang-format off
#define CHOIR_ERROR_CODES(X)                                                                     \
  X(Ok, 0, false, "Success.", "-", "-")                                                          \
  X(InvalidArgument, 100, false, "An argument passed to choir is invalid.",                      \
    "A count, size, root, split or option value outside its allowed range.",                    \
    "Read the message: it names the argument and the allowed range; fix the call.")             \
  X(InvalidWorldSize, 101, false, "The world size is not a positive number, or ranks disagree on it.", \
    "WORLD_SIZE unset or <= 0; a launcher that did not export it; a typo in -n; hosts started "  \
    "with different WORLD_SIZE; a communicator name reused on one store with another size.",     \
    "Start ranks with `choir run -n N` or give every rank the same WORLD_SIZE (>= 1); the "     \
    "message names the rank that disagrees. Give a re-created communicator a new name.")        \
  X(InvalidRank, 102, false, "A rank is outside [0, world size).",                               \
    "RANK unset or wrong; a peer rank in Send/Recv/root beyond the communicator size.",         \
    "Use ranks 0..size-1 of the communicator the call is made on.")                             \
  X(NullBuffer, 103, false, "A null buffer was passed with a nonzero count.",                    \
    "An unallocated tensor or vector; a buffer freed before the call.",                        \
    "Pass a valid buffer, or a count of 0.")                                                    \
  X(UnsupportedOp, 104, false, "This reduce operation is not defined for this data type.",       \
    "Bitwise ops (band/bor/bxor) on floating-point data; an unknown op or dtype value.",        \
    "Use sum/prod/min/max/avg for floating-point types; bitwise ops only on integers.")         \
  X(InvalidSetting, 105, false, "A CHOIR_* setting has a value that cannot be used.",            \
    "A typo in an environment variable or config file; a value of the wrong type or range.",    \
    "Run `choir doctor params` to see every setting, its type and where its value came from.")  \
  X(BadConfigFile, 106, false, "The choir config file cannot be read or parsed.",                \
    "CHOIR_CONFIG_FILE points to a missing file or a line that is not KEY=VALUE.",              \
    "Fix the line the message names, or unset CHOIR_CONFIG_FILE.")                              \
  X(BufferTooSmall, 107, false, "A buffer or split list does not match the counts given.",       \
    "Split sizes that do not add up to the buffer; a counts vector of the wrong length.",       \
    "Make counts/splits have one entry per rank and sum to the buffer length.")                 \
  X(BadTopologyFile, 109, false, "A topology file (rank table) is malformed or does not fit the job.", \
    "A JSON syntax error; a misspelled field; a rank listed twice, on no host or outside the "  \
    "world; groups that overlap or leave out a rank of their host; a bandwidth <= 0; a file "   \
    "written for another world size or by a newer choir.",                                      \
    "Fix the field on the line the message names (docs/topology.md lists every field); check " \
    "the file with `choir topo --check FILE -n WORLD` before starting the job.")                \
  X(StoreTimeout, 200, true, "Waiting for keys in the rendezvous store timed out.",              \
    "Some ranks never started or crashed before rendezvous; a wrong MASTER_ADDR/PORT; "         \
    "WORLD_SIZE larger than the number of ranks started.",                                      \
    "Check that every rank was started with the same job settings; the message lists the "     \
    "missing keys/ranks. Raise CHOIR_TIMEOUT if ranks start slowly.")                           \
  X(StoreUnreachable, 201, true, "The rendezvous store server cannot be reached.",               \
    "The launcher (or rank 0) is not running; wrong address or port; a firewall; the store "    \
    "host picked an interface peers cannot route to.",                                          \
    "Check MASTER_ADDR/MASTER_PORT (or CHOIR_STORE_ADDR) and that the store host is up and "    \
    "reachable (`choir doctor`).")                                                              \
  X(StoreProtocol, 202, false, "The store answered with something choir does not understand.",   \
    "The address belongs to another service; a store of another choir version or job.",        \
    "Point the store address at a choir store (`choir run` hosts one) of the same version.")    \
  X(KeyNotFound, 203, false, "A store key does not exist.",                                      \
    "Reading a key nobody set; a key deleted by another rank.",                                 \
    "Use Wait() for keys that appear later; check the key name.")                               \
  X(StoreIo, 204, true, "The file store cannot read or write its file.",                         \
    "The directory does not exist, is not writable, or is full.",                               \
    "Use a path on a writable, shared file system that every rank can reach.")                  \
  X(ConnectTimeout, 300, true, "Connecting to a peer did not finish before the deadline.",       \
    "The peer crashed or is stuck before listening; a firewall drops packets; the address "     \
    "published by the peer is not reachable from here (wrong interface).",                      \
    "Check the address in the message; choose the interface with CHOIR_SOCKET_IFNAME; "        \
    "run `choir doctor` on both hosts.")                                                        \
  X(ConnectRefused, 301, true, "A peer refused the connection.",                                 \
    "Nothing listens at the peer address (peer exited); the port is blocked with a reset.",     \
    "Check that the peer is alive and that the port range is open between the hosts.")          \
  X(VersionMismatch, 302, false, "A peer speaks another choir protocol version.",                \
    "Nodes run different choir builds (version drift between hosts).",                          \
    "Install the same choir version on every host; `choir doctor --cluster` shows the diff.")   \
  X(JobMismatch, 303, false, "A peer or store belongs to another job.",                          \
    "Two jobs share a store address or port; a stale process from an earlier run.",             \
    "Give each job its own port or CHOIR_JOB_ID; stop stale processes of earlier runs.")        \
  X(PeerLost, 304, false, "A peer closed its connection or exited during communication.",        \
    "The peer process crashed, was killed (OOM, signal) or called Abort; its host went down.",  \
    "Look at the peer's own log (the message names its rank, host and pid) for the first "      \
    "failure; the surviving ranks must be restarted.")                                          \
  X(ShmError, 305, true, "A shared-memory segment or SharedBuffer cannot be created or mapped.",  \
    "/dev/shm is full or too small (containers default to 64 MB); a leftover segment; "         \
    "no memory or file descriptors for a SharedBuffer; a peer's SharedBuffer cannot be "        \
    "taken over (pidfd_getfd refused by ptrace restrictions, or the buffer was freed).",        \
    "Enlarge /dev/shm (docker --shm-size), free space in it, or force CHOIR_TRANSPORT=tcp; "    \
    "for SharedBuffers raise the memory or descriptor limits, keep buffers alive until their "  \
    "collectives finish, or set CHOIR_SHM_CMA=off.")                                            \
  X(SocketError, 306, true, "A socket operation failed.",                                        \
    "Out of file descriptors; no route to the peer; the interface went down.",                  \
    "Read the system error in the message; raise `ulimit -n`; check links with `choir doctor`.")\
  X(AddressInUse, 307, true, "The address or port is already in use.",                          \
    "A stale process from an earlier run still holds the port; two jobs use one port.",         \
    "Find the holder with `ss -ltnp 'sport = :PORT'` and stop it, or pick another port.")       \
  X(InterfaceNotFound, 308, false, "No network interface matches the interface setting.",        \
    "CHOIR_SOCKET_IFNAME names an interface that does not exist or has no IPv4 address.",       \
    "List interfaces with `ip -br addr`; fix CHOIR_SOCKET_IFNAME (prefix, ^exclude, =exact).")  \
  X(ProtocolError, 309, false, "A peer sent a message that breaks the wire protocol.",           \
    "Memory corruption in a peer; a non-choir process connected to a choir port.",              \
    "Make sure only choir ranks of this job connect to its ports; report a bug if it repeats.") \
  X(AuthFailed, 310, false, "A peer or store failed authentication.",                            \
    "The shared secret differs between ranks; a foreign process tried to join the job.",        \
    "Give every rank the same CHOIR_AUTH_SECRET (the launcher does this for you).")             \
  X(UnknownHost, 311, false, "A host name cannot be resolved to an IPv4 address.",               \
    "A typo in --master-addr, MASTER_ADDR or --listen; a name missing from DNS or /etc/hosts.",  \
    "Check the name with `getent ahostsv4 NAME`, or give the IPv4 address instead.")           \
  X(CollectiveTimeout, 400, true, "A collective did not complete before its deadline.",          \
    "A peer is slow, stuck in other code, or never issued this collective; a deadlock in the "  \
    "application (ranks call collectives in different orders).",                                \
    "The message lists the ranks not heard from and the sequence number each rank reached; "   \
    "look at what those ranks were doing. Raise CHOIR_TIMEOUT only if they are merely slow.")   \
  X(CollectiveMismatch, 401, false, "Ranks called different collectives at the same step.",      \
    "A data-dependent branch makes ranks call a different op, count, dtype, root or order.",    \
    "Compare the two signatures in the message and make every rank issue the same "            \
    "collectives in the same order with the same arguments.")                                   \
  X(Aborted, 402, false, "The communicator was aborted.",                                        \
    "Abort() was called on this rank or on a peer (which propagates it).",                      \
    "Create a new communicator; the aborted one cannot be used again.")                         \
  X(RemoteError, 403, false, "A peer failed and told this rank why.",                            \
    "Another rank hit an error (its code and message follow) and aborted the communicator, or "  \
    "could not join it while it formed (a bad rank, world size or setting there).",              \
    "Fix the first error, reported by the rank named in the message.")                          \
  X(Internal, 500, false, "An internal invariant of choir was violated.",                        \
    "A bug in choir.",                                                                          \
    "Report it with the full message, the choir version and `choir doctor` output.")            \
  X(SystemError, 501, true, "A system call failed.",                                             \
    "Resource limits (memory, file descriptors, processes); permissions.",                      \
    "Read the errno text in the message; check limits with `choir doctor`.")                    \
  X(NotSupported, 502, false, "The operation is not supported in this build or configuration.", \
    "A feature compiled out, or a transport that cannot carry this operation.",                 \
    "Read the message for the supported alternative.")                                          \
  X(OutOfMemory, 503, false, "The host has too little free memory for what was asked.",          \
    "Buffers larger than the free memory; too many ranks on one host for their shared-memory "  \
    "segments (they grow with the number of local ranks); a full /dev/shm.",                    \
    "The message gives what was needed and what was free: use smaller sizes or fewer ranks "    \
    "per host, lower CHOIR_SHM_RING_BYTES, or free memory (`free -h`, `df -h /dev/shm`).")      \
  X(RankFailed, 600, false, "A rank started by the launcher failed.",                           \
    "The rank's program exited with a nonzero code or was killed by a signal.",                 \
    "Read that rank's output (lines prefixed with its rank) for the first error.")              \
  X(LaunchFailed, 601, false, "The launcher could not start a rank.",                            \
    "The program does not exist or is not executable; too many processes.",                    \
    "Check the program path and arguments after `--`.")                                        \
  X(UsageError, 602, false, "A command-line flag or argument is wrong.",                         \
    "A misspelled flag, a missing value, a value out of range.",                                \
    "Run the command with --help to see its flags.")                                           \
  X(HostCheckFailed, 603, false, "`choir doctor` found a host problem that breaks choir jobs.",   \
    "A FAIL verdict: /dev/shm too small or full, too few file descriptors, an interface "      \
    "setting that matches nothing, a rejected setting.",                                        \
    "Read the FAIL lines of the report: each names the cause and the fix; rerun doctor.")       \
  X(ClusterMismatch, 604, false, "Hosts of a job differ in version, build, settings or system.",   \
    "Version drift after a partial upgrade; a setting exported on some hosts only (or, for "   \
    "CHOIR_TOPO_FILE and the shared-memory sizes, on some ranks of a host); different kernels " \
    "or MTUs.",                                                                                 \
    "Make the listed keys equal on every host (`choir doctor --cluster` prints each "          \
    "difference with the hosts on each side), then rerun.")                                    \
  X(ProbeFailed, 605, true, "`choir probe` could not finish its collectives within the deadline.", \
    "The host is overloaded or out of memory, /dev/shm or loopback TCP is broken, or a "       \
    "watched job stopped answering.",                                                           \
    "Run `choir doctor` on the host; look at the reason printed by the probe.")
// clang-format on

#endif  // CHOIR_ERROR_CODES_H_
