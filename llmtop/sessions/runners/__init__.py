"""Making measurements: the session recorder with the one request choreography (recorder),
prompt calibration (calibration), the bench protocol (bench), the load sweep (load,
load_config, load_env) and the machine's description (environment)."""
