// Kafka's Java client (kafka-clients 4.3.1) driven by the differential tests: one scenario per
// run, against whatever bootstrap address it is given (the real broker or `logkeeper serve`),
// answering one JSON object on stdout. The Python side compares the answers of both peers.
//
//   produce BOOTSTRAP TOPIC PARTITION CODEC IDEMPOTENT COUNT  offsets acknowledged, or the error
//   admin BOOTSTRAP TOPIC          listTopics(listInternal), describeCluster, describeConfigs
//   rebalance BOOTSTRAP TOPIC GROUP RECORDS  a second member joins; the first commits its
//                                  positions in onPartitionsRevoked; counts redelivered records
//   transactional BOOTSTRAP TOPIC  initTransactions(): what the client makes of the answer
//
// Errors of the scenario itself (a refused request) are part of the answer; anything else is
// a failure of the program (a stack trace and exit 1).

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.ListTopicsOptions;
import org.apache.kafka.clients.admin.TopicListing;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class PeerClient {
    private static final Duration POLL = Duration.ofMillis(100);
    private static final long DEADLINE_MS = 90_000;

    public static void main(String[] args) throws Exception {
        Map<String, Object> answer;
        switch (args[0]) {
            case "produce" -> answer = produce(args[1], args[2], Integer.parseInt(args[3]), args[4],
                Boolean.parseBoolean(args[5]), Integer.parseInt(args[6]));
            case "admin" -> answer = admin(args[1], args[2]);
            case "rebalance" -> answer = rebalance(args[1], args[2], args[3], Integer.parseInt(args[4]));
            case "transactional" -> answer = transactional(args[1], args[2]);
            default -> throw new IllegalArgumentException("unknown scenario " + args[0]);
        }
        System.out.println(new ObjectMapper().writeValueAsString(answer));
    }

    private static Properties common(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("client.id", "peer-client");
        return p;
    }

    private static KafkaProducer<byte[], byte[]> producer(Properties p) {
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        return new KafkaProducer<>(p);
    }

    private static String rootCause(Throwable error) {
        Throwable cause = error;
        while ((cause instanceof ExecutionException || cause.getCause() instanceof org.apache.kafka.common.errors.ApiException)
               && cause.getCause() != null) {
            cause = cause.getCause();
        }
        return cause.getClass().getSimpleName();
    }

    // -- produce ---------------------------------------------------------------------------
    static Map<String, Object> produce(String bootstrap, String topic, int partition, String codec,
                                       boolean idempotent, int count) throws Exception {
        Properties p = common(bootstrap);
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, Boolean.toString(idempotent));
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "20000");
        List<Long> offsets = new ArrayList<>();
        List<String> errors = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = producer(p)) {
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                byte[] key = ("key-" + i).getBytes();
                byte[] value = ("value-" + i + "-" + "x".repeat(100)).getBytes();
                sent.add(producer.send(new ProducerRecord<>(topic, partition, key, value)));
            }
            producer.flush();
            for (Future<RecordMetadata> future : sent) {
                try {
                    offsets.add(future.get().offset());
                } catch (ExecutionException e) {
                    errors.add(rootCause(e));
                }
            }
        }
        Map<String, Object> answer = new TreeMap<>();
        answer.put("offsets", offsets);
        answer.put("errors", errors);
        return answer;
    }

    // -- admin -----------------------------------------------------------------------------
    static Map<String, Object> admin(String bootstrap, String topic) throws Exception {
        Properties p = common(bootstrap);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        Map<String, Object> answer = new TreeMap<>();
        try (Admin admin = Admin.create(p)) {
            Map<String, Boolean> topics = new TreeMap<>();
            for (TopicListing listing : admin.listTopics(new ListTopicsOptions().listInternal(true)).listings().get()) {
                topics.put(listing.name(), listing.isInternal());
            }
            answer.put("topics", topics);
            Set<String> plain = admin.listTopics().names().get();
            answer.put("topicsWithoutInternal", new ArrayList<>(new java.util.TreeSet<>(plain)));
            DescribeClusterResult cluster = admin.describeCluster();
            List<Integer> nodes = new ArrayList<>();
            for (Node node : cluster.nodes().get()) {
                nodes.add(node.id());
            }
            answer.put("nodes", nodes.size());
            answer.put("controllerIsANode", nodes.contains(cluster.controller().get().id()));
            answer.put("clusterIdPresent", cluster.clusterId().get() != null);
            ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            Config config = admin.describeConfigs(List.of(resource)).all().get().get(resource);
            Map<String, Object> configs = new TreeMap<>();
            for (ConfigEntry entry : config.entries()) {
                Map<String, Object> one = new TreeMap<>();
                one.put("value", entry.value());
                one.put("isDefault", entry.isDefault());
                one.put("source", entry.source().name());
                one.put("sensitive", entry.isSensitive());
                configs.put(entry.name(), one);
            }
            answer.put("configs", configs);
            ConfigResource missing = new ConfigResource(ConfigResource.Type.TOPIC, "no-such-topic");
            try {
                admin.describeConfigs(List.of(missing)).all().get();
                answer.put("unknownTopicConfigs", "none");
            } catch (ExecutionException e) {
                answer.put("unknownTopicConfigs", rootCause(e));
            }
        }
        return answer;
    }

    // -- rebalance with a commit on revocation ----------------------------------------------
    private static KafkaConsumer<byte[], byte[]> consumer(String bootstrap, String group) {
        Properties p = common(bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
        p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        return new KafkaConsumer<>(p);
    }

    /** A member that commits its position of every revoked partition before giving it up. */
    private static final class Member implements ConsumerRebalanceListener {
        final KafkaConsumer<byte[], byte[]> consumer;
        final Map<String, Integer> seen;
        final List<String> commitErrors = new ArrayList<>();
        final AtomicInteger assigned = new AtomicInteger();
        final AtomicInteger received = new AtomicInteger();

        Member(KafkaConsumer<byte[], byte[]> consumer, Map<String, Integer> seen) {
            this.consumer = consumer;
            this.seen = seen;
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            Map<TopicPartition, OffsetAndMetadata> positions = new HashMap<>();
            for (TopicPartition tp : partitions) {
                positions.put(tp, new OffsetAndMetadata(consumer.position(tp)));
            }
            try {
                consumer.commitSync(positions);
            } catch (RuntimeException e) {
                commitErrors.add(e.getClass().getSimpleName());
            }
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            assigned.set(consumer.assignment().size());
        }

        void pollOnce() {
            for (ConsumerRecord<byte[], byte[]> record : consumer.poll(POLL)) {
                seen.merge(record.partition() + "@" + record.offset(), 1, Integer::sum);
                received.incrementAndGet();
            }
        }
    }

    static Map<String, Object> rebalance(String bootstrap, String topic, String group, int records)
            throws Exception {
        Map<String, Integer> seen = new ConcurrentHashMap<>();
        long deadline = System.currentTimeMillis() + DEADLINE_MS;
        Member first = new Member(consumer(bootstrap, group), seen);
        first.consumer.subscribe(List.of(topic), first);
        while (seen.size() < records && System.currentTimeMillis() < deadline) {
            first.pollOnce();
        }
        int beforeJoin = seen.size();
        AtomicBoolean stop = new AtomicBoolean();
        Member second = new Member(consumer(bootstrap, group), seen);
        Thread thread = new Thread(() -> {
            second.consumer.subscribe(List.of(topic), second);
            while (!stop.get()) {
                second.pollOnce();
            }
            second.consumer.close();
        });
        thread.start();
        // The group has settled once each member owns one of the two partitions.
        while ((first.assigned.get() != 1 || second.assigned.get() != 1)
               && System.currentTimeMillis() < deadline) {
            first.pollOnce();
        }
        boolean settled = first.assigned.get() == 1 && second.assigned.get() == 1;
        // New records after the rebalance: once all of them have arrived, so has any old
        // record a partition's new owner re-read (each partition is read in offset order).
        int more = 20;
        Properties p = common(bootstrap);
        try (KafkaProducer<byte[], byte[]> producer = producer(p)) {
            for (int i = 0; i < more; i++) {
                producer.send(new ProducerRecord<>(topic, i % 2, null, ("after-" + i).getBytes()));
            }
        }
        while (seen.size() < records + more && System.currentTimeMillis() < deadline) {
            first.pollOnce();
        }
        stop.set(true);
        thread.join();
        first.consumer.close();
        int redelivered = 0;
        for (int count : seen.values()) {
            redelivered += count - 1;
        }
        Map<String, Object> answer = new TreeMap<>();
        answer.put("seenBeforeJoin", beforeJoin);
        answer.put("settled", settled);
        answer.put("distinct", seen.size());
        answer.put("redelivered", redelivered);
        answer.put("commitErrors", first.commitErrors);
        return answer;
    }

    // -- transactions ----------------------------------------------------------------------
    static Map<String, Object> transactional(String bootstrap, String topic) {
        Properties p = common(bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "peer-txn-" + topic);
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "15000");
        Map<String, Object> answer = new TreeMap<>();
        try (KafkaProducer<byte[], byte[]> producer = producer(p)) {
            producer.initTransactions();
            answer.put("initTransactions", "ok");
        } catch (RuntimeException e) {
            answer.put("initTransactions", e.getClass().getSimpleName());
            answer.put("message", String.valueOf(e.getMessage()));
        }
        return answer;
    }
}
