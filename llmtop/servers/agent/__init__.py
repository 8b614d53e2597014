"""`llmtop agent`: serves this machine's probe samples to an llmtop on another machine."""
