// Kafka Streams' word count (kafka-streams 4.3.1) for the differential tests: lines of words
// from INPUT are split, grouped by word (through a repartition topic) and counted into a KTable
// kept in the state store "counts" and its compacted changelog topic; both internal topics are
// created by Streams through the Admin API, named APP_ID-... The counts also go to OUTPUT.
//
//   WordCount BOOTSTRAP APP_ID INPUT OUTPUT GUARANTEE STATE_DIR EXPECTED_WORDS
//
// GUARANTEE is at_least_once or exactly_once_v2. While it runs it prints one line
// {"counted": N} whenever the sum of the counts changes; once the sum reached EXPECTED_WORDS
// and stayed still for two seconds it closes the application (a last commit) and prints
// {"table": {word: count}, "counted": N}. It runs until then, across unavailable brokers
// (the tests SIGKILL the worker under it), or fails after its deadline with exit 1.

import java.time.Duration;
import java.util.Arrays;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;

import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StoreQueryParameters;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.InvalidStateStoreException;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.QueryableStoreTypes;
import org.apache.kafka.streams.state.ReadOnlyKeyValueStore;

public final class WordCount {
    private static final long DEADLINE_MS = 240_000;
    private static final long QUIET_MS = 2_000;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], appId = args[1], input = args[2], output = args[3];
        String guarantee = args[4], stateDir = args[5];
        long expected = Long.parseLong(args[6]);
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, "200");
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, "0");
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, "1");
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class.getName());
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class.getName());
        p.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
        // A worker restarted under the application is back within seconds: retry quickly.
        p.put(StreamsConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "500");
        p.put(StreamsConfig.RETRY_BACKOFF_MS_CONFIG, "200");

        StreamsBuilder builder = new StreamsBuilder();
        builder.<String, String>stream(input)
            .flatMapValues(line -> Arrays.asList(line.toLowerCase().split("\\s+")))
            .filter((key, word) -> !word.isEmpty())
            .groupBy((key, word) -> word)
            .count(Materialized.as("counts"))
            .toStream()
            .to(output, Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(builder.build(), p);
        // A thread that dies on an error the broker's absence caused is replaced, as an
        // operator would restart the application: the counts must still come out exact.
        streams.setUncaughtExceptionHandler(error -> {
            System.err.println("stream thread failed, replacing it: " + error);
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        streams.start();
        ObjectMapper json = new ObjectMapper();
        long deadline = System.currentTimeMillis() + DEADLINE_MS;
        long shown = -1, stillSince = System.currentTimeMillis();
        Map<String, Long> table = new TreeMap<>();
        while (true) {
            if (System.currentTimeMillis() > deadline) {
                streams.close(Duration.ofSeconds(10));
                System.err.println("deadline passed with " + shown + " of " + expected + " words counted");
                System.exit(1);
            }
            Map<String, Long> now = read(streams);
            if (now != null) {
                long counted = now.values().stream().mapToLong(Long::longValue).sum();
                if (counted != shown) {
                    shown = counted;
                    stillSince = System.currentTimeMillis();
                    table = now;
                    System.out.println(json.writeValueAsString(Map.of("counted", counted)));
                    System.out.flush();
                } else if (counted >= expected && System.currentTimeMillis() - stillSince >= QUIET_MS) {
                    break;
                }
            }
            Thread.sleep(100);
        }
        streams.close(Duration.ofSeconds(30));
        Map<String, Object> answer = new TreeMap<>();
        answer.put("table", table);
        answer.put("counted", shown);
        System.out.println(json.writeValueAsString(answer));
    }

    /** The store's content, or null while it is not queryable (rebalancing, restoring). */
    private static Map<String, Long> read(KafkaStreams streams) {
        try {
            ReadOnlyKeyValueStore<String, Long> store = streams.store(
                StoreQueryParameters.fromNameAndType("counts", QueryableStoreTypes.keyValueStore()));
            Map<String, Long> table = new TreeMap<>();
            try (KeyValueIterator<String, Long> all = store.all()) {
                while (all.hasNext()) {
                    KeyValue<String, Long> entry = all.next();
                    table.put(entry.key, entry.value);
                }
            }
            return table;
        } catch (InvalidStateStoreException e) {
            return null;
        }
    }
}
