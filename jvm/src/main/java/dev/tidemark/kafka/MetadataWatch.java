package dev.tidemark.kafka;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import org.apache.kafka.common.config.ConfigException;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.WatchedEvent;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooKeeper;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A stream's metadata in ZooKeeper ({@code <root>/streams/<scope>/<name>} and its
 * {@code epochs/<0000000007>} children, as tidemark.controller.zookeeper.store lays them out),
 * read once and then followed: every change of the record znode is read again and handed on.
 */
final class MetadataWatch implements AutoCloseable {
  private static final Logger log = LoggerFactory.getLogger(MetadataWatch.class);

  private final ZooKeeper zk;
  private final String stream;
  private final String path;
  private volatile Consumer<StreamInfo> onChange = info -> {};
  private volatile boolean closed;

  MetadataWatch(String connect, String root, String stream, int timeoutMs) {
    this.stream = stream;
    String r = root.endsWith("/") ? root.substring(0, root.length() - 1) : root;
    this.path = r + "/streams/" + stream;
    CountDownLatch connected = new CountDownLatch(1);
    try {
      zk =
          new ZooKeeper(
              connect,
              timeoutMs,
              event -> {
                if (event.getState() == Watcher.Event.KeeperState.SyncConnected) {
                  connected.countDown();
                }
              });
      if (!connected.await(timeoutMs, TimeUnit.MILLISECONDS)) {
        zk.close();
        throw new ConfigException(
            "tidemark.zookeeper.connect",
            connect,
            "no ZooKeeper answered within " + timeoutMs + " ms");
      }
    } catch (java.io.IOException e) {
      throw new ConfigException("tidemark.zookeeper.connect", connect, e.toString());
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new ConfigException("interrupted while connecting to ZooKeeper " + connect);
    }
  }

  /** The stream's metadata now (and a watch that calls {@code onChange} on every change). */
  StreamInfo read(Consumer<StreamInfo> onChange) {
    this.onChange = onChange;
    try {
      return readWatching();
    } catch (KeeperException.NoNodeException e) {
      throw new ConfigException(
          "tidemark.stream",
          stream,
          "no such stream in tidemark's metadata (no znode "
              + path
              + "): create or adopt it first (tidemark stream adopt "
              + stream
              + " --topic <topic>), and check tidemark.zookeeper.connect and"
              + " tidemark.zookeeper.root");
    } catch (KeeperException e) {
      throw new ConfigException("reading stream " + stream + " from ZooKeeper failed: " + e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new ConfigException("interrupted while reading stream " + stream);
    }
  }

  private StreamInfo readWatching() throws KeeperException, InterruptedException {
    byte[] record = zk.getData(path, this::changed, null);
    int epoch = StreamInfo.currentEpochOf(stream, record);
    byte[] epochData = zk.getData(String.format("%s/epochs/%010d", path, epoch), false, null);
    return StreamInfo.parse(stream, record, epochData);
  }

  private void changed(WatchedEvent event) {
    if (closed || event.getType() == Watcher.Event.EventType.None) {
      return;
    }
    try {
      onChange.accept(readWatching());
    } catch (KeeperException.NoNodeException e) {
      log.warn("tidemark: stream {} was deleted from tidemark's metadata", stream);
    } catch (KeeperException | RuntimeException e) {
      log.warn("tidemark: reading stream {} again after a change failed", stream, e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  @Override
  public void close() {
    closed = true;
    try {
      zk.close();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }
}
