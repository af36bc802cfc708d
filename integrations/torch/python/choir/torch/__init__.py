"""choir as a torch.distributed backend.

Importing this package registers the backend ``"choir"``::

    import torch.distributed as dist
    import choir.torch  # noqa: F401  (registers the backend)

    dist.init_process_group("choir", init_method="env://", timeout=timedelta(seconds=60))

Every ProcessGroup operation of PyTorch 1.13 works on CPU tensors. Errors are
RuntimeErrors whose message starts with the choir error code and name
("E401 CollectiveMismatch: ..."); ``error_info("E401")`` returns the table row
(summary, likely causes, fix). Importing twice (or after another import
registered the backend) does nothing.

``empty_shared(*size, dtype=...)`` makes a CPU tensor whose memory is a
``choir::SharedBuffer``: when every rank of a host passes such tensors to a
large collective, the ranks read each other's tensors directly (see
docs/algorithms.md). ``group.last_algorithm()`` names the algorithm of the
last finished operation ("shm_pipe+shared" when it did).
"""
import operator

import torch  # noqa: F401  (must come first: it registers the ProcessGroup base class)
import torch.distributed as dist

from . import _C
from ._C import ProcessGroupChoir, error_info

__all__ = ["BACKEND", "ProcessGroupChoir", "error_info", "error_code", "empty_shared", "allreduce_hook",
           "use_shared_allocator"]
__version__ = _C.__version__

BACKEND = "choir"


_INT64_MAX = (1 << 63) - 1


def _invalid(message):
    return RuntimeError(f"E100 InvalidArgument: {message}")


def _create_process_group(store, rank, size, timeout):
    """The creator torch.distributed calls for backend="choir"."""
    if rank is None:
        # torch 1.13's new_group(ranks=[]) treats the empty list like the
        # default group's and calls every rank's creator with rank=None and
        # size 0 (ranks left out of a non-empty list get no call at all).
        raise _invalid(f"torch asked for a process group of {size} ranks without this rank (rank=None), "
                       "as new_group(ranks=[]) does; a group needs at least one rank: list its ranks, or pass "
                       "ranks=None for all of them")
    return ProcessGroupChoir(store, rank, size, timeout)


def _index(value, what):
    """`value` as a Python int (ints, numpy and 0-dim integer tensors), else E100."""
    if isinstance(value, bool):
        raise _invalid(f"{what} is {value!r}; give an integer")
    try:
        return operator.index(value)
    except TypeError:
        raise _invalid(f"{what} is {value!r} ({type(value).__name__}); give an integer") from None


def empty_shared(*size, dtype=torch.float32):
    """A zero-filled contiguous CPU tensor of `size` in memory the host's ranks share.

    Raises RuntimeError "E100 InvalidArgument" for a negative or non-integer
    dimension or a dtype that is not a torch.dtype, and "E503 OutOfMemory"
    when the host has too little memory available (the buffer is populated
    at once, so it is refused instead of inviting the OOM killer later).
    """
    if not isinstance(dtype, torch.dtype):
        raise _invalid(f"empty_shared dtype is {dtype!r}; give a torch.dtype such as torch.float32")
    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        size = tuple(size[0])
    size = tuple(_index(d, f"empty_shared dimension {i} of {size}") for i, d in enumerate(size))
    for i, d in enumerate(size):
        if d < 0:
            raise _invalid(f"empty_shared dimension {i} of {size} is {d}; sizes must be 0 or more")
    count = 1
    for d in size:
        count *= d
    itemsize = torch.empty((), dtype=dtype).element_size()
    nbytes = count * itemsize
    if nbytes > _INT64_MAX:
        raise RuntimeError(f"E503 OutOfMemory: empty_shared{size} of {dtype} needs {nbytes} bytes, more than "
                           "any host has; allocate less")
    raw = _C._shared_bytes(max(nbytes, 1))
    return raw[:nbytes].view(dtype).view(size)


def use_shared_allocator(min_bytes=1 << 20):
    """Serves every CPU tensor of at least `min_bytes` from choir SharedBuffers.

    Call it once, before the model and DDP are created: then parameters,
    gradients and DDP's buckets live in memory the ranks of a host read from
    each other directly, and DDP's allreduces take the faster path. Smaller
    tensors keep torch's allocator. Freed buffers are reused by size (up to
    2 GiB kept). Each buffer holds a file descriptor, so the call raises the
    process's soft limit of open files to its hard limit; when buffers cannot
    be had, tensors come from torch's allocator. It cannot be undone in a
    process.

    `min_bytes` must be an integer of at least 64 KiB (65536): every buffer
    takes whole 64 KiB grains of populated shared memory and a file
    descriptor, which smaller tensors would waste (E100 otherwise).
    """
    # 1.5 must not become 1; the C++ side checks the lower bound.
    min_bytes = _index(min_bytes, "use_shared_allocator min_bytes")
    if min_bytes > _INT64_MAX:
        raise _invalid(f"use_shared_allocator min_bytes is {min_bytes}; it must be at most 2**63 - 1")
    _C._use_shared_allocator(min_bytes)


def allreduce_hook(process_group, bucket):
    """A DDP communication hook: each bucket's average in one choir allreduce.

    DDP's default hook divides every bucket by the world size and then sums
    it (one more pass over all gradients per step); with ReduceOp.AVG choir
    divides as it combines (float32 and float64 inside the reduce kernel,
    other types each chunk while it is in the cache). Register it with
    ``ddp.register_comm_hook(group_or_None, choir.torch.allreduce_hook)``.
    """
    group = process_group if process_group is not None else dist.group.WORLD
    fut = dist.all_reduce(bucket.buffer(), op=dist.ReduceOp.AVG, group=group, async_op=True).get_future()
    return fut.then(lambda f: f.value()[0])


def error_code(exc):
    """The choir code ("E304") at the start of an exception's message, or None."""
    text = str(exc)
    head = text.split(" ", 1)[0]
    if len(head) > 1 and head[0] == "E" and head[1:].isdigit():
        return head
    return None


def _register():
    # register_backend asserts when the name exists (a second import, or a
    # reload under pytest): registering once per interpreter is enough.
    if hasattr(dist.Backend, BACKEND.upper()):
        return
    dist.Backend.register_backend(BACKEND, _create_process_group)


_register()
