"""Making measurements: the session recorder with the one request choreography (recorder),
prompt calibration (calibration), the bench protocol (bench), the load sweep (load,
load_config) and what a run records about where it ran (environment)."""
