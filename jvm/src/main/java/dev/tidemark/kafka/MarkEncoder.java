package dev.tidemark.kafka;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.SortedMap;
import java.util.zip.CRC32;

/**
 * Writer marks as the protocol's bytes (schemas/README.md): Avro single-object encoding of
 * {@code writer_mark.v2}, written by hand (no Avro library on the producer's classpath).
 */
public final class MarkEncoder {
  /** C3 01, then the CRC-64-AVRO fingerprint of writer_mark.v2, little-endian. */
  static final byte[] V2_HEADER = {
    (byte) 0xC3, 0x01, 0x06, 0x6B, 0x40, 0x37, 0x24, 0x71, (byte) 0xB4, 0x4F
  };

  private MarkEncoder() {}

  /** The marks-topic partition of {@code stream}: crc32(utf8(stream)) mod buckets. */
  public static int bucketOf(String stream, int buckets) {
    CRC32 crc = new CRC32();
    crc.update(stream.getBytes(StandardCharsets.UTF_8));
    return (int) (crc.getValue() % buckets);
  }

  /** A v2 mark: position maps segment id to next offset (sorted by segment id). */
  public static byte[] encode(
      String stream,
      String writerId,
      long time,
      SortedMap<Long, Long> position,
      boolean alive,
      String instance,
      Long maxEventTime) {
    ByteArrayOutputStream out = new ByteArrayOutputStream(64 + 12 * position.size());
    out.write(V2_HEADER, 0, V2_HEADER.length);
    writeString(out, stream);
    writeString(out, writerId);
    writeLong(out, time);
    if (!position.isEmpty()) {
      writeLong(out, position.size());
      for (Map.Entry<Long, Long> e : position.entrySet()) {
        writeLong(out, e.getKey());
        writeLong(out, e.getValue());
      }
    }
    writeLong(out, 0); // end of the array
    out.write(alive ? 1 : 0);
    out.write(0); // transaction_id: null (the interceptor wraps no transactions)
    if (instance == null) {
      out.write(0);
    } else {
      out.write(2); // branch 1, zig-zag
      writeString(out, instance);
    }
    if (maxEventTime == null) {
      out.write(0);
    } else {
      out.write(2);
      writeLong(out, maxEventTime);
    }
    return out.toByteArray();
  }

  private static void writeString(ByteArrayOutputStream out, String s) {
    byte[] b = s.getBytes(StandardCharsets.UTF_8);
    writeLong(out, b.length);
    out.write(b, 0, b.length);
  }

  /** Avro's long: zig-zag, then a base-128 varint. */
  static void writeLong(ByteArrayOutputStream out, long v) {
    long n = (v << 1) ^ (v >> 63);
    while ((n & ~0x7FL) != 0) {
      out.write((int) ((n & 0x7F) | 0x80));
      n >>>= 7;
    }
    out.write((int) n);
  }
}
