"""The TUI's pure state: what the screens show, computed without Textual (an import-linter
contract holds it): the live request and the session (live, session_state), the bench's and
the sweep's screens' state (bench_state, bench_config, load_view), NOISY marks (noise), the
frame timer's rule (frames), the settings (settings), number formats (fmt) and text
wrapping (wrap). Unit tests read it directly, with no app running."""
