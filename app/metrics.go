package app

import (
	"runtime/debug"
	"strings"

	"github.com/cairn-db/cairn/broker"
	"github.com/cairn-db/cairn/config"
	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/coordinator/master"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// nodeMetrics are the metrics the app creates once and hands to its roles;
// every package registers its own on the node's registry (no globals).
type nodeMetrics struct {
	etcd   *kv.EtcdMetrics
	master *master.Metrics // nil without the master role
	broker *broker.Metrics // nil without the broker role
}

// registerMetrics fills the node's registry: Go and process metrics, build
// info and each role's own. The etcd request metrics are made before the
// first store; the storage host and the state manager register theirs
// themselves (their Config's Registerer).
func (a *App) registerMetrics() {
	a.reg.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(runtimeCPUMetrics)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), newGCFraction())
	revision, goVersion := "unknown", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVersion = bi.GoVersion
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				revision = s.Value
			}
		}
	}
	version := a.cfg.Version
	if version == "" {
		version = "dev"
	}
	build := prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_build_info",
		Help:        "Always 1; the labels name the running build and the node's roles.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": goVersion, "roles": strings.Join(a.cfg.Roles, ",")}})
	build.Set(1)
	a.reg.MustRegister(build)

	if a.cfg.HasRole(config.RoleMaster) {
		a.metrics.master = master.NewMetrics(a.reg)
	}
	if a.cfg.HasRole(config.RoleBroker) {
		a.metrics.broker = broker.NewMetrics(a.reg)
	}
	if a.cfg.HasRole(config.RoleMaster) || a.cfg.HasRole(config.RoleBroker) {
		a.reg.MustRegister(statemachine.NewClusterCollector(a.sm.Snapshot))
	}
}
