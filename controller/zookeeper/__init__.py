"""The control plane's ZooKeeper adapters: sessions, the metadata store, reader groups'
znodes, claims, and the one leadership recipe.

- :mod:`tidemark.controller.zookeeper.session` -- the one place a ``KazooClient`` is created;
- :mod:`tidemark.controller.zookeeper.store` -- ``ZooKeeperStore``, the metadata store;
- :mod:`tidemark.controller.zookeeper.groups` -- reader groups' registry znodes;
- :mod:`tidemark.controller.zookeeper.claims` -- ephemeral claims naming their owner;
- :mod:`tidemark.controller.zookeeper.leadership` -- ``Leadership``, kazoo's election with the
  connection watched (drivers and the policy loop);
- :mod:`tidemark.controller.zookeeper.driver` -- the controller drivers' election and what the
  leader publishes.
"""
