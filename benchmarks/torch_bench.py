"""choir vs gloo through torch.distributed: latency, allreduce bus bandwidth, DDP step time.

    /usr/bin/python3 benchmarks/torch_bench.py                 # 2 ranks, every measurement
    /usr/bin/python3 benchmarks/torch_bench.py --what latency --rounds 11

Starts the ranks itself (RANK/WORLD_SIZE/MASTER_* set per subprocess) unless
RANK is already set (then it is one rank of a job started by `choir run`).
Each rank joins both backends (gloo as the default group, choir as a second
group) and the measurements alternate between them round by round (gloo
first in even rounds, choir first in odd ones), so that the machine's drift
and other load hit both alike. Reported: the median over rounds, the spread
(min..max over rounds) and the ratio choir/gloo of the medians.

- latency: p50 of `dist.all_reduce` on 8 bytes (2 float32), over --latency-iters calls.
- busbw: allreduce of 16..256 MiB float32; busbw = bytes / time * 2(n-1)/n.
- ddp: step time (forward, backward with DDP's bucket allreduces, optimizer
  step) of examples/torch/train.py's language model, in a configuration where
  communication matters: many parameters, few tokens per rank (see the --ddp-*
  flags and docs/performance.md).
"""
import argparse
import datetime
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BACKENDS = ("gloo", "choir")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--what", default="latency,busbw,ddp")
    p.add_argument("--latency-iters", type=int, default=3000)
    p.add_argument("--sizes-mib", default="16,32,64,128,256")
    p.add_argument("--busbw-iters", type=int, default=3, help="allreduces per size, backend and round")
    p.add_argument("--ddp-dim", type=int, default=768)
    p.add_argument("--ddp-layers", type=int, default=2)
    p.add_argument("--ddp-seq-len", type=int, default=1)
    p.add_argument("--ddp-batch-size", type=int, default=1)
    p.add_argument("--ddp-optimizer", default="sgd", choices=["sgd", "adamw"])
    p.add_argument("--ddp-precision", default="fp32", choices=["bf16", "fp32"],
                   help="bf16: forward/backward under bfloat16 autocast (gradients stay float32)")
    p.add_argument("--ddp-steps", type=int, default=3, help="timed steps per backend and round")
    p.add_argument("--shared-allocator", default="on", choices=["on", "off"],
                   help="on: choir.torch.use_shared_allocator() in every rank, so that parameters, gradients "
                        "and DDP's buckets (of both backends) are SharedBuffers")
    p.add_argument("--ddp-choir-hook", default="avg", choices=["avg", "default"],
                   help="choir's DDP comm hook: avg = choir.torch.allreduce_hook (ReduceOp.AVG in the "
                        "allreduce), default = DDP's own (divide, then sum); gloo always uses DDP's own")
    p.add_argument("--timeout", type=float, default=1800, help="wall-clock limit of the whole run, seconds")
    p.add_argument("--json", help="write the raw results here")
    return p.parse_args(argv)


# ---------------------------------------------------------------------------
# One rank

def import_choir():
    try:
        import choir.torch  # noqa: F401
    except ImportError:
        build = Path(os.environ.get("CHOIR_BUILD_DIR", REPO / "build" / "release"))
        sys.path.insert(0, str(build / "python"))
        import choir.torch  # noqa: F401


def load_example():
    spec = importlib.util.spec_from_file_location("choir_train_example", REPO / "examples" / "torch" / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def rank_main(args):
    import torch
    import torch.distributed as dist
    import_choir()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=300))
    rank, world = dist.get_rank(), dist.get_world_size()
    groups = {"gloo": dist.group.WORLD, "choir": dist.new_group(backend="choir")}
    what = set(args.what.split(","))
    sizes = [int(s) for s in args.sizes_mib.split(",")]
    results = {"latency_us": {b: [] for b in BACKENDS},
               "busbw_gibs": {str(s): {b: [] for b in BACKENDS} for s in sizes},
               "ddp_step_ms": {b: [] for b in BACKENDS},
               "ddp_floor_ms": []}

    def latency(group):
        t = torch.zeros(2)
        for _ in range(300):
            dist.all_reduce(t, group=group)
        samples = []
        for _ in range(args.latency_iters):
            start = time.perf_counter_ns()
            dist.all_reduce(t, group=group)
            samples.append(time.perf_counter_ns() - start)
        return median(samples) / 1e3

    buffers = {s: torch.ones(s * 2**20 // 4) for s in sizes} if "busbw" in what else {}

    def busbw(group, size):
        t = buffers[size]
        dist.all_reduce(t, group=group)  # warm-up (first-touch, connections)
        times = []
        for _ in range(args.busbw_iters):
            dist.barrier(group=group)
            start = time.perf_counter()
            dist.all_reduce(t, group=group)
            times.append(time.perf_counter() - start)
        return size / 1024 / median(times) * 2 * (world - 1) / world

    trainers = {}
    if "ddp" in what:
        if args.shared_allocator == "on":
            # From here on (the busbw buffers above stay ordinary memory):
            # parameters, gradients and DDP's buckets of every backend.
            from choir.torch import use_shared_allocator
            use_shared_allocator()
        example = load_example()
        from torch.nn.parallel import DistributedDataParallel as DDP
        data = example.batches(example.load_text(), args.ddp_batch_size, args.ddp_seq_len, rank, 0)
        def no_communication(state, bucket):
            # DDP's whole step (bucket views, hooks, optimizer) with the
            # allreduce replaced by nothing: the floor of any backend's step.
            fut = torch.futures.Future()
            fut.set_result(bucket.buffer())
            return fut

        for b in (*BACKENDS, "floor"):
            torch.manual_seed(0)
            model = example.LanguageModel(args.ddp_dim, args.ddp_layers, 4, args.ddp_seq_len)
            # gradient_as_bucket_view: no copy between gradients and buckets
            # (the same for both backends; it leaves more of the step to communication).
            ddp = DDP(model, process_group=groups["gloo" if b == "floor" else b], gradient_as_bucket_view=True)
            if b == "floor":
                ddp.register_comm_hook(None, no_communication)
            elif b == "choir" and args.ddp_choir_hook == "avg":
                from choir.torch import allreduce_hook
                ddp.register_comm_hook(groups[b], allreduce_hook)
            if args.ddp_optimizer == "adamw":
                opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
            else:
                opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
            trainers[b] = (ddp, opt)
        n_params = sum(p.numel() for p in model.parameters())
        results["ddp_config"] = {"parameters": n_params, "gradient_mib": 4 * n_params / 2**20,
                                 "tokens_per_rank": args.ddp_batch_size * args.ddp_seq_len,
                                 "dim": args.ddp_dim, "layers": args.ddp_layers,
                                 "optimizer": args.ddp_optimizer, "precision": args.ddp_precision,
                                 "choir_hook": args.ddp_choir_hook, "shared_allocator": args.shared_allocator}

        def ddp_steps(b):
            ddp, opt = trainers[b]
            times = []
            for _ in range(args.ddp_steps + 1):  # the first is a warm-up
                x, y = next(data)
                dist.barrier(group=groups["gloo" if b == "floor" else b])
                start = time.perf_counter()
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.ddp_precision == "bf16"):
                    logits = ddp(x)
                loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, 256), y.reshape(-1))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                times.append(time.perf_counter() - start)
            return median(times[1:]) * 1e3

    for r in range(args.rounds):
        order = BACKENDS if r % 2 == 0 else BACKENDS[::-1]
        if "latency" in what:
            for b in order:
                results["latency_us"][b].append(latency(groups[b]))
        if "busbw" in what:
            for s in sizes:
                for b in order:
                    results["busbw_gibs"][str(s)][b].append(busbw(groups[b], s))
        if "ddp" in what:
            for b in order:
                results["ddp_step_ms"][b].append(ddp_steps(b))
            results["ddp_floor_ms"].append(ddp_steps("floor"))
        if rank == 0:
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    dist.barrier()
    if rank == 0:
        with open(os.environ["TORCH_BENCH_OUT"], "w") as f:
            json.dump(results, f)
    dist.destroy_process_group(groups["choir"])
    # The default (gloo) group stays registered, and the process leaves
    # without the interpreter's teardown (main): see there.
    return results if rank == 0 else None


# ---------------------------------------------------------------------------
# Launcher and report

def launch(args, out):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(args.ranks):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(args.ranks), LOCAL_RANK=str(r),
                   LOCAL_WORLD_SIZE=str(args.ranks), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   TORCH_BENCH_OUT=out, OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, __file__, *sys.argv[1:]], env=env, start_new_session=True))
    deadline = time.monotonic() + args.timeout
    try:
        for p in procs:
            p.wait(max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        print(f"benchmark did not finish within {args.timeout} s; killing the ranks", file=sys.stderr)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    if any(p.returncode != 0 for p in procs):
        raise SystemExit(f"a rank failed: exit codes {[p.returncode for p in procs]}")


def summarize(values):
    return {"median": median(values), "min": min(values), "max": max(values), "n": len(values)}


def report(results):
    lines = []

    def row(name, per_backend, unit, lower_is_better, fmt="{:.1f}"):
        s = {b: summarize(v) for b, v in per_backend.items() if v}
        if len(s) < 2:
            return
        ratio = s["choir"]["median"] / s["gloo"]["median"]
        cells = [f"{fmt.format(s[b]['median'])} ({fmt.format(s[b]['min'])}..{fmt.format(s[b]['max'])})"
                 for b in BACKENDS]
        better = 1 / ratio if lower_is_better else ratio
        lines.append(f"| {name} | {unit} | {cells[1]} | {cells[0]} | {ratio:.3g} ({better:.2f}x better) |")

    lines.append("| measurement | unit | choir median (min..max) | gloo median (min..max) | choir/gloo |")
    lines.append("|---|---|---|---|---|")
    row("allreduce 8 B, p50", results["latency_us"], "us", True)
    for size, per_backend in results["busbw_gibs"].items():
        row(f"allreduce {size} MiB busbw", per_backend, "GiB/s", False, "{:.2f}")
    cfg = results.get("ddp_config")
    if cfg:
        hook = "choir.torch.allreduce_hook" if cfg.get("choir_hook", "default") == "avg" else "DDP's default hook"
        if cfg.get("shared_allocator") == "on":
            hook += ", tensors from choir.torch.use_shared_allocator()"
        row(f"DDP step ({cfg['parameters'] / 1e6:.1f} M params, {cfg['tokens_per_rank']} tokens/rank; choir with {hook})",
            results["ddp_step_ms"], "ms", True)
        floor = results.get("ddp_floor_ms")
        if floor:
            f = summarize(floor)
            gloo = median(results["ddp_step_ms"]["gloo"])
            lines.append(f"| same step, allreduce replaced by a no-op comm hook | ms | {f['median']:.1f} "
                         f"({f['min']:.1f}..{f['max']:.1f}) | | floor of choir/gloo: {f['median'] / gloo:.3g} |")
    return "\n".join(lines)


def main():
    args = parse_args()
    if "RANK" in os.environ:
        # One rank of a job started by a launcher (`choir run -n 2 ...`).
        launched_here = "TORCH_BENCH_OUT" in os.environ
        if not launched_here:
            os.environ["TORCH_BENCH_OUT"] = args.json or os.devnull
        results = rank_main(args)
        if results is not None and not launched_here:
            print(report(results))
        # Leave without the interpreter's teardown. With the default group
        # destroyed, freeing the DDP models made their reducers drop the last
        # reference to the gloo process group, and gloo's destructor joined a
        # worker thread that needed the GIL the joining thread held to free a
        # tensor: the 5th of a series of launches under load hung for good
        # (stacks taken with gdb; pytorch/pytorch#56297). So the gloo group stays registered and
        # nothing is torn down; choir's own group was destroyed in rank_main.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "results.json")
        launch(args, out)
        with open(out) as f:
            results = json.load(f)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    print(f"{args.ranks} ranks, {args.rounds} rounds, choir and gloo interleaved")
    print(report(results))


if __name__ == "__main__":
    main()
