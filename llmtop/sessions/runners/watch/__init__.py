"""`llmtop watch`'s session: each request passing the proxies measured and logged (session),
the proxies served, one per upstream, with the caller lookup and the probes (serving), and
the measured requests as a Prometheus textfile (prometheus). The bytes themselves pass
through servers/watch/.
"""
