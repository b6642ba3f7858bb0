"""Writing to a stream: event and transactional writers, writer marks, timestamping.

    from tidemark.pipelines.writing.writer import EventWriter
    with EventWriter("w1", "shop/orders", store=store, bootstrap_servers=bootstrap) as w:
        w.write(b"order 1", routing_key="customer-7", timestamp=1_700_000_000_000)
        w.note_time(1_700_000_000_000)

Modules: ``writer`` (EventWriter), ``transactions`` (TransactionalWriter),
``producer`` (TidemarkProducer, a drop-in ``confluent_kafka.Producer``). What
the three share, so a rule is written once: ``marks`` (the writer-mark
protocol: building, checking and publishing marks), ``stream_view`` (following
the stream's metadata, what a scale seals), ``sent`` (the stream writers'
records and positions), ``positions`` (the drop-in producer's), and
``timestamping`` (S2's modes), ``config`` (WriterConfig), ``exceptions``.
"""
