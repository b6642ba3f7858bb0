"""tidemark — time for Kafka streams.

The packages: ``controller`` (control plane and the pure watermark core),
``pipelines`` (writers, readers, seek, timeline SDK), ``schemas`` (Avro),
``jobs`` (Spark), ``infra`` (local services). This package holds the
root error (:mod:`tidemark.errors`), the names of every environment variable
(:mod:`tidemark.environment`) — two leaf modules every package may import —
and the command line (:mod:`tidemark.cli`).
"""

__version__ = "0.1.0"
