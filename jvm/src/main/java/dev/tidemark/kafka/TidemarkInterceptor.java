package dev.tidemark.kafka;

import java.security.SecureRandom;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerInterceptor;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.common.utils.Utils;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A Kafka {@link ProducerInterceptor} that makes any JVM producer a tidemark writer, by
 * configuration alone:
 *
 * <pre>
 * interceptor.classes=dev.tidemark.kafka.TidemarkInterceptor
 * tidemark.stream=shop/orders
 * tidemark.zookeeper.connect=zk1:2181
 * tidemark.zookeeper.auth=orders-app:secret    # optional; else $TIDEMARK_ZK_AUTH
 * </pre>
 *
 * <p>Records to the stream's topic are stamped by the stream's timestamping rules and given
 * their partition explicitly (where Kafka's default partitioner would put them: murmur2 of the
 * serialized key, sticky for keyless records), so each one's segment is known; the broker's
 * acknowledgements make the positions. Every {@code tidemark.note.interval.ms} the interceptor
 * notes time automatically (the drop-in producer's rule: the clock, never below the last noted
 * time nor the highest timestamp sent) and publishes a writer mark once every record sent
 * before the note is acknowledged, from its own producer (the application's connection and
 * security settings); {@code close()} sends the shutdown mark. Streams tidemark routes (which
 * scale) are refused: write them with tidemark's writers. With ZooKeeper digest credentials
 * the writer id's registrations are that principal's alone (see {@link MetadataWatch}).
 */
public final class TidemarkInterceptor implements ProducerInterceptor<Object, Object> {
  private static final Logger log = LoggerFactory.getLogger(TidemarkInterceptor.class);

  static final String PREFIX = "tidemark.";
  static final String STREAM = "tidemark.stream";
  static final String WRITER_ID = "tidemark.writer.id";
  static final String ZK_CONNECT = "tidemark.zookeeper.connect";
  static final String ZK_ROOT = "tidemark.zookeeper.root";
  static final String ZK_AUTH = "tidemark.zookeeper.auth";
  /** The environment variable tidemark's Python side reads for the same credentials. */
  static final String ZK_AUTH_ENV = "TIDEMARK_ZK_AUTH";
  static final String MARKS_TOPIC = "tidemark.marks.topic";
  static final String BUCKETS = "tidemark.bucket.count";
  static final String INTERVAL = "tidemark.note.interval.ms";
  static final String CREATE_MARKS_TOPIC = "tidemark.create.marks.topic";
  static final String CLOSE_TIMEOUT = "tidemark.close.timeout.ms";
  static final Set<String> KEYS =
      Set.of(
          STREAM,
          WRITER_ID,
          ZK_CONNECT,
          ZK_ROOT,
          ZK_AUTH,
          MARKS_TOPIC,
          BUCKETS,
          INTERVAL,
          CREATE_MARKS_TOPIC,
          CLOSE_TIMEOUT);
  /** Keyless records stay on one partition for this many records, as Kafka's sticky one. */
  private static final int STICKY_RECORDS = 512;

  private final Object lock = new Object();
  private String stream;
  private String writerId;
  private String instance;
  private String marksTopic;
  private int bucket;
  private long closeTimeoutMs;
  private volatile StreamInfo info;
  private Stamper stamper;
  private Positions positions;
  private Serializer<Object> keySerializer;
  private boolean ignoreKeys;
  private MetadataWatch watch;
  private KafkaProducer<byte[], byte[]> marks;
  private ScheduledExecutorService noter;
  private long lastNoted = Long.MIN_VALUE;
  private int sticky = -1;
  private int stickyLeft;
  private boolean closed;

  @Override
  public void configure(Map<String, ?> configs) {
    for (String key : configs.keySet()) {
      if (key.startsWith(PREFIX) && !KEYS.contains(key)) {
        throw new ConfigException(
            key, configs.get(key), "not a tidemark setting; valid: " + String.join(", ", KEYS));
      }
    }
    stream = required(configs, STREAM);
    if (!stream.matches("[^/\\s]+/[^/\\s]+")) {
      throw new ConfigException(STREAM, stream, "a stream is named scope/name");
    }
    writerId = text(configs, WRITER_ID, text(configs, ProducerConfig.CLIENT_ID_CONFIG, ""));
    if (writerId.isBlank()) {
      throw new ConfigException(
          WRITER_ID, writerId, "set tidemark.writer.id (or client.id) to name this writer");
    }
    marksTopic = text(configs, MARKS_TOPIC, "tidemark-marks");
    int buckets = number(configs, BUCKETS, 8, 1);
    long intervalMs = number(configs, INTERVAL, 1_000, 1);
    closeTimeoutMs = number(configs, CLOSE_TIMEOUT, 30_000, 1);
    boolean createMarksTopic = bool(configs, CREATE_MARKS_TOPIC, true);
    bucket = MarkEncoder.bucketOf(stream, buckets);
    Object partitioner = configs.get(ProducerConfig.PARTITIONER_CLASS_CONFIG);
    if (partitioner != null && !String.valueOf(partitioner).isBlank()) {
      throw new ConfigException(
          ProducerConfig.PARTITIONER_CLASS_CONFIG,
          partitioner,
          "the tidemark interceptor places the stream's records itself (where Kafka's default"
              + " partitioner would); leave partitioner.class unset");
    }
    Object transactional = configs.get(ProducerConfig.TRANSACTIONAL_ID_CONFIG);
    if (transactional != null && !String.valueOf(transactional).isBlank()) {
      throw new ConfigException(
          ProducerConfig.TRANSACTIONAL_ID_CONFIG,
          transactional,
          "the tidemark interceptor wraps no transactions (an aborted record would count in"
              + " its positions); write transactionally with tidemark's TransactionalWriter");
    }
    ignoreKeys = bool(configs, ProducerConfig.PARTITIONER_IGNORE_KEYS_CONFIG, false);
    String auth = zookeeperAuth(configs, System.getenv(ZK_AUTH_ENV));
    byte[] token = new byte[16];
    new SecureRandom().nextBytes(token);
    instance = HexFormat.of().formatHex(token);

    watch =
        new MetadataWatch(
            text(configs, ZK_CONNECT, "127.0.0.1:2181"),
            text(configs, ZK_ROOT, "/tidemark"),
            stream,
            30_000,
            auth);
    try {
      StreamInfo first = watch.read(this::changed);
      check(first);
      info = first;
      stamper = new Stamper(first);
      positions = new Positions(first.segmentOf.length);
      keySerializer = keySerializer(configs);
      Map<String, Object> conn = connection(configs);
      ensureMarksTopic(conn, buckets, createMarksTopic);
      watch.register(writerId, instance); // before the first mark: heard at once after a crash
      marks = new KafkaProducer<>(markProducerSettings(conn), new ByteArraySerializer(),
          new ByteArraySerializer());
    } catch (RuntimeException e) {
      watch.close();
      throw e;
    }
    noter =
        Executors.newSingleThreadScheduledExecutor(
            r -> {
              Thread t = new Thread(r, "tidemark-note-" + writerId);
              t.setDaemon(true);
              return t;
            });
    noter.scheduleAtFixedRate(this::tick, intervalMs, intervalMs, TimeUnit.MILLISECONDS);
    log.info(
        "tidemark: writer {} (instance {}) writes stream {} (topic {}), marks to {}[{}], {}",
        writerId, instance, stream, info.topic, marksTopic, bucket,
        auth == null
            ? "registered anonymously"
            : "registered as ZooKeeper principal " + auth.substring(0, auth.indexOf(':')));
  }

  private void check(StreamInfo s) {
    if (s.routed) {
      throw new ConfigException(
          STREAM,
          stream,
          "tidemark routes this stream (created by tidemark, or adopted with tidemark routing):"
              + " its keys move between segments when it scales, which this interceptor does not"
              + " follow; write it with tidemark's writers, or adopt a topic without tidemark"
              + " routing (tidemark stream adopt "
              + stream
              + " --topic <topic>)");
    }
    if (!s.writable()) {
      throw new ConfigException(STREAM, stream, "the stream is " + s.state + ": not writable");
    }
  }

  private void changed(StreamInfo s) {
    info = s;
    stamper.policy(s);
    log.info("tidemark: stream {} changed (state {}, timestamping {})", stream, s.state,
        s.timestamping);
  }

  @Override
  public ProducerRecord<Object, Object> onSend(ProducerRecord<Object, Object> record) {
    StreamInfo s = info;
    if (s == null || !record.topic().equals(s.topic)) {
      return record;
    }
    if (!s.writable()) {
      throw new RecordRefused("stream " + stream + " is " + s.state + ": nothing was sent");
    }
    int partition;
    if (record.partition() != null) {
      partition = record.partition();
      if (partition >= s.segmentOf.length || s.segmentOf[partition] < 0) {
        throw new RecordRefused(
            "partition " + partition + " of " + s.topic + " is not a segment of stream "
                + stream + " (partitions 0.." + (s.segmentOf.length - 1) + ")");
      }
    } else {
      partition = -1;
    }
    byte[] keyBytes =
        partition < 0 && !ignoreKeys && record.key() != null
            ? keySerializer.serialize(record.topic(), record.headers(), record.key())
            : null;
    synchronized (lock) {
      if (closed) {
        throw new RecordRefused("the tidemark interceptor of writer " + writerId + " is closed");
      }
      if (partition < 0) {
        partition = keyBytes != null ? Utils.toPositive(Utils.murmur2(keyBytes))
            % s.segmentOf.length : stickyPartition(s.segmentOf.length);
      }
      // The clock is read under the lock, as a note reads it: a record stamped after a
      // note is never earlier than the note's time.
      long arrival = System.currentTimeMillis();
      long ts = stamper.stamp(partition, record.timestamp(), arrival);
      positions.sent(partition);
      return new ProducerRecord<>(
          record.topic(), partition, ts, record.key(), record.value(), record.headers());
    }
  }

  private int stickyPartition(int partitions) {
    if (stickyLeft-- <= 0 || sticky >= partitions) {
      sticky = ThreadLocalRandom.current().nextInt(partitions);
      stickyLeft = STICKY_RECORDS - 1;
    }
    return sticky;
  }

  @Override
  public void onAcknowledgement(RecordMetadata metadata, Exception exception) {
    StreamInfo s = info;
    if (s == null || metadata == null || !metadata.topic().equals(s.topic)) {
      return;
    }
    boolean ready;
    synchronized (lock) {
      ready =
          positions.acknowledged(
              metadata.partition(), exception == null ? metadata.offset() : -1, exception == null);
    }
    if (ready && !noter.isShutdown()) {
      try {
        noter.execute(this::publishReady);
      } catch (java.util.concurrent.RejectedExecutionException e) {
        // closing: close() publishes what is ready itself
      }
    }
  }

  /** The heartbeat: note the time automatically, then publish what is ready. */
  private void tick() {
    try {
      synchronized (lock) {
        if (closed) {
          return;
        }
        note(automaticTime(), true);
      }
      publishReady();
    } catch (RuntimeException e) {
      log.warn("tidemark: writer {}: noting time automatically failed", writerId, e);
    }
  }

  /**
   * The drop-in producer's rule: the clock, never below the last noted time nor the highest
   * timestamp sent; taken as the clock's previous millisecond, once the clock is past every
   * timestamp sent (it waits a millisecond when one is the clock's own), so a record stamped
   * by the clock after the note is later than it (called under the lock: no record is stamped
   * meanwhile).
   */
  private long automaticTime() {
    Long top = stamper.highest();
    long floor = Math.max(lastNoted, top == null ? Long.MIN_VALUE : top);
    long now = System.currentTimeMillis();
    for (int i = 0; now <= floor && floor - now < 2 && i < 50; i++) {
      try {
        Thread.sleep(0, 200_000);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        break;
      }
      now = System.currentTimeMillis();
    }
    return Math.max(now - 1, floor);
  }

  private void note(long time, boolean alive) {
    lastNoted = time;
    positions.note(time, alive, stamper.highest());
  }

  /** Publish the notes whose records are all acknowledged (on the noter's thread only). */
  private void publishReady() {
    List<Positions.Note> ready;
    StreamInfo s;
    synchronized (lock) {
      ready = positions.ready();
      s = info;
    }
    for (Positions.Note n : ready) {
      if (n.failed) {
        log.warn(
            "tidemark: writer {}: mark for time {} on {} not published: records written before"
                + " it were not stored", writerId, n.time, stream);
        continue;
      }
      TreeMap<Long, Long> position = new TreeMap<>();
      for (int p = 0; p < n.position.length; p++) {
        if (n.position[p] > 0) {
          position.put(s.segmentOf[p], n.position[p]);
        }
      }
      byte[] value =
          MarkEncoder.encode(stream, writerId, n.time, position, n.alive, instance,
              n.maxEventTime);
      marks.send(
          new ProducerRecord<>(marksTopic, bucket, stream.getBytes(
              java.nio.charset.StandardCharsets.UTF_8), value),
          (md, e) -> {
            if (e != null) {
              log.warn("tidemark: writer {}: a mark for time {} was not stored", writerId,
                  n.time, e);
            }
          });
    }
  }

  /** Called by the producer's close, after its records are acknowledged: the shutdown mark. */
  @Override
  public void close() {
    synchronized (lock) {
      if (closed || noter == null) {
        return;
      }
      closed = true;
    }
    try {
      noter.submit(() -> {
        synchronized (lock) {
          note(automaticTime(), false);
        }
        publishReady();
        synchronized (lock) {
          if (positions.waiting()) {
            log.warn("tidemark: writer {}: records still unacknowledged at close; no shutdown"
                + " mark", writerId);
          }
        }
      }).get(closeTimeoutMs, TimeUnit.MILLISECONDS);
    } catch (ExecutionException | java.util.concurrent.TimeoutException e) {
      log.warn("tidemark: writer {}: the shutdown mark failed", writerId, e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } finally {
      noter.shutdownNow();
      marks.close(java.time.Duration.ofMillis(closeTimeoutMs));
      watch.close();
    }
  }

  // --- settings --------------------------------------------------------------------------

  /** The application producer's connection and security settings, for the marks' clients. */
  static Map<String, Object> connection(Map<String, ?> configs) {
    Map<String, Object> out = new HashMap<>();
    for (Map.Entry<String, ?> e : configs.entrySet()) {
      String k = e.getKey();
      if (k.equals(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG)
          || k.equals(ProducerConfig.CLIENT_DNS_LOOKUP_CONFIG)
          || k.startsWith("security.")
          || k.startsWith("sasl.")
          || k.startsWith("ssl.")) {
        out.put(k, e.getValue());
      }
    }
    return out;
  }

  private Map<String, Object> markProducerSettings(Map<String, Object> conn) {
    Map<String, Object> out = new HashMap<>(conn);
    out.put(ProducerConfig.CLIENT_ID_CONFIG, writerId + "-tidemark-marks");
    out.put(ProducerConfig.ACKS_CONFIG, "all");
    out.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
    out.put(ProducerConfig.LINGER_MS_CONFIG, 0);
    return out;
  }

  /** The marks topic with the bucket count's partitions; made (LogAppendTime) when missing. */
  private void ensureMarksTopic(Map<String, Object> conn, int buckets, boolean create) {
    Map<String, Object> settings = new HashMap<>(conn);
    settings.put("client.id", writerId + "-tidemark-admin");
    try (Admin admin = Admin.create(settings)) {
      try {
        TopicDescription d =
            admin.describeTopics(List.of(marksTopic)).allTopicNames().get(30, TimeUnit.SECONDS)
                .get(marksTopic);
        if (d.partitions().size() != buckets) {
          throw new ConfigException(
              MARKS_TOPIC, marksTopic,
              "the marks topic has " + d.partitions().size() + " partitions, not the bucket"
                  + " count " + buckets + " (tidemark.bucket.count must be the controller's)");
        }
      } catch (ExecutionException e) {
        if (!(e.getCause() instanceof UnknownTopicOrPartitionException)) {
          throw new ConfigException("describing the marks topic " + marksTopic + " failed: "
              + e.getCause());
        }
        if (!create) {
          throw new ConfigException(MARKS_TOPIC, marksTopic,
              "the marks topic does not exist (and tidemark.create.marks.topic is false)");
        }
        NewTopic topic = new NewTopic(marksTopic, Optional.of(buckets), Optional.empty())
            .configs(Map.of("message.timestamp.type", "LogAppendTime"));
        try {
          admin.createTopics(List.of(topic)).all().get(30, TimeUnit.SECONDS);
        } catch (ExecutionException ce) {
          if (!(ce.getCause()
              instanceof org.apache.kafka.common.errors.TopicExistsException)) {
            throw new ConfigException("creating the marks topic " + marksTopic + " failed: "
                + ce.getCause());
          }
        }
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new ConfigException("interrupted while checking the marks topic");
    } catch (java.util.concurrent.TimeoutException e) {
      throw new ConfigException("the brokers did not answer about the marks topic " + marksTopic
          + " within 30 s");
    }
  }

  @SuppressWarnings("unchecked")
  private static Serializer<Object> keySerializer(Map<String, ?> configs) {
    Object given = configs.get(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG);
    Serializer<Object> s;
    try {
      if (given instanceof Class<?> c) {
        s = (Serializer<Object>) c.getDeclaredConstructor().newInstance();
      } else if (given instanceof String name && !name.isBlank()) {
        s = (Serializer<Object>) Class.forName(name.trim(), true,
            Thread.currentThread().getContextClassLoader() != null
                ? Thread.currentThread().getContextClassLoader()
                : TidemarkInterceptor.class.getClassLoader())
            .getDeclaredConstructor().newInstance();
      } else {
        throw new ConfigException(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, given,
            "the tidemark interceptor needs the key serializer's class to place keyed records");
      }
    } catch (ReflectiveOperationException e) {
      throw new ConfigException(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, given,
          "cannot make the key serializer: " + e);
    }
    s.configure(configs, true);
    return s;
  }

  /**
   * The ZooKeeper digest credentials, {@code user:password}: {@link #ZK_AUTH}, else {@code env}
   * (the value of {@link #ZK_AUTH_ENV}); {@code null} when neither is set. A malformed value is
   * refused by name, never quoted (it holds a password).
   */
  static String zookeeperAuth(Map<String, ?> configs, String env) {
    String given = text(configs, ZK_AUTH, "");
    String where = ZK_AUTH;
    if (given.isEmpty()) {
      given = env == null ? "" : env.trim();
      where = "$" + ZK_AUTH_ENV;
    }
    if (given.isEmpty()) {
      return null;
    }
    int colon = given.indexOf(':');
    if (colon <= 0 || colon == given.length() - 1) {
      throw new ConfigException(
          where + " must be user:password (ZooKeeper's digest scheme); its value is not shown");
    }
    return given;
  }

  private static String text(Map<String, ?> configs, String key, String fallback) {
    Object v = configs.get(key);
    return v == null ? fallback : String.valueOf(v).trim();
  }

  private static String required(Map<String, ?> configs, String key) {
    String v = text(configs, key, "");
    if (v.isEmpty()) {
      throw new ConfigException(key, null, "required: the tidemark stream to write, scope/name");
    }
    return v;
  }

  private static int number(Map<String, ?> configs, String key, int fallback, int min) {
    String v = text(configs, key, null);
    if (v == null) {
      return fallback;
    }
    try {
      int n = Integer.parseInt(v);
      if (n >= min) {
        return n;
      }
    } catch (NumberFormatException e) {
      // below
    }
    throw new ConfigException(key, v, "must be an integer >= " + min);
  }

  private static boolean bool(Map<String, ?> configs, String key, boolean fallback) {
    String v = text(configs, key, null);
    if (v == null) {
      return fallback;
    }
    if (v.equalsIgnoreCase("true") || v.equalsIgnoreCase("false")) {
      return Boolean.parseBoolean(v);
    }
    throw new ConfigException(key, v, "must be true or false");
  }
}
