#!/usr/bin/python3
"""gloo allreduce bus bandwidth, one process per rank (the peer for choir perf).

    gloo_allreduce.py --rank R --world-size N --init tcp://ADDR:PORT
                      --sizes 16M,64M --iters 5 --warmup 1 [--json FILE]

Float32 sum allreduce in place on a tensor of the given size in bytes. Each
iteration is timed on every rank; the operation's time is the slowest rank's
(as in `choir perf`), the mean over iterations gives algbw = bytes / time and
busbw = algbw * 2(n-1)/n. Rank 0 prints one line per size and writes a JSON
file shaped like `choir perf --json` (results[].op/bytes/busbw_median/...).
Run it with GLOO_SOCKET_IFNAME set to the interface between the hosts.
"""
import argparse
import json
import os
import sys
import time


def parse_bytes(text):
    text = text.strip().upper()
    mult = 1
    for suffix, m in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)):
        if text.endswith(suffix):
            text, mult = text[:-1], m
            break
    return int(float(text) * mult)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world-size", type=int, required=True)
    ap.add_argument("--init", required=True, help="tcp://ADDR:PORT of rank 0")
    ap.add_argument("--sizes", default="64M")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--json", default="")
    ap.add_argument("--timeout", type=float, default=120)
    a = ap.parse_args()

    import datetime
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=a.init, rank=a.rank, world_size=a.world_size,
                            timeout=datetime.timedelta(seconds=a.timeout))
    n = a.world_size
    results = []
    for size in [parse_bytes(s) for s in a.sizes.split(",") if s]:
        count = size // 4
        t = torch.zeros(count, dtype=torch.float32)
        for _ in range(a.warmup):
            dist.all_reduce(t)
        times = torch.zeros(a.iters, dtype=torch.float64)
        for i in range(a.iters):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            times[i] = time.perf_counter() - t0
        dist.all_reduce(times, op=dist.ReduceOp.MAX)  # slowest rank per iteration
        # correctness: one allreduce of ones gives n everywhere
        t.fill_(1.0)
        dist.all_reduce(t)
        ok = bool(torch.all(t == float(n)).item())
        mean = float(times.mean())
        algbw = count * 4 / mean / 1e9
        busbw = algbw * 2 * (n - 1) / n
        row = {"op": "allreduce", "bytes": count * 4, "count": count, "iters": a.iters,
               "mean_us": [mean * 1e6], "algbw_gbps": [algbw], "busbw_gbps": [busbw],
               "busbw_median": busbw, "busbw_spread": 0.0, "algorithm": "gloo",
               "check": "ok" if ok else "FAILED"}
        results.append(row)
        if a.rank == 0:
            print(f"gloo allreduce {count * 4:>12} B  {mean * 1e6:12.1f} us  algbw {algbw:7.3f}  "
                  f"busbw {busbw:7.3f} GB/s  check={row['check']}", flush=True)
    if a.rank == 0 and a.json:
        with open(a.json, "w") as f:
            json.dump({"tool": "gloo_allreduce.py", "ranks": n, "torch": torch.__version__,
                       "results": results}, f, indent=1)
    dist.destroy_process_group()
    return 0 if all(r["check"] == "ok" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
