package dev.tidemark.kafka;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Whether an earlier instance under this writer id may still hold it: the last mark under the
 * id in the stream's bucket of the marks topic, within the writer timeout. An instance that
 * closed sent a shutdown mark (alive=false): the new one is heard at once. One that crashed
 * did not: the controller refuses every other token (impersonated) until it forgets the dead
 * instance, one writer timeout after its last mark, so a new instance holds its marks until
 * then instead of sending marks that are refused.
 */
final class PreviousInstance {
  private static final byte[] V1_HEADER = {
    (byte) 0xC3, 0x01, 0x63, 0x35, (byte) 0x84, (byte) 0x94, (byte) 0xC8, 0x7D, 0x23, 0x6E
  };

  private PreviousInstance() {}

  /**
   * The time (ms, the broker's clock) until which marks under {@code writerId} would be
   * refused, or 0 when none would.
   */
  static long heldUntil(
      Map<String, Object> connection,
      String topic,
      int bucket,
      String stream,
      String writerId,
      long timeoutMs,
      long marginMs) {
    Map<String, Object> settings = new HashMap<>(connection);
    settings.put("client.id", writerId + "-tidemark-previous");
    settings.put("isolation.level", "read_committed");
    settings.put("enable.auto.commit", false);
    TopicPartition tp = new TopicPartition(topic, bucket);
    long now = System.currentTimeMillis();
    try (KafkaConsumer<byte[], byte[]> consumer =
        new KafkaConsumer<>(settings, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
      consumer.assign(List.of(tp));
      long end = consumer.endOffsets(List.of(tp), Duration.ofSeconds(30)).get(tp);
      OffsetAndTimestamp from =
          consumer
              .offsetsForTimes(Map.of(tp, now - timeoutMs - marginMs), Duration.ofSeconds(30))
              .get(tp);
      if (from == null || from.offset() >= end) {
        return 0;
      }
      consumer.seek(tp, from.offset());
      byte[] key = stream.getBytes(StandardCharsets.UTF_8);
      long lastAlive = 0;
      long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
      while (consumer.position(tp) < end && System.nanoTime() < deadline) {
        for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
          if (r.value() == null || !Arrays.equals(r.key(), key)) {
            continue;
          }
          Boolean alive = aliveOf(r.value(), writerId);
          if (alive != null) {
            lastAlive = alive ? r.timestamp() : 0;
          }
        }
      }
      return lastAlive == 0 ? 0 : lastAlive + timeoutMs + marginMs;
    }
  }

  /** A mark's {@code alive} when it is a writer mark of {@code writerId}, else null. */
  static Boolean aliveOf(byte[] value, String writerId) {
    if (value.length < 10) {
      return null;
    }
    byte[] header = Arrays.copyOf(value, 10);
    if (!Arrays.equals(header, MarkEncoder.V2_HEADER) && !Arrays.equals(header, V1_HEADER)) {
      return null;
    }
    try {
      ByteBuffer in = ByteBuffer.wrap(value, 10, value.length - 10);
      skipString(in); // stream
      String writer = readString(in);
      if (!writer.equals(writerId)) {
        return null;
      }
      readLong(in); // time
      for (long n = readLong(in); n != 0; n = readLong(in)) {
        if (n < 0) {
          n = -n;
          readLong(in); // the block's size in bytes
        }
        for (long i = 0; i < 2 * n; i++) {
          readLong(in);
        }
      }
      return in.get() != 0;
    } catch (RuntimeException e) {
      return null;
    }
  }

  private static String readString(ByteBuffer in) {
    int n = (int) readLong(in);
    byte[] b = new byte[n];
    in.get(b);
    return new String(b, StandardCharsets.UTF_8);
  }

  private static void skipString(ByteBuffer in) {
    int n = (int) readLong(in);
    in.position(in.position() + n);
  }

  private static long readLong(ByteBuffer in) {
    long n = 0;
    int shift = 0;
    int b;
    do {
      b = in.get() & 0xFF;
      n |= (long) (b & 0x7F) << shift;
      shift += 7;
    } while ((b & 0x80) != 0);
    return (n >>> 1) ^ -(n & 1);
  }
}
