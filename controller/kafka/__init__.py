"""The control plane's Kafka adapters.

- :mod:`tidemark.controller.kafka.settings` -- the one builder of every Kafka client's connection
  settings (bootstrap servers and security), for confluent-kafka and Spark;
- :mod:`tidemark.controller.kafka.admin` -- stream topics and the marks topic (admin API);
- :mod:`tidemark.controller.kafka.acls` -- the ACLs of each role on a secured cluster;
- :mod:`tidemark.controller.kafka.retry` -- retrying retriable Kafka errors;
- :mod:`tidemark.controller.kafka.segment_sizes` -- the bytes each segment holds.
"""
