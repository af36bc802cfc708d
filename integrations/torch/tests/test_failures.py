"""Failure paths: every one ends in a numbered choir error, in bounded time."""
import pytest

import ranks


def error_code(text):
    head = (text or "").split(" ", 1)[0]
    return head if head[:1] == "E" and head[1:].isdigit() else None


@pytest.mark.parametrize("world_size,die_at", [(2, 2), (3, 1)])
def test_rank_exiting_mid_training_fails_the_others(world_size, die_at):
    """Rank 1 exits (os._exit) in DDP training; the survivors raise E304 at once, no hang."""
    launched = ranks.launch("rank_dies", world_size, die_at, timeout=60, allow_failure=True,
                            env={"TORCH_TEST_TIMEOUT": "20"})
    assert launched[1].returncode == 3, launched[1].output
    for r in launched:
        if r.rank == 1:
            continue
        assert r.returncode == 0 and r.result, r.output
        error = r.result["error"]
        assert error_code(error) == "E304", error
        assert "rank 1" in error and "exited" in error, error
        # Detected from the closed connection, long before the 20 s timeout.
        assert r.result["seconds"] < 10, r.result


@pytest.mark.parametrize("kind,detail", [
    ("op", "but rank 0 called allreduce"),
    ("count", "called allreduce(float32 x"),
    ("dtype", "called allreduce(int32 x 4"),
])
def test_mismatched_collectives_raise_e401(kind, detail):
    launched = ranks.launch("mismatch", 2, kind, timeout=60)
    for r in launched:
        error = r.result["error"]
        assert error_code(error) == "E401", error
        assert error.startswith("E401 CollectiveMismatch: "), error
        assert r.result["seconds"] < 10
    assert any(detail in r.result["error"] for r in launched), [r.result["error"] for r in launched]


def test_bad_arguments_raise_clear_errors_and_release_peers():
    launched = ranks.launch("bad_args", 2, timeout=90)
    expected = {
        "allgather_dtype": ("E100", "is Long[3] but must match Float[3]"),
        "allgather_shape": ("E100", "is Float[2] but must match Float[3]"),
        "allgather_base_size": ("E100", "2 times its elements"),
        "reduce_scatter_base_dtype": ("E100", "must have the dtype of output Double[2]"),
        "bitwise_float": ("E104", "ReduceOp.BAND on Float"),
        "avg_bool": ("E104", "ReduceOp.AVG on Bool"),
        "sum_int16": ("E104", "ReduceOp.SUM on Short"),
        "alltoall_splits": ("E107", "split sizes have 3 entries for 2 ranks"),
    }
    bad, peer = launched[0].result, launched[1].result
    for name, (code, text) in expected.items():
        assert error_code(bad[name]["error"]) == code, (name, bad[name])
        assert text in bad[name]["error"], (name, bad[name])
        assert bad[name]["status"].startswith("E402 Aborted"), (name, bad[name])
        # The peer was told instead of waiting for the timeout.
        assert error_code(peer[name]["error"]) == "E402", (name, peer[name])
        assert text in peer[name]["error"], (name, peer[name])
        assert peer[name]["seconds"] < 10, (name, peer[name])
    assert bad["default_ok"] and peer["default_ok"]


def test_collective_timeout_honours_init_process_group_timeout():
    """init_process_group(timeout=2 s): a collective nobody joins fails after ~2 s with E400."""
    launched = ranks.launch("timeout", 2, timeout=60)
    result = launched[0].result
    assert error_code(result["error"]) == "E400", result
    assert "within 2.0 s" in result["error"], result
    assert 1.5 < result["seconds"] < 6, result


def test_work_wait_timeout_then_completion():
    launched = ranks.launch("wait_timeout", 2, timeout=60)
    result = launched[0].result
    assert error_code(result["error"]) == "E400", result
    assert 0.25 < result["seconds"] < 3, result
    assert result["later_ok"], result


def test_rendezvous_timeout_is_store_timeout():
    """A rank that never joins: the torch store's wait timeout surfaces as E200 StoreTimeout."""
    launched = ranks.launch("join_timeout", 2, timeout=60)
    result = launched[0].result
    assert error_code(result["error"]) == "E200", result
    assert "rank(s) 1 of 2 never joined" in result["error"], result
    assert result["seconds"] < 6, result


def test_destroying_a_group_with_pending_future_callbacks():
    """No deadlock between the group's destructor and Python callbacks of its futures."""
    launched = ranks.launch("destroy_pending", 2, timeout=60)
    for r in launched:
        assert r.result["callbacks"] == [2.0] * 4, r.result
        assert r.result["values"] == [2.0] * 4, r.result
