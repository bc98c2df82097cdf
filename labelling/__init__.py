"""Labels from the traffic the gateway serves, kept per team in Redis, for ``routegate learn``.

    recorder = Recorder(LabelStore(redis, "rg", settings), settings)   # one per replica
    recorder.observe(team, request_id, messages, ...)                  # in the request's finally
    await store.feedback(team, request_id, 0.8)                        # POST /v1/feedback
    async for label in store.read(team, since_s=7 * 86400): ...        # routegate learn --from-traffic

- ``keys``: every Redis key, under the team's hash tag (Redis Cluster safe);
- ``store``: the writes (pipelined), the feedback script, the reads;
- ``recorder``: what the request path hands over, buffered and written off it;
- ``running``: marks for feedback teams' requests that run long, so feedback
  sent as such a stream ends waits for its record.

Below ``gateway/``: it knows Redis and ``classifiers`` (the sketch of a
prompt), never the app.
"""
