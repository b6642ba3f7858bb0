"""Reading a stream: readers, reader groups, time windows and timestamp seek.

    from tidemark.pipelines.reading.group import ReaderGroup
    group = ReaderGroup.create("billing", "shop/orders", store=store,
                               bootstrap_servers=bootstrap, delta_root="/data/delta",
                               from_time=1_700_000_000_000)
    event = group.reader("r1").read_next(1_000)

Modules: ``group`` (ReaderGroup), ``reader`` (EventReader, and ``ReaderHost``:
what a reader needs of its group), ``offsets`` (where the group's position is
kept: Kafka or memory), ``registry`` (who owns which segment; its ZooKeeper
znodes are ``tidemark.controller.zookeeper.groups``), ``view`` (the group's position as a stream
cut),
``seek`` (a time to a cut), ``windows`` (time windows for a position),
``checkpoints`` (named,
consistent positions of a whole group), ``balance`` (readers kept together
in time: ownership by time, alignment), ``streams`` (the joint rules over
several streams), ``streams_group`` (reader groups over several streams),
``merge`` (several streams in event-time order), ``config`` (ReaderConfig)
and ``exceptions``.
"""
