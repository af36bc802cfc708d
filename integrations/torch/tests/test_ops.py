"""Every ProcessGroup operation, dtype and reduce op on 1-4 ranks.

One launch per world size runs all checks (starting ranks that import torch
costs seconds; a check costs microseconds); each test below asserts the
checks of one operation on every rank. Values are computed independently in
worker.py from plain Python numbers.
"""
import functools

import pytest

import ranks

WORLD_SIZES = [1, 2, 3, 4]
OPERATIONS = [
    "broadcast", "allreduce", "allreduce_coalesced", "reduce", "allgather", "_allgather_base",
    "allgather_coalesced", "gather", "scatter", "reduce_scatter", "_reduce_scatter_base",
    "alltoall_base", "alltoall", "barrier", "future", "async", "threads", "fsdp_pattern",
    "subgroup",
]
# Point-to-point needs a peer: these run from 2 ranks up.
P2P_OPERATIONS = ["send_recv", "isend_irecv", "recv_anysource"]


@functools.lru_cache(maxsize=None)
def results(world_size):
    launched = ranks.launch("ops", world_size, timeout=240)
    return [r.result for r in launched]


def cases():
    for ws in WORLD_SIZES:
        for op in OPERATIONS + (P2P_OPERATIONS if ws > 1 else []):
            yield pytest.param(ws, op, id=f"ws{ws}-{op}")


@pytest.mark.parametrize("world_size,operation", list(cases()))
def test_operation(world_size, operation):
    per_rank = results(world_size)
    checked = 0
    failures = []
    for rank, result in enumerate(per_rank):
        for name, outcome in result.items():
            if name.split("/")[0] != operation:
                continue
            checked += 1
            if outcome != "ok":
                failures.append(f"rank {rank} {name}: {outcome}")
    assert checked > 0, f"no checks of {operation} ran"
    assert not failures, "\n".join(failures[:20])


def test_matrix_covers_every_dtype_and_op():
    """The matrix really contains each dtype x reduce op the backend supports."""
    names = set(results(2)[0])
    for dtype in ["float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "int64", "bool"]:
        assert f"broadcast/{dtype}/strided/zero" in names
        assert f"alltoall_base/{dtype}/strided/uneven" in names
        for op in ["SUM", "PRODUCT", "MIN", "MAX"]:
            assert f"allreduce/{dtype}/{op}/strided" in names
    for dtype in ["float32", "float64", "float16", "bfloat16"]:
        assert f"allreduce/{dtype}/AVG/contig" in names
        assert f"allreduce/{dtype}/PREMUL_SUM/contig" in names
        assert f"_reduce_scatter_base/{dtype}/PREMUL_SUM/strided" in names
    for dtype in ["int8", "uint8", "int32", "int64", "bool"]:
        for op in ["BAND", "BOR", "BXOR"]:
            assert f"allreduce/{dtype}/{op}/contig" in names
    assert "broadcast/int16/contig/n5" in names and "allgather/complex64/contig/n5" in names


def test_outputs_that_require_grad():
    """Parameters and views of them as outputs (gloo accepts them): the result
    is written, the tensors stay leaves that require grad, autograd still works."""
    for rank, result in enumerate(r.result for r in ranks.launch("grad_outputs", 2, timeout=60)):
        assert len(result) == 5, result
        failed = {k: v for k, v in result.items() if v != "ok"}
        assert not failed, f"rank {rank}: {failed}"
