package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cairn-db/cairn/internal/atomicfile"
	"github.com/cairn-db/cairn/statemachine"
)

// The data dir's format: FORMAT in it names the version of its layout and
// files (node id, state.backup, shard files). A release reads the formats
// of the release before it (COMPATIBILITY.md); a binary that meets a newer
// one refuses to start instead of serving an empty or partial database (an
// older release started on a newer data dir answered every query with
// nothing).
const (
	dataFormatFile    = "FORMAT"
	dataFormatName    = "cairn-data-dir"
	dataFormatVersion = 1
)

// ErrNewerFormat: the data dir (or a file in it) was written by a newer
// release in a format this binary does not read.
var ErrNewerFormat = errors.New("written in a newer format")

type dataFormat struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
}

// checkDataFormat refuses a data dir of a newer format, or holding a newer
// local state backup, and marks one without a mark (new, or written by
// release 0.1.0, which had none) with this binary's.
func checkDataFormat(dir string) error {
	if err := checkStateBackup(dir); err != nil {
		return err
	}
	path := filepath.Join(dir, dataFormatFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		mark, _ := json.Marshal(dataFormat{Format: dataFormatName, Version: dataFormatVersion})
		if err := atomicfile.Write(path, append(mark, '\n'), 0o644); err != nil {
			return fmt.Errorf("marking the data dir's format: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the data dir's format: %w", err)
	}
	var f dataFormat
	if err := json.Unmarshal(data, &f); err != nil || f.Format != dataFormatName || f.Version < 1 {
		return fmt.Errorf("%s is not a Cairn data dir format mark (want {\"format\":%q,\"version\":N}): %q", path, dataFormatName, data)
	}
	if f.Version > dataFormatVersion {
		return fmt.Errorf("%w: data dir %s holds format version %d; this cairn reads format version %d and older. Run the release that wrote it (or a newer one), or restore a backup into a fresh data dir: nothing was changed",
			ErrNewerFormat, dir, f.Version, dataFormatVersion)
	}
	return nil
}

// checkStateBackup refuses a local state backup of a newer version: starting
// empty instead would overwrite it at the first save.
func checkStateBackup(dir string) error {
	path := filepath.Join(dir, "state.backup")
	if _, err := statemachine.ReadBackupFile(path); errors.Is(err, statemachine.ErrBackupNewer) {
		return fmt.Errorf("%w: %s: %w; nothing was changed", ErrNewerFormat, path, err)
	}
	return nil
}
