"""The control plane: the stream model, the metadata store, bucket ownership,
and the watermark algorithm as pure functions.

The pure core (``model``, ``watermarks``, ``timewindow``, ``index`` and the
other modules that import no I/O library) never imports Kafka, Spark, Delta
or ZooKeeper. Around it: ``streams`` (stream operations), ``memory_store``,
``policy_loop`` (retention and auto-scaling, its index lookup handed in), and
the adapters, in two packages -- ``tidemark.controller.zookeeper`` (sessions, the
store, reader groups' znodes, claims, the one leadership recipe, the drivers'
election) and ``tidemark.controller.kafka`` (the one client-settings builder, admin,
retry, segment sizes).
"""
