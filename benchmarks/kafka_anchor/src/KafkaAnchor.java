/*
 * Kafka's own classes on bytes that Logkeeper wrote: the anchor figures of benchmarks/bench_cleaner.py
 * and benchmarks/bench_log.py. Built and run by benchmarks/kafka_anchor.py (javac against the
 * classpath of ../pom.xml); prints one JSON object on stdout.
 *
 *   java KafkaAnchor clean  <runs> <warmup> <map-bytes> <out-dir> <segment.log>... [--keep]
 *   java KafkaAnchor append <runs> <warmup> <codec: none|lz4> <out-dir> <batches-file>
 *
 * clean: one cleaning round as Kafka's Cleaner does it for a plain, non-transactional log without
 * tombstones: an offset map (SkimpyOffsetMap, MD5) filled from every record key of the segments
 * (buildOffsetMapForSegment: read buffer, MemoryRecords, streaming iterator, put, latest offset),
 * then MemoryRecords.filterTo over every chunk with Cleaner's shouldRetainRecord rule and its
 * batch retention (the round's last batch kept even if empty), the retained bytes appended to a
 * FileRecords and flushed. I/O buffers of Kafka's defaults (log.cleaner.io.buffer.size 512 KiB
 * split into a read and a write buffer). Not included: the offset and time indexes of the
 * cleaned segment, the swap, the checkpoint (Logkeeper's round does all of those).
 *
 * append: the leader's work per produce batch, as UnifiedLog.analyzeAndValidateRecords and
 * LogValidator do it (base offset 0 from clients, size, batch CRC via isValid, then Kafka's own
 * LogValidator.validateMessagesAndAssignOffsets: every record iterated and checked, lz4
 * decompressed, offsets and leader epoch set in place), then FileRecords.append; versus a plain
 * FileChannel.write of the same buffers; both sides end with one force (flush). Not included:
 * the segment's offset and time index entries, producer state, the high watermark.
 *
 * Warm JIT: <warmup> untimed runs first, then the best of <runs>; the first run is reported too,
 * and (clean) every timed run's seconds, so that the caller can print Kafka's spread. Before each
 * run of clean, System.gc(): no run pays for the garbage of the one before it.
 */

import java.io.File;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.StandardOpenOption;
import java.security.DigestException;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.record.internal.CompressionType;
import org.apache.kafka.common.record.internal.FileRecords;
import org.apache.kafka.common.record.internal.MemoryRecords;
import org.apache.kafka.common.record.internal.MutableRecordBatch;
import org.apache.kafka.common.record.internal.Record;
import org.apache.kafka.common.record.internal.RecordBatch;
import org.apache.kafka.common.utils.BufferSupplier;
import org.apache.kafka.common.utils.CloseableIterator;
import org.apache.kafka.common.utils.PrimitiveRef;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.storage.internals.log.AppendOrigin;
import org.apache.kafka.storage.internals.log.LogValidator;
import org.apache.kafka.storage.internals.log.SkimpyOffsetMap;

public final class KafkaAnchor {
    /** log.cleaner.io.buffer.size (512 KiB) / threads (1) / 2: Kafka's read and write buffers. */
    private static final int IO_BUFFER_BYTES = 512 * 1024 / 2;
    /** log.cleaner.io.buffer.load.factor: the map is full at this share of its slots. */
    private static final double DEDUPE_LOAD_FACTOR = 0.9;
    /** message.max.bytes default: Kafka grows the cleaner's buffers up to this. */
    private static final int MAX_MESSAGE_BYTES = 1048588;
    private static final TopicPartition TP = new TopicPartition("bench", 0);

    private KafkaAnchor() {}

    public static void main(String[] args) throws Exception {
        if (args.length < 1) throw new IllegalArgumentException("usage: clean|append ...");
        switch (args[0]) {
            case "clean" -> clean(args);
            case "append" -> append(args);
            default -> throw new IllegalArgumentException("unknown command " + args[0]);
        }
    }

    // -- the cleaner -----------------------------------------------------------------------------

    /** What one round did: records and bytes read by the filter pass, what it kept. */
    private record CleanResult(long records, long bytes, long retainedRecords, long retainedBytes) {}

    private static void clean(String[] args) throws Exception {
        int runs = Integer.parseInt(args[1]);
        int warmup = Integer.parseInt(args[2]);
        int mapBytes = Integer.parseInt(args[3]);
        File outDir = new File(args[4]);
        boolean keep = false; // --keep: leave the last run's cleaned file for a byte comparison
        List<File> segments = new ArrayList<>();
        for (int i = 5; i < args.length; i++) {
            if (args[i].equals("--keep")) keep = true;
            else segments.add(new File(args[i]));
        }
        SkimpyOffsetMap map = new SkimpyOffsetMap(mapBytes); // MD5, as Kafka's cleaner
        CleanResult result = null;
        double first = 0;
        double best = Double.MAX_VALUE;
        List<String> times = new ArrayList<>(); // every timed run, for the spread
        File kept = null;
        for (int run = 0; run < warmup + runs; run++) {
            File out = new File(outDir, "kafka-cleaned-" + run + ".log");
            // A collection now rather than inside the timed run: the heap is empty of the last
            // run's garbage when the next starts (favours Kafka; the run's own garbage is its).
            System.gc();
            long start = System.nanoTime();
            result = cleanOnce(map, segments, out);
            double seconds = (System.nanoTime() - start) / 1e9;
            if (keep && run == warmup + runs - 1) kept = out;
            else Files.delete(out.toPath());
            if (run == 0) first = seconds;
            if (run >= warmup) {
                best = Math.min(best, seconds);
                times.add(String.format(Locale.ROOT, "%.6f", seconds));
            }
        }
        System.out.printf(
            Locale.ROOT,
            "{\"records\": %d, \"bytes\": %d, \"retained_records\": %d, \"retained_bytes\": %d, "
                + "\"best_s\": %.6f, \"first_s\": %.6f, \"times_s\": [%s], \"runs\": %d, "
                + "\"warmup\": %d, \"map_slots\": %d, \"output\": %s}%n",
            result.records, result.bytes, result.retainedRecords, result.retainedBytes,
            best, first, String.join(", ", times), runs, warmup, map.slots(),
            kept == null ? "null" : "\"" + kept.getAbsolutePath().replace("\\", "\\\\").replace("\"", "\\\"") + "\"");
    }

    private static CleanResult cleanOnce(SkimpyOffsetMap map, List<File> segments, File out)
            throws IOException, DigestException {
        map.clear();
        ByteBuffer readBuffer = ByteBuffer.allocate(IO_BUFFER_BYTES);
        ByteBuffer writeBuffer = ByteBuffer.allocate(IO_BUFFER_BYTES);
        BufferSupplier decompression = BufferSupplier.create();
        List<FileRecords> sources = new ArrayList<>();
        for (File segment : segments) sources.add(FileRecords.open(segment, false));
        try {
            int maxDesiredMapSize = (int) (map.slots() * DEDUPE_LOAD_FACTOR);
            // Pass 1, Cleaner.buildOffsetMapForSegment: every key of the dirty section.
            for (FileRecords source : sources) {
                int position = 0;
                while (position < source.sizeInBytes()) {
                    readBuffer.clear();
                    source.readInto(readBuffer, position);
                    MemoryRecords records = MemoryRecords.readableRecords(readBuffer);
                    for (MutableRecordBatch batch : records.batches()) {
                        try (CloseableIterator<Record> it = batch.streamingIterator(decompression)) {
                            while (it.hasNext()) {
                                Record record = it.next();
                                if (record.hasKey()) {
                                    if (map.size() >= maxDesiredMapSize)
                                        throw new IllegalStateException("offset map full: one round only");
                                    map.put(record.key(), record.offset());
                                }
                            }
                        }
                        map.updateLatestOffset(batch.lastOffset());
                    }
                    int read = records.validBytes();
                    if (read == 0) throw new IllegalStateException("batch larger than the read buffer");
                    position += read;
                }
            }
            // Pass 2, Cleaner.cleanInto: filterTo chunk by chunk into the cleaned file.
            long upperBound = map.latestOffset() + 1;
            MemoryRecords.RecordFilter filter = new RoundFilter(map, upperBound);
            long records = 0;
            long bytes = 0;
            long retainedRecords = 0;
            long retainedBytes = 0;
            FileRecords cleaned = FileRecords.open(out);
            try {
                for (FileRecords source : sources) {
                    int position = 0;
                    while (position < source.sizeInBytes()) {
                        readBuffer.clear();
                        writeBuffer.clear();
                        source.readInto(readBuffer, position);
                        MemoryRecords chunk = MemoryRecords.readableRecords(readBuffer);
                        MemoryRecords.FilterResult result =
                            chunk.filterTo(filter, writeBuffer, decompression);
                        if (result.bytesRead() == 0) throw new IllegalStateException("batch larger than the read buffer");
                        position += result.bytesRead();
                        records += result.messagesRead();
                        bytes += result.bytesRead();
                        retainedRecords += result.messagesRetained();
                        retainedBytes += result.bytesRetained();
                        ByteBuffer output = result.outputBuffer();
                        if (output.position() > 0) {
                            output.flip();
                            cleaned.append(MemoryRecords.readableRecords(output));
                        }
                        if (output.capacity() > writeBuffer.capacity()) writeBuffer = output; // grown by filterTo
                    }
                }
                cleaned.flush();
            } finally {
                cleaned.close();
            }
            return new CleanResult(records, bytes, retainedRecords, retainedBytes);
        } finally {
            for (FileRecords source : sources) source.close();
        }
    }

    /** Cleaner.cleanInto's RecordFilter for a log without producers, transactions or tombstones. */
    private static final class RoundFilter extends MemoryRecords.RecordFilter {
        private final SkimpyOffsetMap map;
        private final long upperBound;

        RoundFilter(SkimpyOffsetMap map, long upperBound) {
            super(System.currentTimeMillis(), 86_400_000L); // delete.retention.ms default
            this.map = map;
            this.upperBound = upperBound;
        }

        @Override
        protected BatchRetentionResult checkBatchRetention(RecordBatch batch) {
            // The round's last batch stays even if empty, so that the last offset is not lost.
            BatchRetention retention = batch.nextOffset() == upperBound
                ? BatchRetention.RETAIN_EMPTY : BatchRetention.DELETE_EMPTY;
            return new BatchRetentionResult(retention, false);
        }

        @Override
        protected boolean shouldRetainRecord(RecordBatch batch, Record record) {
            // Cleaner.shouldRetainRecord: the latest offset for the key, a value or a live horizon.
            if (record.offset() > map.latestOffset()) return true;
            if (!record.hasKey()) return false;
            long found;
            try {
                found = map.get(record.key());
            } catch (DigestException e) {
                throw new IllegalStateException(e);
            }
            boolean retainDeletes = batch.deleteHorizonMs().isEmpty()
                || currentTime < batch.deleteHorizonMs().getAsLong();
            return record.offset() >= found && (record.hasValue() || retainDeletes);
        }
    }

    // -- the leader's append -----------------------------------------------------------------------

    private static void append(String[] args) throws Exception {
        int runs = Integer.parseInt(args[1]);
        int warmup = Integer.parseInt(args[2]);
        CompressionType codec = CompressionType.forName(args[3]);
        File outDir = new File(args[4]);
        ByteBuffer all = ByteBuffer.wrap(Files.readAllBytes(new File(args[5]).toPath()));
        // One buffer per batch, as each produce request brings its own.
        List<ByteBuffer> batches = new ArrayList<>();
        for (MutableRecordBatch batch : MemoryRecords.readableRecords(all).batches()) {
            if (batch.compressionType() != codec)
                throw new IllegalArgumentException("batch at " + batch.baseOffset() + " is " + batch.compressionType());
            ByteBuffer copy = ByteBuffer.allocate(batch.sizeInBytes());
            batch.writeTo(copy);
            copy.flip();
            batches.add(copy);
        }
        long totalBytes = 0;
        long totalRecords = 0;
        for (ByteBuffer b : batches) {
            totalBytes += b.remaining();
            for (MutableRecordBatch batch : MemoryRecords.readableRecords(b.duplicate()).batches())
                totalRecords += batch.countOrNull();
        }
        Compression target = Compression.of(codec).build(); // compression.type=producer
        double bestPlain = Double.MAX_VALUE;
        double bestKafka = Double.MAX_VALUE;
        double firstKafka = 0;
        for (int run = 0; run < warmup + runs; run++) {
            // Alternate the sides so that a noisy stretch of the shared machine hits both alike.
            File plainFile = new File(outDir, "plain-" + run + ".bin");
            long start = System.nanoTime();
            plainWrite(batches, plainFile);
            double plain = (System.nanoTime() - start) / 1e9;
            Files.delete(plainFile.toPath());

            for (ByteBuffer b : batches) b.putLong(0, 0L); // as a client sends it: base offset 0
            File logFile = new File(outDir, "00000000000000000000-" + run + ".log");
            start = System.nanoTime();
            leaderAppend(batches, logFile, codec, target);
            double kafka = (System.nanoTime() - start) / 1e9;
            Files.delete(logFile.toPath());
            if (run == 0) firstKafka = kafka;
            if (run >= warmup) {
                bestPlain = Math.min(bestPlain, plain);
                bestKafka = Math.min(bestKafka, kafka);
            }
        }
        System.out.printf(
            Locale.ROOT,
            "{\"codec\": \"%s\", \"batches\": %d, \"records\": %d, \"bytes\": %d, "
                + "\"plain_s\": %.6f, \"kafka_s\": %.6f, \"kafka_first_s\": %.6f, "
                + "\"runs\": %d, \"warmup\": %d, \"validator\": \"%s\"}%n",
            codec.name, batches.size(), totalRecords, totalBytes, bestPlain, bestKafka, firstKafka,
            runs, warmup, LogValidator.class.getName());
    }

    private static void plainWrite(List<ByteBuffer> batches, File file) throws IOException {
        try (FileChannel channel = FileChannel.open(
                file.toPath(), StandardOpenOption.CREATE, StandardOpenOption.WRITE,
                StandardOpenOption.TRUNCATE_EXISTING)) {
            for (ByteBuffer b : batches) {
                ByteBuffer view = b.duplicate();
                while (view.hasRemaining()) channel.write(view);
            }
            channel.force(true);
        }
    }

    private static void leaderAppend(
            List<ByteBuffer> batches, File file, CompressionType codec, Compression target)
            throws IOException {
        LogValidator.MetricsRecorder metrics = new NoMetrics();
        BufferSupplier decompression = BufferSupplier.create(); // the request handler's, reused
        PrimitiveRef.LongRef nextOffset = PrimitiveRef.ofLong(0);
        FileRecords log = FileRecords.open(file);
        try {
            for (ByteBuffer b : batches) {
                MemoryRecords records = MemoryRecords.readableRecords(b.duplicate());
                // UnifiedLog.analyzeAndValidateRecords: offsets from clients, size, CRC.
                for (MutableRecordBatch batch : records.batches()) {
                    if (batch.baseOffset() != 0)
                        throw new IllegalStateException("base offset " + batch.baseOffset() + " from a client");
                    if (batch.sizeInBytes() > MAX_MESSAGE_BYTES)
                        throw new IllegalStateException("batch of " + batch.sizeInBytes() + " bytes");
                    if (!batch.isValid()) throw new IllegalStateException("CRC mismatch");
                }
                LogValidator validator = new LogValidator(
                    records, TP, Time.SYSTEM, codec, target, false, RecordBatch.MAGIC_VALUE_V2,
                    TimestampType.CREATE_TIME, Long.MAX_VALUE, 3_600_000L, 0, AppendOrigin.CLIENT);
                LogValidator.ValidationResult result =
                    validator.validateMessagesAndAssignOffsets(nextOffset, metrics, decompression);
                if (result.messageSizeMaybeChanged())
                    throw new IllegalStateException("LogValidator rebuilt the batch: not in place");
                log.append(result.validatedRecords());
            }
            log.flush();
        } finally {
            log.close();
        }
    }

    private static final class NoMetrics implements LogValidator.MetricsRecorder {
        @Override public void recordInvalidMagic() {}
        @Override public void recordInvalidOffset() {}
        @Override public void recordInvalidSequence() {}
        @Override public void recordInvalidChecksums() {}
        @Override public void recordNoKeyCompactedTopic() {}
    }
}
