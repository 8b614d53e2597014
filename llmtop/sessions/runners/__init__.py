"""Making measurements and logging them: the recorder, which owns one session log and runs the
one request choreography (recorder); warming the model (warmup), prompt calibration
(calibration), the bench protocol (bench) with its context phases (context) and saved
prefill curves (curves), and several engines' benches interleaved in rounds (engines); the
load sweep (load/) and a watch log replayed against an engine (replay); `llmtop watch`'s
session (watch/); energy sampled alongside a run (energy), the throttles at a request's
edges (throttles) and what a run records about where it ran (environment).

The doors: `recorder.SessionRecorder` (a TUI session's and `llmtop run`'s requests),
`bench.BenchRunner`, `engines.InterleavedBench`, `load.runner.LoadRunner` and
`watch.session.WatchSession`.
"""
