"""From a session log's records to figures and verdicts, pure over the records read back
(records/), so a report is reproducible from the log alone.

A bench run: per-request status, statistics per prompt size and drift (run), slow episodes
(episodes) and what each cost and who caused it (episode_causes), the one-word verdict
(verdict), decode against memory bandwidth (bandwidth), the engine's placement claim against
the machine (offload), a system on chip's heat and memory contention (soc), the spread over
`--runs K` (repeat), the context phases (context),
the prefill curve (prefill), a context-depth sweep's rows (depth), the energy figures
(energy) and, for a TUI session, the engine's own figures its engine panel logged
(engine_own). A load sweep: its levels and
knee (load), its verdict (load_verdict), over-saturation (saturation) and the SLO search's
rule (search). Two runs compared: compare/; several engines benched together, their model
matched and their metrics side by side (engine_set). Who was busy while requests were slow
(attribution), the machine's own series beside the engine's (machine), per-request series
for pictures (series), a run in another tool's definitions (peers), a watch log by caller and
model (watch), a `load --replay` log against the watch log it replayed (replay), and the saved
logs' list (catalog).

The doors: `run.analyze_run`, `load.analyze_sweep` (`analyze_load` from a path),
`watch.analyze_watch` and `compare.logs.compare_logs`.
"""
