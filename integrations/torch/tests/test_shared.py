"""Tensors from choir.torch.empty_shared: collectives read the peers' tensors directly.

Every rank checks its values against sums computed independently; the
algorithm each rank reports must carry "+shared" for shared tensors (from 2
ranks up: a rank alone has no peer to reach) and must not for heap tensors.
"""
import pytest

import ranks


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_shared_tensors(world_size):
    launched = ranks.launch("shared", world_size, timeout=180)
    for r in launched:
        failed = {k: v for k, v in r.result["checks"].items() if v != "ok"}
        assert not failed, f"rank {r.rank}: {failed}"
        assert len(r.result["checks"]) == 13, r.result["checks"]
        algorithms = r.result["algorithms"]
        for name, algo in algorithms.items():
            if name.endswith("/heap") or world_size == 1:
                assert "+shared" not in algo, (r.rank, name, algo)
            elif name.startswith("allreduce") or name.startswith("_allgather_base") or \
                    name.startswith("_reduce_scatter_base"):
                # Every rank reads (or writes) its peers' tensors in these.
                assert algo.endswith("+shared"), (r.rank, name, algo)
        if world_size > 1:
            assert algorithms["allreduce/4400000/shared"] == "shm_pipe+shared", algorithms
