package dev.tidemark.kafka;

import com.eclipsesource.json.Json;
import com.eclipsesource.json.JsonArray;
import com.eclipsesource.json.JsonObject;
import com.eclipsesource.json.JsonValue;
import java.nio.charset.StandardCharsets;
import java.util.Set;
import org.apache.kafka.common.config.ConfigException;

/**
 * What the interceptor needs of a stream's metadata, read from its ZooKeeper znodes (the JSON
 * tidemark.controller.metadata writes): the topic, the timestamping rules, the state, whether
 * tidemark routes it, and the current epoch's segments (partition -> segment id).
 */
final class StreamInfo {
  enum Mode {
    CLIENT_PREFER,
    CLIENT_REQUIRE,
    ARRIVAL
  }

  /** States in which writers may append (tidemark.controller.states.WRITABLE). */
  static final Set<String> WRITABLE = Set.of("active", "updating", "scaling", "truncating");

  final String name;
  final String topic;
  final Mode timestamping;
  final boolean uncapped;
  final boolean refuseAdjustments;
  final String state;
  final boolean routed;
  final int currentEpoch;
  /** Partition number -> segment id, for the current epoch's segments. */
  final long[] segmentOf;

  private StreamInfo(
      String name,
      String topic,
      Mode timestamping,
      boolean uncapped,
      boolean refuseAdjustments,
      String state,
      boolean routed,
      int currentEpoch,
      long[] segmentOf) {
    this.name = name;
    this.topic = topic;
    this.timestamping = timestamping;
    this.uncapped = uncapped;
    this.refuseAdjustments = refuseAdjustments;
    this.state = state;
    this.routed = routed;
    this.currentEpoch = currentEpoch;
    this.segmentOf = segmentOf;
  }

  boolean writable() {
    return WRITABLE.contains(state);
  }

  static int currentEpochOf(String name, byte[] record) {
    return parseObject(name, record).getInt("current_epoch", 0);
  }

  /** The stream record's JSON and its current epoch's JSON, decoded. */
  static StreamInfo parse(String name, byte[] record, byte[] epoch) {
    JsonObject raw = parseObject(name, record);
    JsonObject config = raw.get("config").asObject();
    String mode = config.getString("timestamping", "client-prefer");
    Mode m =
        switch (mode) {
          case "client-prefer" -> Mode.CLIENT_PREFER;
          case "client-require" -> Mode.CLIENT_REQUIRE;
          case "arrival" -> Mode.ARRIVAL;
          default -> throw new ConfigException(
              "stream " + name + " has timestamping " + mode + ", unknown to this interceptor");
        };
    JsonValue adoption = raw.get("adoption");
    boolean routed =
        adoption == null
            || adoption.isNull()
            || adoption.asObject().getBoolean("tidemark_routing", true);
    JsonObject ep = parseObject(name, epoch);
    JsonArray segments = ep.get("segments").asArray();
    int max = -1;
    for (JsonValue s : segments) {
      max = Math.max(max, (int) (s.asObject().get("id").asLong() & 0xFFFFFFFFL));
    }
    long[] segmentOf = new long[max + 1];
    java.util.Arrays.fill(segmentOf, -1);
    for (JsonValue s : segments) {
      long id = s.asObject().get("id").asLong();
      segmentOf[(int) (id & 0xFFFFFFFFL)] = id;
    }
    return new StreamInfo(
        raw.getString("name", name),
        raw.getString("topic", ""),
        m,
        config.getBoolean("uncapped", false),
        config.getBoolean("refuse_adjustments", false),
        raw.getString("state", "active"),
        routed,
        raw.getInt("current_epoch", 0),
        segmentOf);
  }

  private static JsonObject parseObject(String name, byte[] data) {
    try {
      return Json.parse(new String(data, StandardCharsets.UTF_8)).asObject();
    } catch (RuntimeException e) {
      throw new ConfigException(
          "the metadata of stream " + name + " in ZooKeeper is not tidemark's JSON: " + e);
    }
  }
}
