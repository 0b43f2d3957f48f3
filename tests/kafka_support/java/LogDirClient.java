// Kafka's Java client (kafka-clients 4.3.1) writing and reading the topics of the log-dir test
// (tests/integration/peer/test_broker_log_dir.py): the broker writes the files, storagecore reads
// and cleans copies of them, and the records this program read are what storagecore must read.
// One scenario per run, one JSON object on stdout.
//
//   produce BOOTSTRAP COUNT TOPIC=CODEC...  COUNT records with headers and explicit timestamps
//                                           to each TOPIC, in batches of 25 (one flush each)
//   compacted BOOTSTRAP TOPIC ROUNDS WAIT_MS  ROUNDS rounds over the same 40 keys (the last
//                                           round writes tombstones for keys 0-9), each followed
//                                           by WAIT_MS so that the next append rolls the segment
//                                           (the topic's segment.ms), then one record "end"
//   transactions BOOTSTRAP TOPIC WAIT_MS    a transactional producer: commit, abort, commit
//                                           (with headers), abort, and a last commit, each
//                                           followed by WAIT_MS (segment.ms, as above)
//   read BOOTSTRAP ISOLATION TOPIC...       every record of partition 0 of each TOPIC
//                                           (read_committed or read_uncommitted): offset,
//                                           timestamp, key, value, headers (bytes as base64;
//                                           null stays null)

import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;

import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class LogDirClient {
    private static final long DEADLINE_MS = 90_000;
    /** An hour ago: within the broker's retention and timestamp bounds, apart from now. */
    private static final long BASE_TIMESTAMP = System.currentTimeMillis() - 3_600_000L;

    public static void main(String[] args) throws Exception {
        Map<String, Object> answer = switch (args[0]) {
            case "produce" -> {
                Map<String, Object> all = new TreeMap<>();
                for (int i = 3; i < args.length; i++) {
                    String[] topicCodec = args[i].split("=", 2);
                    all.put(topicCodec[0], produce(args[1], topicCodec[0], topicCodec[1],
                        Integer.parseInt(args[2])));
                }
                yield all;
            }
            case "compacted" -> compacted(args[1], args[2], Integer.parseInt(args[3]),
                Long.parseLong(args[4]));
            case "transactions" -> transactions(args[1], args[2], Long.parseLong(args[3]));
            case "read" -> {
                Map<String, Object> all = new TreeMap<>();
                for (int i = 3; i < args.length; i++) {
                    all.put(args[i], read(args[1], args[i], args[2]));
                }
                yield all;
            }
            default -> throw new IllegalArgumentException("unknown scenario " + args[0]);
        };
        System.out.println(new ObjectMapper().writeValueAsString(answer));
    }

    private static KafkaProducer<byte[], byte[]> producer(String bootstrap, Properties extra) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "50");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.putAll(extra);
        return new KafkaProducer<>(p);
    }

    private static ProducerRecord<byte[], byte[]> record(String topic, long timestamp, String key,
                                                         String value, int headers) {
        RecordHeaders h = new RecordHeaders();
        for (int i = 0; i < headers; i++) {
            h.add("h" + i, i == 1 ? null : ("header-" + i + "-" + key).getBytes());
        }
        return new ProducerRecord<>(topic, 0, timestamp, key == null ? null : key.getBytes(),
            value == null ? null : value.getBytes(), h);
    }

    static Map<String, Object> produce(String bootstrap, String topic, String codec, int count) {
        Properties extra = new Properties();
        extra.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        try (KafkaProducer<byte[], byte[]> producer = producer(bootstrap, extra)) {
            for (int i = 0; i < count; i++) {
                String value = codec + "-value-" + i + "-" + "abcdefgh".repeat(i % 7);
                producer.send(record(topic, BASE_TIMESTAMP + 1000L * i, "key-" + i, value, i % 3));
                if (i % 25 == 24) {
                    producer.flush();
                }
            }
        }
        return Map.of("produced", count);
    }

    static Map<String, Object> compacted(String bootstrap, String topic, int rounds, long waitMs)
            throws InterruptedException {
        Properties extra = new Properties();
        extra.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, "lz4");
        int sent = 0;
        try (KafkaProducer<byte[], byte[]> producer = producer(bootstrap, extra)) {
            for (int round = 0; round < rounds; round++) {
                for (int key = 0; key < 40; key++) {
                    boolean tombstone = round == rounds - 1 && key < 10;
                    String value = tombstone ? null : "round-" + round + "-key-" + key;
                    // The time now: segment.ms counts from the first record's timestamp.
                    producer.send(record(topic, System.currentTimeMillis(), "k" + key, value,
                        key % 2));
                    sent++;
                }
                producer.flush();
                // segment.ms must pass before the next append for it to roll the segment: the
                // time passing is the condition itself.
                Thread.sleep(waitMs);
            }
            producer.send(record(topic, System.currentTimeMillis(), "end", "end", 0));
            sent++;
        }
        return Map.of("produced", sent);
    }

    static Map<String, Object> transactions(String bootstrap, String topic, long waitMs)
            throws InterruptedException {
        Properties extra = new Properties();
        extra.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "log-dir-" + topic);
        extra.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, "zstd");
        boolean[] commits = {true, false, true, false, true};
        int sent = 0;
        try (KafkaProducer<byte[], byte[]> producer = producer(bootstrap, extra)) {
            producer.initTransactions();
            for (int txn = 0; txn < commits.length; txn++) {
                producer.beginTransaction();
                for (int i = 0; i < 10; i++) {
                    String key = "txn-" + txn + "-" + i;
                    producer.send(record(topic, System.currentTimeMillis(), key, "value-" + key,
                        txn == 2 ? 3 : 0));
                    sent++;
                    if (i == 4) {
                        producer.flush();  // two batches per transaction
                    }
                }
                producer.flush();  // an abort would drop what was not sent yet
                if (commits[txn]) {
                    producer.commitTransaction();
                } else {
                    producer.abortTransaction();
                }
                Thread.sleep(waitMs);
            }
        }
        return Map.of("produced", sent);
    }

    private static String encoded(byte[] bytes) {
        return bytes == null ? null : Base64.getEncoder().encodeToString(bytes);
    }

    static Map<String, Object> read(String bootstrap, String topic, String isolation) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        List<Object> records = new ArrayList<>();
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            long end = consumer.endOffsets(List.of(tp)).get(tp);
            long deadline = System.currentTimeMillis() + DEADLINE_MS;
            while (consumer.position(tp) < end && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    List<Object> headers = new ArrayList<>();
                    for (Header header : r.headers()) {
                        headers.add(java.util.Arrays.asList(header.key(), encoded(header.value())));
                    }
                    records.add(java.util.Arrays.asList(r.offset(), r.timestamp(),
                        encoded(r.key()), encoded(r.value()), headers));
                }
            }
            Map<String, Object> answer = new TreeMap<>();
            answer.put("end", end);
            answer.put("position", consumer.position(tp));
            answer.put("records", records);
            return answer;
        }
    }
}
