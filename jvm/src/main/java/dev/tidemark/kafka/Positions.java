package dev.tidemark.kafka;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Deque;
import java.util.List;

/**
 * Positions from the broker's acknowledgements, per partition, and the notes waiting for them.
 *
 * <p>A note covers exactly the records sent before it: per partition it needs as many
 * acknowledgements as records were sent then (acknowledgements of one partition come in send
 * order), and takes that partition's next offset (last stored + 1) at the moment the last of
 * them arrives, so no record sent after the note is in its position. A partition with nothing
 * stored is left out. A note whose own records include one not stored is failed (its position
 * would hide the gap). Not thread-safe: the interceptor holds its lock.
 */
final class Positions {
  static final class Note {
    final long time;
    final boolean alive;
    final Long maxEventTime;
    final long[] need;
    final long[] prevNeed;
    final long[] position;
    int remaining;
    boolean failed;

    Note(long time, boolean alive, Long maxEventTime, long[] need, long[] prevNeed) {
      this.time = time;
      this.alive = alive;
      this.maxEventTime = maxEventTime;
      this.need = need;
      this.prevNeed = prevNeed;
      this.position = new long[need.length];
    }
  }

  private final long[] sent;
  private final long[] acked;
  private final long[] next;
  /** Per partition, the count of the latest acknowledgement that was a failure (0: none). */
  private final long[] lastFailure;
  private long[] lastNeed;
  private final Deque<Note> pending = new ArrayDeque<>();

  Positions(int partitions) {
    sent = new long[partitions];
    acked = new long[partitions];
    next = new long[partitions];
    lastFailure = new long[partitions];
    lastNeed = new long[partitions];
  }

  int partitions() {
    return sent.length;
  }

  void sent(int p) {
    sent[p]++;
  }

  /**
   * One acknowledgement of partition {@code p} ({@code offset} < 0 when not stored); whether
   * a note became ready.
   */
  boolean acknowledged(int p, long offset, boolean stored) {
    if (p < 0 || p >= acked.length) {
      return false;
    }
    boolean ready = false;
    long count = ++acked[p];
    if (stored && offset >= 0 && offset + 1 > next[p]) {
      next[p] = offset + 1;
    }
    if (!stored) {
      lastFailure[p] = count;
    }
    for (Note n : pending) {
      if (!stored && n.prevNeed[p] < count && count <= n.need[p]) {
        n.failed = true;
      }
      if (n.need[p] == count) {
        n.position[p] = next[p];
        ready |= --n.remaining == 0;
      }
    }
    return ready;
  }

  /** Note {@code time}: it waits for every record sent so far. */
  void note(long time, boolean alive, Long maxEventTime) {
    long[] need = sent.clone();
    Note n = new Note(time, alive, maxEventTime, need, lastNeed);
    lastNeed = need;
    for (int p = 0; p < need.length; p++) {
      if (lastFailure[p] > n.prevNeed[p]) { // one of its records failed before the note
        n.failed = true;
      }
      if (acked[p] >= need[p]) {
        n.position[p] = next[p];
      } else {
        n.remaining++;
      }
    }
    pending.add(n);
  }

  /** The notes whose records are all acknowledged, in order, taken out. */
  List<Note> ready() {
    List<Note> out = new ArrayList<>();
    while (!pending.isEmpty() && pending.peekFirst().remaining == 0) {
      out.add(pending.pollFirst());
    }
    return out;
  }

  boolean waiting() {
    return !pending.isEmpty();
  }

  @Override
  public String toString() {
    return "sent " + Arrays.toString(sent) + " acked " + Arrays.toString(acked);
  }
}
