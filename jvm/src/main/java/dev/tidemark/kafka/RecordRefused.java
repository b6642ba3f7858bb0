package dev.tidemark.kafka;

/**
 * A record the stream's timestamping rules refuse (client-require without a timestamp, an
 * adjustment under refuse-adjustments) or a record to a stream that is not writable.
 *
 * <p>An {@link Error}, not an exception: Kafka's producer catches and logs every exception an
 * interceptor's {@code onSend} throws and sends the record anyway; only an error leaves
 * {@code send}, so a refused record is not sent and the application is told.
 */
public final class RecordRefused extends Error {
  private static final long serialVersionUID = 1L;

  public RecordRefused(String message) {
    super(message);
  }
}
