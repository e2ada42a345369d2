package app

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/cairn-db/cairn/config"
	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/internal/backoff"
	"go.uber.org/zap"
)

// exposure is one surface a node leaves open to its network.
type exposure struct {
	surface string // what is open, a short key for the log
	msg     string // what anyone who reaches it can do, and the fix
}

// exposures lists what a node leaves open on addresses other hosts can
// reach: open is fine on loopback (one machine, the default), but on
// 0.0.0.0 or a public address it hands the cluster to its network. An
// operator who means it says --insecure.
func exposures(cfg config.Config) []exposure {
	if cfg.Insecure {
		return nil
	}
	var out []exposure
	if !loopbackAddr(cfg.HTTPAddr) {
		at := " on " + cfg.HTTPAddr
		if cfg.AdminToken == "" {
			out = append(out, exposure{"admin_api", "no --admin-token: anyone who reaches" + at +
				" can create and drop databases, change storage clusters, drain nodes and read profiles; set --admin-token-file"})
		}
		if cfg.WriteToken == "" && cfg.AdminToken == "" {
			out = append(out, exposure{"writes", "no --write-token: anyone who reaches" + at + " can write data; set --write-token-file"})
		}
		if cfg.ReadToken == "" && cfg.WriteToken == "" && cfg.AdminToken == "" {
			out = append(out, exposure{"reads", "no --read-token: anyone who reaches" + at + " can query data and read the cluster's state; set --read-token-file"})
		}
		if cfg.ClusterSecret == "" && cfg.TLSClientCA == "" && (cfg.HasRole(config.RoleStorage) || cfg.HasRole(config.RoleBroker)) {
			out = append(out, exposure{"internal_api", "no --cluster-secret: anyone who reaches" + at +
				" can read and overwrite shard data through /internal/; set --cluster-secret-file on every node"})
		}
	}
	if cfg.HasRole(config.RoleEtcd) {
		out = append(out, etcdExposures(cfg)...)
	}
	return out
}

// etcdExposures: the embedded member holds every key of the cluster; a
// client that reaches it can read every key, delete databases'
// config or fence out the master. Its peers can join the cluster.
func etcdExposures(cfg config.Config) []exposure {
	var out []exposure
	if u := cfg.EtcdListenClientURL; !loopbackURL(u) && !strings.HasPrefix(u, "https://") {
		out = append(out, exposure{"etcd_client_plaintext", "the embedded etcd serves clients in plaintext on " + u +
			": anyone on the network can read and delete every key; set --etcd-cert-file and --etcd-key-file"})
	}
	if u := cfg.EtcdListenPeerURL; !loopbackURL(u) && !strings.HasPrefix(u, "https://") {
		out = append(out, exposure{"etcd_peer_plaintext", "the embedded etcd talks to its peers in plaintext on " + u +
			": anyone who reaches it can join or disrupt the etcd cluster; set --etcd-peer-cert-file, --etcd-peer-key-file and --etcd-peer-trusted-ca-file"})
	}
	return out
}

// warnExposures logs one WARN per open surface.
func warnExposures(lg *zap.Logger, cfg config.Config) {
	for _, e := range exposures(cfg) {
		lg.Warn("OPEN TO THE NETWORK: "+e.msg+" (or --insecure to accept it)", zap.String("surface", e.surface))
	}
}

// loopbackAddr reports whether host:port listens on loopback only. An empty
// host or an unspecified address (0.0.0.0, ::) listens everywhere; a name
// other than localhost may resolve anywhere.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func loopbackURL(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	return loopbackAddr(u.Host)
}

// warnEtcdAuthOff checks once, when etcd first answers, that a member
// serving clients beyond loopback has etcd's authentication on: without it
// any client that gets through (no --etcd-client-cert-auth, or a
// certificate of the CA) reads and deletes every key.
func (a *App) warnEtcdAuthOff(ctx context.Context) {
	if a.cfg.Insecure || !a.cfg.HasRole(config.RoleEtcd) || loopbackURL(a.cfg.EtcdListenClientURL) {
		return
	}
	b := backoff.New(time.Second, 10*time.Second)
	for {
		on, err := a.store.AuthEnabled(ctx)
		if err == nil {
			if !on {
				a.lg.Warn("OPEN TO THE NETWORK: etcd's authentication is off: any client that reaches "+a.cfg.EtcdListenClientURL+
					" can read and delete every key; run cairn etcd-auth-setup (or --insecure to accept it)", zap.String("surface", "etcd_auth_off"))
			}
			return
		}
		if errors.Is(err, kv.ErrAccessDenied) {
			return // etcd refused us: its auth is on (probeEtcd reports the credentials)
		}
		if !b.Wait(ctx) {
			return
		}
	}
}
