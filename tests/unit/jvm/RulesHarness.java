package dev.tidemark.kafka;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import java.util.TreeMap;

/**
 * The interceptor's pure rules driven line by line from stdin, for the unit tests to compare
 * with tidemark's Python writers: "policy MODE UNCAPPED REFUSE", "stamp PARTITION TS|- ARRIVAL"
 * (prints the stored timestamp or "refused"), "highest", "encode STREAM WRITER TIME ALIVE
 * INSTANCE|- MAX|- SEG:OFF...", "bucket STREAM B"; positions of 3 partitions: "sent P",
 * "ack P OFFSET ok|fail", "note TIME", "ready" (prints "TIME [failed] P:NEXT...;" per note);
 * "node HEX" (the znode name of the writer id whose UTF-8 bytes are HEX); "configure K=V..."
 * (the refusal's message, for settings refused before any service is asked); "zookeeper
 * CONNECT" (the shaded ZooKeeper client's refusal of a ZooKeeper that does not answer); "zkauth
 * SETTING|- ENV|-" (the ZooKeeper credentials taken from the setting, else the variable: "user
 * USER", "anonymous", or the refusal's message).
 */
public final class RulesHarness {
  public static void main(String[] args) throws Exception {
    BufferedReader in =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    Stamper stamper = null;
    Positions positions = new Positions(3);
    StringBuilder out = new StringBuilder();
    for (String line; (line = in.readLine()) != null; ) {
      String[] w = line.trim().split(" ");
      switch (w[0]) {
        case "policy" -> {
          String record =
              "{\"name\":\"s/x\",\"topic\":\"t\",\"state\":\"active\",\"current_epoch\":0,"
                  + "\"config\":{\"timestamping\":\"" + w[1] + "\",\"uncapped\":" + w[2]
                  + ",\"refuse_adjustments\":" + w[3] + "},\"adoption\":{\"tidemark_routing\":false}}";
          String epoch = "{\"number\":0,\"segments\":[{\"id\":0,\"low\":0.0,\"high\":1.0}]}";
          stamper = new Stamper(StreamInfo.parse("s/x", bytes(record), bytes(epoch)));
        }
        case "stamp" -> {
          try {
            Long ts = w[2].equals("-") ? null : Long.parseLong(w[2]);
            out.append(stamper.stamp(Integer.parseInt(w[1]), ts, Long.parseLong(w[3])));
          } catch (RecordRefused e) {
            out.append("refused");
          }
          out.append('\n');
        }
        case "highest" -> out.append(stamper.highest()).append('\n');
        case "encode" -> {
          TreeMap<Long, Long> position = new TreeMap<>();
          for (int i = 7; i < w.length; i++) {
            String[] so = w[i].split(":");
            position.put(Long.parseLong(so[0]), Long.parseLong(so[1]));
          }
          byte[] b =
              MarkEncoder.encode(
                  w[1], w[2], Long.parseLong(w[3]), position, Boolean.parseBoolean(w[4]),
                  w[5].equals("-") ? null : w[5], w[6].equals("-") ? null : Long.parseLong(w[6]));
          out.append(HexFormat.of().formatHex(b)).append('\n');
        }
        case "sent" -> positions.sent(Integer.parseInt(w[1]));
        case "ack" -> positions.acknowledged(
            Integer.parseInt(w[1]), Long.parseLong(w[2]), w[3].equals("ok"));
        case "note" -> positions.note(Long.parseLong(w[1]), true, null);
        case "ready" -> {
          for (Positions.Note n : positions.ready()) {
            out.append(n.time).append(n.failed ? " failed" : "");
            for (int p = 0; p < n.position.length; p++) {
              if (n.position[p] > 0) {
                out.append(' ').append(p).append(':').append(n.position[p]);
              }
            }
            out.append(';');
          }
          out.append('\n');
        }
        case "node" -> out.append(MetadataWatch.nodeName(
            new String(HexFormat.of().parseHex(w[1]), StandardCharsets.UTF_8))).append('\n');
        case "configure" -> {
          java.util.Map<String, Object> configs = new java.util.HashMap<>();
          for (int i = 1; i < w.length; i++) {
            String[] kv = w[i].split("=", 2);
            configs.put(kv[0], kv[1]);
          }
          try {
            new TidemarkInterceptor().configure(configs);
            out.append("configured");
          } catch (org.apache.kafka.common.config.ConfigException e) {
            out.append(e.getMessage());
          }
          out.append('\n');
        }
        case "zookeeper" -> {
          try (MetadataWatch watch = new MetadataWatch(w[1], "/tidemark", "s/x", 1_000, null)) {
            out.append("connected");
          } catch (org.apache.kafka.common.config.ConfigException e) {
            out.append(e.getMessage());
          }
          out.append('\n');
        }
        case "zkauth" -> {
          java.util.Map<String, Object> configs = new java.util.HashMap<>();
          if (!w[1].equals("-")) {
            configs.put(TidemarkInterceptor.ZK_AUTH, w[1]);
          }
          try {
            String env = w[2].equals("-") ? null : w[2];
            String auth = TidemarkInterceptor.zookeeperAuth(configs, env);
            out.append(auth == null ? "anonymous" : "user " + auth.split(":", 2)[0]);
          } catch (org.apache.kafka.common.config.ConfigException e) {
            out.append(e.getMessage());
          }
          out.append('\n');
        }
        case "bucket" -> out.append(MarkEncoder.bucketOf(w[1], Integer.parseInt(w[2])))
            .append('\n');
        default -> throw new IllegalArgumentException(line);
      }
    }
    System.out.print(out);
  }

  private static byte[] bytes(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }
}
