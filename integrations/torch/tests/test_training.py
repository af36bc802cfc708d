"""DDP and ZeroRedundancyOptimizer on choir against one process over the global batch.

The model is float64 so that the comparison can be tight. DDP averages the
ranks' gradients (each the mean over B/N samples); the reference takes the
mean over all B samples at once. The two are the same sum in a different
order, so each step differs by a few float64 rounding errors (~1e-16
relative), growing at most linearly over the handful of steps; 1e-9 relative
leaves a margin of millions while any real fault (a bucket not reduced, a
missing division, rank 0's weights not broadcast, an optimizer shard not
synchronized) changes values by 1e-3 or more.
"""
import pytest

import ranks

RTOL = 1e-9


def train(world_size, backend="choir", kind="sgd", zero=False, unused=False, bucket_mb=25):
    launched = ranks.launch("train", world_size, backend, kind, int(zero), int(unused), bucket_mb,
                            timeout=120)
    return [r.result for r in launched]


def assert_parity(results):
    for rank, result in enumerate(results):
        worst = max(result["param_rel_diff"].values())
        assert worst < RTOL, f"rank {rank}: parameters differ from the reference by {worst:.3g}: " \
                             f"{result['param_rel_diff']}"
        for step, (loss, ref) in enumerate(zip(result["losses"], result["ref_losses"])):
            assert abs(loss - ref) <= RTOL * abs(ref), f"rank {rank} step {step}: loss {loss} vs {ref}"


@pytest.mark.parametrize("world_size", [2, 3])
def test_ddp_matches_single_process(world_size):
    assert_parity(train(world_size))


@pytest.mark.parametrize("world_size", [2, 3])
def test_ddp_with_choir_allreduce_hook_matches_single_process(world_size):
    # Averaging inside the allreduce (ReduceOp.AVG) instead of DDP's division first.
    assert_parity(train(world_size, backend="choir+hook", bucket_mb=0.01))


@pytest.mark.parametrize("world_size", [2, 3])
def test_ddp_on_the_shared_allocator_matches_single_process(world_size):
    # Parameters, gradients and buckets in SharedBuffers (choir.torch.use_shared_allocator).
    results = train(world_size, backend="choir+hook+shared", kind="adam", bucket_mb=0.01)
    assert_parity(results)
    for r in results:
        assert r["last_algorithm"].endswith("+shared"), r["last_algorithm"]


def test_ddp_without_the_shared_allocator_uses_ordinary_memory():
    for r in train(2, backend="choir+hook", bucket_mb=0.01):
        assert not r["last_algorithm"].endswith("+shared"), r["last_algorithm"]


def test_ddp_many_buckets_and_unused_parameters():
    # bucket_cap_mb=0.002 (2 KB) puts nearly every parameter in its own bucket.
    assert_parity(train(2, unused=True, bucket_mb=0.002))


def test_ddp_adam_four_ranks():
    assert_parity(train(4, kind="adam", bucket_mb=0.01))


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_zero_redundancy_optimizer(kind):
    results = train(2, kind=kind, zero=True)
    assert_parity(results)
    # consolidate_state_dict(to=0) gathered every shard's state on rank 0.
    assert results[0]["state_tensors"] > 0
    assert results[0]["state_rel_diff"] < RTOL


def test_choir_and_gloo_give_the_same_losses():
    choir = train(2, backend="choir", unused=True, bucket_mb=0.002)
    gloo = train(2, backend="gloo", unused=True, bucket_mb=0.002)
    for c, g in zip(choir, gloo):
        # Two ranks: each sum has two terms, identical in any order, so the
        # runs agree to the last bit.
        assert c["losses"] == g["losses"]
        assert c["param_rel_diff"] == g["param_rel_diff"]
