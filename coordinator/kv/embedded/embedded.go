// Package embedded runs an etcd member inside the Cairn process: the `etcd`
// role. Its logs go through Cairn's zap logger, auto-compaction is on, and
// Close stops it within a bounded time.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Config of one member.
type Config struct {
	Name                string
	Dir                 string // the member's data dir, e.g. <data-dir>/etcd
	ListenClientURL     string
	ListenPeerURL       string
	AdvertiseClientURL  string // default ListenClientURL
	AdvertisePeerURL    string // default ListenPeerURL
	InitialCluster      string // default name=advertise peer url
	ClusterState        string // "new" or "existing"
	Logger              *zap.Logger
	StartTimeout        time.Duration // default 30s (a member of a new cluster waits for quorum)
	CompactionRetention string        // default "5m" periodic
	// QuotaBackendBytes is the space the member's database may use before
	// etcd raises its NOSPACE alarm; 0 keeps etcd's default (2 GiB).
	QuotaBackendBytes int64
}

// Validate fills defaults and checks URLs.
func (c *Config) Validate() error {
	if c.Name == "" {
		c.Name = "default"
	}
	if c.Dir == "" {
		return errors.New("embedded: no data dir")
	}
	if c.AdvertiseClientURL == "" {
		c.AdvertiseClientURL = c.ListenClientURL
	}
	if c.AdvertisePeerURL == "" {
		c.AdvertisePeerURL = c.ListenPeerURL
	}
	if c.InitialCluster == "" {
		c.InitialCluster = c.Name + "=" + c.AdvertisePeerURL
	}
	if c.ClusterState == "" {
		c.ClusterState = embed.ClusterStateFlagNew
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 30 * time.Second
	}
	if c.CompactionRetention == "" {
		c.CompactionRetention = "5m"
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	for _, u := range []string{c.ListenClientURL, c.ListenPeerURL, c.AdvertiseClientURL, c.AdvertisePeerURL} {
		if _, err := url.Parse(u); err != nil || u == "" {
			return fmt.Errorf("embedded: bad url %q", u)
		}
	}
	return nil
}

// Server is a running member.
type Server struct {
	etcd    *embed.Etcd
	cfg     Config
	closing *atomic.Bool // set by Close: etcd's shutdown noise is expected
}

func urls(s string) []url.URL {
	u, _ := url.Parse(s)
	return []url.URL{*u}
}

// Start starts the member and waits until it is ready to serve (it has joined a
// cluster with quorum) or StartTimeout passes.
func Start(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(cfg.Dir), 0o755); err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	ec := embed.NewConfig()
	ec.Name = cfg.Name
	ec.Dir = cfg.Dir
	ec.ListenClientUrls = urls(cfg.ListenClientURL)
	ec.AdvertiseClientUrls = urls(cfg.AdvertiseClientURL)
	ec.ListenPeerUrls = urls(cfg.ListenPeerURL)
	ec.AdvertisePeerUrls = urls(cfg.AdvertisePeerURL)
	ec.InitialCluster = cfg.InitialCluster
	ec.ClusterState = cfg.ClusterState
	// etcd derives the cluster id from the peer URLs and this token: a fixed
	// token would give an etcd wiped and recreated at the same URLs the same
	// id, hiding the replacement from clients. A lone new member gets a
	// random one; members of a multi-member cluster must agree, so they
	// share a fixed token.
	ec.InitialClusterToken = "cairn"
	if !strings.Contains(cfg.InitialCluster, ",") {
		ec.InitialClusterToken = "cairn-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	ec.AutoCompactionMode = embed.CompactorModePeriodic
	ec.AutoCompactionRetention = cfg.CompactionRetention
	ec.QuotaBackendBytes = cfg.QuotaBackendBytes
	ec.Logger = "zap"
	elg, closing := wrapLogger(cfg.Logger.Named("etcd"))
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(elg)
	// Faster elections than etcd's defaults suit one machine or a LAN; they
	// bound how long the cluster is unavailable when a member dies.
	ec.TickMs = 100
	ec.ElectionMs = 1000
	if !strings.Contains(cfg.InitialCluster, ",") {
		// A single member elects itself after a randomised election
		// timeout; keep it short so a standalone node starts fast.
		ec.TickMs = 50
		ec.ElectionMs = 250
	}
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("embedded: start etcd: %w", flagError{err})
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		closing.Store(true)
		e.Close()
		return nil, fmt.Errorf("embedded: etcd failed: %w", flagError{err})
	case <-time.After(cfg.StartTimeout):
		closing.Store(true)
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("embedded: etcd not ready after %s (is a quorum of --etcd-initial-cluster up?)", cfg.StartTimeout)
	}
	return &Server{etcd: e, cfg: cfg, closing: closing}, nil
}

// ClientURL is where clients reach this member.
func (s *Server) ClientURL() string { return s.cfg.AdvertiseClientURL }

// Err reports a fatal server error.
func (s *Server) Err() <-chan error { return s.etcd.Err() }

// Close stops the member, giving it at most timeout.
func (s *Server) Close(ctx context.Context) {
	s.closing.Store(true)
	done := make(chan struct{})
	go func() {
		s.etcd.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.cfg.Logger.Warn("embedded etcd did not stop in time")
	}
}
