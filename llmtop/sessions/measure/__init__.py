"""The measuring core, below every other wing: one request streamed and stamped (request), its
metrics (timeline) and the server's durations checked against llmtop's clock (telemetry),
the statistics (stats), cache-busting prompts (prompts), the options every request sends
(options), a user's own requests (dataset), the latency target (slo), what a bench, sweep or
watch was set up to do (config), a depth sweep's depths and the context that must hold them
(depths) and the metric table every view reads (metrics). Pure but for
the stream.

The doors: `request.run_request` (one request, measured) and `timeline.compute_metrics`
(its metrics from its stamps).
"""
