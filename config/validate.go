package config

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
)

// Validate checks every value, then fills the derived defaults (advertise
// address, etcd advertise URLs, initial cluster, etcd endpoints) and checks
// the result. It normalizes Roles into canonical order. Errors are
// *UsageError naming the flag and the bad value. Calling it twice is
// harmless.
func (c *Config) Validate() error {
	// Check what was given before deriving, so a bad --http-addr is
	// reported as such rather than as a bad derived --advertise-addr.
	if err := c.checkAll(); err != nil {
		return err
	}
	c.derive()
	if err := c.checkAll(); err != nil {
		return err
	}
	if err := c.readSecretFiles(); err != nil {
		return err
	}
	return c.checkCombinations()
}

// checkAll round-trips every option through its parser, which is the same
// check a flag gets.
func (c *Config) checkAll() error {
	for _, o := range options {
		raw := o.get(c)
		if err := o.set(c, raw); err != nil {
			return source{kind: "flag"}.invalid(o, raw, err)
		}
	}
	return nil
}

func (c *Config) derive() {
	if c.AdvertiseAddr == "" {
		c.AdvertiseAddr = advertisableAddr(c.HTTPAddr)
	}
	if c.EtcdAdvertiseClientURL == "" {
		c.EtcdAdvertiseClientURL = advertisableURL(c.EtcdListenClientURL)
	}
	if c.EtcdAdvertisePeerURL == "" {
		c.EtcdAdvertisePeerURL = advertisableURL(c.EtcdListenPeerURL)
	}
	if c.EtcdInitialCluster == "" {
		c.EtcdInitialCluster = c.EtcdName + "=" + c.EtcdAdvertisePeerURL
	}
	if c.HasRole(RoleEtcd) {
		// The node's own client trusts and authenticates as the member
		// (etcd's gateway does the same with its server certificate).
		if c.EtcdCACert == "" {
			c.EtcdCACert = c.EtcdTrustedCAFile
		}
		if c.EtcdCert == "" && c.EtcdKey == "" {
			c.EtcdCert, c.EtcdKey = c.EtcdCertFile, c.EtcdKeyFile
		}
	}
	if len(c.EtcdEndpoints) == 0 {
		if c.HasRole(RoleEtcd) {
			c.EtcdEndpoints = []string{c.EtcdAdvertiseClientURL}
		} else {
			c.EtcdEndpoints = []string{"http://127.0.0.1:2379"}
		}
	}
}

func (c *Config) checkCombinations() error {
	names, err := parseInitialCluster(c.EtcdInitialCluster)
	if err != nil {
		return &UsageError{Msg: fmt.Sprintf("invalid --etcd-initial-cluster %q: %v", c.EtcdInitialCluster, err)}
	}
	if c.HasRole(RoleEtcd) && !slices.Contains(names, c.EtcdName) {
		return &UsageError{Msg: fmt.Sprintf("invalid --etcd-initial-cluster %q: must include this member (--etcd-name %q)",
			c.EtcdInitialCluster, c.EtcdName)}
	}
	if c.HasRole(RoleEtcd) {
		if err := c.checkMemberTLS(); err != nil {
			return err
		}
	}
	if (c.EtcdCert == "") != (c.EtcdKey == "") {
		return &UsageError{Msg: "invalid etcd client certificate: --etcd-cert and --etcd-key must be given together"}
	}
	if c.EtcdPassword != "" && c.EtcdUsername == "" {
		return &UsageError{Msg: "invalid --etcd-password: it needs --etcd-username"}
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return &UsageError{Msg: "invalid TLS certificate: --tls-cert and --tls-key must be given together"}
	}
	if c.TLSCert == "" && (c.TLSCA != "" || c.TLSClientCA != "") {
		return &UsageError{Msg: "invalid --tls-ca/--tls-client-ca: they need --tls-cert and --tls-key (a cluster is all HTTPS or all HTTP)"}
	}
	return nil
}

// checkMemberTLS checks the embedded member's TLS flags, for its clients
// and for its peers: each side's URL scheme agrees with its certificate.
func (c *Config) checkMemberTLS() error {
	for _, side := range []struct {
		flag, listen, cert, key, ca string
		auth                        bool
	}{
		{"etcd-", c.EtcdListenClientURL, c.EtcdCertFile, c.EtcdKeyFile, c.EtcdTrustedCAFile, c.EtcdClientCertAuth},
		{"etcd-peer-", c.EtcdListenPeerURL, c.EtcdPeerCertFile, c.EtcdPeerKeyFile, c.EtcdPeerTrustedCAFile, c.EtcdPeerClientCertAuth},
	} {
		urlFlag := "--etcd-listen-client-url"
		if side.flag == "etcd-peer-" {
			urlFlag = "--etcd-listen-peer-url"
		}
		https := strings.HasPrefix(side.listen, "https://")
		var msg string
		switch {
		case (side.cert == "") != (side.key == ""):
			msg = fmt.Sprintf("--%scert-file and --%skey-file must be given together", side.flag, side.flag)
		case https && side.cert == "":
			msg = fmt.Sprintf("%s %q is https: it needs --%scert-file and --%skey-file", urlFlag, side.listen, side.flag, side.flag)
		case !https && side.cert != "":
			msg = fmt.Sprintf("--%scert-file is set but %s %q is not https", side.flag, urlFlag, side.listen)
		case side.auth && side.ca == "":
			msg = fmt.Sprintf("--%sclient-cert-auth needs --%strusted-ca-file, the CA that signs the certificates it accepts", side.flag, side.flag)
		case side.ca != "" && side.cert == "":
			msg = fmt.Sprintf("--%strusted-ca-file needs --%scert-file and --%skey-file", side.flag, side.flag, side.flag)
		}
		if msg != "" {
			return &UsageError{Msg: "invalid etcd member TLS: " + msg}
		}
	}
	return nil
}

// advertisableAddr turns a listen address into one other nodes can dial: a
// wildcard or empty host is replaced by this machine's host name.
func advertisableAddr(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil || !isUnspecifiedHost(host) {
		return listen
	}
	return net.JoinHostPort(localHostName(), port)
}

func advertisableURL(listen string) string {
	u, err := url.Parse(listen)
	if err != nil || u.Host == "" {
		return listen
	}
	u.Host = advertisableAddr(u.Host)
	return u.String()
}

func localHostName() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "127.0.0.1"
}
