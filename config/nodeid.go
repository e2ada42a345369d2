package config

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/cairn-db/cairn/internal/atomicfile"
)

// NodeIDFile is the file in the data directory that keeps the node id.
const NodeIDFile = "node_id"

// LoadOrCreateNodeID returns the node's stable identity. Replicas, leases and
// shard leadership are recorded under this id, so it must survive restarts:
//   - explicit set: it is validated, and recorded in <dataDir>/node_id if no
//     id is recorded yet; a data dir that already belongs to another id is
//     refused, since reusing its shard data under a new identity would
//     corrupt the cluster's view of who holds which replica.
//   - explicit empty: the recorded id, or a new random one ("n-" + 12 hex
//     digits) written atomically on first start.
//
// An invalid explicit id is a *UsageError; file-system failures are not.
// With an explicit id and an empty dataDir nothing is read or written.
func LoadOrCreateNodeID(dataDir, explicit string) (string, error) {
	if explicit != "" && !ValidName(explicit) {
		return "", &UsageError{Msg: fmt.Sprintf("invalid --node-id %q: %v", explicit, checkName(explicit))}
	}
	if explicit != "" && dataDir == "" {
		return explicit, nil
	}
	if dataDir == "" {
		return "", &UsageError{Msg: `invalid --data-dir "": must not be empty`}
	}
	path := filepath.Join(dataDir, NodeIDFile)
	recorded, err := readNodeID(path)
	switch {
	case err == nil && explicit != "" && recorded != explicit:
		return "", &UsageError{Msg: fmt.Sprintf(
			"invalid --node-id %q: data dir %s belongs to node %q; use that id, or another data dir, or remove %s to rename the node (its shard data then counts as a new node's)",
			explicit, dataDir, recorded, path)}
	case err == nil:
		return recorded, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", err
	}
	id := explicit
	if id == "" {
		id = newNodeID()
	}
	if err := atomicfile.Write(filepath.Join(dataDir, NodeIDFile), []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("config: record node id: %w", err)
	}
	return id, nil
}

func readNodeID(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(data))
	if !ValidName(id) {
		return "", fmt.Errorf("config: %s holds %q, not a valid node id; fix or remove it", path, id)
	}
	return id, nil
}

func newNodeID() string {
	var b [6]byte
	// crypto/rand.Read never fails on supported platforms (it aborts the
	// process instead), so there is no error to handle.
	_, _ = rand.Read(b[:])
	return "n-" + hex.EncodeToString(b[:])
}
