"""Real services as local processes: ZooKeeper, Kafka (KRaft), Spark, PostgreSQL.

Environment variables (see :mod:`tidemark.environment`) point everything at
existing services instead.
"""
