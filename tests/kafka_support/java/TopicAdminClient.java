// Kafka's Java admin client (kafka-clients 4.3.1) creating, growing, reconfiguring and deleting
// topics, for the differential tests of client topics: one scenario per run, against whatever
// bootstrap address it is given (the real broker or `logkeeper serve`), answering one JSON
// object on stdout. Each step's answer is "ok" (with what the client reports) or the simple
// name of the exception the client raised; the Python side compares both peers' answers.
//
//   lifecycle BOOTSTRAP PREFIX    every verb on topics named PREFIX..., with Kafka's refusals
//   try BOOTSTRAP VERB TOPIC      one verb (create, delete, grow, alter): the exception's
//                                 simple name and message, for refusals only one peer makes

import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutionException;

import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.config.ConfigResource;

public final class TopicAdminClient {
    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", args[1]);
        p.put("client.id", "topic-admin-client");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        Map<String, Object> answer;
        try (Admin admin = Admin.create(p)) {
            switch (args[0]) {
                case "lifecycle" -> answer = lifecycle(admin, args[2]);
                case "try" -> answer = attempt(admin, args[2], args[3]);
                default -> throw new IllegalArgumentException("unknown scenario " + args[0]);
            }
        }
        System.out.println(new ObjectMapper().writeValueAsString(answer));
    }

    private static Throwable cause(Throwable error) {
        Throwable cause = error;
        while (cause instanceof ExecutionException && cause.getCause() != null) {
            cause = cause.getCause();
        }
        return cause;
    }

    /** "ok" and what ``step`` returned, or the exception's simple name. */
    private static Object step(Callable<Object> step) throws Exception {
        try {
            Object value = step.call();
            return value == null ? "ok" : value;
        } catch (ExecutionException e) {
            return cause(e).getClass().getSimpleName();
        }
    }

    /** A read taken after a change: the broker applies a committed change to the metadata it
     *  answers from a moment later (KRaft), so the read is repeated until it differs from the
     *  one taken before the change, for at most ten seconds. The worker answers at once. */
    private static Object after(Object before, Callable<Object> read) throws Exception {
        long deadline = System.nanoTime() + 10_000_000_000L;
        Object value = step(read);
        while (value.equals(before) && System.nanoTime() < deadline) {
            Thread.sleep(20);
            value = step(read);
        }
        return value;
    }

    private static NewTopic topic(String name, int partitions, short factor, Map<String, String> configs) {
        return new NewTopic(name, Optional.of(partitions), Optional.of(factor)).configs(configs);
    }

    private static Object create(Admin admin, NewTopic topic, boolean validateOnly) throws Exception {
        return step(() -> {
            CreateTopicsResult result = admin.createTopics(List.of(topic),
                new CreateTopicsOptions().validateOnly(validateOnly));
            result.all().get();
            Map<String, Object> created = new TreeMap<>();
            created.put("partitions", result.numPartitions(topic.name()).get());
            created.put("replicationFactor", result.replicationFactor(topic.name()).get());
            Config config = result.config(topic.name()).get();
            created.put("cleanup.policy", config.get("cleanup.policy").value());
            created.put("retention.ms", config.get("retention.ms").value());
            return created;
        });
    }

    private static Object alter(Admin admin, String topic, Collection<AlterConfigOp> ops) throws Exception {
        ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        return step(() -> {
            admin.incrementalAlterConfigs(Map.of(resource, ops)).all().get();
            return null;
        });
    }

    private static Map<String, Object> configs(Admin admin, String topic, String... keys) throws Exception {
        ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        Config config = admin.describeConfigs(List.of(resource)).all().get().get(resource);
        Map<String, Object> shown = new TreeMap<>();
        for (String key : keys) {
            ConfigEntry entry = config.get(key);
            shown.put(key, entry.value() + " " + entry.source().name());
        }
        return shown;
    }

    private static AlterConfigOp op(String key, String value, AlterConfigOp.OpType type) {
        return new AlterConfigOp(new ConfigEntry(key, value), type);
    }

    static Map<String, Object> lifecycle(Admin admin, String prefix) throws Exception {
        Map<String, Object> answer = new TreeMap<>();
        String a = prefix + "a";
        short one = 1;
        answer.put("01 create", create(admin, topic(a, 3, one,
            Map.of("cleanup.policy", "compact", "min.compaction.lag.ms", "0")), false));
        answer.put("02 create again", create(admin, topic(a, 3, one, Map.of()), false));
        answer.put("03 bad name", create(admin, topic(prefix + "bad name!", 1, one, Map.of()), false));
        answer.put("04 dot collides with underscore", create(admin, topic(prefix.replace("_", ".") + "a", 1, one, Map.of()), false));
        answer.put("05 three replicas", create(admin, topic(prefix + "b", 1, (short) 3, Map.of()), false));
        answer.put("06 zero partitions", create(admin, topic(prefix + "c", 0, one, Map.of()), false));
        answer.put("07 max.compaction.lag.ms 0", create(admin, topic(prefix + "d", 1, one,
            Map.of("cleanup.policy", "compact", "max.compaction.lag.ms", "0")), false));
        answer.put("08 unknown key", create(admin, topic(prefix + "e", 1, one, Map.of("no.such.key", "1")), false));
        answer.put("09 not a number", create(admin, topic(prefix + "e", 1, one, Map.of("retention.ms", "soon")), false));
        answer.put("10 validate only", create(admin, topic(prefix + "f", 2, one, Map.of("retention.ms", "1000")), true));
        answer.put("11 validated topic absent", admin.listTopics().names().get().contains(prefix + "f"));
        answer.put("12 default partitions", step(() -> {
            admin.createTopics(List.of(new NewTopic(prefix + "g", Optional.empty(), Optional.empty()))).all().get();
            return admin.describeTopics(List.of(prefix + "g")).allTopicNames().get().get(prefix + "g").partitions().size();
        }));
        Callable<Object> partitionCount = () ->
            admin.describeTopics(List.of(a)).allTopicNames().get().get(a).partitions().size();
        Object partitionsBefore = step(partitionCount);
        answer.put("13 grow to 5", step(() -> {
            admin.createPartitions(Map.of(a, NewPartitions.increaseTo(5))).all().get();
            return null;
        }));
        answer.put("14 shrink to 4", step(() -> {
            admin.createPartitions(Map.of(a, NewPartitions.increaseTo(4))).all().get();
            return null;
        }));
        answer.put("15 grow to 5 again", step(() -> {
            admin.createPartitions(Map.of(a, NewPartitions.increaseTo(5))).all().get();
            return null;
        }));
        answer.put("16 grow unknown", step(() -> {
            admin.createPartitions(Map.of(prefix + "none", NewPartitions.increaseTo(5))).all().get();
            return null;
        }));
        answer.put("17 partitions after growing", after(partitionsBefore, partitionCount));
        Callable<Object> configs20 = () -> configs(admin, a, "retention.ms", "cleanup.policy", "segment.bytes");
        Object configsBefore20 = step(configs20);
        answer.put("18 set retention.ms", alter(admin, a, List.of(op("retention.ms", "3600000", AlterConfigOp.OpType.SET))));
        answer.put("19 append cleanup.policy", alter(admin, a, List.of(op("cleanup.policy", "delete", AlterConfigOp.OpType.APPEND))));
        answer.put("20 configs after set and append", after(configsBefore20, configs20));
        answer.put("21 set max.compaction.lag.ms 0", alter(admin, a, List.of(op("max.compaction.lag.ms", "0", AlterConfigOp.OpType.SET))));
        answer.put("22 append to retention.ms", alter(admin, a, List.of(op("retention.ms", "1", AlterConfigOp.OpType.APPEND))));
        answer.put("23 unknown key", alter(admin, a, List.of(op("no.such.key", "1", AlterConfigOp.OpType.SET))));
        Callable<Object> configs25 = () -> configs(admin, a, "retention.ms", "cleanup.policy");
        Object configsBefore25 = step(configs25);
        answer.put("24 subtract delete, delete retention.ms", alter(admin, a, List.of(
            op("cleanup.policy", "delete", AlterConfigOp.OpType.SUBTRACT),
            op("retention.ms", null, AlterConfigOp.OpType.DELETE))));
        answer.put("25 configs after subtract and delete", after(configsBefore25, configs25));
        answer.put("26 alter unknown topic", alter(admin, prefix + "none", List.of(op("retention.ms", "1", AlterConfigOp.OpType.SET))));
        answer.put("27 validate-only alter keeps the value", step(() -> {
            ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, a);
            admin.incrementalAlterConfigs(Map.of(resource, List.of(op("retention.ms", "5", AlterConfigOp.OpType.SET))),
                new org.apache.kafka.clients.admin.AlterConfigsOptions().validateOnly(true)).all().get();
            return configs(admin, a, "retention.ms");
        }));
        answer.put("28 delete", step(() -> {
            admin.deleteTopics(List.of(a, prefix + "g")).all().get();
            return null;
        }));
        answer.put("29 delete again", step(() -> {
            admin.deleteTopics(List.of(a)).all().get();
            return null;
        }));
        return answer;
    }

    static Map<String, Object> attempt(Admin admin, String verb, String topic) throws Exception {
        Map<String, Object> answer = new TreeMap<>();
        try {
            switch (verb) {
                case "create" -> admin.createTopics(List.of(topic(topic, 1, (short) 1, Map.of()))).all().get();
                case "delete" -> admin.deleteTopics(List.of(topic)).all().get();
                case "grow" -> {
                    TopicDescription described = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
                    admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(described.partitions().size() + 1))).all().get();
                }
                case "alter" -> admin.incrementalAlterConfigs(Map.of(
                    new ConfigResource(ConfigResource.Type.TOPIC, topic),
                    List.of(op("retention.ms", "1000", AlterConfigOp.OpType.SET)))).all().get();
                default -> throw new IllegalArgumentException("unknown verb " + verb);
            }
            answer.put("outcome", "ok");
        } catch (ExecutionException e) {
            Throwable error = cause(e);
            answer.put("outcome", error.getClass().getSimpleName());
            answer.put("message", String.valueOf(error.getMessage()));
        }
        List<String> names = new ArrayList<>(admin.listTopics().names().get());
        answer.put("exists", names.contains(topic));
        return answer;
    }
}
