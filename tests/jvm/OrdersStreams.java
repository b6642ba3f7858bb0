import java.io.FileReader;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Produced;

/**
 * A stateless Kafka Streams application (the guide's Kafka Streams settings, read from
 * args[0]): args[1] upper-cased into args[2], a stream adopted by tidemark, and into args[4],
 * a topic of its own. It closes once it has forwarded args[3] records; close() flushes its
 * producer, whose interceptor then sends the shutdown mark.
 */
public class OrdersStreams {
  public static void main(String[] args) throws Exception {
    Properties props = new Properties();
    try (FileReader in = new FileReader(args[0])) {
      props.load(in);
    }
    int count = Integer.parseInt(args[3]);
    AtomicInteger forwarded = new AtomicInteger();
    CountDownLatch done = new CountDownLatch(1);
    StreamsBuilder builder = new StreamsBuilder();
    KStream<String, String> upper =
        builder.stream(args[1], Consumed.with(Serdes.String(), Serdes.String()))
            .mapValues(v -> v.toUpperCase());
    upper.to(args[4], Produced.with(Serdes.String(), Serdes.String())); // not the stream's topic
    upper
        .peek((k, v) -> {
          if (forwarded.incrementAndGet() == count) {
            done.countDown();
          }
        })
        .to(args[2], Produced.with(Serdes.String(), Serdes.String()));
    KafkaStreams streams = new KafkaStreams(builder.build(), props);
    streams.setUncaughtExceptionHandler(e -> {
      e.printStackTrace();
      done.countDown();
      return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
          .StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
    });
    streams.start();
    boolean finished = done.await(120, TimeUnit.SECONDS);
    streams.close(Duration.ofSeconds(60));
    if (!finished || forwarded.get() < count) {
      System.err.println("forwarded " + forwarded.get() + " of " + count + " records");
      System.exit(1);
    }
  }
}
