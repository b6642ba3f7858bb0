import java.io.FileReader;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.springframework.kafka.core.DefaultKafkaProducerFactory;
import org.springframework.kafka.core.KafkaTemplate;

/**
 * Spring for Apache Kafka with the guide's producer factory (its snippet is put where the
 * marker line is): the application's own settings come from args[0] (bootstrap servers,
 * serializers, the installation's tidemark settings), the stream and ZooKeeper from args[1]
 * and args[2]; args[4] records are sent to topic args[3] through the KafkaTemplate, and the
 * factory's destroy() closes the producer, whose interceptor then sends the shutdown mark.
 */
public class SpringOrders {
  public static void main(String[] args) throws Exception {
    Properties props = new Properties();
    try (FileReader in = new FileReader(args[0])) {
      props.load(in);
    }
    Map<String, Object> producerSettings = new HashMap<>();
    props.forEach((k, v) -> producerSettings.put((String) k, v));
    String stream = args[1];
    String zk = args[2];
    String topic = args[3];
    int count = Integer.parseInt(args[4]);
    // SNIPPET: SpringProducer.java
    for (int i = 0; i < count; i++) {
      template.send(topic, "key-" + i % 7, "event-" + i);
      if (i % 5 == 4) {
        Thread.sleep(3);
      }
    }
    template.flush();
    factory.destroy(); // what the application context does when it closes
  }
}
