"""One rank of a torch-backend test: ``python3 worker.py SCENARIO [ARGS...]``.

Started by ``ranks.launch`` with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
set (the torchrun / ``choir run`` contract). Each scenario writes a JSON
result to the file named by TORCH_TEST_RESULT_FILE: a dict of check name -> "ok" or
the failure text, or whatever the scenario reports. Expected values are
computed here independently of the collectives, from plain Python numbers.
"""
import datetime
import functools
import json
import operator
import os
import sys
import threading
import time
import traceback

import torch
import torch.distributed as dist

import choir.torch  # noqa: F401  (registers the "choir" backend)

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
TIMEOUT = datetime.timedelta(seconds=float(os.environ.get("TORCH_TEST_TIMEOUT", "30")))

torch.set_num_threads(1)  # up to 4 ranks share 2 cores


def init(backend="choir", timeout=TIMEOUT):
    dist.init_process_group(backend, init_method="env://", timeout=timeout)


def write_result(result):
    # "{rank}" in the name: one file per rank when every rank gets the same
    # environment (under `choir run`).
    with open(os.environ["TORCH_TEST_RESULT_FILE"].replace("{rank}", str(RANK)), "w") as f:
        json.dump(result, f)


# ---------------------------------------------------------------------------
# Values and expectations

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.uint8, torch.int32, torch.int64]
DTYPES = FLOATS + INTS + [torch.bool]
# Moved as raw bytes by data-movement ops (choir has no such type).
EXTRA_MOVE_DTYPES = [torch.int16, torch.complex64]
OPS = ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "PREMUL_SUM", "BAND", "BOR", "BXOR"]
PREMUL_FACTOR = 0.5


def dname(dtype):
    return str(dtype).replace("torch.", "")


def supported(dtype, op):
    if dtype is torch.bool:
        return op in ("SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR")
    if dtype.is_floating_point:
        return op in ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "PREMUL_SUM")
    return op in ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR")


def value(rank, i, op="SUM", dtype=torch.float32):
    """Rank `rank`'s element i, as a Python number small enough for every dtype."""
    if dtype is torch.bool:
        return ((rank * 5 + i) % 4) < 2
    if op == "PRODUCT":
        return 1 + (rank + i) % 2
    if op in ("BAND", "BOR", "BXOR"):
        return (rank * 37 + i * 11 + 5) % 100
    return (rank * 3 + i * 5) % 7 + 1


def values(rank, n, op="SUM", dtype=torch.float32):
    return [value(rank, i, op, dtype) for i in range(n)]


def combine(op, xs, dtype):
    """The reduction of Python numbers `xs` (one per rank)."""
    if dtype is torch.bool:
        if op in ("SUM", "MAX", "BOR"):
            return any(xs)
        if op in ("PRODUCT", "MIN", "BAND"):
            return all(xs)
        return functools.reduce(operator.xor, xs)
    if op == "SUM":
        return sum(xs)
    if op == "PRODUCT":
        return functools.reduce(operator.mul, xs)
    if op == "MIN":
        return min(xs)
    if op == "MAX":
        return max(xs)
    if op == "AVG":
        return sum(xs) / len(xs) if dtype.is_floating_point else sum(xs) // len(xs)
    if op == "PREMUL_SUM":
        return sum(x * PREMUL_FACTOR for x in xs)
    if op == "BAND":
        return functools.reduce(operator.and_, xs)
    if op == "BOR":
        return functools.reduce(operator.or_, xs)
    if op == "BXOR":
        return functools.reduce(operator.xor, xs)
    raise ValueError(op)


def reduced(n, op, dtype, world=None):
    world = WORLD if world is None else world
    return [combine(op, [value(r, i, op, dtype) for r in range(world)], dtype) for i in range(n)]


def torch_op(op):
    if op == "PREMUL_SUM":
        return dist._make_nccl_premul_sum(PREMUL_FACTOR)
    return getattr(dist.ReduceOp, op)


def tolerance(dtype):
    return {torch.float16: 1e-3, torch.bfloat16: 1e-2, torch.float32: 1e-6, torch.float64: 1e-12}.get(dtype, 0)


def assert_values(tensor, expected, what):
    """`tensor` holds `expected` (a flat list of Python numbers), within the dtype's rounding."""
    got = tensor.reshape(-1)
    if got.numel() != len(expected):
        raise AssertionError(f"{what}: {got.numel()} elements, expected {len(expected)}")
    if not expected:
        return
    if tensor.dtype is torch.bool:
        want = torch.tensor(expected, dtype=torch.bool)
        if not torch.equal(got, want):
            raise AssertionError(f"{what}: got {got.tolist()}, expected {expected}")
        return
    if tensor.dtype.is_complex:
        want = torch.tensor(expected, dtype=tensor.dtype)
        if not torch.equal(got, want):
            raise AssertionError(f"{what}: got {got.tolist()}, expected {expected}")
        return
    want = torch.tensor(expected, dtype=torch.float64)
    rtol = tolerance(tensor.dtype)
    if not torch.allclose(got.double(), want, rtol=rtol, atol=rtol):
        bad = (got.double() - want).abs().argmax().item()
        raise AssertionError(f"{what}: element {bad} is {got[bad].item()}, expected {expected[bad]} "
                             f"(rtol {rtol}); got {got.tolist()[:8]}...")


def make(vals, dtype, layout):
    """A tensor holding `vals`: contiguous, or a strided view into a larger buffer."""
    base = torch.tensor(vals, dtype=torch.float64 if dtype not in (torch.bool,) and not dtype.is_complex else dtype)
    if layout == "contig":
        return base.to(dtype).clone()
    buf = torch.zeros(len(vals), 2, dtype=dtype)
    view = buf[:, 1]
    view.copy_(base.to(dtype))
    return view


def untouched_neighbours(t):
    """For strided views made by make(): the interleaved column must still be zero."""
    if t.is_contiguous() or t.numel() == 0:
        return
    full = torch.as_strided(t, (t.numel(), 2), (2, 1), t.storage_offset() - 1)
    if full[:, 0].to(torch.float64 if not t.dtype.is_complex else t.dtype).abs().sum().item() != 0:
        raise AssertionError("the op wrote outside the strided view")


class Checks:
    """Runs named checks, recording "ok" or the failure."""

    def __init__(self):
        self.results = {}

    def run(self, name, fn, *args):
        try:
            fn(*args)
            self.results[name] = "ok"
        except Exception as e:  # noqa: BLE001 (every failure is reported, not raised)
            self.results[name] = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}"


LAYOUTS = ["contig", "strided"]
SIZES = {"n5": 5, "zero": 0}
LARGE = 100_000  # 400 KB of float32: above CHOIR_ASYNC_BYTES, runs on the progress thread


# ---------------------------------------------------------------------------
# Operation checks (every function raises on a wrong result)

def check_broadcast(dtype, layout, n):
    root = WORLD - 1
    t = make(rank_values(RANK, n, dtype), dtype, layout)
    dist.broadcast(t, src=root)
    assert_values(t, rank_values(root, n, dtype), "broadcast")
    untouched_neighbours(t)


def check_allreduce(dtype, op, layout, n, async_op=False):
    t = make(values(RANK, n, op, dtype), dtype, layout)
    if async_op:
        work = dist.all_reduce(t, op=torch_op(op), async_op=True)
        fut = work.get_future()
        work.wait()
        (out,) = fut.wait()
        assert_values(out, reduced(n, op, dtype), "future value")
    else:
        dist.all_reduce(t, op=torch_op(op))
    assert_values(t, reduced(n, op, dtype), f"allreduce {op}")
    untouched_neighbours(t)


def check_allreduce_coalesced(op, mixed):
    """Through dist (one dtype, as torch requires) or straight to the process group (mixed dtypes)."""
    if mixed:
        specs = [(torch.float32, 4, "contig"), (torch.int32, 3, "strided"), (torch.float32, 0, "contig"),
                 (torch.float64, 6, "contig")]
    else:
        specs = [(torch.float32, 4, "contig"), (torch.float32, 3, "strided"), (torch.float32, 0, "contig"),
                 (torch.float32, 6, "contig")]
    ts = [make(values(RANK, n, op, dtype), dtype, layout) for dtype, n, layout in specs]
    ts[3] = ts[3].view(2, 3)
    if mixed:
        opts = dist.AllreduceCoalescedOptions()
        opts.reduceOp = torch_op(op)
        dist.distributed_c10d._get_default_group().allreduce_coalesced(ts, opts).wait()
    else:
        dist.all_reduce_coalesced(ts, op=torch_op(op))
    for t, (dtype, n, _) in zip(ts, specs):
        assert_values(t, reduced(n, op, dtype), f"coalesced {dname(dtype)}")
        untouched_neighbours(t)


def check_reduce(dtype, op, layout, n):
    root = (1 % WORLD)
    t = make(values(RANK, n, op, dtype), dtype, layout)
    dist.reduce(t, dst=root, op=torch_op(op))
    if RANK == root:
        assert_values(t, reduced(n, op, dtype), f"reduce {op}")
    untouched_neighbours(t)


def rank_values(r, n, dtype):
    if dtype is torch.bool:
        return values(r, n, dtype=dtype)
    return [v * (r + 1) % 50 for v in values(r, n)]


def check_allgather(dtype, layout, n):
    inp = make(rank_values(RANK, n, dtype), dtype, layout)
    if layout == "chunks":
        # Back-to-back chunks of one tensor: choir writes into them directly.
        inp = make(rank_values(RANK, n, dtype), dtype, "contig")
        outs = list(torch.zeros(WORLD * n, dtype=dtype).chunk(WORLD)) if n else [
            torch.zeros(0, dtype=dtype) for _ in range(WORLD)]
    elif layout == "strided":
        outs = [make([0] * n, dtype, "strided") for _ in range(WORLD)]
    else:
        outs = [torch.zeros(n, dtype=dtype) for _ in range(WORLD)]
    dist.all_gather(outs, inp)
    for r in range(WORLD):
        assert_values(outs[r], rank_values(r, n, dtype), f"allgather block {r}")
        untouched_neighbours(outs[r])


def check_allgather_base(dtype, layout, n):
    inp = make(rank_values(RANK, 2 * n, dtype), dtype, "contig").view(2, n)
    out = make([0] * (WORLD * 2 * n), dtype, layout).view(WORLD * 2, n) if layout == "contig" else \
        make([0] * (WORLD * 2 * n), dtype, layout)
    dist.all_gather_into_tensor(out, inp)
    want = []
    for r in range(WORLD):
        want += rank_values(r, 2 * n, dtype)
    assert_values(out, want, "_allgather_base")
    untouched_neighbours(out)


def check_allgather_coalesced(mixed):
    if mixed:
        shapes = [(torch.float32, (3,)), (torch.int64, (2, 2)), (torch.bool, (1,)), (torch.float16, (0,)),
                  (torch.int16, (5,))]
    else:
        shapes = [(torch.float32, (3,)), (torch.float32, (2, 2)), (torch.float32, (0,))]
    inputs = []
    for k, (dtype, shape) in enumerate(shapes):
        n = 1
        for d in shape:
            n *= d
        inputs.append(make(rank_values(RANK + k, n, dtype), dtype, "contig").view(shape))
    outputs = [[torch.zeros(shape, dtype=dtype) for dtype, shape in shapes] for _ in range(WORLD)]
    if mixed:
        dist.distributed_c10d._get_default_group().allgather_coalesced(outputs, inputs).wait()
    else:
        dist.all_gather_coalesced(outputs, inputs)
    for r in range(WORLD):
        for k, (dtype, shape) in enumerate(shapes):
            n = outputs[r][k].numel()
            assert_values(outputs[r][k], rank_values(r + k, n, dtype), f"block {r} tensor {k}")


def check_gather(dtype, layout, n):
    root = WORLD - 1
    inp = make(rank_values(RANK, n, dtype), dtype, layout)
    outs = [make([0] * n, dtype, layout) for _ in range(WORLD)] if RANK == root else None
    dist.gather(inp, gather_list=outs, dst=root)
    if RANK == root:
        for r in range(WORLD):
            assert_values(outs[r], rank_values(r, n, dtype), f"gather block {r}")
            untouched_neighbours(outs[r])


def check_scatter(dtype, layout, n):
    root = 0
    out = make([0] * n, dtype, layout)
    ins = [make(rank_values(r + 10, n, dtype), dtype, layout) for r in range(WORLD)] if RANK == root else None
    dist.scatter(out, scatter_list=ins, src=root)
    assert_values(out, rank_values(RANK + 10, n, dtype), "scatter")
    untouched_neighbours(out)


def block_values(r, block, n, op, dtype):
    """Rank r's contribution to output block `block` of a reduce-scatter."""
    return [value(r, block * 7 + i, op, dtype) for i in range(n)]


def reduced_block(block, n, op, dtype):
    return [combine(op, [value(r, block * 7 + i, op, dtype) for r in range(WORLD)], dtype) for i in range(n)]


def check_reduce_scatter(dtype, op, layout, n):
    ins = [make(block_values(RANK, b, n, op, dtype), dtype, layout) for b in range(WORLD)]
    out = make([0] * n, dtype, layout)
    dist.reduce_scatter(out, ins, op=torch_op(op))
    assert_values(out, reduced_block(RANK, n, op, dtype), f"reduce_scatter {op}")
    untouched_neighbours(out)


def check_reduce_scatter_base(dtype, op, layout, n):
    flat = []
    for b in range(WORLD):
        flat += block_values(RANK, b, n, op, dtype)
    inp = make(flat, dtype, layout)
    out = make([0] * n, dtype, layout)
    dist.reduce_scatter_tensor(out, inp, op=torch_op(op))
    assert_values(out, reduced_block(RANK, n, op, dtype), f"_reduce_scatter_base {op}")
    untouched_neighbours(out)


def a2a_rows(src, dst):
    """Rows rank `src` sends to rank `dst` in the uneven alltoall (0 included)."""
    return (src * 2 + dst) % 3


def a2a_row(src, dst, k, width, dtype):
    if dtype is torch.bool:
        return [((src + dst + k + j) % 3) == 0 for j in range(width)]
    return [(src * 11 + dst * 5 + k * 3 + j) % 60 for j in range(width)]


def check_alltoall_single(dtype, layout, uneven):
    width = 3
    if uneven:
        in_splits = [a2a_rows(RANK, j) for j in range(WORLD)]
        out_splits = [a2a_rows(i, RANK) for i in range(WORLD)]
    else:
        in_splits = out_splits = [2] * WORLD
    rows = []
    for j in range(WORLD):
        for k in range(in_splits[j]):
            rows += a2a_row(RANK, j, k, width, dtype)
    inp = make(rows, dtype, "contig").view(-1, width)
    out = torch.zeros(sum(out_splits), width, dtype=dtype)
    if layout == "strided":
        # Non-contiguous 2-D tensors: transposes of contiguous ones.
        inp = inp.t().contiguous().t()
        out = torch.zeros(width, sum(out_splits), dtype=dtype).t()
    if uneven:
        dist.all_to_all_single(out, inp, output_split_sizes=out_splits, input_split_sizes=in_splits)
    else:
        dist.all_to_all_single(out, inp)
    want = []
    for i in range(WORLD):
        for k in range(out_splits[i]):
            want += a2a_row(i, RANK, k, width, dtype)
    assert_values(out.contiguous(), want, "alltoall_base")


def check_alltoall_list(dtype):
    width = 2
    ins = [torch.tensor(sum((a2a_row(RANK, j, k, width, dtype) for k in range(a2a_rows(RANK, j))), []),
                        dtype=torch.float64 if dtype is not torch.bool else torch.bool).to(dtype)
           for j in range(WORLD)]
    outs = [torch.zeros(a2a_rows(i, RANK) * width, dtype=dtype) for i in range(WORLD)]
    dist.all_to_all(outs, ins)
    for i in range(WORLD):
        want = sum((a2a_row(i, RANK, k, width, dtype) for k in range(a2a_rows(i, RANK))), [])
        assert_values(outs[i], want, f"alltoall from {i}")


def check_send_recv(dtype, layout, n):
    nxt, prv = (RANK + 1) % WORLD, (RANK - 1) % WORLD
    out = make(rank_values(RANK, n, dtype), dtype, layout)
    inp = make([0] * n, dtype, layout)
    if RANK % 2 == 0:
        dist.send(out, nxt, tag=3)
        dist.recv(inp, prv, tag=3)
    else:
        dist.recv(inp, prv, tag=3)
        dist.send(out, nxt, tag=3)
    assert_values(inp, rank_values(prv, n, dtype), "recv")
    untouched_neighbours(inp)


def check_isend_irecv():
    nxt, prv = (RANK + 1) % WORLD, (RANK - 1) % WORLD
    out = torch.full((4,), float(RANK))
    inp = torch.zeros(4)
    reqs = [dist.irecv(inp, prv, tag=7), dist.isend(out, nxt, tag=7)] if RANK % 2 else \
        [dist.isend(out, nxt, tag=7), dist.irecv(inp, prv, tag=7)]
    for r in reqs:
        r.wait()
    assert_values(inp, [float(prv)] * 4, "irecv")


def check_recv_anysource():
    if RANK == 0:
        seen = set()
        for _ in range(WORLD - 1):
            t = torch.zeros(2, dtype=torch.int64)
            src = dist.recv(t)
            if t.tolist() != [src, src * 10]:
                raise AssertionError(f"recv from any: got {t.tolist()} from rank {src}")
            seen.add(src)
        if seen != set(range(1, WORLD)):
            raise AssertionError(f"heard from {sorted(seen)}")
    else:
        dist.send(torch.tensor([RANK, RANK * 10]), 0)


def check_barrier():
    for _ in range(3):
        dist.barrier()


def check_future_then():
    t = torch.ones(LARGE)
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future().then(lambda f: f.value()[0].sum().item())
    total = fut.wait()
    if total != LARGE * WORLD:
        raise AssertionError(f"future callback saw {total}")
    if not work.is_completed() or not work.is_success():
        raise AssertionError("work not completed/successful after its future")
    if not torch.equal(work.result()[0], t):
        raise AssertionError("result() is not the output tensor")


def check_polled_completion():
    """Async ops polled with is_completed(), never waited for, complete."""
    ts = [torch.full((LARGE,), float(k + RANK)) for k in range(3)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    deadline = time.monotonic() + 20
    while not all(w.is_completed() for w in works):
        if time.monotonic() > deadline:
            raise AssertionError("polled async ops still not completed after 20 s")
        time.sleep(0.0005)
    for k, (w, t) in enumerate(zip(works, ts)):
        want = sum(float(k + r) for r in range(WORLD))
        if not w.is_success() or not torch.equal(t, torch.full((LARGE,), want)):
            raise AssertionError(f"polled op {k}: {t[0].item()}..{t[-1].item()} != {want} everywhere")


def check_async_order():
    """Async ops of both sizes complete, in issue order, with the right values."""
    ts = [torch.full((LARGE if k % 2 == 0 else 3,), float(k + RANK)) for k in range(6)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    for w in works:
        w.wait(timeout=datetime.timedelta(seconds=20))
    for k, t in enumerate(ts):
        want = sum(float(k + r) for r in range(WORLD))
        if t[0].item() != want or t[-1].item() != want:
            raise AssertionError(f"async op {k}: {t[0].item()} != {want}")


def check_threads():
    """Two Python threads, each driving its own process group, at once."""
    groups = [dist.new_group(backend="choir") for _ in range(2)]
    errors = []

    def drive(k):
        try:
            for i in range(200):
                t = torch.full((3,), float(i + RANK + k))
                dist.all_reduce(t, group=groups[k])
                want = sum(float(i + r + k) for r in range(WORLD))
                if t[0].item() != want:
                    raise AssertionError(f"thread {k} step {i}: {t[0].item()} != {want}")
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=drive, args=(k,)) for k in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    if errors:
        raise errors[0]
    if any(th.is_alive() for th in threads):
        raise AssertionError("a thread did not finish")


def check_fsdp_pattern(dtype):
    """What FSDP's FULL_SHARD does with a flat parameter: all-gather the shards
    into the full parameter, compute, reduce-scatter the full gradient back to
    the shards (pre-divided by the world size), and clip with a norm allreduce."""
    numel = 1000 + 7  # not a multiple of the world size: FSDP pads
    padded = (numel + WORLD - 1) // WORLD * WORLD
    shard_len = padded // WORLD
    full_ref = torch.arange(padded, dtype=torch.float64) / 100
    full_ref[numel:] = 0
    shard = full_ref[RANK * shard_len:(RANK + 1) * shard_len].to(dtype).clone()
    full = torch.empty(padded, dtype=dtype)
    dist._all_gather_base(full, shard)
    assert_values(full, full_ref.to(dtype).double().tolist(), "unsharded parameter")
    grad = (full * (RANK + 1)).div_(WORLD)
    grad_shard = torch.empty(shard_len, dtype=dtype)
    dist._reduce_scatter_base(grad_shard, grad)
    scale = sum(r + 1 for r in range(WORLD)) / WORLD
    want = (full_ref.to(dtype).double() * scale)[RANK * shard_len:(RANK + 1) * shard_len]
    assert_values(grad_shard, want.tolist(), "gradient shard")
    norm = grad_shard.double().pow(2).sum()
    dist.all_reduce(norm)
    want_norm = (full_ref.to(dtype).double() * scale).pow(2).sum().item()
    if abs(norm.item() - want_norm) > 1e-2 * want_norm:
        raise AssertionError(f"gradient norm^2 {norm.item()} != {want_norm}")


def check_subgroup():
    """A group of some ranks (new_group(ranks=...)): members reduce among themselves."""
    members = [0, WORLD - 1] if WORLD > 1 else [0]
    group = dist.new_group(ranks=members, backend="choir")  # every rank must call new_group
    if RANK in members:
        t = torch.full((3,), float(RANK + 1))
        dist.all_reduce(t, group=group)
        want = float(sum(r + 1 for r in members))
        if t.tolist() != [want] * 3:
            raise AssertionError(f"subgroup allreduce gave {t.tolist()}, expected {want}")
        dist.broadcast(t, src=members[-1], group=group)  # global rank as src
        dist.destroy_process_group(group)


def scenario_ops():
    """Every operation, dtype and reduce op, with values checked; one result per check."""
    init()
    c = Checks()
    for dtype in DTYPES + EXTRA_MOVE_DTYPES:
        for layout in LAYOUTS:
            for size, n in SIZES.items():
                tag = f"{dname(dtype)}/{layout}/{size}"
                if dtype.is_complex and layout == "strided":
                    continue
                c.run(f"broadcast/{tag}", check_broadcast, dtype, layout, n)
                c.run(f"allgather/{tag}", check_allgather, dtype, layout, n)
                c.run(f"gather/{tag}", check_gather, dtype, layout, n)
                c.run(f"scatter/{tag}", check_scatter, dtype, layout, n)
                c.run(f"_allgather_base/{tag}", check_allgather_base, dtype, layout, n)
                if WORLD > 1:
                    c.run(f"send_recv/{tag}", check_send_recv, dtype, layout, n)
        c.run(f"allgather/{dname(dtype)}/chunks", check_allgather, dtype, "chunks", 5)
        if not dtype.is_complex:
            for layout in LAYOUTS:
                for uneven in (False, True):
                    c.run(f"alltoall_base/{dname(dtype)}/{layout}/{'uneven' if uneven else 'equal'}",
                          check_alltoall_single, dtype, layout, uneven)
            c.run(f"alltoall/{dname(dtype)}/uneven", check_alltoall_list, dtype)
    for dtype in DTYPES:
        for op in OPS:
            if not supported(dtype, op):
                continue
            for layout in LAYOUTS:
                tag = f"{dname(dtype)}/{op}/{layout}"
                c.run(f"allreduce/{tag}", check_allreduce, dtype, op, layout, 5)
                c.run(f"reduce/{tag}", check_reduce, dtype, op, layout, 5)
                c.run(f"reduce_scatter/{tag}", check_reduce_scatter, dtype, op, layout, 3)
                c.run(f"_reduce_scatter_base/{tag}", check_reduce_scatter_base, dtype, op, layout, 3)
            c.run(f"allreduce/{dname(dtype)}/{op}/zero", check_allreduce, dtype, op, "contig", 0)
            c.run(f"reduce_scatter/{dname(dtype)}/{op}/zero", check_reduce_scatter, dtype, op, "contig", 0)
        c.run(f"allreduce/{dname(dtype)}/SUM/large", check_allreduce, dtype, "SUM", "contig", LARGE)
        c.run(f"allreduce/{dname(dtype)}/SUM/large_async", check_allreduce, dtype, "SUM", "strided", LARGE,
              True)
    for op in ("SUM", "MAX", "PRODUCT", "AVG"):
        c.run(f"allreduce_coalesced/{op}", check_allreduce_coalesced, op, False)
        c.run(f"allreduce_coalesced/{op}/mixed_dtypes", check_allreduce_coalesced, op, True)
    c.run("allgather_coalesced/one_dtype", check_allgather_coalesced, False)
    c.run("allgather_coalesced/mixed_dtypes", check_allgather_coalesced, True)
    c.run("broadcast/float32/large", check_broadcast, torch.float32, "contig", LARGE)
    c.run("allgather/float32/large", check_allgather, torch.float32, "chunks", LARGE)
    c.run("_reduce_scatter_base/float32/SUM/large", check_reduce_scatter_base, torch.float32, "SUM",
          "contig", LARGE)
    c.run("_allgather_base/float32/large", check_allgather_base, torch.float32, "contig", LARGE)
    if WORLD > 1:
        c.run("send_recv/float32/large", check_send_recv, torch.float32, "contig", LARGE)
        c.run("isend_irecv/float32", check_isend_irecv)
        c.run("recv_anysource/int64", check_recv_anysource)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        c.run(f"fsdp_pattern/{dname(dtype)}", check_fsdp_pattern, dtype)
    c.run("subgroup/first_and_last", check_subgroup)
    c.run("barrier/default", check_barrier)
    c.run("future/then", check_future_then)
    c.run("async/order", check_async_order)
    c.run("async/polled", check_polled_completion)
    c.run("threads/two_groups", check_threads)
    dist.barrier()
    dist.destroy_process_group()
    write_result(c.results)


# ---------------------------------------------------------------------------
# Training parity: DDP and ZeroRedundancyOptimizer against one process

class Net(torch.nn.Module):
    """Small MLP with a branch used only on some steps (for find_unused_parameters)."""

    def __init__(self, hidden=32):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, hidden)
        self.fc2 = torch.nn.Linear(hidden, hidden)
        self.side = torch.nn.Linear(hidden, hidden)
        self.head = torch.nn.Linear(hidden, 4)

    def forward(self, x, use_side=True):
        h = torch.relu(self.fc1(x))
        h = torch.relu(self.fc2(h))
        if use_side:
            h = h + torch.tanh(self.side(h))
        return self.head(h)


GLOBAL_BATCH = 24  # divisible by 1, 2, 3 and 4 ranks
STEPS = 6


def batch(step):
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(GLOBAL_BATCH, 8, generator=g, dtype=torch.float64)
    y = torch.randn(GLOBAL_BATCH, 4, generator=g, dtype=torch.float64)
    return x, y


def make_model(hidden=32):
    torch.manual_seed(0)
    return Net(hidden).double()


def make_optimizer(params, kind, zero=False):
    if zero:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        cls = torch.optim.Adam if kind == "adam" else torch.optim.SGD
        kwargs = {"lr": 0.01} if kind == "adam" else {"lr": 0.1, "momentum": 0.9}
        return ZeroRedundancyOptimizer(params, optimizer_class=cls, **kwargs)
    if kind == "adam":
        return torch.optim.Adam(params, lr=0.01)
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


def train_reference(kind, unused, hidden=32):
    """One process over the global batch: what every DDP rank must end with."""
    model = make_model(hidden)
    opt = make_optimizer(model.parameters(), kind)
    losses = []
    for step in range(STEPS):
        x, y = batch(step)
        loss = torch.nn.functional.mse_loss(model(x, use_side=not (unused and step % 2)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return model, opt, losses


def scenario_train(backend, kind, zero, unused, bucket_mb):
    # "choir+hook": DDP with choir.torch.allreduce_hook instead of its default
    # hook; "+shared": every tensor of 64 KiB or more (the least use_shared_allocator
    # takes) from choir.torch.use_shared_allocator, with hidden layers of 128 so
    # that the 128x128 float64 weights (128 KiB), their gradients and buckets are.
    backend, *flags = backend.split("+")
    hook = "hook" in flags
    hidden = 32
    if "shared" in flags:
        choir.torch.use_shared_allocator(64 * 1024)
        hidden = 128
    init(backend)
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = make_model(hidden)
    # Perturb rank > 0's initial weights: DDP must broadcast rank 0's.
    if RANK > 0:
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.5)
    ddp = DDP(model, find_unused_parameters=unused, bucket_cap_mb=bucket_mb)
    if hook:
        ddp.register_comm_hook(None, choir.torch.allreduce_hook)
    opt = make_optimizer(ddp.parameters(), kind, zero=zero)
    per_rank = GLOBAL_BATCH // WORLD
    losses = []
    for step in range(STEPS):
        x, y = batch(step)
        xs, ys = x[RANK * per_rank:(RANK + 1) * per_rank], y[RANK * per_rank:(RANK + 1) * per_rank]
        loss = torch.nn.functional.mse_loss(ddp(xs, use_side=not (unused and step % 2)), ys)
        opt.zero_grad()
        loss.backward()
        opt.step()
        # The global loss (mean over ranks) is comparable with the reference.
        lt = loss.detach().clone()
        dist.all_reduce(lt)
        losses.append(lt.item() / WORLD)
    ref_model, ref_opt, ref_losses = train_reference(kind, unused, hidden)
    diffs = {}
    for (name, p), q in zip(model.named_parameters(), ref_model.parameters()):
        diffs[name] = (p.detach() - q.detach()).abs().max().item() / max(q.abs().max().item(), 1e-30)
    result = {"param_rel_diff": diffs, "losses": losses, "ref_losses": ref_losses}
    if backend == "choir":
        big = torch.ones(1 << 18)  # 1 MiB: a same-host algorithm that reaches peers' buffers
        dist.all_reduce(big)
        assert bool((big == WORLD).all())
        result["last_algorithm"] = dist.distributed_c10d._get_default_group().last_algorithm()
    if zero:
        opt.consolidate_state_dict(to=0)
        if RANK == 0:
            sd = opt.state_dict()
            ref_sd = ref_opt.state_dict()
            worst = 0.0
            keys = 0
            for idx, state in ref_sd["state"].items():
                for key, ref_val in state.items():
                    val = sd["state"][idx][key]
                    if torch.is_tensor(ref_val) and ref_val.dim() > 0:
                        worst = max(worst, (val - ref_val).abs().max().item() / max(ref_val.abs().max().item(),
                                                                                  1e-30))
                        keys += 1
            result["state_rel_diff"] = worst
            result["state_tensors"] = keys
    dist.barrier()
    dist.destroy_process_group()
    write_result(result)


# ---------------------------------------------------------------------------
# Failure paths

def error_of(fn):
    """The text of the exception `fn` raises, with how long it took."""
    start = time.monotonic()
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return {"error": str(e), "type": type(e).__name__, "seconds": time.monotonic() - start}
    return {"error": None, "seconds": time.monotonic() - start}


def scenario_rank_dies(die_at):
    """Rank 1 exits during step `die_at` of DDP training; the others must fail fast."""
    init()
    from torch.nn.parallel import DistributedDataParallel as DDP
    ddp = DDP(make_model(), bucket_cap_mb=0.001)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)

    def train():
        for step in range(1000):
            x, y = batch(step)
            if RANK == 1 and step == die_at:
                os._exit(3)  # a crash: no clean shutdown
            loss = torch.nn.functional.mse_loss(ddp(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()

    write_result(error_of(train))
    os._exit(0)  # the group is broken; do not run destructors that talk to peers


def scenario_mismatch(kind):
    init()
    c = {}
    if kind == "op":
        t = torch.ones(4)
        c = error_of(lambda: dist.all_reduce(t) if RANK == 0 else dist.broadcast(t, 0))
    elif kind == "count":
        t = torch.ones(4 + RANK)
        c = error_of(lambda: dist.all_reduce(t))
    elif kind == "dtype":
        t = torch.ones(4, dtype=torch.float32 if RANK == 0 else torch.int32)
        c = error_of(lambda: dist.all_reduce(t))
    elif kind == "p2p_dtype":
        # Same byte length, another type: the receiver refuses it; the sender's
        # send completed, and it hears of the receiver's failure next.
        if RANK == 0:
            c = error_of(lambda: (dist.send(torch.ones(4), 1), dist.barrier()))
        else:
            c = error_of(lambda: dist.recv(torch.zeros(4, dtype=torch.int32), 0))
    write_result(c)
    os._exit(0)


def run_bad_argument_cases(cases):
    """Runs each case on a fresh group (a bad argument aborts its communicator)
    and writes every rank's error and group status, and whether the default
    group still works."""
    out = {}
    for name, fn in cases.items():
        group = dist.new_group(backend="choir")
        # Only rank 0 passes the bad argument; the others make a valid call
        # and must learn about rank 0's failure instead of waiting for it.
        if RANK == 0:
            out[name] = error_of(lambda: fn(group))
        else:
            out[name] = error_of(lambda: dist.all_reduce(torch.ones(1), group=group))
        out[name]["status"] = group.communicator_status()
    # The default group is still healthy.
    t = torch.ones(2)
    dist.all_reduce(t)
    out["default_ok"] = t.tolist() == [float(WORLD)] * 2
    write_result(out)
    os._exit(0)


def scenario_bad_args():
    """Bad arguments, each on a fresh group (a bad argument aborts its communicator)."""
    init()
    cases = {
        # torch's Python layer rejects mixed dtypes itself: call the group directly.
        "allgather_dtype": lambda g: g.allgather([[torch.zeros(3, dtype=torch.int64) for _ in range(WORLD)]],
                                                 [torch.ones(3)]).wait(),
        "allgather_shape": lambda g: dist.all_gather([torch.zeros(2) for _ in range(WORLD)], torch.ones(3),
                                                     group=g),
        "allgather_base_size": lambda g: dist.all_gather_into_tensor(torch.zeros(WORLD * 3 + 1), torch.ones(3),
                                                                     group=g),
        "reduce_scatter_base_dtype": lambda g: dist.reduce_scatter_tensor(
            torch.zeros(2, dtype=torch.float64), torch.ones(2 * WORLD), group=g),
        "bitwise_float": lambda g: dist.all_reduce(torch.ones(3), op=dist.ReduceOp.BAND, group=g),
        "avg_bool": lambda g: dist.all_reduce(torch.ones(3, dtype=torch.bool), op=dist.ReduceOp.AVG, group=g),
        "sum_int16": lambda g: dist.all_reduce(torch.ones(3, dtype=torch.int16), group=g),
        "alltoall_splits": lambda g: dist.all_to_all_single(torch.zeros(4), torch.ones(4),
                                                            input_split_sizes=[1] * (WORLD + 1), group=g),
    }
    run_bad_argument_cases(cases)


def scenario_timeout():
    """A collective one rank never joins fails after init_process_group's timeout."""
    init(timeout=datetime.timedelta(seconds=2))
    result = {}
    if RANK == 0:
        result = error_of(lambda: dist.all_reduce(torch.ones(2)))
        # Work.wait(timeout) shorter than the group's timeout, on a fresh group.
    write_result(result)
    time.sleep(4 if RANK else 0)
    os._exit(0)


def scenario_join_timeout():
    """Rank 1 never joins a choir group: rank 0's rendezvous fails with StoreTimeout."""
    init("gloo")
    result = {}
    if RANK == 0:
        result = error_of(lambda: dist.new_group(backend="choir", timeout=datetime.timedelta(seconds=2)))
    else:
        time.sleep(4)
    write_result(result)
    os._exit(0)


def scenario_wait_timeout():
    init(timeout=datetime.timedelta(seconds=10))
    result = {}
    if RANK == 0:
        work = dist.all_reduce(torch.ones(LARGE), async_op=True)
        result = error_of(lambda: work.wait(timeout=datetime.timedelta(milliseconds=300)))
    else:
        time.sleep(1.5)
        dist.all_reduce(torch.ones(LARGE))
    if RANK == 0:
        work.wait()
        result["later_ok"] = work.is_success()
    dist.barrier()
    write_result(result)
    dist.destroy_process_group()


def scenario_store():
    """The choir::Store adapter over torch's TCPStore, method by method."""
    init()
    from choir.torch import _C
    store = dist.distributed_c10d._get_default_store()
    out = {}
    if RANK == 0:
        s = _C._StoreAdapter(dist.PrefixStore("adapter", store))
        s.set("a", b"1")
        out["get"] = s.get("a").decode()
        out["get_missing"] = error_of(lambda: s.get("nope"))
        out["add"] = [s.add("n", 5), s.add("n", 2)]
        out["cas_missing_nonempty"] = s.compare_set("c", b"x", b"y").decode()
        out["cas_create"] = s.compare_set("c", b"", b"v1").decode()
        out["cas_swap"] = s.compare_set("c", b"v1", b"v2").decode()
        out["cas_fail"] = s.compare_set("c", b"zz", b"v3").decode()
        out["check"] = [s.check(["a", "c"]), s.check(["a", "missing"])]
        out["delete"] = [s.delete("a"), s.delete("a")]
        out["wait_ok"] = error_of(lambda: s.wait(["c"], 1000))
        out["wait_timeout"] = error_of(lambda: s.wait(["never"], 300))
    write_result(out)
    os._exit(0)


def scenario_destroy_pending():
    """Destroying a group while async ops with Python future callbacks are queued
    completes them (the destructor must not hold the GIL while it waits)."""
    init()
    group = dist.new_group(backend="choir")
    seen = []
    ts = [torch.ones(LARGE) for _ in range(4)]
    for t in ts:
        dist.all_reduce(t, group=group, async_op=True).get_future().then(lambda f: seen.append(f.value()[0][0].item()))
    dist.destroy_process_group(group)
    del group
    dist.barrier()
    write_result({"callbacks": seen, "values": [t[0].item() for t in ts]})
    dist.destroy_process_group()


def scenario_latency(iters):
    """p50 of dist.all_reduce on 8 bytes, for the smoke check of the fast path."""
    init()
    t = torch.zeros(2)
    for _ in range(200):
        dist.all_reduce(t)
    samples = []
    for _ in range(iters):
        start = time.perf_counter_ns()
        dist.all_reduce(t)
        samples.append(time.perf_counter_ns() - start)
    samples.sort()
    dist.barrier()
    write_result({"p50_us": samples[len(samples) // 2] / 1000})
    dist.destroy_process_group()


def scenario_shared():
    """Collectives on tensors from choir.torch.empty_shared: values and the algorithm used."""
    init()
    pg = dist.distributed_c10d._get_default_group()
    c = Checks()
    algorithms = {}

    def pattern(rank, n):
        # Whole numbers: every sum below is exact in float32.
        return (torch.arange(n, dtype=torch.float32) % 1000) + 1000 * rank

    def used(name):
        algorithms[name] = pg.last_algorithm()

    def check_shapes():
        t = choir.torch.empty_shared(2, 3, dtype=torch.bfloat16)
        assert t.shape == (2, 3) and t.dtype == torch.bfloat16 and t.is_contiguous(), (t.shape, t.dtype)
        assert bool((t == 0).all()), "not zero-filled"
        assert choir.torch.empty_shared((4,), dtype=torch.int64).shape == (4,)
        assert choir.torch.empty_shared(0).shape == (0,)

    def check_allreduce(n, shared):
        t = choir.torch.empty_shared(n) if shared else torch.empty(n)
        t.copy_(pattern(RANK, n))
        dist.all_reduce(t)
        want = sum(pattern(r, n) for r in range(WORLD))
        assert torch.equal(t, want), f"allreduce: {(t != want).nonzero()[:5].tolist()}"
        used(f"allreduce/{n}/{'shared' if shared else 'heap'}")

    def check_allgather(n):
        inp, out = choir.torch.empty_shared(n), choir.torch.empty_shared(n * WORLD)
        inp.copy_(pattern(RANK, n))
        dist.distributed_c10d._all_gather_base(out, inp)
        for r in range(WORLD):
            assert torch.equal(out[r * n:(r + 1) * n], pattern(r, n)), f"block {r}"
        used(f"_allgather_base/{n}")

    def check_broadcast(n):
        t = choir.torch.empty_shared(n)
        t.copy_(pattern(RANK, n))
        dist.broadcast(t, src=WORLD - 1)
        assert torch.equal(t, pattern(WORLD - 1, n))
        used(f"broadcast/{n}")

    def check_reduce_scatter(n):
        inp, out = choir.torch.empty_shared(n * WORLD), choir.torch.empty_shared(n)
        inp.copy_(pattern(RANK, n * WORLD))
        dist.distributed_c10d._reduce_scatter_base(out, inp)
        want = sum(pattern(r, n * WORLD) for r in range(WORLD))[RANK * n:(RANK + 1) * n]
        assert torch.equal(out, want)
        used(f"_reduce_scatter_base/{n}")

    def check_allocator_argument():
        try:
            choir.torch.use_shared_allocator(0)
        except RuntimeError as e:
            assert str(e).startswith("E100 InvalidArgument"), str(e)
        else:
            raise AssertionError("use_shared_allocator(0) was accepted")

    def check_fork_after_shared_allocator():
        # A forked child must not take the parent's cached buffers: here it
        # would get the very buffer the parent reuses next and write into it.
        choir.torch.use_shared_allocator(1 << 20)
        t = torch.empty(1 << 20)
        t.fill_(3)
        del t  # back into the allocator's cache
        pid = os.fork()
        if pid == 0:
            x = torch.empty(1 << 20)
            x.fill_(7)
            os._exit(0)
        os.waitpid(pid, 0)
        y = torch.empty(1 << 20)  # the cached buffer
        assert bool((y == 3).all()), f"the child wrote into the parent's buffer: {y[:4].tolist()}"

    c.run("shapes", check_shapes)
    c.run("allocator_argument", check_allocator_argument)
    # single-copy sizes, and shm_pipe sizes (17.6 MB of float32: past cma's range
    # for allreduce whether or not the ranks share cores)
    for n in (300_000, 4_400_000):
        c.run(f"allreduce/{n}/shared", check_allreduce, n, True)
        c.run(f"allreduce/{n}/heap", check_allreduce, n, False)
        c.run(f"_allgather_base/{n}", check_allgather, n)
        c.run(f"broadcast/{n}", check_broadcast, n)
        c.run(f"_reduce_scatter_base/{n}", check_reduce_scatter, n)
    c.run("fork_after_shared_allocator", check_fork_after_shared_allocator)  # last: installs the allocator
    dist.barrier()
    write_result({"checks": c.results, "algorithms": algorithms})
    dist.destroy_process_group()


# A split size that wraps: three of them add up to 2**64 + 5, which a signed
# 64-bit sum sees as 5.
WRAPPING_SPLIT = 6148914691236517207
# Elements of an expand()ed tensor: 4 TiB of float32 as soon as anything
# copies it, while the view itself takes 4 bytes.
HUGE = 2 ** 40


def scenario_bad_input():
    """More bad arguments (3 ranks), each on a fresh group: rank 0 passes it,
    the others make a valid call and must be released (E402), not wait."""
    init()
    x = WRAPPING_SPLIT
    cases = {
        "alltoall_wrapping_splits": lambda g: dist.all_to_all_single(torch.zeros(5), torch.ones(5), [x] * WORLD,
                                                                     [x] * WORLD, group=g),
        "alltoall_negative_split": lambda g: dist.all_to_all_single(torch.zeros(5), torch.ones(5),
                                                                    [5] + [0] * (WORLD - 1),
                                                                    [-1, 6] + [0] * (WORLD - 2), group=g),
        "alltoall_splits_past_rows": lambda g: dist.all_to_all_single(torch.zeros(5), torch.ones(5),
                                                                      [5] + [0] * (WORLD - 1),
                                                                      [3, 3] + [0] * (WORLD - 2), group=g),
        # Staging copies torch cannot allocate: E503 before anything is sent.
        "oom_broadcast_root": lambda g: dist.broadcast(torch.zeros(1).expand(HUGE), src=0, group=g),
        "oom_reduce": lambda g: dist.reduce(torch.zeros(1).expand(HUGE), dst=1, group=g),
        "oom_send": lambda g: dist.send(torch.zeros(1).expand(HUGE), 1, group=g),
        "oom_alltoall_list": lambda g: dist.all_to_all([torch.zeros(1) for _ in range(WORLD)],
                                                       [torch.zeros(1).expand(HUGE) for _ in range(WORLD)], group=g),
        # Outputs whose elements share memory: refused before communicating.
        "overlap_allreduce": lambda g: dist.all_reduce(torch.ones(1).expand(4), group=g),
        "overlap_allreduce_huge": lambda g: dist.all_reduce(torch.zeros(1).expand(HUGE), group=g),
        "overlap_broadcast_nonroot": lambda g: dist.broadcast(torch.ones(1).expand(4), src=1, group=g),
        "overlap_allgather_output": lambda g: dist.all_gather([torch.zeros(1).expand(3) for _ in range(WORLD)],
                                                              torch.ones(3), group=g),
        "overlap_recv": lambda g: dist.recv(torch.zeros(2, 1).expand(2, 3), 1, group=g),
    }
    run_bad_argument_cases(cases)


def scenario_grad_outputs():
    """Outputs that are parameters or views of them (requires_grad), as gloo
    accepts them: the result is written without autograd recording."""
    init()
    c = Checks()

    def view_of_parameter():
        p = torch.nn.Parameter(torch.ones(3, 2))
        dist.all_reduce(p.t())  # non-contiguous: staged, then copied back
        assert p.requires_grad and p.grad is None and p.is_leaf
        assert torch.equal(p.detach(), torch.full((3, 2), float(WORLD))), p.tolist()

    def coalesced_parameters():
        ps = [torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2, 2))]
        dist.all_reduce_coalesced(ps)
        for p in ps:
            assert p.requires_grad and p.is_leaf
            assert bool((p.detach() == WORLD).all()), p.tolist()

    def broadcast_into_parameter_view():
        p = torch.nn.Parameter(torch.full((2, 3), float(RANK)))
        dist.broadcast(p.t(), src=WORLD - 1)
        assert torch.equal(p.detach(), torch.full((2, 3), float(WORLD - 1))), p.tolist()

    def premul_sum_into_parameter():
        p = torch.nn.Parameter(torch.ones(4))  # contiguous, but PREMUL_SUM stages a scaled copy
        dist.all_reduce(p, op=dist._make_nccl_premul_sum(PREMUL_FACTOR))
        assert torch.equal(p.detach(), torch.full((4,), WORLD * PREMUL_FACTOR)), p.tolist()

    def gradients_still_flow():
        # Autograd still works on the parameter afterwards.
        p = torch.nn.Parameter(torch.ones(3, 2))
        dist.all_reduce(p.t())
        (p * 2).sum().backward()
        assert torch.equal(p.grad, torch.full((3, 2), 2.0)), p.grad

    for name, fn in [("view_of_parameter", view_of_parameter), ("coalesced_parameters", coalesced_parameters),
                     ("broadcast_into_parameter_view", broadcast_into_parameter_view),
                     ("premul_sum_into_parameter", premul_sum_into_parameter),
                     ("gradients_still_flow", gradients_still_flow)]:
        c.run(name, fn)
    dist.barrier()
    dist.destroy_process_group()
    write_result(c.results)


def scenario_p2p_order(pattern):
    """Exchanges gloo completes whatever the order the ranks issue them in:
    both ranks post a receive before the send the other one waits for, or
    both isend a tensor larger than the transport buffers before they irecv.
    Each must finish well within the group's 5 s timeout with exact values."""
    init()
    group = dist.new_group(backend="choir", timeout=datetime.timedelta(seconds=5))
    peer = 1 - RANK
    n = (4 << 20) if pattern == "large_isend" else 3
    x, y = torch.zeros(n), torch.arange(n, dtype=torch.float32) + 1000 * RANK

    def irecv_then_send():
        req = dist.irecv(x, peer, group=group)
        dist.send(y, peer, group=group)
        req.wait()

    def batch():
        ops = [dist.P2POp(dist.irecv, x, peer, group), dist.P2POp(dist.isend, y, peer, group)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()

    def large_isend():
        reqs = [dist.isend(y, peer, group=group), dist.irecv(x, peer, group=group)]
        for req in reqs:
            req.wait()

    result = error_of({"irecv_then_send": irecv_then_send, "batch": batch, "large_isend": large_isend}[pattern])
    result["values_ok"] = torch.equal(x, torch.arange(n, dtype=torch.float32) + 1000 * peer)
    # The group goes on with collectives.
    z = torch.full((2,), float(RANK + 1))
    dist.all_reduce(z, group=group)
    result["after_ok"] = z.tolist() == [3.0, 3.0]
    write_result(result)
    os._exit(0)


def scenario_long_timeout():
    """A group with timedelta(days=30000): the rendezvous waits (rank 1 comes
    late) instead of failing at once; collectives work."""
    init()
    if RANK == 1:
        time.sleep(1.5)
    start = time.monotonic()
    group = dist.new_group(backend="choir", timeout=datetime.timedelta(days=30000))
    joined = time.monotonic() - start
    t = torch.ones(3)
    dist.all_reduce(t, group=group)
    write_result({"joined_seconds": joined, "sum": t.tolist()})
    dist.destroy_process_group(group)
    dist.destroy_process_group()


def scenario_local_args():
    """Arguments checked without peers (one rank): each raises a numbered error."""
    init()
    from choir.torch import _C
    store = dist.HashStore()
    two_s = datetime.timedelta(seconds=2)
    cases = {
        "pg_store_none": lambda: choir.torch.ProcessGroupChoir(None, 0, 1, two_s),
        "adapter_store_none": lambda: _C._StoreAdapter(None).set("k", b"v"),
        "timeout_zero": lambda: choir.torch.ProcessGroupChoir(store, 0, 2, datetime.timedelta(seconds=0)),
        "timeout_negative": lambda: choir.torch.ProcessGroupChoir(store, 0, 2, datetime.timedelta(seconds=-5)),
        "new_group_empty": lambda: dist.new_group([], backend="choir"),
        "empty_shared_minus_1": lambda: choir.torch.empty_shared(-1),
        "empty_shared_minus_2_3": lambda: choir.torch.empty_shared(-2, 3),
        "empty_shared_minus_1_minus_1": lambda: choir.torch.empty_shared(-1, -1),
        "empty_shared_tuple_minus_4": lambda: choir.torch.empty_shared((-4,)),
        "empty_shared_float_dim": lambda: choir.torch.empty_shared(2.5),
        "empty_shared_dtype_none": lambda: choir.torch.empty_shared(3, dtype=None),
        "empty_shared_dtype_str": lambda: choir.torch.empty_shared(3, dtype="float32"),
        "empty_shared_2_45_bytes": lambda: choir.torch.empty_shared(2 ** 43, dtype=torch.float32),
        "empty_shared_past_int64": lambda: choir.torch.empty_shared(2 ** 40, 2 ** 40),
        "allocator_1": lambda: choir.torch.use_shared_allocator(1),
        "allocator_1_5": lambda: choir.torch.use_shared_allocator(1.5),
        "allocator_below_grain": lambda: choir.torch.use_shared_allocator(65535),
        "allocator_0": lambda: choir.torch.use_shared_allocator(0),
        "allocator_negative": lambda: choir.torch.use_shared_allocator(-1),
        "allocator_past_int64": lambda: choir.torch.use_shared_allocator(2 ** 70),
    }
    out = {name: error_of(fn) for name, fn in cases.items()}
    # Valid calls next to the refused ones still work.
    t = choir.torch.empty_shared(2, 0, dtype=torch.int64)
    out["empty_shared_zero_ok"] = list(t.shape) == [2, 0]
    pg = choir.torch.ProcessGroupChoir(store, 0, 1, datetime.timedelta(days=30000))
    out["pg_long_timeout_ok"] = pg.communicator_status() == "OK"
    # A group of 2 whose rank 1 never comes, with timedelta(days=30000): the
    # rendezvous must keep waiting (it failed at once: a wait past the
    # HashStore's clock range), here for the 1.5 s we watch it.
    waiting = {"error": None}

    def join():
        waiting.update(error_of(lambda: choir.torch.ProcessGroupChoir(dist.HashStore(), 0, 2,
                                                                      datetime.timedelta(days=30000))))

    th = threading.Thread(target=join, daemon=True)
    th.start()
    th.join(1.5)
    out["long_timeout_still_waiting"] = th.is_alive() and waiting["error"] is None
    out["long_timeout_wait"] = waiting
    write_result(out)
    os._exit(0)


def main():
    name, args = sys.argv[1], sys.argv[2:]
    if name == "ops":
        scenario_ops()
    elif name == "train":
        backend, kind, zero, unused, bucket = args
        scenario_train(backend, kind, zero == "1", unused == "1", float(bucket))
    elif name == "rank_dies":
        scenario_rank_dies(int(args[0]))
    elif name == "mismatch":
        scenario_mismatch(args[0])
    elif name == "bad_args":
        scenario_bad_args()
    elif name == "timeout":
        scenario_timeout()
    elif name == "join_timeout":
        scenario_join_timeout()
    elif name == "wait_timeout":
        scenario_wait_timeout()
    elif name == "store":
        scenario_store()
    elif name == "destroy_pending":
        scenario_destroy_pending()
    elif name == "latency":
        scenario_latency(int(args[0]))
    elif name == "shared":
        scenario_shared()
    elif name == "bad_input":
        scenario_bad_input()
    elif name == "grad_outputs":
        scenario_grad_outputs()
    elif name == "p2p_order":
        scenario_p2p_order(args[0])
    elif name == "long_timeout":
        scenario_long_timeout()
    elif name == "local_args":
        scenario_local_args()
    else:
        raise SystemExit(f"unknown scenario {name}")


if __name__ == "__main__":
    main()
