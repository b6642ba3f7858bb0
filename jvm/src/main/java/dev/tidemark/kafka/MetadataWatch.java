package dev.tidemark.kafka;

import com.eclipsesource.json.Json;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import org.apache.kafka.common.config.ConfigException;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.WatchedEvent;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.ZooKeeper;
import org.apache.zookeeper.data.ACL;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A stream's metadata in ZooKeeper ({@code <root>/streams/<scope>/<name>} and its
 * {@code epochs/<0000000007>} children, as tidemark.controller.zookeeper.store lays them out),
 * read once and then followed: every change of the record znode is read again and handed on.
 * It also registers the producer's instance under its writer id (the stream's {@code
 * writers/<writer id>/r-<sequence>} znodes, as tidemark.controller.zookeeper.store lays them
 * out), so the controller hears a restarted producer at once. With digest credentials
 * ({@code user:password}) the session authenticates as that principal, and the writer id's
 * znode and its registrations are made under the ACL tidemark.controller.zookeeper.store gives
 * them: all rights for that principal, reading for anyone (the controller).
 */
final class MetadataWatch implements AutoCloseable {
  private static final Logger log = LoggerFactory.getLogger(MetadataWatch.class);
  /** Registrations kept per writer id (tidemark.controller.zookeeper.store.KEPT_REGISTRATIONS). */
  static final int KEPT_REGISTRATIONS = 16;

  private final ZooKeeper zk;
  private final String stream;
  private final String path;
  /** The ACL of the writer id's znode and registrations (open for an anonymous session). */
  private final List<ACL> owned;
  private final int timeoutMs;
  private volatile Consumer<StreamInfo> onChange = info -> {};
  private volatile boolean closed;

  /** {@code auth}: digest credentials, {@code user:password}; {@code null}: anonymous. */
  MetadataWatch(String connect, String root, String stream, int timeoutMs, String auth) {
    this.stream = stream;
    this.timeoutMs = timeoutMs;
    String r = root.endsWith("/") ? root.substring(0, root.length() - 1) : root;
    this.path = r + "/streams/" + stream;
    this.owned = auth == null ? ZooDefs.Ids.OPEN_ACL_UNSAFE : ownedAcl();
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
      if (auth != null) { // sent again by the client on every reconnection
        zk.addAuthInfo("digest", auth.getBytes(StandardCharsets.UTF_8));
      }
    } catch (java.io.IOException e) {
      throw new ConfigException("tidemark.zookeeper.connect", connect, e.toString());
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new ConfigException("interrupted while connecting to ZooKeeper " + connect);
    }
  }

  /** All rights for the session's principal ("auth"), reading for anyone. */
  private static List<ACL> ownedAcl() {
    List<ACL> acl = new ArrayList<>(ZooDefs.Ids.CREATOR_ALL_ACL);
    acl.addAll(ZooDefs.Ids.READ_ACL_UNSAFE);
    return acl;
  }

  /** The stream's metadata now (and a watch that calls {@code onChange} on every change). */
  StreamInfo read(Consumer<StreamInfo> onChange) {
    this.onChange = onChange;
    try {
      catchUp();
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

  /**
   * Registers {@code instance} as the current instance of writer {@code writerId}: a new
   * sequential znode under the id's registration znode (holding the token), before the first
   * mark; the oldest beyond {@link #KEPT_REGISTRATIONS} are deleted. Refused when the id's
   * registrations belong to another ZooKeeper principal.
   */
  void register(String writerId, String instance) {
    String writers = path + "/writers";
    String node = writers + "/" + nodeName(writerId);
    byte[] data =
        Json.object()
            .add("instance", instance)
            .add("registered_at", System.currentTimeMillis())
            .toString()
            .getBytes(StandardCharsets.UTF_8);
    try {
      // never the stream's own znode: a deleted stream stays deleted
      createIfMissing(writers, new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE);
      createIfMissing(node, writerId.getBytes(StandardCharsets.UTF_8), owned);
      zk.create(node + "/r-", data, owned, CreateMode.PERSISTENT_SEQUENTIAL);
      List<String> kept = zk.getChildren(node, false);
      kept.sort(null);
      for (String old : kept.subList(0, Math.max(0, kept.size() - KEPT_REGISTRATIONS))) {
        try {
          zk.delete(node + "/" + old, -1);
        } catch (KeeperException.NoNodeException e) {
          // another instance pruned it
        }
      }
    } catch (KeeperException.NoNodeException e) {
      throw new ConfigException(
          "tidemark.stream", stream, "the stream was deleted from tidemark's metadata");
    } catch (KeeperException.NoAuthException e) {
      throw new ConfigException(
          "writer id '" + writerId + "' of stream '" + stream + "' is registered by another"
              + " ZooKeeper principal: ZooKeeper refused this registration (NoAuth); register as"
              + " that principal (tidemark.zookeeper.auth or $TIDEMARK_ZK_AUTH) or use another"
              + " writer id");
    } catch (KeeperException e) {
      throw new ConfigException(
          "registering writer " + writerId + " of stream " + stream + " failed: " + e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new ConfigException("interrupted while registering writer " + writerId);
    }
  }

  private void createIfMissing(String node, byte[] data, List<ACL> acl)
      throws KeeperException, InterruptedException {
    try {
      zk.create(node, data, acl, CreateMode.PERSISTENT);
    } catch (KeeperException.NodeExistsException e) {
      // made by an earlier instance
    }
  }

  /**
   * A writer id as a znode name (tidemark.controller.naming.writer_node_name): its UTF-8 bytes,
   * each outside {@code A-Z a-z 0-9 _ - .} as {@code %XX}; "." and ".." with their dots so too.
   */
  static String nodeName(String writerId) {
    StringBuilder out = new StringBuilder();
    for (byte b : writerId.getBytes(StandardCharsets.UTF_8)) {
      int c = b & 0xFF;
      boolean kept =
          (c >= 'A' && c <= 'Z')
              || (c >= 'a' && c <= 'z')
              || (c >= '0' && c <= '9')
              || c == '_'
              || c == '-'
              || c == '.';
      out.append(kept ? String.valueOf((char) c) : String.format("%%%02X", c));
    }
    String name = out.toString();
    return name.equals(".") || name.equals("..") ? name.replace(".", "%2E") : name;
  }

  /**
   * A {@code sync}: the session's server first applies every write the leader committed before
   * now. Without it a follower behind the leader could answer with a stream another process has
   * just created or changed as it was before (still "creating", or absent).
   */
  private void catchUp() throws KeeperException, InterruptedException {
    CountDownLatch done = new CountDownLatch(1);
    int[] code = {KeeperException.Code.OK.intValue()};
    zk.sync(
        path,
        (rc, p, ctx) -> {
          code[0] = rc;
          done.countDown();
        },
        null);
    if (!done.await(timeoutMs, TimeUnit.MILLISECONDS)) {
      throw new ConfigException(
          "ZooKeeper did not answer a sync of " + path + " within " + timeoutMs + " ms");
    }
    if (code[0] != KeeperException.Code.OK.intValue()) {
      throw KeeperException.create(KeeperException.Code.get(code[0]), path);
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
