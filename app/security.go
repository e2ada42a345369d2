package app

import (
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/cairn-db/cairn/config"
	"github.com/cairn-db/cairn/internal/certs"
	"github.com/cairn-db/cairn/internal/peerauth"
	"github.com/cairn-db/cairn/web"
	"go.uber.org/zap"
)

// setupSecurity loads the TLS material, builds the one HTTP transport every
// node-to-node call goes through (it signs with the cluster secret and
// speaks https when TLS is on) and the guard of the internal API, and warns
// about what is left open or exposed.
func (a *App) setupSecurity() error {
	cfg := a.cfg
	tcfg := certs.Config{CertFile: cfg.TLSCert, KeyFile: cfg.TLSKey, CAFile: cfg.TLSCA, ClientCAFile: cfg.TLSClientCA}
	base := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second}
	if tcfg.Enabled() {
		m, err := certs.Load(tcfg)
		if err != nil {
			return &config.UsageError{Msg: fmt.Sprintf("invalid TLS setup: %v", err)}
		}
		a.tls = m
		base.TLSClientConfig = m.Client
	}
	a.peer = peerauth.NewTransport(peerauth.TransportConfig{Base: base, Secret: cfg.ClusterSecret, HTTPS: tcfg.Enabled(),
		Logger: a.lg.Named("peer"), ProofVersion: a.proofVersion})

	var guards []func(*http.Request) error
	if cfg.TLSClientCA != "" {
		guards = append(guards, peerauth.RequireVerifiedCert)
	}
	if cfg.ClusterSecret != "" {
		v := peerauth.NewVerifier(peerauth.VerifierConfig{Secret: cfg.ClusterSecret, Node: a.nodeID,
			Addresses: []string{cfg.AdvertiseAddr}, AcceptV1: a.rollFrom010, AcceptV2: a.rollFromV2, Logger: a.lg.Named("peer")})
		guards = append(guards, v.VerifyRequest)
	}
	if len(guards) > 0 {
		a.guard = func(r *http.Request) error {
			for _, g := range guards {
				if err := g(r); err != nil {
					return err
				}
			}
			return nil
		}
	}

	warnExposures(a.lg, cfg)
	if len(cfg.SecretFlags) > 0 {
		a.lg.Warn("secrets given as command-line flags are visible to every local user (ps, /proc); use the *-file flags or CAIRN_* environment variables",
			zap.Strings("flags", cfg.SecretFlags))
	}
	if a.guard == nil && cfg.HasRole(config.RoleStorage) {
		a.lg.Warn("the internal API (/internal/) is open: anyone who reaches this node can read and write shard data; set --cluster-secret-file or CAIRN_CLUSTER_SECRET on every node")
	}
	a.lg.Info("security", zap.Bool("cluster_secret", cfg.ClusterSecret != ""), zap.Bool("tls", tcfg.Enabled()),
		zap.Bool("mtls_internal", cfg.TLSClientCA != ""), zap.Bool("admin_token", cfg.AdminToken != ""),
		zap.Bool("write_token", cfg.WriteToken != ""), zap.Bool("read_token", cfg.ReadToken != ""))
	return nil
}

// peerClient is an HTTP client for node-to-node calls.
func (a *App) peerClient(timeout time.Duration) *http.Client {
	return &http.Client{Transport: a.peer, Timeout: timeout}
}

// webSecurity fills the security fields of the HTTP server's config.
func (a *App) webSecurity(w *web.Config) {
	w.Tokens = web.Tokens{Admin: a.cfg.AdminToken, Write: a.cfg.WriteToken, Read: a.cfg.ReadToken}
	w.InternalGuard = a.guard
	w.Cmdline = config.RedactArgs(os.Args)
	if a.tls != nil {
		w.TLS = a.tls.Server
	}
}
