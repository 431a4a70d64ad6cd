def test_endpoint_users_release_their_http_pool_on_close():
    from rewardpipe.policies import OpenAIPolicy
    from rewardpipe.simulator import OpenAISimulator

    with OpenAIPolicy("http://127.0.0.1:9", "m") as policy, OpenAISimulator("http://127.0.0.1:9", "m") as simulator:
        assert not policy.client._http.is_closed and not simulator.client._http.is_closed
    assert policy.client._http.is_closed and simulator.client._http.is_closed
