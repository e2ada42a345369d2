package app

import (
	"fmt"

	"github.com/cairn-db/cairn/config"
)

// waiting names what this node's roles still wait for before the node is
// ready ("" when every role serves): a master elected, this broker's record
// and this storage node's record live in the state the broker routes and
// places with, in a configured storage cluster. A node serving from its local
// backup (etcd not confirmed yet) is ready as it is: its roles cannot register
// while etcd is away, and its state already names them.
func (a *App) waiting() string {
	st := a.sm.Snapshot()
	if st.FromBackup {
		return ""
	}
	if a.cfg.HasRole(config.RoleMaster) && st.Master == nil {
		return "no master elected yet"
	}
	if a.cfg.HasRole(config.RoleBroker) {
		if b, ok := st.Brokers[a.nodeID]; !ok || b.Address != a.cfg.AdvertiseAddr {
			return "this broker is not registered yet"
		}
	}
	if a.cfg.HasRole(config.RoleStorage) {
		cluster := a.cfg.StorageCluster
		if _, ok := st.StorageClusters[cluster]; !ok {
			return fmt.Sprintf("storage cluster %q is not configured yet", cluster)
		}
		// Registration says the process holds its record; a process that
		// watches the live nodes also sees it published at its address.
		n, ok := st.Nodes.At(cluster).Get(a.nodeID)
		if !a.holding.Load() || (a.watchesNodes() && (!ok || n.NodeAddress != a.cfg.AdvertiseAddr)) {
			return "this storage node is not registered yet"
		}
	}
	return ""
}
