"""Writing to a stream: event and transactional writers, writer marks, timestamping.

    from pipelines.writing.writer import EventWriter
    with EventWriter("w1", "shop/orders", store=store, bootstrap_servers=bootstrap) as w:
        w.write(b"order 1", routing_key="customer-7", timestamp=1_700_000_000_000)
        w.note_time(1_700_000_000_000)

Modules: ``writer`` (EventWriter), ``transactions`` (TransactionalWriter),
``marks`` (writer marks on the marks topic), ``positions`` (what a writer has
acknowledged), ``replay`` (re-sending across a scale), ``timestamping`` (S2's
modes), ``config`` (WriterConfig) and ``exceptions``.
"""
