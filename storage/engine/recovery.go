package engine

import (
	"fmt"

	"github.com/cairn-db/cairn/models"
	bolt "go.etcd.io/bbolt"
)

// resetRecent forgets the blocks of the previous flush: from now on only the
// flush under way can be redone from the log.
func resetRecent(tx *bolt.Tx) error {
	if err := tx.DeleteBucket(bucketRecent); err != nil {
		return err
	}
	_, err := tx.CreateBucket(bucketRecent)
	return err
}

// repairTorn checks the blocks of the last flush, the only ones a crash can
// have caught half-written. If one fails its checksum and the log still holds
// every entry that flush wrote (and it merged nothing into older blocks), the
// flush is undone (its blocks and undo records dropped, flushed_txn moved
// back) so the log tail replays into the memtable and the next flush writes
// the blocks again. Anything else that is corrupt stays an ErrBlockCorrupt
// for the reads that meet it: never silently wrong points.
func repairTorn(tx *bolt.Tx, logBase uint64) error {
	m, err := readMeta(tx)
	if err != nil {
		return err
	}
	v := tx.Bucket(bucketMeta).Get(keyRecentFrom)
	if len(v) != 8 {
		return nil
	}
	from := beUint64(v)
	if from == 0 || from <= max(m.baseTxn, logBase) || from > m.flushedTxn+1 {
		return nil
	}
	torn := false
	var keys [][]byte
	err = tx.Bucket(bucketRecent).ForEach(func(k, _ []byte) error {
		keys = append(keys, append([]byte(nil), k...))
		torn = torn || checkRecent(tx, k) != nil
		return nil
	})
	if err != nil || !torn {
		return err
	}
	for _, k := range keys {
		if err := deleteRecent(tx, k); err != nil {
			return err
		}
	}
	undoB := tx.Bucket(bucketUndo)
	for t := from; t <= m.flushedTxn; t++ {
		if err := undoB.Delete(u64Key(t)); err != nil {
			return err
		}
	}
	m.flushedTxn = from - 1
	if err := tx.Bucket(bucketMeta).Put(keyRecentFrom, u64Key(0)); err != nil {
		return err
	}
	return writeMeta(tx, m)
}

// checkRecent checks the block or pack (packRecentKey) the last flush wrote
// under recent record k.
func checkRecent(tx *bolt.Tx, k []byte) error {
	if isPackRecent(k) {
		if b := tx.Bucket(bucketPacks); b != nil {
			if v := b.Get(k[1:]); v != nil {
				if _, _, _, err := parsePack(v); err != nil {
					return fmt.Errorf("pack %x: %w", k[1:], err)
				}
			}
		}
		return nil
	}
	if v := tx.Bucket(bucketBlocks).Get(k); v != nil {
		if _, _, err := parseBlock(v); err != nil {
			return fmt.Errorf("block %x: %w", k, err)
		}
	}
	return nil
}

// deleteRecent deletes the block or pack of recent record k, and the record.
func deleteRecent(tx *bolt.Tx, k []byte) error {
	if !isPackRecent(k) {
		return deleteBlock(tx, k)
	}
	if b := tx.Bucket(bucketPacks); b != nil {
		if err := b.Delete(k[1:]); err != nil {
			return err
		}
	}
	return tx.Bucket(bucketRecent).Delete(k)
}

// convertLegacy moves the per-point series buckets that versions before the
// block format wrote into blocks, in the open's transaction: a crash leaves
// the file unconverted, and the next open converts it again.
func convertLegacy(tx *bolt.Tx) error {
	series := tx.Bucket(bucketSeries)
	if series == nil {
		return nil
	}
	ns := newSeries{tx: tx}
	bp := newBlockPut(tx, 0)
	err := series.ForEach(func(k, v []byte) error {
		if v != nil {
			return nil
		}
		var pts []memPoint
		err := series.Bucket(k).ForEach(func(tk, val []byte) error {
			if len(tk) != 8 || len(val) != 8 {
				return fmt.Errorf("%w: legacy point in %q", ErrCorrupt, k)
			}
			pts = append(pts, memPoint{tsFromKey(tk), beUint64(val)})
			return nil
		})
		if err != nil || len(pts) == 0 {
			return err
		}
		id, err := ns.create(string(k))
		if err != nil {
			return err
		}
		return bp.put(id, pts, models.FieldFloat) // they stored floats only
	})
	if err == nil {
		err = ns.finish()
	}
	if err != nil {
		return fmt.Errorf("convert series to blocks: %w", err)
	}
	return tx.DeleteBucket(bucketSeries)
}
