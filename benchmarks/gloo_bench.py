#!/usr/bin/env python3
"""torch.distributed collective benchmark reporting the same figures as `choir perf`.

    python3 gloo_bench.py --nprocs N [--backend gloo|choir] [--op LIST|all]
        [--min-bytes 8] [--max-bytes 256M] [--step-factor 2] [--iters N | --time-per-size 0.2]
        [--iters-schedule BYTES:ITERS:WARMUP,...] [--warmup 5] [--root 0] [--no-check] [--latency N]
        [--json FILE]

Written for the Debian python3-torch (1.13) with /usr/bin/python3. The parent
process starts N ranks of this script with subprocess; they meet at
tcp://127.0.0.1:<free port> (GLOO_SOCKET_IFNAME=lo, one torch thread each).
`--backend choir` imports `choir.torch`, which registers the choir backend,
so the same script measures choir through PyTorch.

Conventions are choir perf's (nccl-tests'): bytes is the per-rank buffer for
allreduce, broadcast and reduce, the whole buffer for reduce_scatter,
allgather and alltoall, and the root's whole buffer for gather and scatter;
each iteration is timed on every rank and an operation's time is the slowest
rank's; algbw = bytes / mean time; busbw factors 2(n-1)/n (allreduce),
(n-1)/n (reduce_scatter, allgather, alltoall, gather, scatter), 1
(broadcast, reduce). Rank 0 probes one call and picks the iteration count
(clamped to 5..100000) that fills --time-per-size; --iters-schedule
"64K:200:10,1M:50:3,*:5:1" instead fixes iterations and warmup per size band
(first entry whose bytes >= the size; * = any size).

torch's collectives are in place, so the timed loops of allreduce and reduce
run on zeros (values stay finite); allgather, gather and scatter use the list forms (gloo has
no _allgather_base); reduce_scatter uses reduce_scatter_tensor, which gloo in
torch 1.13 does not support: it is reported under "unsupported". Every size
is checked once afterwards on patterned inputs, every element of every rank.

--latency N: N individually timed 8-byte allreduce calls (100 warmup).
JSON rows have the keys of `choir perf --json` (one-element lists).
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import time

OPS = ["allreduce", "reduce_scatter", "allgather", "broadcast", "reduce", "alltoall", "gather", "scatter"]
WHOLE_BUFFER = {"reduce_scatter", "allgather", "alltoall", "gather", "scatter"}
# Ops whose send (receive) buffer holds a block per rank.
SEND_PER_RANK = {"reduce_scatter", "alltoall", "scatter"}
RECV_PER_RANK = {"allgather", "alltoall", "gather"}
MIN_ITERS, MAX_ITERS = 5, 100000
LAUNCH_WARMUP_CALLS = 100  # untimed 8-byte allreduces before the first size, as choir perf runs


def parse_bytes(text):
    units = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
             "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}
    t = text.strip().lower()
    i = len(t)
    while i > 0 and t[i - 1].isalpha():
        i -= 1
    if t[i:] not in units:
        raise argparse.ArgumentTypeError(f"bad size '{text}' (e.g. 64, 4K, 256M)")
    return int(float(t[:i]) * units[t[i:]])


def parse_schedule(text):
    """'64K:200:10,*:5:1' -> [(max_bytes, iters, warmup)], max_bytes None for '*'."""
    bands = []
    for item in text.split(","):
        parts = item.split(":")
        if len(parts) != 3:
            raise argparse.ArgumentTypeError(f"bad --iters-schedule entry '{item}' (BYTES:ITERS:WARMUP)")
        limit = None if parts[0] == "*" else parse_bytes(parts[0])
        bands.append((limit, int(parts[1]), int(parts[2])))
    return bands


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nprocs", "-n", type=int, default=2, help="ranks to start (default 2)")
    p.add_argument("--backend", default="gloo", help="torch.distributed backend: gloo (default) or choir")
    p.add_argument("--op", default="allreduce", help="comma-separated ops or 'all' (default allreduce)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--reduce-op", default="sum", choices=["sum", "max", "min"])
    p.add_argument("--min-bytes", type=parse_bytes, default=8)
    p.add_argument("--max-bytes", type=parse_bytes, default=256 << 20)
    p.add_argument("--step-factor", type=float, default=2.0)
    p.add_argument("--iters", type=int, default=0, help="timed iterations per size (default: fill --time-per-size)")
    p.add_argument("--time-per-size", type=float, default=0.2)
    p.add_argument("--iters-schedule", type=parse_schedule, default=None,
                   help="BYTES:ITERS:WARMUP,... fixed iterations per size band ('*' = any size)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--root", type=int, default=0)
    p.add_argument("--no-check", action="store_true", help="skip the correctness check")
    p.add_argument("--latency", type=int, default=0, metavar="N", help="8-byte allreduce latency mode, N calls")
    p.add_argument("--json", default="", help="write results to this file (rank 0)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds before the ranks are stopped")
    # Set by the parent for its children.
    p.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.ops = OPS if a.op == "all" else [("broadcast" if o == "bcast" else o) for o in a.op.split(",")]
    for o in a.ops:
        if o not in OPS:
            p.error(f"unknown --op '{o}' (one of {', '.join(OPS)}, all)")
    if a.latency:
        a.ops, a.min_bytes, a.max_bytes, a.iters, a.warmup = ["allreduce"], 8, 8, a.latency, 100
    if not 0 < a.min_bytes <= a.max_bytes or a.step_factor < 1.01:
        p.error("need 0 < --min-bytes <= --max-bytes and --step-factor > 1")
    if not 0 <= a.root < a.nprocs:
        p.error("--root outside the ranks")
    return a


# ---------------------------------------------------------------- parent


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args, argv):
    """Starts the ranks, waits for them, stops the rest when one fails."""
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    port = free_port()
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), *argv, "--rank", str(r), "--port",
                               str(port)], env=env) for r in range(args.nprocs)]
    deadline = time.monotonic() + args.timeout
    rc = 0
    try:
        while procs:
            for pr in list(procs):
                code = pr.poll()
                if code is None:
                    continue
                procs.remove(pr)
                if code != 0 and rc == 0:
                    rc = code
                    print(f"gloo_bench: a rank exited with {code}; stopping the others", file=sys.stderr)
                    for other in procs:
                        other.terminate()
            if time.monotonic() > deadline and rc == 0:
                rc = 124
                print(f"gloo_bench: timeout after {args.timeout:.0f} s; stopping the ranks", file=sys.stderr)
                for pr in procs:
                    pr.terminate()
            time.sleep(0.05)
    finally:
        for pr in procs:
            pr.kill()
            pr.wait()
    return rc


# ---------------------------------------------------------------- ranks


def percentile(sorted_values, p):
    if not sorted_values:
        return 0.0
    pos = p * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


class Bench:
    def __init__(self, args, torch, dist):
        self.a, self.torch, self.dist = args, torch, dist
        self.rank, self.n = dist.get_rank(), dist.get_world_size()
        self.dtype = torch.float32 if args.dtype == "float32" else torch.float64
        self.es = 4 if args.dtype == "float32" else 8
        self.rop = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}[args.reduce_op]
        self._send = self._recv = self._tile = torch.empty(0, dtype=self.dtype)

    # Returns a callable that runs `op` once on buffers for `count` elements.
    def make(self, op, count, send, recv):
        d, root, rop = self.dist, self.a.root, self.rop
        if op == "allreduce":
            return lambda: d.all_reduce(recv, op=rop)
        if op == "reduce_scatter":
            return lambda: d.reduce_scatter_tensor(recv, send, op=rop)
        if op == "allgather":
            views = list(recv.split(count))
            return lambda: d.all_gather(views, send)
        if op == "broadcast":
            return lambda: d.broadcast(recv, src=root)
        if op == "reduce":
            return lambda: d.reduce(recv, dst=root, op=rop)
        if op == "gather":
            views = list(recv.split(count)) if self.rank == root else None
            return lambda: d.gather(send, gather_list=views, dst=root)
        if op == "scatter":
            views = list(send.split(count)) if self.rank == root else None
            return lambda: d.scatter(recv, scatter_list=views, src=root)
        return lambda: d.all_to_all_single(recv, send)

    def buffers(self, op, count):
        """Zeroed send and receive views of storage kept across sizes (no page faults in the timing)."""
        send_elems = count * self.n if op in SEND_PER_RANK else count
        recv_elems = count * self.n if op in RECV_PER_RANK else count
        if self._send.numel() < send_elems:
            self._send = self.torch.empty(send_elems, dtype=self.dtype)
        if self._recv.numel() < recv_elems:
            self._recv = self.torch.empty(recv_elems, dtype=self.dtype)
        return self._send[:send_elems].zero_(), self._recv[:recv_elems].zero_()

    def pattern(self, r, elems, offset=0):
        """Elements offset.. of rank r's input: 3r + index % 509 (exact small integers)."""
        start = offset % 509
        if self._tile.numel() < start + elems:
            self._tile = self.torch.arange(509, dtype=self.dtype).repeat((start + elems + 508) // 509)
        return self._tile[start:start + elems] + 3 * r

    def reduced(self, elems, offset=0):
        """The reduction of pattern() over all ranks, in closed form."""
        n, base = self.n, self.pattern(0, elems, offset)
        if self.a.reduce_op == "sum":
            return base * n + 3 * n * (n - 1) // 2
        return base + 3 * (n - 1) if self.a.reduce_op == "max" else base

    def check(self, op, count):
        """Runs op once on patterned inputs; True when every rank's output is exact."""
        t, n, r, root = self.torch, self.n, self.rank, self.a.root
        send, recv = self.buffers(op, count)
        send.copy_(self.pattern(r, send.numel()))
        recv.fill_(-1)
        if op in ("allreduce", "reduce") or (op == "broadcast" and r == root):
            recv.copy_(self.pattern(r, count))
        self.make(op, count, send, recv)()
        if op == "allreduce" or (op == "reduce" and r == root):
            want = self.reduced(count)
        elif op == "reduce_scatter":
            want = self.reduced(count, r * count)
        elif op == "allgather" or (op == "gather" and r == root):
            want = t.cat([self.pattern(p, count) for p in range(n)])
        elif op == "scatter":
            want = self.pattern(root, count, r * count)
        elif op == "broadcast":
            want = self.pattern(root, count)
        elif op == "alltoall":
            want = t.cat([self.pattern(p, count, r * count) for p in range(n)])
        else:  # reduce or gather on a non-root rank: no output
            want = recv
        ok = t.tensor([1 if t.equal(recv, want) else 0], dtype=t.int64)
        self.dist.all_reduce(ok, op=self.dist.ReduceOp.MIN)
        return bool(ok.item())

    def measure(self, op, count, nbytes):
        t, a = self.torch, self.a
        send, recv = self.buffers(op, count)
        run = self.make(op, count, send, recv)
        iters, warmup = a.iters, a.warmup
        for limit, band_iters, band_warmup in a.iters_schedule or []:
            if limit is None or nbytes <= limit:
                iters, warmup = band_iters, band_warmup
                break
        for _ in range(warmup):
            run()
        if iters == 0:
            t0 = time.perf_counter()
            run()
            one = max(1e-7, time.perf_counter() - t0)
            iters = min(MAX_ITERS, max(MIN_ITERS, int(a.time_per_size / one)))
        it = t.tensor([iters], dtype=t.int64)
        self.dist.broadcast(it, src=0)
        iters = int(it.item())
        mine = [0.0] * iters
        clock = time.perf_counter
        for i in range(iters):
            t0 = clock()
            run()
            mine[i] = (clock() - t0) * 1e6
        self.dist.barrier()  # nobody leaves the timed loop before all have finished it, as in choir perf
        slowest = t.tensor(mine, dtype=t.float64)
        self.dist.all_reduce(slowest, op=self.dist.ReduceOp.MAX)
        v = sorted(slowest.tolist())
        mean = sum(v) / len(v)
        return iters, mean, percentile(v, 0.5), percentile(v, 0.99)

    def bus_factor(self, op):
        if op == "allreduce":
            return 2.0 * (self.n - 1) / self.n
        if op in ("broadcast", "reduce"):
            return 1.0
        return (self.n - 1) / self.n


def sizes(a):
    out, b = [], float(a.min_bytes)
    while b <= a.max_bytes * 1.0000001:
        out.append(int(round(b)))
        b *= a.step_factor
    return out


def run_rank(a):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    if a.backend == "choir":
        try:
            import choir.torch  # noqa: F401  (registers the "choir" backend)
        except ImportError as e:
            print(f"gloo_bench: --backend choir needs the choir torch module on PYTHONPATH: {e}", file=sys.stderr)
            return 3
    from datetime import timedelta

    dist.init_process_group(a.backend, init_method=f"tcp://127.0.0.1:{a.port}", rank=a.rank,
                            world_size=a.nprocs, timeout=timedelta(seconds=300))
    b = Bench(a, torch, dist)
    for _ in range(LAUNCH_WARMUP_CALLS):
        dist.all_reduce(torch.zeros(1, dtype=torch.int64))
    rows, unsupported, all_ok = [], {}, True
    if b.rank == 0:
        print(f"# gloo_bench: backend {a.backend}, torch {torch.__version__}, {b.n} ranks, {a.dtype} {a.reduce_op}, "
              f"{len(sizes(a))} sizes from {a.min_bytes} to {a.max_bytes} B", flush=True)
    for op in a.ops:
        if b.rank == 0:
            print(f"#\n# {op}\n# {'bytes':>12} {'count':>12} {'mean(us)':>11} {'p50(us)':>11} {'p99(us)':>11} "
                  f"{'algbw':>9} {'busbw':>9}  check", flush=True)
        for nbytes in sizes(a):
            per = b.es * (b.n if op in WHOLE_BUFFER else 1)
            count = nbytes // per
            if count == 0:
                continue
            try:
                iters, mean, p50, p99 = b.measure(op, count, count * per)
            except RuntimeError as e:
                if "support" not in str(e):
                    raise
                # Unsupported by this backend: raised locally on every rank before any traffic.
                unsupported[op] = str(e).splitlines()[0]
                if b.rank == 0:
                    print(f"  unsupported: {unsupported[op]}", flush=True)
                break
            check = ""
            if not a.no_check:
                check = "ok" if b.check(op, count) else "FAILED"
                all_ok = all_ok and check == "ok"
            algbw = count * per / (mean * 1e-6) / 1e9
            busbw = algbw * b.bus_factor(op)
            rows.append({"op": op, "bytes": count * per, "count": count, "dtype": a.dtype, "reduce_op": a.reduce_op,
                         "iters": iters, "mean_us": [mean], "p50_us": [p50], "p99_us": [p99], "algbw_gbps": [algbw],
                         "busbw_gbps": [busbw], "busbw_median": busbw, "busbw_spread": 0.0, "algorithm": a.backend,
                         "check": check})
            if b.rank == 0:
                print(f"  {count * per:>12} {count:>12} {mean:>11.2f} {p50:>11.2f} {p99:>11.2f} {algbw:>9.3f} "
                      f"{busbw:>9.3f}  {check or '-'}", flush=True)
    if b.rank == 0 and a.json:
        doc = {"tool": "gloo_bench", "library": f"torch {torch.__version__} {a.backend}", "ranks": b.n,
               "machine": {"hostname": socket.gethostname(), "online_cpus": os.cpu_count()}, "repeat": 1,
               "root": a.root, "unsupported": unsupported, "results": rows}
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
    dist.barrier()
    dist.destroy_process_group()
    return 0 if all_ok else 1


def main(argv):
    a = parse_args(argv)
    if a.rank >= 0:
        return run_rank(a)
    return launch(a, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
