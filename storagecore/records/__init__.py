"""Record batches v2: layout, varints, CRC-32C, codecs, batch read/write, .log files."""
