// Kafka's own record classes (kafka-clients 4.3.1, which still hold the legacy v0/v1 builder and
// readers) writing and reading legacy message sets, for tests/integration/storagecore/
// test_legacy_kafka_oracle.py: segments Kafka's MemoryRecordsBuilder wrote must read here as
// Kafka reads them, and what storagecore's cleaner wrote must read in Kafka as it does here.
// One scenario per run, one JSON object on stdout.
//
//   write FILE SPEC...   appends one MemoryRecordsBuilder output per SPEC to FILE, where SPEC is
//                        magic:codec:timestampType:baseOffset:count:keys:ts0 (codec none, gzip,
//                        snappy or lz4; timestampType CreateTime or LogAppendTime, whose append
//                        time is ts0 + 100000). Record i: key "k<i % keys>" (null when i % 5 ==
//                        3), value "v<i>" (null, a tombstone, when i % 4 == 1), timestamp ts0+i
//   read FILE            every batch of FILE (FileRecords, ensureValid) and its records:
//                        offset, timestamp, key and value as base64 (null stays null), and per
//                        batch magic, lastOffset, codec and timestamp type

import java.io.File;
import java.io.FileOutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.record.internal.CompressionType;
import org.apache.kafka.common.record.internal.FileLogInputStream.FileChannelRecordBatch;
import org.apache.kafka.common.record.internal.FileRecords;
import org.apache.kafka.common.record.internal.MemoryRecords;
import org.apache.kafka.common.record.internal.MemoryRecordsBuilder;
import org.apache.kafka.common.record.internal.Record;

public final class LegacyRecords {
    public static void main(String[] args) throws Exception {
        Map<String, Object> answer = switch (args[0]) {
            case "write" -> write(args[1], List.of(args).subList(2, args.length));
            case "read" -> read(args[1]);
            default -> throw new IllegalArgumentException("unknown scenario " + args[0]);
        };
        System.out.println(new ObjectMapper().writeValueAsString(answer));
    }

    private static Map<String, Object> write(String path, List<String> specs) throws Exception {
        int bytes = 0;
        try (FileOutputStream out = new FileOutputStream(path, true)) {
            for (String spec : specs) {
                String[] f = spec.split(":");
                byte magic = Byte.parseByte(f[0]);
                CompressionType codec = CompressionType.forName(f[1]);
                TimestampType type = TimestampType.forName(f[2]);
                long base = Long.parseLong(f[3]);
                int count = Integer.parseInt(f[4]);
                int keys = Integer.parseInt(f[5]);
                long ts0 = Long.parseLong(f[6]);
                long appendTime = type == TimestampType.LOG_APPEND_TIME ? ts0 + 100_000 : -1;
                ByteBuffer buffer = ByteBuffer.allocate(1 << 20);
                MemoryRecordsBuilder builder = new MemoryRecordsBuilder(buffer, magic,
                    Compression.of(codec).build(), type, base, appendTime, -1L, (short) -1, -1,
                    false, false, -1, buffer.capacity());
                for (int i = 0; i < count; i++) {
                    byte[] key = i % 5 == 3 ? null : ("k" + (i % keys)).getBytes(StandardCharsets.UTF_8);
                    byte[] value = i % 4 == 1 ? null : ("v" + i).getBytes(StandardCharsets.UTF_8);
                    builder.appendWithOffset(base + i, ts0 + i, key, value);
                }
                MemoryRecords records = builder.build();
                ByteBuffer data = records.buffer();
                byte[] raw = new byte[data.remaining()];
                data.get(raw);
                out.write(raw);
                bytes += raw.length;
            }
        }
        Map<String, Object> answer = new LinkedHashMap<>();
        answer.put("bytes", bytes);
        return answer;
    }

    private static Map<String, Object> read(String path) throws Exception {
        List<Map<String, Object>> batches = new ArrayList<>();
        List<Map<String, Object>> records = new ArrayList<>();
        try (FileRecords file = FileRecords.open(new File(path), false)) {
            for (FileChannelRecordBatch batch : file.batches()) {
                batch.ensureValid();
                Map<String, Object> b = new LinkedHashMap<>();
                b.put("magic", (int) batch.magic());
                b.put("lastOffset", batch.lastOffset());
                b.put("codec", batch.compressionType().name);
                b.put("timestampType", batch.timestampType().name);
                b.put("maxTimestamp", batch.maxTimestamp());
                batches.add(b);
                for (Record record : batch) {
                    Map<String, Object> r = new LinkedHashMap<>();
                    r.put("offset", record.offset());
                    r.put("timestamp", record.timestamp());
                    r.put("key", base64(record.key()));
                    r.put("value", base64(record.value()));
                    records.add(r);
                }
            }
        }
        Map<String, Object> answer = new LinkedHashMap<>();
        answer.put("batches", batches);
        answer.put("records", records);
        return answer;
    }

    private static String base64(ByteBuffer buffer) {
        if (buffer == null) return null;
        byte[] raw = new byte[buffer.remaining()];
        buffer.duplicate().get(raw);
        return Base64.getEncoder().encodeToString(raw);
    }
}
