"""From records to figures, pure over a log read back: a run's statistics and drift (run), a
sweep's levels and knee (load), two runs compared (compare), who slowed a request
(attribution, machine), per-request series (series) and the catalogue of logs (catalog)."""
