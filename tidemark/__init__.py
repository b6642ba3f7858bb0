"""tidemark — time for Kafka streams.

The packages: ``controller`` (control plane and the pure watermark core),
``pipelines`` (writers, readers, seek, timeline SDK), ``schemas`` (Avro),
``jobs`` (Spark), ``infra`` (local services). This package holds only the
root error (:mod:`tidemark.errors`) and the command line (:mod:`tidemark.cli`).
"""

__version__ = "0.1.0"
