"""Two runs compared (`llmtop compare`): is B faster than A? Two logs metric by metric (logs),
one metric's ratio of medians, interval and verdict (stats), the requests a comparison reads,
grouped by prompt size (groups), whether the two can be compared at all (checks), what their
engines served and how they were set up (engines), energy per output token (energy), and
sides that are sets of `bench --runs K` runs (runs).
"""
