"""``tidemark serve``: the time service, its Prometheus metrics and a dashboard.

    tidemark serve --port 8790           # then open http://127.0.0.1:8790/
    export TIDEMARK_TIME_SERVICE=http://127.0.0.1:8790   # CLI and readers ask it first

Modules: ``state`` (what the service keeps warm: metadata, indexes,
watermark history), ``app`` (the Starlette routes: JSON API, ``/metrics``,
the dashboard pages), ``server`` (running it on uvicorn). ``static/``
holds the vendored chart library (uPlot 1.6.32, MIT, see
``static/uPlot.LICENSE``) so the dashboard works without a network.
"""
