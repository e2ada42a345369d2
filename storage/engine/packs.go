package engine

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/cairn-db/cairn/models"
	bolt "go.etcd.io/bbolt"
)

// Packs: a flush writes the series that got few points (fewer than
// packPoints) as packed blocks instead of a block each, appended at the end
// of the packs bucket under a growing sequence number, so that a flush of a
// million series with a point or two each is a few sequential puts, not a
// million puts scattered over the blocks bucket's pages (issue 21):
//
//	packs  seq (u64 BE) -> pack
//
// A pack is a header, a directory of the series it holds (sorted by id, each
// with the end offset of its block) and the series' blocks, each encoded as
// a block of the blocks bucket (gorilla.go, every field type):
//
//	crc32c (LE, of what follows) | version 1 | minTS | maxTS | minID | maxID |
//	n (u32) | n x (id u64 | end u32) | blocks
//
// Invariant: a series' points in a pack are all newer than every point of
// it flushed before the pack (a flush packs a series only when its points
// come after its newest flushed one), and whatever rewrites a series' points
// in a range (a flush merging older points, a rollback) first moves its
// packed points of that range into its own blocks (unpackRange). A series'
// packed and block points therefore never share a timestamp, and a read is
// their union.
var bucketPacks = []byte("packs")

const (
	packVersion = 1
	// packPoints: a series with fewer points in a flush goes into a pack.
	// A block put costs a page rewrite whatever it holds; below a handful
	// of points that cost is most of the flush.
	packPoints = 8
	// packManySeries, packManyPoints: a flush of packManySeries series or
	// more packs those with fewer than packManyPoints points (packBelow).
	packManySeries = 16 << 10
	packManyPoints = 64
	// packMaxBytes bounds one pack's value; a flush writes more packs past it.
	packMaxBytes   = 4 << 20
	packHeaderSize = 4 + 1 + 8*4 + 4
	packDirEntry   = 12
)

// packBelow is how few points a series must have in a flush of the given
// series to go into a pack. A flush's block puts rewrite the pages of the
// blocks bucket that hold the series it writes; with as many series as
// packManySeries that is most of the bucket's pages, whatever the puts
// hold, and it is rewritten at every flush: a node growing to a million
// series filled its memtables at about ten points a series, and each flush
// put a block of ten points for each of a shard's 100k+ series (issue 21).
// Packed instead, the flush writes its points sequentially and the packs'
// compaction puts one block for a series' points of several flushes. A
// series with packManyPoints or more keeps its block: packing it would
// only write its points twice.
func packBelow(series int) int {
	if series >= packManySeries {
		return packManyPoints
	}
	return packPoints
}

// packHead is what the shard keeps in memory of each pack: enough to skip
// the packs that cannot hold a series' points in a range.
type packHead struct {
	seq          uint64
	minTS, maxTS int64
	minID, maxID uint64
}

func (h packHead) covers(id uint64, start, end int64) bool {
	return h.minID <= id && id <= h.maxID && h.maxTS >= start && h.minTS <= end
}

// packList is a shard file's pack heads, in sequence order. It holds at least
// the packs of every transaction a reader may have open: a flush adds its
// packs' heads before its commit (a reader that finds a head whose pack its
// transaction does not hold skips it), and heads go only when the file is
// reopened (a pack emptied by unpackRange is deleted, its head stays).
type packList struct {
	mu    sync.Mutex // serializes writers
	heads atomic.Pointer[[]packHead]
}

func (pl *packList) load() []packHead {
	if h := pl.heads.Load(); h != nil {
		return *h
	}
	return nil
}

func (pl *packList) add(h packHead) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	old := pl.load()
	i, found := slices.BinarySearchFunc(old, h.seq, func(x packHead, seq uint64) int { return cmpU64(x.seq, seq) })
	next := slices.Clone(old)
	if found {
		next[i] = h // a failed flush's head, its seq written again
	} else {
		next = slices.Insert(next, i, h)
	}
	pl.heads.Store(&next)
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// packLists maps each open shard file to its pack heads. The functions that
// read blocks get only the transaction (a flush's rollups, a rollback, a
// delete), and the heads belong to the file: openBolt loads them.
var packLists sync.Map // *bolt.DB -> *packList

func packsOf(tx *bolt.Tx) *packList {
	if v, ok := packLists.Load(tx.DB()); ok {
		return v.(*packList)
	}
	return &packList{}
}

// loadPacks reads the heads of the file's packs into its list.
func loadPacks(tx *bolt.Tx) error {
	pl := &packList{}
	var heads []packHead
	if b := tx.Bucket(bucketPacks); b != nil {
		err := b.ForEach(func(k, v []byte) error {
			h, _, _, err := parsePack(v)
			if err != nil {
				// Torn (repairTorn drops it next) or corrupt: reads of
				// any series meet it and report it.
				h = packHead{minTS: math.MinInt64, maxTS: math.MaxInt64, maxID: math.MaxUint64}
			}
			h.seq = beUint64(k)
			heads = append(heads, h)
			return nil
		})
		if err != nil {
			return err
		}
	}
	pl.heads.Store(&heads)
	packLists.Store(tx.DB(), pl)
	return nil
}

func forgetPacks(db *bolt.DB) { packLists.Delete(db) }

// packChecks counts the packs whose checksum was computed (a cost test
// reads it).
var packChecks atomic.Uint64

// parsePack checks a pack and returns its header, directory and blocks.
func parsePack(v []byte) (packHead, []byte, []byte, error) {
	packChecks.Add(1)
	if len(v) < packHeaderSize {
		return packHead{}, nil, nil, fmt.Errorf("%w: pack of %d bytes", ErrBlockCorrupt, len(v))
	}
	if crc32.Checksum(v[4:], castagnoli) != binary.LittleEndian.Uint32(v) {
		return packHead{}, nil, nil, fmt.Errorf("%w: pack checksum mismatch", ErrBlockCorrupt)
	}
	if v[4] != packVersion {
		return packHead{}, nil, nil, fmt.Errorf("%w: pack version %d", ErrBlockCorrupt, v[4])
	}
	h := packHead{
		minTS: int64(binary.BigEndian.Uint64(v[5:])), maxTS: int64(binary.BigEndian.Uint64(v[13:])),
		minID: binary.BigEndian.Uint64(v[21:]), maxID: binary.BigEndian.Uint64(v[29:]),
	}
	n := int(binary.BigEndian.Uint32(v[37:]))
	dirEnd := packHeaderSize + n*packDirEntry
	if n > (len(v)-packHeaderSize)/packDirEntry {
		return packHead{}, nil, nil, fmt.Errorf("%w: pack directory of %d series", ErrBlockCorrupt, n)
	}
	dir, data := v[packHeaderSize:dirEnd], v[dirEnd:]
	if n > 0 && int(binary.BigEndian.Uint32(dir[len(dir)-4:])) != len(data) {
		return packHead{}, nil, nil, fmt.Errorf("%w: pack blocks end at %d of %d", ErrBlockCorrupt,
			binary.BigEndian.Uint32(dir[len(dir)-4:]), len(data))
	}
	return h, dir, data, nil
}

// blockInPack returns series id's block in a parsed pack (nil: none).
func blockInPack(dir, data []byte, id uint64) ([]byte, error) {
	n := len(dir) / packDirEntry
	i := sort.Search(n, func(m int) bool { return binary.BigEndian.Uint64(dir[m*packDirEntry:]) >= id })
	if i == n || binary.BigEndian.Uint64(dir[i*packDirEntry:]) != id {
		return nil, nil
	}
	start := 0
	if i > 0 {
		start = int(binary.BigEndian.Uint32(dir[(i-1)*packDirEntry+8:]))
	}
	end := int(binary.BigEndian.Uint32(dir[i*packDirEntry+8:]))
	if start > end || end > len(data) {
		return nil, fmt.Errorf("%w: pack entry of series %d at %d:%d", ErrBlockCorrupt, id, start, end)
	}
	return data[start:end], nil
}

// packer gathers the packed series of one flush.
type packer struct {
	recent []byte // the recent bucket's value for the packs; nil: none
	ids    []uint64
	ends   []uint32
	data   []byte
	head   packHead
}

func (p *packer) add(id uint64, pts []memPoint, typ models.FieldType) {
	if len(p.ids) == 0 {
		p.head = packHead{minTS: pts[0].ts, maxTS: pts[len(pts)-1].ts, minID: id, maxID: id}
	}
	p.head.minTS = min(p.head.minTS, pts[0].ts)
	p.head.maxTS = max(p.head.maxTS, pts[len(pts)-1].ts)
	p.head.minID, p.head.maxID = min(p.head.minID, id), max(p.head.maxID, id)
	p.data = encodeBlock(p.data, pts, typ)
	p.ids = append(p.ids, id)
	p.ends = append(p.ends, uint32(len(p.data)))
}

// addWriting adds a series and writes the pack once it is full.
func (p *packer) addWriting(tx *bolt.Tx, id uint64, pts []memPoint, typ models.FieldType) error {
	p.add(id, pts, typ)
	if len(p.data) < packMaxBytes {
		return nil
	}
	return p.write(tx)
}

// encode builds the pack; the flush order puts ids in increasing order.
func (p *packer) encode() []byte {
	v := make([]byte, packHeaderSize, packHeaderSize+len(p.ids)*packDirEntry+len(p.data))
	v[4] = packVersion
	binary.BigEndian.PutUint64(v[5:], uint64(p.head.minTS))
	binary.BigEndian.PutUint64(v[13:], uint64(p.head.maxTS))
	binary.BigEndian.PutUint64(v[21:], p.head.minID)
	binary.BigEndian.PutUint64(v[29:], p.head.maxID)
	binary.BigEndian.PutUint32(v[37:], uint32(len(p.ids)))
	for i, id := range p.ids {
		v = binary.BigEndian.AppendUint64(v, id)
		v = binary.BigEndian.AppendUint32(v, p.ends[i])
	}
	v = append(v, p.data...)
	binary.LittleEndian.PutUint32(v, crc32.Checksum(v[4:], castagnoli))
	return v
}

// write appends the gathered series as a pack at the end of the packs
// bucket, marks the file format 3 (the first pack's flush does), and adds
// the pack's head to the file's list before the commit.
func (p *packer) write(tx *bolt.Tx) error {
	if len(p.ids) == 0 {
		return nil
	}
	if !slices.IsSorted(p.ids) {
		return fmt.Errorf("engine: pack of unsorted series ids")
	}
	b, err := tx.CreateBucketIfNotExists(bucketPacks)
	if err != nil {
		return err
	}
	b.FillPercent = 1 // appended at the end only
	seq := uint64(1)
	if k, _ := b.Cursor().Last(); k != nil {
		seq = beUint64(k) + 1
	}
	if err := markFormat(tx, packFormat); err != nil {
		return err
	}
	if err := b.Put(u64Key(seq), p.encode()); err != nil {
		return err
	}
	if p.recent != nil {
		if err := tx.Bucket(bucketRecent).Put(packRecentKey(seq), p.recent); err != nil {
			return err
		}
	}
	h := p.head
	h.seq = seq
	packsOf(tx).add(h)
	p.ids, p.ends, p.data = p.ids[:0], p.ends[:0], nil
	return nil
}

// PackWriter is implemented by the shards of NewBoltEngine (type-assert a
// Shard): AllowPacks says whether its flushes may write packs. The first
// pack marks the file format 3, which the release before refuses, as a file
// and as a snapshot sent to a follower: the storage host allows packs only
// once every replica of the shard speaks models.ProtocolPacks. Off until
// told.
// Format is the shard file's format mark.
type PackWriter interface {
	AllowPacks(ok bool)
	Format() (uint64, error)
}

func (s *boltShard) AllowPacks(ok bool) { s.packs.Store(ok) }

func (s *boltShard) Format() (f uint64, err error) {
	err = s.view(func(tx *bolt.Tx) error {
		f = fileFormat(tx)
		return nil
	})
	return f, err
}
