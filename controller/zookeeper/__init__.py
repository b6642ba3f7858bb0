"""The control plane's ZooKeeper adapters: sessions, the metadata store, reader groups'
znodes, claims, and the one leadership recipe.

- :mod:`controller.zookeeper.session` -- the one place a ``KazooClient`` is created;
- :mod:`controller.zookeeper.store` -- ``ZooKeeperStore``, the metadata store;
- :mod:`controller.zookeeper.groups` -- reader groups' registry znodes;
- :mod:`controller.zookeeper.claims` -- ephemeral claims naming their owner;
- :mod:`controller.zookeeper.leadership` -- ``Leadership``, kazoo's election with the
  connection watched (drivers and the policy loop);
- :mod:`controller.zookeeper.driver` -- the controller drivers' election and what the
  leader publishes.
"""
