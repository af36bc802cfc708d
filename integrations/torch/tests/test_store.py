"""The choir::Store adapter over torch's TCPStore (through choir.torch._C._StoreAdapter)."""
import ranks


def test_store_adapter_follows_the_choir_store_contract():
    result = ranks.launch("store", 1, timeout=60)[0].result
    assert result["get"] == "1"
    # choir's Get does not wait for a missing key (c10d's get would).
    assert result["get_missing"]["error"].startswith("E203 KeyNotFound"), result
    assert result["get_missing"]["seconds"] < 1
    assert result["add"] == [5, 7]
    # A missing key with a non-empty expected value stays missing ("").
    assert result["cas_missing_nonempty"] == ""
    assert [result["cas_create"], result["cas_swap"], result["cas_fail"]] == ["v1", "v2", "v2"]
    assert result["check"] == [True, False]
    assert result["delete"] == [True, False]
    assert result["wait_ok"]["error"] is None
    # A torch wait timeout becomes StoreTimeout.
    assert result["wait_timeout"]["error"].startswith("E200 StoreTimeout"), result
    assert 0.25 < result["wait_timeout"]["seconds"] < 3
