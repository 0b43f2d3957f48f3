// Kafka's Java client (kafka-clients 4.3.1) in transactions, for the differential tests: one
// scenario per run against a bootstrap address (the real broker or `logkeeper serve`), one JSON
// object on stdout. Values written are "<tag>-<i>"; the read_committed consumer's values are
// the answer the Python side compares across peers.
//
//   commit-abort BOOTSTRAP TOPIC TXNID    commit 10, abort 10, commit 5 over partitions 0 and 1
//   fence BOOTSTRAP TOPIC TXNID           a second producer of the id fences the first mid-txn
//   timeout BOOTSTRAP TOPIC TXNID MS      a transaction left open past transaction.timeout.ms
//   offsets BOOTSTRAP TOPIC TXNID GROUP   sendOffsetsToTransaction, committed then aborted
//   open BOOTSTRAP TOPIC TXNID            sends in a transaction, then halts (no commit/abort)
//   resume BOOTSTRAP TOPIC TXNID          initTransactions over what "open" left, commit 3
//   read BOOTSTRAP TOPIC                  the read_committed and read_uncommitted values
//
// A refused request of the scenario is part of the answer (the exception's class); anything
// else fails the program (a stack trace and exit 1).

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;

import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class TxnClient {
    private static final Duration POLL = Duration.ofMillis(100);
    private static final long DEADLINE_MS = 90_000;

    public static void main(String[] args) throws Exception {
        Map<String, Object> answer = switch (args[0]) {
            case "commit-abort" -> commitAbort(args[1], args[2], args[3]);
            case "fence" -> fence(args[1], args[2], args[3]);
            case "timeout" -> timeout(args[1], args[2], args[3], Integer.parseInt(args[4]));
            case "offsets" -> offsets(args[1], args[2], args[3], args[4]);
            case "open" -> open(args[1], args[2], args[3]);
            case "resume" -> resume(args[1], args[2], args[3]);
            case "read" -> read(args[1], args[2]);
            default -> throw new IllegalArgumentException("unknown scenario " + args[0]);
        };
        System.out.println(new ObjectMapper().writeValueAsString(answer));
    }

    private static KafkaProducer<byte[], byte[]> producer(String bootstrap, String txnId, int timeoutMs) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, Integer.toString(timeoutMs));
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        return new KafkaProducer<>(p);
    }

    private static KafkaConsumer<byte[], byte[]> consumer(String bootstrap, String isolation, String group) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        if (group != null) {
            p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        }
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        return new KafkaConsumer<>(p);
    }

    private static void send(KafkaProducer<byte[], byte[]> producer, String topic, String tag, int count) {
        for (int i = 0; i < count; i++) {
            byte[] value = (tag + "-" + i).getBytes();
            producer.send(new ProducerRecord<>(topic, i % 2, ("k" + i).getBytes(), value));
        }
        producer.flush();
    }

    /** Every value below the end offsets the isolation level shows (read_committed: the last
     *  stable offset), partitions 0 and 1, in offset order per partition. */
    static List<String> values(String bootstrap, String topic, String isolation) {
        List<String> out = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(bootstrap, isolation, null)) {
            List<TopicPartition> tps = List.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1));
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            Map<TopicPartition, Long> end = consumer.endOffsets(tps);
            long deadline = System.currentTimeMillis() + DEADLINE_MS;
            while (tps.stream().anyMatch(tp -> consumer.position(tp) < end.get(tp))) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("positions did not reach " + end);
                }
                for (ConsumerRecord<byte[], byte[]> record : consumer.poll(POLL)) {
                    out.add(record.partition() + ":" + new String(record.value()));
                }
            }
        }
        return out;
    }

    private static Map<String, Object> withValues(Map<String, Object> answer, String bootstrap, String topic) {
        answer.put("committed", values(bootstrap, topic, "read_committed"));
        answer.put("uncommitted", values(bootstrap, topic, "read_uncommitted").size());
        return answer;
    }

    static Map<String, Object> commitAbort(String bootstrap, String topic, String txnId) {
        Map<String, Object> answer = new TreeMap<>();
        try (KafkaProducer<byte[], byte[]> producer = producer(bootstrap, txnId, 60000)) {
            producer.initTransactions();
            producer.beginTransaction();
            send(producer, topic, "c", 10);
            producer.commitTransaction();
            producer.beginTransaction();
            send(producer, topic, "a", 10);
            producer.abortTransaction();
            producer.beginTransaction();
            send(producer, topic, "d", 5);
            producer.commitTransaction();
        }
        return withValues(answer, bootstrap, topic);
    }

    static Map<String, Object> fence(String bootstrap, String topic, String txnId) {
        Map<String, Object> answer = new TreeMap<>();
        KafkaProducer<byte[], byte[]> zombie = producer(bootstrap, txnId, 60000);
        zombie.initTransactions();
        zombie.beginTransaction();
        send(zombie, topic, "zombie", 4);
        try (KafkaProducer<byte[], byte[]> fresh = producer(bootstrap, txnId, 60000)) {
            fresh.initTransactions();
            try {
                zombie.send(new ProducerRecord<>(topic, 0, null, "zombie-late".getBytes())).get();
                answer.put("zombieSend", "ok");
            } catch (Exception e) {
                answer.put("zombieSend", rootCause(e));
            }
            try {
                zombie.commitTransaction();
                answer.put("zombieCommit", "ok");
            } catch (KafkaException e) {
                answer.put("zombieCommit", e.getClass().getSimpleName());
            }
            fresh.beginTransaction();
            send(fresh, topic, "fresh", 4);
            fresh.commitTransaction();
        } finally {
            zombie.close(Duration.ZERO);
        }
        return withValues(answer, bootstrap, topic);
    }

    static Map<String, Object> timeout(String bootstrap, String topic, String txnId, int timeoutMs)
            throws InterruptedException {
        Map<String, Object> answer = new TreeMap<>();
        try (KafkaProducer<byte[], byte[]> producer = producer(bootstrap, txnId, timeoutMs)) {
            producer.initTransactions();
            producer.beginTransaction();
            send(producer, topic, "late", 6);
            // The coordinator aborts the transaction once its timeout passed: the last stable
            // offset (read_committed end offsets) reaches the log end; wait for that.
            answer.put("lsoReachedEnd", waitStable(bootstrap, topic));
            try {
                producer.commitTransaction();
                answer.put("commit", "ok");
            } catch (KafkaException e) {
                answer.put("commit", e.getClass().getSimpleName());
            }
        }
        return withValues(answer, bootstrap, topic);
    }

    /** Until the read_committed end offsets equal the read_uncommitted ones (no open
     *  transaction holds the last stable offset back). */
    static boolean waitStable(String bootstrap, String topic) throws InterruptedException {
        List<TopicPartition> tps = List.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1));
        long deadline = System.currentTimeMillis() + DEADLINE_MS;
        try (KafkaConsumer<byte[], byte[]> committed = consumer(bootstrap, "read_committed", null);
             KafkaConsumer<byte[], byte[]> all = consumer(bootstrap, "read_uncommitted", null)) {
            while (System.currentTimeMillis() < deadline) {
                if (committed.endOffsets(tps).equals(all.endOffsets(tps))) {
                    return true;
                }
                Thread.sleep(POLL.toMillis());  // the pause between two looks at the condition
            }
        }
        return false;
    }

    static Map<String, Object> offsets(String bootstrap, String topic, String txnId, String group) {
        Map<String, Object> answer = new TreeMap<>();
        TopicPartition tp0 = new TopicPartition(topic, 0);
        try (KafkaProducer<byte[], byte[]> producer = producer(bootstrap, txnId, 60000);
             KafkaConsumer<byte[], byte[]> consumer = consumer(bootstrap, "read_committed", group)) {
            producer.initTransactions();
            producer.beginTransaction();
            send(producer, topic, "o", 2);
            producer.sendOffsetsToTransaction(Map.of(tp0, new OffsetAndMetadata(7, "seven")),
                consumer.groupMetadata());
            producer.commitTransaction();
            answer.put("afterCommit", committed(consumer, tp0));
            producer.beginTransaction();
            send(producer, topic, "p", 2);
            producer.sendOffsetsToTransaction(Map.of(tp0, new OffsetAndMetadata(99, "ninety-nine")),
                consumer.groupMetadata());
            producer.abortTransaction();
            answer.put("afterAbort", committed(consumer, tp0));
        }
        return answer;
    }

    private static String committed(KafkaConsumer<byte[], byte[]> consumer, TopicPartition tp) {
        OffsetAndMetadata found = consumer.committed(java.util.Set.of(tp)).get(tp);
        return found == null ? "none" : found.offset() + "/" + found.metadata();
    }

    static Map<String, Object> open(String bootstrap, String topic, String txnId) {
        KafkaProducer<byte[], byte[]> producer = producer(bootstrap, txnId, 600000);
        producer.initTransactions();
        producer.beginTransaction();
        send(producer, topic, "open", 4);
        Map<String, Object> answer = new TreeMap<>();
        answer.put("sent", 4);
        System.out.println(new String(writeJson(answer)));
        System.out.flush();
        Runtime.getRuntime().halt(0);  // dies mid-transaction: no EndTxn, no close
        return answer;
    }

    static Map<String, Object> resume(String bootstrap, String topic, String txnId) {
        Map<String, Object> answer = new TreeMap<>();
        try (KafkaProducer<byte[], byte[]> producer = producer(bootstrap, txnId, 60000)) {
            producer.initTransactions();
            producer.beginTransaction();
            send(producer, topic, "resumed", 3);
            producer.commitTransaction();
        }
        return withValues(answer, bootstrap, topic);
    }

    static Map<String, Object> read(String bootstrap, String topic) {
        return withValues(new TreeMap<>(), bootstrap, topic);
    }

    private static byte[] writeJson(Object value) {
        try {
            return new ObjectMapper().writeValueAsBytes(value);
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    }

    private static String rootCause(Throwable error) {
        Throwable cause = error;
        while (cause.getCause() != null) {
            cause = cause.getCause();
        }
        return cause.getClass().getSimpleName();
    }
}
