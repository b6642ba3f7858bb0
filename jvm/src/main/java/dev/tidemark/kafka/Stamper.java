package dev.tidemark.kafka;

import java.util.HashMap;
import java.util.Map;

/**
 * The stream's rules for record timestamps, as EventWriter applies them
 * (tidemark.pipelines.writing.timestamping): mode, then the cap, then monotonic per segment;
 * under refuse-adjustments a record whose timestamp would change is refused instead.
 */
final class Stamper {
  private final Map<Integer, Long> floors = new HashMap<>();
  private volatile StreamInfo info;

  Stamper(StreamInfo info) {
    this.info = info;
  }

  void policy(StreamInfo info) {
    this.info = info;
  }

  /** The timestamp to store for a record of {@code partition}, remembered as its floor. */
  long stamp(int partition, Long clientTs, long arrivalMs) {
    StreamInfo s = info;
    long ts;
    if (clientTs == null || s.timestamping == StreamInfo.Mode.ARRIVAL) {
      if (clientTs == null && s.timestamping == StreamInfo.Mode.CLIENT_REQUIRE) {
        throw new RecordRefused(
            "stream "
                + s.name
                + " has timestamping client-require: every record needs a timestamp, and this"
                + " record has none; nothing was sent");
      }
      ts = arrivalMs;
    } else if (clientTs > arrivalMs && !s.uncapped) {
      ts = arrivalMs;
    } else {
      ts = clientTs;
    }
    Long floor = floors.get(partition);
    if (floor != null && ts < floor) {
      ts = floor;
    }
    if (clientTs != null && ts != clientTs && s.refuseAdjustments) {
      String why =
          floor != null && ts == floor
              ? "below the segment's previous timestamp"
              : s.timestamping == StreamInfo.Mode.ARRIVAL
                  ? "the stream takes arrival times"
                  : "later than the arrival time, capped";
      throw new RecordRefused(
          "timestamp "
              + clientTs
              + " would be stored as "
              + ts
              + " ("
              + why
              + "); stream "
              + s.name
              + " refuses adjustments, so nothing was sent");
    }
    if (floor == null || ts > floor) {
      floors.put(partition, ts);
    }
    return ts;
  }

  /** The highest timestamp sent on any segment (a mark's max_event_time), or null. */
  Long highest() {
    Long top = null;
    for (long v : floors.values()) {
      if (top == null || v > top) {
        top = v;
      }
    }
    return top;
  }
}
