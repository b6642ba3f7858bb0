import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.kafka.core.KafkaTemplate;

/**
 * A Spring Boot application configured by the guide's application.properties (its location
 * is args[0]): Spring Boot's Kafka auto-configuration makes the KafkaTemplate, and binds the
 * spring.kafka.producer.properties.* keys into its producer's settings; args[2] records go to
 * topic args[1]. Closing the context closes the producer, whose interceptor then sends the
 * shutdown mark.
 */
@EnableAutoConfiguration
public class BootOrders {
  public static void main(String[] args) throws Exception {
    String[] boot = {"--spring.config.location=file:" + args[0]};
    try (ConfigurableApplicationContext context = SpringApplication.run(BootOrders.class, boot)) {
      @SuppressWarnings("unchecked")
      KafkaTemplate<String, String> template = context.getBean(KafkaTemplate.class);
      int count = Integer.parseInt(args[2]);
      for (int i = 0; i < count; i++) {
        template.send(args[1], "key-" + i % 7, "event-" + i);
        if (i % 5 == 4) {
          Thread.sleep(3);
        }
      }
      template.flush();
    }
  }
}
