import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;

import org.rocksdb.BlockBasedTableConfig;
import org.rocksdb.BloomFilter;
import org.rocksdb.CompressionType;
import org.rocksdb.FlushOptions;
import org.rocksdb.LRUCache;
import org.rocksdb.Options;
import org.rocksdb.RocksDB;
import org.rocksdb.WriteBufferManager;
import org.rocksdb.WriteOptions;

/**
 * A JVM that exits with RocksDB instances open, as the job's driver JVM did at
 * the end of every run before the job closed its state stores
 * (docs/real-kafka.md, "Known issues"): Spark's bounded-memory setup (one LRU
 * cache and WriteBufferManager for every instance, WAL off), writes, flushes
 * left running in the background, then System.exit(0). The exit runs RocksDB's
 * static destructors under its background threads: with "open" it aborted
 * (SIGABRT, rc 134; "terminate called after throwing an instance of
 * 'std::bad_alloc'" or a SIGSEGV in RocksDB and an hs_err file), with "close"
 * (each instance closed first, as StateStore.stop() does) it did not.
 *
 * <pre>
 * JAR=$(ls .venv/lib/python3.11/site-packages/pyspark/jars/rocksdbjni-*.jar)
 * javac -cp $JAR -d /tmp/exitrace bench/RocksDBExitRace.java
 * for i in $(seq 20); do for mode in open close; do
 *   java -Xmx64m -cp $JAR:/tmp/exitrace RocksDBExitRace /tmp/exitrace 8 3000 $mode
 *   echo "$mode rc=$?"; done; done
 * </pre>
 * Arguments: DIR INSTANCES KEYS open|close [STATS_DUMP_PERIOD_S]; a stats dump
 * period of 1 s makes the periodic stats dump (the thread that threw the
 * std::bad_alloc here) run at the exit far more often than RocksDB's 600 s.
 */
public class RocksDBExitRace {
  public static void main(String[] args) throws Exception {
    Path root = Files.createTempDirectory(Paths.get(args[0]), "race");
    int instances = Integer.parseInt(args[1]);
    int keys = Integer.parseInt(args[2]);
    boolean close = args[3].equals("close");
    RocksDB.loadLibrary();
    long budget = 128L << 20;  // spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB = 128
    LRUCache cache = new LRUCache(budget, -1, false, 0.1);
    WriteBufferManager buffers = new WriteBufferManager(budget / 2, cache);
    BlockBasedTableConfig table = new BlockBasedTableConfig().setBlockCache(cache)
        .setCacheIndexAndFilterBlocks(true).setPinL0FilterAndIndexBlocksInCache(true)
        .setFilterPolicy(new BloomFilter(10)).setBlockSize(4096);
    List<RocksDB> open = new ArrayList<>();
    for (int i = 0; i < instances; i++) {
      Options options = new Options().setCreateIfMissing(true).setTableFormatConfig(table)
          .setWriteBufferManager(buffers).setCompressionType(CompressionType.LZ4_COMPRESSION)
          .setLevel0FileNumCompactionTrigger(2).setWriteBufferSize(256 << 10);
      if (args.length > 4) {
        options.setStatsDumpPeriodSec(Integer.parseInt(args[4]));
      }
      open.add(RocksDB.open(options, root.resolve("db" + i).toString()));
    }
    WriteOptions noWal = new WriteOptions().setDisableWAL(true);
    FlushOptions inBackground = new FlushOptions().setWaitForFlush(false);
    Random random = new Random();
    byte[] value = new byte[200];
    for (int round = 0; round < 4; round++) {
      for (RocksDB db : open) {
        for (int k = 0; k < keys; k++) {
          random.nextBytes(value);
          db.put(noWal, ("p" + random.nextInt(keys * 4)).getBytes(), value);
        }
        db.flush(inBackground);  // flushes and compactions still running at the exit
      }
    }
    if (close) {
      for (RocksDB db : open) {
        db.cancelAllBackgroundWork(true);
        db.close();
      }
    }
    System.exit(0);
  }
}
