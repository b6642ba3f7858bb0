import java.io.FileReader;
import java.util.Properties;
import java.util.Random;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Sends RECORDS records of BYTES bytes (64 keys) with the settings file's producer (at RATE a
 * second when given); prints the records per second, from the first send to the close (every
 * record acknowledged).
 */
public class ProducerBench {
  public static void main(String[] args) throws Exception {
    Properties props = new Properties();
    try (FileReader in = new FileReader(args[0])) {
      props.load(in);
    }
    String topic = args[1];
    int records = Integer.parseInt(args[2]);
    byte[] payload = new byte[Integer.parseInt(args[3])];
    int rate = args.length > 4 ? Integer.parseInt(args[4]) : 0; // records/s, 0: full speed
    new Random(7).nextBytes(payload);
    byte[][] keys = new byte[64][];
    for (int i = 0; i < keys.length; i++) {
      keys[i] = ("key-" + i).getBytes();
    }
    KafkaProducer<byte[], byte[]> producer =
        new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer());
    long start = System.nanoTime();
    for (int i = 0; i < records; i++) {
      producer.send(new ProducerRecord<>(topic, keys[i & 63], payload));
      if (rate > 0 && i % 100 == 99) {
        long due = start + (long) ((i + 1) * 1e9 / rate);
        long wait = due - System.nanoTime();
        if (wait > 0) {
          Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
        }
      }
    }
    producer.close();
    double seconds = (System.nanoTime() - start) / 1e9;
    System.out.println(records / seconds);
  }
}
