"""The metrics endpoint (issue 27; docs/metrics.md): the service's figures for Prometheus, on a port of its own
when `HIVE_METRICS_PORT` is set.

    endpoint.py     GET /metrics on the service's HTTP server: admission from the head, bounds, one read per scrape
    families.py     what is exported: the store's figures (store/metrics.py) and the live service's, as families
    exposition.py   the text format 0.0.4, written (pure)
"""
