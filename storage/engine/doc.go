// Package engine owns the on-disk state of shard replicas: the Shard and Engine
// interfaces the storage role programs against, and the default implementation
// that keeps one write-ahead log per engine (node), shared by its shard
// replicas and holding their replication logs, and one bbolt file per shard
// replica holding the undo records needed to cut a divergent tail and the
// points in compressed per-series blocks (Gorilla's delta-of-delta timestamps
// and XOR values) with a series index and posting lists. A write is durable
// once its entry is in the log; its points wait in an in-memory memtable and
// become blocks in bulk flushes, and a rate-limited background compaction
// merges the small blocks of successive flushes.
//
// # Layout and costs
//
// A shard file's buckets are listed in blocks.go: series ids (dense per
// shard, 1, 2, ...) name series keys; posting lists map metric, tag and field
// to ids; blocks are keyed id | min ts, so one series' blocks are adjacent and
// a series' range is one seek. A flush (flush.go) writes, in one bbolt
// commit, a block per series of the frozen memtable, the undo records of its
// entries and the new flushed txn; flushes of different shards run beside
// the commits, at most flushSlots at once per engine.
//
// Memory is accounted by kind (MemoryUse): the active memtables, bounded by
// the engine's budget plus room for each indexed series once (past it a
// shard holding a fair share freezes its memtable, and a commit that would
// freeze a second one waits for the first flush: that is how writers are
// pushed back, with a bound; the room keeps a memtable's fixed cost per
// series from leaving the budget a point or two per series); the frozen
// memtables being flushed (one per shard at most); and the series indexes,
// one map entry and slots in slices by id per series (seriesindex.go),
// which grow with the series a node holds and which the node's soft memory
// limit follows (app.derivedLimit) rather than sitting under them.
//
// # Field types
//
// A field keeps one type per (measurement, field) in a shard, InfluxDB's
// five: float, integer, unsigned, boolean, string (types.go). The leader
// admits a point only of its field's type, or of a field new to the shard,
// whose type the point claims (AdmitTypes): a point of another type is
// refused with InfluxDB's "field type conflict" and the batch's other
// points are written (a partial write, like a bad line's). Followers take
// what their leader logged. The types are saved by flushes (the ftype
// bucket); a field with postings and no saved type is a float, the only
// type of the files written before types were kept.
//
// Entries carry each point's type (storage/wire, entry version 2; an
// all-float entry stays version 1, readable by the release before). In the
// memtable and in blocks every value is 64 bits: a float's float64 bits,
// an integer's int64, an unsigned's uint64, a boolean's 0 or 1, and a
// string's id in the shard's string heap (the strs bucket: id -> bytes,
// ids drawn in order by the active memtable and saved by its flush), so
// the undo records, truncation, merges and compaction handle every type
// alike. Float blocks are the version 1 Gorilla blocks, unchanged; the
// other types' blocks are version 2 with their type in the header and
// their values as delta-of-delta integers (gorilla.go). A string
// overwritten or truncated stays in the heap until the shard is dropped.
//
// # High cardinality: what the layout still costs, and where it goes next
//
// A flush costs a bbolt put per series it holds, at the series' place in the
// blocks bucket. With a million series and a memtable budget that holds a
// point or two per series, a flush is O(series) puts scattered over every
// leaf page of the bucket, for O(series) points: the cost per point is a
// page rewrite divided by few points (issue 21's profiles: writeMemtable,
// bbolt node.put). Three things keep that in bounds for now: the memtables
// have room for each indexed series once beside the budget (flush.go:
// activeLimit), so the budget buys points, not series; background
// compaction is tiered (compact.go: compactPolicy), so a series' growing
// block is not rewritten every few flushes; and flushes run two at a time
// at least, so a commit waiting for its shard's flush does not queue behind
// every shard's. Packs (packs.go, packread.go, packcompact.go) take the
// rest: once every replica of the shard speaks the protocol that reads
// them (the storage host says so per shard: AllowPacks), a flush writes
// the series with fewer than packPoints new points (packManyPoints in a
// flush of packManySeries series or more) as packed blocks keyed
// by flush (a directory of series ids with offsets, then their encoded
// points), appended at the end of a packs bucket, so a flush is sequential
// and O(points); a read of series id consults the few packs whose time
// range and id range cover it (binary search in each directory, the heads
// held in memory), merged with its own blocks; background compaction
// merges packs into per-series blocks once they are many, which amortizes
// the scattered puts over many points per series. Whatever rewrites a
// series' range (a merging flush, undo, truncation, a delete) first takes
// its packed points of the range out of their packs; expiry drops whole
// packs, and the torn-block rebuild checks the last flush's packs as its
// blocks.
//
// Rollup levels (rollup.go) are buckets of their own in the shard file, a
// cell per series and interval (count, sum, min, max, first, last), brought
// up to date in each flush's commit from the points it writes, and by
// deletes and rollbacks; they outlive the raw points' expiry until their
// own, and a query over the expired range reads them instead of blocks.
//
// Time partitions (partition.go, seal.go): once every replica of a shard
// reads them (the storage host sets the length per shard from the
// database's, InfluxDB's shard group duration: SetPartitionLength), each
// expiry pass first seals the partitions [start, start+length) that end a
// length or more before now: their points, blocks straddling a boundary
// split, move out of the shard file into a file of their own next to it
// (<shard file>.p<id>, one blocks bucket, read-only once written), written
// and synced (flushes go on meanwhile; one that changes the range makes the
// seal give up) before the one transaction that takes them out of the shard
// file and records the file in its parts bucket (a file no record names is
// removed at open; a recorded one missing or of another size fails the
// open). A seal reads the range in steps of one read transaction each (at
// most 4096 series and 256k points) and waits after each what the engine's
// compaction limiter asks for 16 bytes a point (their decoded size), so the
// seals and compactions of every shard of a node together go at most at
// the compaction rate (8 MiB/s by default: 524k points/s of seals; no pace
// when compaction is off), and a backlog (a database holding months of
// points when the seals begin) is sealed over many passes, a Seal call
// beginning no partition once those it sealed held 4M points (or 16). The transaction that takes the range out of the
// shard file is not paced: it holds the flush lock for one rewrite of the
// partition's blocks. The series index, postings, string heap, types and
// rollup cells stay in the shard file, so a partition re-creates no series.
// Reads merge the shard file over the partitions whose range overlaps theirs and never
// open the others; a late write into a sealed range lands in the shard
// file and wins on its ts (the next seal of the range merges it into a new
// file); a delete first moves the partitions it may touch back into the
// shard file (deletes are rare), and a seal raises the undo floor, so a
// rollback never has to undo inside a sealed file. Expiry drops a sealed
// partition by removing its record, then its file: its space is back at
// once, without rewriting anything. A full-sync snapshot carries the files
// after the log (snapshot.go); the first seal marks the file format 4,
// which a follower of an older protocol is refused.
package engine
