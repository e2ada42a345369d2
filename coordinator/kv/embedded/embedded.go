// Package embedded runs an etcd member inside the Cairn process: the `etcd`
// role. Its logs go through Cairn's zap logger, auto-compaction is on, and
// Close stops it within a bounded time.
package embedded

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
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
	// ClientTLS is served on an https ListenClientURL, PeerTLS on an https
	// ListenPeerURL; a URL's scheme and its TLS settings must agree.
	ClientTLS, PeerTLS TLS
	// BcryptCost hashes the passwords of etcd's users (etcd auth); 0 keeps
	// etcd's default (10). Each password login costs about 2^cost work.
	BcryptCost uint
}

// TLS is a member's certificate for one side: its clients or its peers.
type TLS struct {
	CertFile, KeyFile string
	// TrustedCAFile verifies the other side's certificates.
	TrustedCAFile string
	// ClientCertAuth refuses connections without a certificate signed by
	// TrustedCAFile.
	ClientCertAuth bool
}

// enabled reports whether the side serves TLS.
func (t TLS) enabled() bool { return t.CertFile != "" }

// check catches a URL scheme that disagrees with the side's TLS: etcd
// would refuse an https URL without a certificate with its own flag names,
// and silently serve plaintext on an http URL with one.
func (t TLS) check(listen string) error {
	https := strings.HasPrefix(listen, "https://")
	if https != t.enabled() {
		return fmt.Errorf("embedded: %s: an https URL needs a certificate and key, and a certificate needs an https URL", listen)
	}
	return nil
}

func (t TLS) info() transport.TLSInfo {
	return transport.TLSInfo{CertFile: t.CertFile, KeyFile: t.KeyFile, TrustedCAFile: t.TrustedCAFile, ClientCertAuth: t.ClientCertAuth}
}

// aeadSuites are the TLS 1.2 suites the member accepts (TLS 1.3's are all
// AEAD): no CBC or SHA-1 MAC suites.
var aeadSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
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
	if err := c.ClientTLS.check(c.ListenClientURL); err != nil {
		return err
	}
	return c.PeerTLS.check(c.ListenPeerURL)
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
	ec.ClientTLSInfo, ec.PeerTLSInfo = cfg.ClientTLS.info(), cfg.PeerTLS.info()
	for _, id := range aeadSuites {
		ec.CipherSuites = append(ec.CipherSuites, tls.CipherSuiteName(id))
	}
	if cfg.BcryptCost != 0 {
		ec.BcryptCost = cfg.BcryptCost
	}
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
