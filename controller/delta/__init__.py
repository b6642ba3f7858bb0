"""The Delta adapter: every read, append, compaction, vacuum and commit of the
controller's Delta tables (delta-rs; no Spark).

- :mod:`tidemark.controller.delta.tables` -- reading and tailing the tables (file
  statistics first), the tools' appends, the process's shared open tables;
- :mod:`tidemark.controller.delta.log` -- the direct read of a local table's log;
- :mod:`tidemark.controller.delta.appends` -- creating and evolving the tables, the
  controller's idempotent appends;
- :mod:`tidemark.controller.delta.maintenance` and
  :mod:`tidemark.controller.delta.compaction` -- compaction, checkpoints, vacuum;
- :mod:`tidemark.controller.delta.commit_turns` -- one commit at a time per table;
- :mod:`tidemark.controller.delta.exceptions` -- :class:`DeltaUnavailableError`, what
  a store that does not answer raises.

Nothing outside this package imports ``deltalake``.
"""
