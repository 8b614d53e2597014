"""`llmtop load`: the sweep's runner, levels on one event loop (runner), how a level's requests
leave, closed or open loop (loops), when they leave and how far the sweep may go (config),
the SLO search's points (search), what the sweep reports as it runs (progress) and
llama-server's own `/metrics` read over each level (server_metrics).
"""
