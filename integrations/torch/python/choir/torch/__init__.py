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
import math

import torch  # noqa: F401  (must come first: it registers the ProcessGroup base class)
import torch.distributed as dist

from . import _C
from ._C import ProcessGroupChoir, error_info

__all__ = ["BACKEND", "ProcessGroupChoir", "error_info", "error_code", "empty_shared", "allreduce_hook",
           "use_shared_allocator"]
__version__ = _C.__version__

BACKEND = "choir"


def _create_process_group(store, rank, size, timeout):
    """The creator torch.distributed calls for backend="choir"."""
    return ProcessGroupChoir(store, rank, size, timeout)


def empty_shared(*size, dtype=torch.float32):
    """A zero-filled contiguous CPU tensor of `size` in memory the host's ranks share."""
    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        size = tuple(size[0])
    count = math.prod(size)
    itemsize = torch.empty((), dtype=dtype).element_size()
    raw = _C._shared_bytes(max(count * itemsize, 1))
    return raw[: count * itemsize].view(dtype).view(size)


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
    """
    _C._use_shared_allocator(int(min_bytes))


def allreduce_hook(process_group, bucket):
    """A DDP communication hook: each bucket's average in one choir allreduce.

    DDP's default hook divides every bucket by the world size and then sums
    it (one more pass over all gradients per step); ReduceOp.AVG lets choir
    divide each chunk while it is in the cache. Register it with
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
