// Package certs owns a node's TLS material: its certificate and key (served
// to clients and presented to peers as a client certificate), reloaded when
// the files change on disk, and the CA pools that verify peers (--tls-ca)
// and client certificates on the internal API (--tls-client-ca). The CA
// bundles are read once at start: renewing a CA needs a restart.
package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// ErrNoCerts means a CA file held no PEM certificate.
var ErrNoCerts = errors.New("no PEM certificate found")

// Reloader serves a certificate/key pair from a cache refreshed when either
// file's modification time or size changes, so a renewed certificate is used
// without a restart. A pair that fails to load keeps the previous one.
type Reloader struct {
	certFile, keyFile string

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   [2]fileStamp
	lastErr error
}

type fileStamp struct {
	mod  time.Time
	size int64
}

// NewReloader loads the pair once; an unreadable pair is an error now rather
// than at the first handshake.
func NewReloader(certFile, keyFile string) (*Reloader, error) {
	r := &Reloader{certFile: certFile, keyFile: keyFile}
	if _, err := r.current(); err != nil {
		return nil, err
	}
	return r, nil
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{mod: fi.ModTime(), size: fi.Size()}, nil
}

// current returns the cached pair, reloading it first when a file changed.
func (r *Reloader) current() (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cs, err1 := stampOf(r.certFile)
	ks, err2 := stampOf(r.keyFile)
	if err := errors.Join(err1, err2); err != nil {
		if r.cert != nil {
			return r.cert, nil // a file being replaced: keep serving the old pair
		}
		return nil, fmt.Errorf("tls certificate: %w", err)
	}
	if r.cert != nil && r.stamp == [2]fileStamp{cs, ks} {
		return r.cert, nil
	}
	pair, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		r.lastErr = err
		if r.cert != nil {
			return r.cert, nil
		}
		return nil, fmt.Errorf("tls certificate %s / key %s: %w", r.certFile, r.keyFile, err)
	}
	r.cert, r.stamp, r.lastErr = &pair, [2]fileStamp{cs, ks}, nil
	return r.cert, nil
}

// LastError is the error of the last failed reload (nil once a reload
// succeeds).
func (r *Reloader) LastError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastErr
}

// GetCertificate is tls.Config.GetCertificate.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) { return r.current() }

// GetClientCertificate is tls.Config.GetClientCertificate.
func (r *Reloader) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return r.current()
}

// LoadPool reads a PEM bundle of CA certificates.
func LoadPool(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tls CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("tls CA %s: %w", path, ErrNoCerts)
	}
	return pool, nil
}

// Config names the TLS files of a node; see the --tls-* flags.
type Config struct {
	CertFile, KeyFile string
	CAFile            string // verifies peers; the system roots when empty
	ClientCAFile      string // verifies client certificates on the internal API
}

// Enabled reports whether the node serves HTTPS.
func (c Config) Enabled() bool { return c.CertFile != "" }

// Material is a node's loaded TLS setup.
type Material struct {
	Server *tls.Config // for the listener
	Client *tls.Config // for requests to peers
}

// AEADSuites are the TLS 1.2 cipher suites Cairn speaks: forward secret
// (ECDHE) and authenticated encryption (GCM, ChaCha20-Poly1305) only, no
// CBC with SHA-1. TLS 1.3 suites are not configurable and all AEAD.
var AEADSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// Load builds the server and client TLS configurations. The server asks for
// a client certificate (without requiring one) when a client CA is set, so
// browsers and API clients need none; the internal API then requires a
// verified one (peerauth.RequireVerifiedCert).
func Load(c Config) (*Material, error) {
	r, err := NewReloader(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, err
	}
	srv := &tls.Config{MinVersion: tls.VersionTLS12, CipherSuites: AEADSuites, GetCertificate: r.GetCertificate}
	if c.ClientCAFile != "" {
		pool, err := LoadPool(c.ClientCAFile)
		if err != nil {
			return nil, err
		}
		srv.ClientCAs, srv.ClientAuth = pool, tls.VerifyClientCertIfGiven
	}
	cli := &tls.Config{MinVersion: tls.VersionTLS12, CipherSuites: AEADSuites, GetClientCertificate: r.GetClientCertificate}
	if c.CAFile != "" {
		pool, err := LoadPool(c.CAFile)
		if err != nil {
			return nil, err
		}
		cli.RootCAs = pool
	}
	return &Material{Server: srv, Client: cli}, nil
}
