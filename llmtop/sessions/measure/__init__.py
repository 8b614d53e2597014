"""The measuring core: one request streamed and stamped (request), its metrics (timeline), the
statistics (stats), cache-busting prompts (prompts) and the options every request sends with
the bench's and the sweep's shared workload (options). Pure but for the stream."""
