"""Train a small byte-level transformer language model with DDP on choir or gloo.

    choir run -n 2 /usr/bin/python3 examples/torch/train.py --backend choir
    choir run -n 2 /usr/bin/python3 examples/torch/train.py --backend gloo --zero

(or any launcher that sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT;
without them it runs as a single process). The text is what ships with the
system: the license texts in /usr/share/common-licenses and Python's own
documentation topics (pydoc_data), tokenized as bytes.

Every step prints the loss (mean over ranks), the step time, tokens/s over
all ranks, the communication share and the MFU:

- communication share: the time gradient allreduces were in flight during the
  step (the union of [issue, completion] of DDP's bucket allreduces, measured
  by a comm hook) divided by the step time. DDP overlaps these allreduces
  with the backward pass, so this is the share of the step during which the
  network was busy, not only the time the step waited for it.
- MFU: model FLOPs per step (6 x parameters x tokens for the matmuls, plus
  the attention scores) / step time / peak FLOP/s of all ranks. The peak is
  measured once per rank with a timed matmul in the training precision on the
  threads this rank uses, or given with --peak-flops (per rank).

--precision bf16 runs forward and backward under bfloat16 autocast (weights,
gradients, optimizer and communication stay float32); on CPUs with AVX512-BF16
or AMX, oneDNN makes that many times faster than float32 (Debian's torch uses
the reference BLAS for float32). The default, auto, takes bf16 when a timed
matmul says it is faster on every rank.

--zero shards the AdamW state with ZeroRedundancyOptimizer (and consolidates
it on rank 0 at the end, as a checkpoint would).
"""
import argparse
import datetime
import glob
import json
import math
import os
import socket
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def import_choir():
    """Imports choir.torch, falling back to the repository's build tree."""
    try:
        import choir.torch  # noqa: F401
        return
    except ImportError:
        pass
    repo = Path(__file__).resolve().parents[2]
    build = Path(os.environ.get("CHOIR_BUILD_DIR", repo / "build" / "release"))
    sys.path.insert(0, str(build / "python"))
    import choir.torch  # noqa: F401


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default="choir", choices=["choir", "gloo"])
    p.add_argument("--zero", action="store_true", help="shard optimizer state (ZeroRedundancyOptimizer)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup-steps", type=int, default=3, help="steps left out of the summary")
    p.add_argument("--dim", type=int, default=128, help="model width")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=4, help="sequences per rank per step")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"])
    p.add_argument("--bucket-cap-mb", type=float, default=25, help="DDP gradient bucket size")
    p.add_argument("--no-shared-allocator", action="store_true",
                   help="with --backend choir, keep torch's allocator (default: choir.torch.use_shared_allocator(), "
                        "so that parameters, gradients and DDP buckets are memory the ranks read directly)")
    p.add_argument("--peak-flops", type=float, default=0, help="peak FLOP/s per rank (0: measure)")
    p.add_argument("--threads", type=int, default=0, help="torch threads per rank (0: cores / local ranks)")
    p.add_argument("--timeout", type=float, default=120, help="process group timeout, seconds")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="rank 0 writes the per-step metrics and the summary here")
    p.add_argument("--quiet", action="store_true", help="print only the summary")
    return p.parse_args(argv)


# ---------------------------------------------------------------------------
# Data

def load_text():
    """Bytes of text that ship with the system (licenses, Python's docs)."""
    parts = []
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(path):
            with open(path, "rb") as f:
                parts.append(f.read())
    try:
        from pydoc_data.topics import topics
        parts.extend(v.encode("utf-8") for _, v in sorted(topics.items()))
    except ImportError:
        pass
    data = b"\n".join(parts)
    if len(data) < 100_000:  # a minimal system: fall back to generated text
        words = [b"all", b"reduce", b"scatter", b"gather", b"rank", b"ring", b"tree", b"bus", b"band", b"width"]
        g = torch.Generator().manual_seed(0)
        data += b" ".join(words[i] for i in torch.randint(len(words), (200_000,), generator=g).tolist())
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long()


def batches(data, batch_size, seq_len, rank, seed):
    """Random windows of the text; each rank draws its own."""
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    while True:
        starts = torch.randint(len(data) - seq_len - 1, (batch_size,), generator=g)
        window = torch.stack([data[s:s + seq_len + 1] for s in starts.tolist()])
        yield window[:, :-1], window[:, 1:]


# ---------------------------------------------------------------------------
# Model

class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class LanguageModel(nn.Module):
    """A GPT-style decoder over bytes (vocabulary 256)."""

    def __init__(self, dim, layers, heads, seq_len, vocab=256):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq_len, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        mask = torch.triu(torch.full((seq_len, seq_len), float("-inf")), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t))
        for block in self.blocks:
            x = block(x, self.mask[:t, :t])
        return self.head(self.ln(x))

    def flops_per_token(self, seq_len):
        """Training FLOPs per token: 6 per matmul weight, plus the attention scores and mixing."""
        matmul_params = sum(p.numel() for name, p in self.named_parameters()
                            if p.dim() == 2 and not name.startswith(("tok.", "pos.")))
        dim = self.tok.embedding_dim
        attention = 6 * 2 * len(self.blocks) * seq_len * dim  # QK^T and AV, forward and backward
        return 6 * matmul_params + attention


# ---------------------------------------------------------------------------
# Measurements

def measure_peak_flops(dtype=torch.float32, size=512, trials=5, seconds=0.2):
    """FLOP/s of a matmul on this rank's threads: the best of a few short
    trials, so that a moment of contention does not lower the peak."""
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    a @ b
    best = 0.0
    for _ in range(trials):
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            a @ b
            n += 1
        best = max(best, 2 * size ** 3 * n / (time.perf_counter() - start))
    return best


class CommTimer:
    """A DDP comm hook that allreduces each bucket (averaging, like DDP's default
    hook) and records when each allreduce was in flight. With `fused_average`
    (the choir backend) the allreduce averages itself (ReduceOp.AVG, as
    choir.torch.allreduce_hook does); otherwise the bucket is divided first,
    as DDP's default hook does (gloo has no AVG)."""

    def __init__(self, group, world, fused_average=False):
        self.group = group
        self.world = world
        self.fused_average = fused_average
        self.intervals = []

    def hook(self, state, bucket):
        start = time.perf_counter()
        buf = bucket.buffer()
        if self.fused_average:
            fut = dist.all_reduce(buf, op=dist.ReduceOp.AVG, group=self.group, async_op=True).get_future()
        else:
            buf.div_(self.world)
            fut = dist.all_reduce(buf, group=self.group, async_op=True).get_future()

        def done(f):
            self.intervals.append((start, time.perf_counter()))
            return f.value()[0]

        return fut.then(done)

    def busy_seconds(self):
        """Length of the union of the recorded intervals; resets them."""
        total, end = 0.0, -math.inf
        for s, e in sorted(self.intervals):
            if e <= end:
                continue
            total += e - max(s, end)
            end = e
        self.intervals = []
        return total


# ---------------------------------------------------------------------------

def choose_bf16(precision):
    """Whether to compute under bfloat16 autocast; "auto" asks every rank's
    matmul speed and takes bf16 only when all of them find it faster."""
    if precision != "auto":
        return precision == "bf16"
    faster = measure_peak_flops(torch.bfloat16, trials=2) > 1.5 * measure_peak_flops(torch.float32, trials=2)
    vote = torch.tensor([1 if faster else 0])
    dist.all_reduce(vote, op=dist.ReduceOp.MIN)
    return bool(vote.item())


def setup(args):
    if "RANK" not in os.environ:  # single process
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(port))
    if args.backend == "choir":
        import_choir()
        if not args.no_shared_allocator:
            from choir.torch import use_shared_allocator
            use_shared_allocator()
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"]))
    threads = args.threads or max(1, (os.cpu_count() or 1) // local_world)
    torch.set_num_threads(threads)
    dist.init_process_group(args.backend, init_method="env://",
                            timeout=datetime.timedelta(seconds=args.timeout))
    return dist.get_rank(), dist.get_world_size(), threads


def main(argv=None):
    args = parse_args(argv)
    rank, world, threads = setup(args)
    torch.manual_seed(args.seed)
    model = LanguageModel(args.dim, args.layers, args.heads, args.seq_len)
    n_params = sum(p.numel() for p in model.parameters())
    ddp = DDP(model, bucket_cap_mb=args.bucket_cap_mb)
    timer = CommTimer(dist.group.WORLD, world, fused_average=args.backend == "choir")
    ddp.register_comm_hook(None, timer.hook)
    if args.zero:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.AdamW, lr=args.lr)
    else:
        opt = torch.optim.AdamW(ddp.parameters(), lr=args.lr)

    bf16 = choose_bf16(args.precision)
    peak = args.peak_flops or measure_peak_flops(torch.bfloat16 if bf16 else torch.float32)
    flops_step = model.flops_per_token(args.seq_len) * args.batch_size * args.seq_len * world
    tokens_step = args.batch_size * args.seq_len * world
    data = batches(load_text(), args.batch_size, args.seq_len, rank, args.seed)
    if rank == 0 and not args.quiet:
        print(f"backend {args.backend}{' + ZeRO' if args.zero else ''}, {'bf16 autocast' if bf16 else 'fp32'}, "
              f"{world} ranks x {threads} threads, "
              f"{n_params / 1e6:.2f} M parameters ({4 * n_params / 2**20:.1f} MiB of gradients), "
              f"{tokens_step} tokens/step, peak {peak / 1e9:.1f} GFLOP/s per rank", flush=True)

    steps = []
    dist.barrier()
    for step in range(args.steps):
        x, y = next(data)
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = ddp(x)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        elapsed = time.perf_counter() - start
        comm = timer.busy_seconds()
        # Outside the timed region: the mean loss over ranks (8 bytes).
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss)
        record = {"step": step, "loss": mean_loss.item() / world, "step_ms": elapsed * 1e3,
                  "tokens_per_s": tokens_step / elapsed, "comm_share": comm / elapsed,
                  "mfu": flops_step / elapsed / (peak * world)}
        steps.append(record)
        if rank == 0 and not args.quiet:
            print(f"step {step:4d} | loss {record['loss']:.4f} | step {record['step_ms']:8.1f} ms | "
                  f"{record['tokens_per_s']:9.0f} tok/s | comm {100 * record['comm_share']:5.1f}% | "
                  f"MFU {100 * record['mfu']:5.1f}%", flush=True)
    if args.zero:
        opt.consolidate_state_dict(to=0)  # what saving a checkpoint does
        if rank == 0:
            assert len(opt.state_dict()["state"]) == len(list(model.parameters()))

    # Fewer steps than the warm-up: summarize all of them (sorted too).
    measured = sorted(steps[args.warmup_steps:] or steps, key=lambda r: r["step_ms"])
    median = measured[len(measured) // 2]
    summary = {"backend": args.backend, "zero": args.zero, "precision": "bf16" if bf16 else "fp32",
               "world_size": world, "threads": threads,
               "parameters": n_params, "tokens_per_step": tokens_step, "peak_flops_per_rank": peak,
               "median_step_ms": median["step_ms"], "min_step_ms": measured[0]["step_ms"],
               "max_step_ms": measured[-1]["step_ms"],
               "median_comm_share": sorted(r["comm_share"] for r in measured)[len(measured) // 2],
               "median_mfu": sorted(r["mfu"] for r in measured)[len(measured) // 2],
               "final_loss": steps[-1]["loss"]}
    if rank == 0:
        print(f"summary: {args.backend}{' + ZeRO' if args.zero else ''} median step "
              f"{summary['median_step_ms']:.1f} ms (min {summary['min_step_ms']:.1f}, max "
              f"{summary['max_step_ms']:.1f}), comm {100 * summary['median_comm_share']:.1f}%, "
              f"MFU {100 * summary['median_mfu']:.1f}%, final loss {summary['final_loss']:.4f}", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"summary": summary, "steps": steps, "args": vars(args)}, f, indent=1)
    dist.barrier()
    if args.backend == "gloo":
        # torch 1.13 can hang for good here with gloo: when `ddp` goes away
        # after the group was destroyed, its reducer drops the last reference
        # to the gloo process group, whose destructor joins a worker thread
        # that needs the GIL the joining thread holds to free a tensor
        # (pytorch/pytorch#56297; seen in a series of launches of
        # benchmarks/torch_bench.py under load). Leave without tearing down.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
