"""llmtop's workload for Locust, for load beyond one machine (`pip install 'llmtop-latency[load]'`).

* `stream.py`: one /api/chat request streamed with a blocking httpx client (gevent-friendly),
  each line stamped at arrival and classified as llmtop does (no Locust import).
* `locustfile.py`: the Locust user class and the master's session-log writer:
  `locust -f llmtop/loadtest/locustfile.py --host URL --llmtop-model M ...`.
"""
