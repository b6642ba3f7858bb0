"""The control plane: the stream model, the metadata store, bucket ownership,
and the watermark algorithm as pure functions.

The pure core (``model``, ``watermarks``, ``timewindow``, ``index`` and the
other modules that import no I/O library) never imports Kafka, Spark, Delta
or ZooKeeper; the store and operation modules are adapters around it.
"""
